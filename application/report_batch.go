package application

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// CompleteBatch reports many successes of one worker in one transaction.
// Each item is fenced on its own (every item names its lease): a refused
// item does not stop the others. An item may enqueue tasks: they are
// created with its completion or not at all (see CompleteEnqueue); an item
// whose enqueue is invalid fails on its own ("items[2].enqueue[0].payload"),
// and all the items together may enqueue at most MaxEnqueue tasks.
func (s *TaskService) CompleteBatch(ctx context.Context, workerID string, items []ports.CompleteItem) ([]ports.TaskResult, error) {
	ids := make([]uuid.UUID, len(items))
	lists := make([][]task.SubmitParams, len(items))
	total, enqueues := 0, false
	for i, it := range items {
		ids[i], lists[i] = it.TaskID, it.Enqueue
		total += len(it.Enqueue)
		enqueues = enqueues || it.Enqueue != nil
	}
	err := validateBatch(workerID, ids, func(v *validation.Errors) {
		for i, it := range items {
			checkLease(v, fmt.Sprintf("items[%d].lease_id", i), it.LeaseID)
		}
		if total > MaxEnqueue {
			v.Add("items", fmt.Sprintf("may enqueue at most %d tasks in total", MaxEnqueue))
		}
	})
	if err != nil {
		return nil, err
	}
	// An item whose enqueue, or whose result, breaks a rule fails on its
	// own, with a validation problem; the others go on.
	invalid := make([]*validation.Error, len(items))
	for i, it := range items {
		var v validation.Errors
		if err := prepareEnqueue(fmt.Sprintf("items[%d].enqueue", i), it.Enqueue, &v); err != nil {
			return nil, err
		}
		if err := v.Err(); err != nil {
			invalid[i] = err.(*validation.Error)
		}
	}
	if err := checkEnqueueAccess(ctx, lists...); err != nil {
		return nil, err
	}
	refuse := func(st ports.Stores) []error {
		out := make([]error, len(items))
		for i, it := range items {
			var v validation.Errors
			checkJSON(&v, st, fmt.Sprintf("items[%d].result", i), it.Result)
			if invalid[i] != nil {
				v.Merge("", invalid[i])
			} else if err := checkPayloads(st, fmt.Sprintf("items[%d].enqueue", i), it.Enqueue); err != nil {
				v.Merge("", err.(*validation.Error))
			}
			out[i] = v.Err()
		}
		return out
	}
	built := make([]enqueue, len(items))
	decide := func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		it := items[i]
		var (
			b   enqueue
			err error
		)
		if b, err = buildEnqueue(it.Enqueue, fmt.Sprintf("items[%d].enqueue", i), now); err != nil {
			return nil, err
		}
		e, err := t.Complete(task.CompleteParams{WorkerID: workerID, LeaseID: *it.LeaseID, Result: it.Result}, now)
		if err != nil {
			return nil, err
		}
		built[i] = b
		return []event.Event{e}, nil
	}
	var then func(context.Context, ports.Stores, []ports.TaskResult) error
	if enqueues {
		then = func(ctx context.Context, st ports.Stores, out []ports.TaskResult) error {
			return enqueueCompleted(ctx, st, items, built, out)
		}
	}
	out, err := s.reportBatch(ctx, workerID, ids, refuse, decide, then)
	if err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	return out, nil
}

// enqueueCompleted creates, with one statement, the tasks that the
// completed items of a batch enqueue, and gives each item its own.
func enqueueCompleted(ctx context.Context, st ports.Stores, items []ports.CompleteItem, built []enqueue, out []ports.TaskResult) error {
	var all enqueue
	for i := range items {
		if out[i].Err == nil {
			all.tasks = append(all.tasks, built[i].tasks...)
			all.events = append(all.events, built[i].events...)
		}
	}
	created, err := all.create(ctx, st)
	if err != nil {
		return err
	}
	if err := hideLeases(ctx, st, created); err != nil { // existing tasks may be RUNNING
		return err
	}
	for i, it := range items {
		if it.Enqueue == nil || out[i].Err != nil {
			continue
		}
		n := len(built[i].tasks)
		out[i].Enqueued, created = created[:n:n], created[n:]
	}
	return nil
}

