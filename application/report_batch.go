package application

import (
	"context"
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
// item does not stop the others.
func (s *TaskService) CompleteBatch(ctx context.Context, workerID string, items []ports.CompleteItem) ([]ports.TaskResult, error) {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.TaskID
	}
	err := validateBatch(workerID, ids, func(v *validation.Errors) {
		for i, it := range items {
			checkLease(v, fmt.Sprintf("items[%d].lease_id", i), it.LeaseID)
		}
	})
	if err != nil {
		return nil, err
	}
	// An item whose result storage cannot hold fails on its own, with a
	// validation problem; the others go on.
	refuse := func(st ports.Stores) []error {
		out := make([]error, len(items))
		for i, it := range items {
			var v validation.Errors
			checkJSON(&v, st, fmt.Sprintf("items[%d].result", i), it.Result)
			out[i] = v.Err()
		}
		return out
	}
	out, err := s.reportBatch(ctx, workerID, ids, refuse, func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		it := items[i]
		e, err := t.Complete(task.CompleteParams{WorkerID: workerID, LeaseID: *it.LeaseID, Result: it.Result}, now)
		return []event.Event{e}, err
	})
	if err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	return out, nil
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
		e, err := t.Fail(task.FailParams{WorkerID: workerID, LeaseID: *it.LeaseID, Error: it.Error, Retryable: it.Retryable}, s.cfg.Backoff, now)
		return []event.Event{e}, err
	})
	if err != nil {
		return nil, fmt.Errorf("fail batch: %w", err)
	}
	return out, nil
}

// reportBatch applies a batch report's items. refuse, when not nil, returns
// an error for each item that must fail on its own before its task is
// loaded (nil for the others); fn decides the rest.
func (s *TaskService) reportBatch(ctx context.Context, workerID string, ids []uuid.UUID,
	refuse func(ports.Stores) []error, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out, err := s.reports.do(ctx, report{workerID: workerID, ids: ids, refuse: refuse, decide: fn})
	return out, err
}

// report is one request of a holder that changes its tasks: a complete, a
// fail or an extend (one item), or a batch report (many). Concurrent
// reports share transactions (s.reports): one that locks every task of the
// batch (in id order), lets the domain decide each item (each fenced by its
// own lease), saves the changes with one statement, touches the reporting
// workers with one more, and appends one outbox message. Each request is
// answered only after that transaction committed, with its own items'
// outcomes.
type report struct {
	workerID string
	ids      []uuid.UUID
	refuse   func(ports.Stores) []error
	decide   ports.TaskUpdateEachFunc
}

// reportsOverlap reports whether p names a task that a request in batch
// names too: those go to a later batch (one transaction changes a task
// once).
func reportsOverlap(batch []*pending[report, []ports.TaskResult], p *pending[report, []ports.TaskResult]) bool {
	for _, q := range batch {
		for _, a := range q.req.ids {
			for _, b := range p.req.ids {
				if a == b {
					return true
				}
			}
		}
	}
	return false
}

// reportsBatch serves a batch of reports in one transaction.
func (s *TaskService) reportsBatch(ctx context.Context, batch []*pending[report, []ports.TaskResult]) error {
	return inOneTransaction(ctx, s.tx, batch, reportInTx)
}

func reportInTx(ctx context.Context, st ports.Stores, batch []*pending[report, []ports.TaskResult]) error {
	type ref struct {
		p *pending[report, []ports.TaskResult]
		i int // the item's index in its request
	}
	var (
		kept    []uuid.UUID
		at      []ref
		workers []string
		seen    = map[string]bool{}
	)
	for _, p := range batch {
		p.err = nil
		p.res = make([]ports.TaskResult, len(p.req.ids))
		refused := make([]error, len(p.req.ids))
		if p.req.refuse != nil {
			refused = p.req.refuse(st)
		}
		for i, id := range p.req.ids {
			p.res[i] = ports.TaskResult{ID: id, Err: refused[i]}
			if refused[i] == nil {
				kept = append(kept, id)
				at = append(at, ref{p: p, i: i})
			}
		}
		if !seen[p.req.workerID] {
			seen[p.req.workerID] = true
			workers = append(workers, p.req.workerID)
		}
	}
	applied, err := st.Tasks.UpdateEach(ctx, kept, func(j int, t *task.Task, now time.Time) ([]event.Event, error) {
		r := at[j]
		events, err := r.p.req.decide(r.i, t, now)
		cid := ports.CorrelationID(r.p.ctx)
		for k := range events {
			events[k].CorrelationID = cid
		}
		return events, err
	})
	if err != nil {
		return err
	}
	for j, res := range applied {
		at[j].p.res[at[j].i] = res
	}
	// The reports count as their workers' signs of life. They were fenced
	// already, so a worker that vanished or died since does not undo them.
	_, err = st.Workers.TouchEach(ctx, workers, signOfLife)
	return err
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