// FailBatch reports many failures of one worker in one transaction, each
// item fenced on its own.
func (s *TaskService) FailBatch(ctx context.Context, workerID string, items []ports.FailItem) ([]ports.TaskResult, error) {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.TaskID
	}
	err := validateBatch(workerID, ids, func(v *validation.Errors) {
		for i, it := range items {
			checkLease(v, fmt.Sprintf("items[%d].lease_id", i), it.LeaseID)
			if len(it.Error) > task.MaxErrorLength {
				v.Add(fmt.Sprintf("items[%d].error", i), fmt.Sprintf("must be at most %d bytes", task.MaxErrorLength))
			}
		}
	})
	if err != nil {
		return nil, err
	}
	out, err := s.reportBatch(ctx, workerID, ids, nil, func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		it := items[i]
		e, err := t.Fail(task.FailParams{WorkerID: workerID, LeaseID: *it.LeaseID, Error: it.Error, Retryable: it.Retryable, Rand: s.rand}, s.cfg.Backoff, now)
		return []event.Event{e}, err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("fail batch: %w", err)
	}
	return out, nil
}

// reportBatch applies a batch report's items in one transaction. refuse,
// when not nil, returns an error for each item that must fail on its own
// before its task is loaded (nil for the others); fn decides the rest; then,
// when not nil, runs in the transaction once every item is settled. An
// item whose task lies in a queue the principal may not see fails as if the
// task were missing.
func (s *TaskService) reportBatch(ctx context.Context, workerID string, ids []uuid.UUID,
	refuse func(ports.Stores) []error, fn ports.TaskUpdateEachFunc,
	then func(context.Context, ports.Stores, []ports.TaskResult) error) ([]ports.TaskResult, error) {
	p := ports.Principal(ctx)
	if err := p.CheckWorkerID(workerID); err != nil {
		return nil, err
	}
	var out []ports.TaskResult
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		refused := make([]error, len(ids))
		if refuse != nil {
			refused = refuse(st)
		}
		var (
			kept []uuid.UUID
			at   []int // at[j] is the item index of kept[j]
		)
		for i, id := range ids {
			if refused[i] == nil {
				kept = append(kept, id)
				at = append(at, i)
			}
		}
		applied, err := st.Tasks.UpdateEach(ctx, kept, func(j int, t *task.Task, now time.Time) ([]event.Event, error) {
			if !p.QueueAllowed(t.Queue()) {
				return nil, task.ErrNotFound
			}
			return fn(at[j], t, now)
		})
		if err != nil {
			return err
		}
		out = make([]ports.TaskResult, len(ids))
		for i, id := range ids {
			out[i] = ports.TaskResult{ID: id, Err: refused[i]}
		}
		for j, res := range applied {
			out[at[j]] = res
		}
		if then != nil {
			if err := then(ctx, st, out); err != nil {
				return err
			}
		}
		// Every item is settled: the worker must be the principal's, or
		// the whole batch rolls back.
		if err := touchReporter(ctx, st, workerID); err != nil {
			return err
		}
		shown := make([]*task.Task, len(out))
		for i := range out {
			if errors.Is(out[i].Err, task.ErrNotFound) {
				out[i].Task = nil // in a queue the key may not see: as if missing
			}
			shown[i] = out[i].Task
		}
		// A refused item shows the task as it is, perhaps held by another
		// worker under a lease that is not the caller's to see.
		if err := hideLeases(ctx, st, shown); err != nil {
			return err
		}
		for i := range out {
			out[i].Task = shown[i]
		}
		return nil
	})
	return out, err
}

func validateBatch(workerID string, ids []uuid.UUID, more func(*validation.Errors)) error {
	var v validation.Errors
	if workerID == "" {
		v.Add("worker_id", "is required")
	}
	switch {
	case len(ids) == 0:
		v.Add("items", "must hold at least one item")
	case len(ids) > MaxBatch:
		v.Add("items", fmt.Sprintf("must hold at most %d items", MaxBatch))
	}
	seen := make(map[uuid.UUID]bool, len(ids))
	for i, id := range ids {
		if seen[id] {
			v.Add(fmt.Sprintf("items[%d].id", i), "repeats an earlier item")
		}
		seen[id] = true
	}
	if more != nil {
		more(&v)
	}
	return v.Err()
}
