package application

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// CompleteBatch reports many successes of one worker in one transaction.
// Each item is fenced on its own (every item names its lease): a refused
// item does not stop the others. An item may enqueue tasks: they are
// created with its completion or not at all (see CompleteEnqueue); an item
// whose enqueue is invalid fails on its own ("items[2].enqueue[0].payload"),
// and all the items together may enqueue at most MaxEnqueue tasks.
func (s *TaskService) CompleteBatch(ctx context.Context, workerID string, items []ports.CompleteItem) ([]ports.TaskResult, error) {
	r, err := completeReport(ctx, "items", workerID, items)
	if err != nil {
		return nil, err
	}
	out, err := s.reports.do(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("complete batch: %w", err)
	}
	return out, nil
}

// completeReport is CompleteBatch's request, its items named list[i] in
// what it refuses.
func completeReport(ctx context.Context, list, workerID string, items []ports.CompleteItem) (report, error) {
	ids := make([]uuid.UUID, len(items))
	lists := make([][]task.SubmitParams, len(items))
	total, enqueues := 0, false
	for i, it := range items {
		ids[i], lists[i] = it.TaskID, it.Enqueue
		total += len(it.Enqueue)
		enqueues = enqueues || it.Enqueue != nil
	}
	err := validateBatch(list, workerID, ids, func(v *validation.Errors) {
		for i, it := range items {
			checkLease(v, fmt.Sprintf("%s[%d].lease_id", list, i), it.LeaseID)
		}
		if total > MaxEnqueue {
			v.Add(list, fmt.Sprintf("may enqueue at most %d tasks in total", MaxEnqueue))
		}
	})
	if err != nil {
		return report{}, err
	}
	// An item whose enqueue, or whose result, breaks a rule fails on its
	// own, with a validation problem; the others go on.
	invalid := make([]*validation.Error, len(items))
	parents := make([][][]task.ParentRef, len(items))
	for i, it := range items {
		var v validation.Errors
		enqueueField := fmt.Sprintf("%s[%d].enqueue", list, i)
		if err := prepareEnqueue(enqueueField, it.Enqueue, &v); err != nil {
			return report{}, err
		}
		var err error
		if parents[i], err = resolveGraph(&v, enqueueField, it.Enqueue, it.EnqueueGraph); err != nil {
			return report{}, err
		}
		if err := v.Err(); err != nil {
			invalid[i] = err.(*validation.Error)
		}
	}
	if err := checkEnqueueAccess(ctx, lists...); err != nil {
		return report{}, err
	}
	refuse := func(st ports.Stores) []error {
		// Each item's values are checked on their own, and all of them
		// against the request's allowance: beyond it every item fails.
		j := newStoredJSON(st)
		vs := make([]validation.Errors, len(items))
		for i, it := range items {
			j.check(&vs[i], fmt.Sprintf("%s[%d].result", list, i), it.Result)
			if invalid[i] != nil {
				vs[i].Merge("", invalid[i])
			} else {
				j.payloads(&vs[i], fmt.Sprintf("%s[%d].enqueue", list, i), it.Enqueue)
			}
		}
		var total validation.Errors
		j.total(&total, list)
		out := make([]error, len(items))
		for i := range items {
			if err := total.Err(); err != nil {
				vs[i].Merge("", err.(*validation.Error))
			}
			out[i] = vs[i].Err()
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
		joinRun(it.Enqueue, t)
		if b, err = buildEnqueue(it.Enqueue, fmt.Sprintf("%s[%d].enqueue", list, i), now); err != nil {
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
			return enqueueCompleted(ctx, st, list, items, built, parents, out)
		}
	}
	r, err := batchReport(ctx, workerID, ids, refuse, decide, then)
	if err != nil {
		return report{}, err
	}
	if !enqueues {
		r.completes = make([]ports.CompleteRef, len(items))
		for i, it := range items {
			r.completes[i] = ports.CompleteRef{ID: it.TaskID, WorkerID: workerID, LeaseID: *it.LeaseID, Result: it.Result}
		}
	}
	return r, nil
}

// enqueueCompleted creates, with one statement, the tasks that the
// completed items of a batch enqueue, and gives each item its own; an item
// whose enqueue has dependencies (parents[i] not nil) creates its graph on
// its own (createGraph: a depends_on that names no task then fails the
// whole request).
func enqueueCompleted(ctx context.Context, st ports.Stores, list string, items []ports.CompleteItem, built []enqueue, parents [][][]task.ParentRef,
	out []ports.TaskResult) error {
	var all enqueue
	for i, it := range items {
		if out[i].Err != nil {
			continue
		}
		if parents[i] != nil {
			var err error
			if out[i].Enqueued, _, err = createGraph(ctx, st, fmt.Sprintf("%s[%d].enqueue", list, i), it.Enqueue, parents[i]); err != nil {
				return err
			}
			continue
		}
		all.tasks = append(all.tasks, built[i].tasks...)
		all.events = append(all.events, built[i].events...)
	}
	created, err := all.create(ctx, st)
	if err != nil {
		return err
	}
	if err := hideLeases(ctx, st, created); err != nil { // existing tasks may be RUNNING
		return err
	}
	for i, it := range items {
		if it.Enqueue == nil || out[i].Err != nil || parents[i] != nil {
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
	r, err := s.failReport(ctx, "items", workerID, items)
	if err != nil {
		return nil, err
	}
	out, err := s.reports.do(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("fail batch: %w", err)
	}
	return out, nil
}

// failReport is FailBatch's request, its items named list[i] in what it
// refuses.
func (s *TaskService) failReport(ctx context.Context, list, workerID string, items []ports.FailItem) (report, error) {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.TaskID
	}
	err := validateBatch(list, workerID, ids, func(v *validation.Errors) {
		for i, it := range items {
			checkLease(v, fmt.Sprintf("%s[%d].lease_id", list, i), it.LeaseID)
			if len(it.Error) > task.MaxErrorLength {
				v.Add(fmt.Sprintf("%s[%d].error", list, i), fmt.Sprintf("must be at most %d bytes", task.MaxErrorLength))
			}
		}
	})
	if err != nil {
		return report{}, err
	}
	return batchReport(ctx, workerID, ids, nil, func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		it := items[i]
		e, err := t.Fail(task.FailParams{WorkerID: workerID, LeaseID: *it.LeaseID, Error: it.Error, Retryable: it.Retryable, Rand: s.rand}, s.cfg.Backoff, now)
		return []event.Event{e}, err
	}, nil)
}

// reportBatch applies a batch report's items. refuse, when not nil, returns
// an error for each item that must fail on its own before its task is
// loaded (nil for the others); fn decides the rest; then, when not nil, runs
// in the (shared) transaction once the request's items are settled, with
// the request's principal and correlation id. An item whose task lies in a
// queue the principal may not see fails as if the task were missing.
func (s *TaskService) reportBatch(ctx context.Context, workerID string, ids []uuid.UUID,
	refuse func(ports.Stores) []error, fn ports.TaskUpdateEachFunc,
	then func(context.Context, ports.Stores, []ports.TaskResult) error) ([]ports.TaskResult, error) {
	r, err := batchReport(ctx, workerID, ids, refuse, fn, then)
	if err != nil {
		return nil, err
	}
	return s.reports.do(ctx, r)
}

// batchReport is reportBatch's request, to serve with s.reports.
func batchReport(ctx context.Context, workerID string, ids []uuid.UUID,
	refuse func(ports.Stores) []error, fn ports.TaskUpdateEachFunc,
	then func(context.Context, ports.Stores, []ports.TaskResult) error) (report, error) {
	p := ports.Principal(ctx)
	if err := p.CheckWorkerID(workerID); err != nil {
		return report{}, err
	}
	return report{workerID: workerID, ids: ids, refuse: refuse, then: then, decide: func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		if !p.QueueAllowed(t.Queue()) {
			return nil, task.ErrNotFound
		}
		return fn(i, t, now)
	}}, nil
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
	// progress marks a progress report: its task's progress is all that
	// is saved (TaskStore.UpdateProgress).
	progress bool
	refuse   func(ports.Stores) []error
	decide   ports.TaskUpdateEachFunc
	// then, when not nil, runs after the request's items were applied and
	// its worker touched, in the same transaction (see reportBatch).
	then func(ctx context.Context, st ports.Stores, res []ports.TaskResult) error
	// completes, when not nil, says that every item is a plain completion
	// (one per id, in order): unless its principal is limited to some
	// queues, the request is served by TaskStore.CompleteEach, which
	// completes with one statement what decide would complete (decide
	// still judges every task it locked).
	completes []ports.CompleteRef
}

// completing reports whether p's items go through TaskStore.CompleteEach:
// plain completions of a principal that may see every queue (for a limited
// one, decide may refuse a task the statement would complete: its queue).
func completing(p *pending[report, []ports.TaskResult]) bool {
	return p.req.completes != nil && !ports.Principal(p.ctx).Restricted()
}

// reportsOverlap reports whether p names a task that a request in batch
// names too: those go to a later batch (one transaction changes a task
// once).
func reportsOverlap(batch []*pending[report, []ports.TaskResult], p *pending[report, []ports.TaskResult]) bool {
	for _, q := range batch {
		if idsOverlap(q.req.ids, p.req.ids) {
			return true
		}
	}
	return false
}

// idsOverlap reports whether a and b share an id.
func idsOverlap(a, b []uuid.UUID) bool {
	for _, x := range a {
		if slices.Contains(b, x) {
			return true
		}
	}
	return false
}

// reportsBatch serves a batch of reports in one transaction.
func (s *TaskService) reportsBatch(ctx context.Context, batch []*pending[report, []ports.TaskResult]) error {
	return inOneTransaction(ctx, s.tx, batch, reportInTx)
}

// errReportRefused fails a shared transaction in which a request changed
// tasks but may not report as its worker: the batch runs again one request
// at a time, and that request's changes roll back alone.
var errReportRefused = errors.New("a report of the batch may not act as its worker")

func reportInTx(ctx context.Context, st ports.Stores, batch []*pending[report, []ports.TaskResult]) error {
	return applyReports(ctx, st, batch, true)
}

// applyReports is reportInTx; without touch, it neither touches the
// reporting workers nor checks that the requests may act as them: the
// caller does both in the same transaction (claimInTx: the claim that
// carries the reports touches its worker after them, and fails, rolling
// them back, where they were refused).
func applyReports(ctx context.Context, st ports.Stores, batch []*pending[report, []ports.TaskResult], touch bool) error {
	type ref struct {
		p *pending[report, []ports.TaskResult]
		i int // the item's index in its request
	}
	var (
		kept, progressKept []uuid.UUID
		at, progressAt     []ref
		completes          []ports.CompleteRef
		completeAt         []ref
		workers            []string
		seen               = map[string]bool{}
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
			switch {
			case refused[i] != nil:
			case p.req.progress:
				progressKept = append(progressKept, id)
				progressAt = append(progressAt, ref{p: p, i: i})
			case completing(p):
				completes = append(completes, p.req.completes[i])
				completeAt = append(completeAt, ref{p: p, i: i})
			default:
				kept = append(kept, id)
				at = append(at, ref{p: p, i: i})
			}
		}
		if !seen[p.req.workerID] {
			seen[p.req.workerID] = true
			workers = append(workers, p.req.workerID)
		}
	}
	decide := func(at []ref) ports.TaskUpdateEachFunc {
		return func(j int, t *task.Task, now time.Time) ([]event.Event, error) {
			r := at[j]
			events, err := r.p.req.decide(r.i, t, now)
			cid := ports.CorrelationID(r.p.ctx)
			for k := range events {
				events[k].CorrelationID = cid
			}
			return events, err
		}
	}
	changed := map[*pending[report, []ports.TaskResult]]bool{}
	settle := func(at []ref, applied []ports.TaskResult) {
		for j, res := range applied {
			at[j].p.res[at[j].i] = res
			if res.Err == nil {
				changed[at[j].p] = true
			}
		}
	}
	if len(completes) > 0 {
		applied, err := st.Tasks.CompleteEach(ctx, completes, decide(completeAt))
		if err != nil {
			return err
		}
		settle(completeAt, applied)
	}
	if len(kept) > 0 || (len(progressKept) == 0 && len(completes) == 0) {
		applied, err := st.Tasks.UpdateEach(ctx, kept, decide(at))
		if err != nil {
			return err
		}
		settle(at, applied)
	}
	if len(progressKept) > 0 {
		// Progress reports save nothing but the progress.
		applied, err := st.Tasks.UpdateProgress(ctx, progressKept, decide(progressAt))
		if err != nil {
			return err
		}
		settle(progressAt, applied)
	}
	// The reports count as their workers' signs of life. They were fenced
	// already, so a worker that died since does not undo them.
	if touch {
		if err := touchReporters(ctx, st, batch, workers, changed); err != nil {
			return err
		}
	}
	// What the requests do after their items (complete-and-enqueue: the
	// next stage's tasks), each as its own principal. A failure fails the
	// shared transaction, which then runs one request at a time.
	for _, p := range batch {
		if p.err != nil || p.req.then == nil {
			continue
		}
		pctx := ports.WithCorrelationID(ports.WithPrincipal(ctx, ports.Principal(p.ctx)), ports.CorrelationID(p.ctx))
		if err := p.req.then(pctx, st, p.res); err != nil {
			return err
		}
	}
	// A refused item shows the task as it is, perhaps held by another
	// worker under a lease that is not the caller's to see. (An applied
	// item's task is the reporter's own.)
	for _, p := range batch {
		if p.err != nil {
			continue
		}
		var (
			shown []*task.Task
			idx   []int
		)
		for i := range p.res {
			if errors.Is(p.res[i].Err, task.ErrNotFound) {
				p.res[i].Task = nil // in a queue the key may not see: as if missing
			}
			if p.res[i].Err != nil && p.res[i].Task != nil {
				shown = append(shown, p.res[i].Task)
				idx = append(idx, i)
			}
		}
		if len(shown) == 0 {
			continue
		}
		if err := hideLeases(ports.WithPrincipal(ctx, ports.Principal(p.ctx)), st, shown); err != nil {
			return err
		}
		for k, i := range idx {
			p.res[i].Task = shown[k]
		}
	}
	return nil
}

// touchReporters gives the reporting workers their sign of life. On that
// read of each worker, its request's principal must own it (one that
// vanished belongs to no key, which only the unrestricted principal and
// admin may report for): a worker of another key gets 403 whatever its
// tasks' state, and its report saves nothing (changed: the requests that
// changed tasks, whose refusal fails the transaction).
func touchReporters(ctx context.Context, st ports.Stores, batch []*pending[report, []ports.TaskResult], workers []string,
	changed map[*pending[report, []ports.TaskResult]]bool) error {
	denied := map[*pending[report, []ports.TaskResult]]error{}
	actAs := func(p *pending[report, []ports.TaskResult], w *worker.Worker) error {
		return ports.Principal(p.ctx).CheckActAs(w.ID(), w.Owner())
	}
	touched, err := st.Workers.TouchEach(ctx, workers, signOfLifeFor(batch, func(p *pending[report, []ports.TaskResult]) string { return p.req.workerID }, actAs, nil, denied))
	if err != nil {
		return err
	}
	for _, w := range touched {
		if errors.Is(w.Err, worker.ErrNotFound) {
			for _, p := range batch {
				if p.req.workerID == w.ID {
					if err := ports.Principal(p.ctx).CheckActAs(w.ID, ""); err != nil {
						denied[p] = err
					}
				}
			}
		}
	}
	for _, p := range batch {
		err := denied[p]
		if err == nil {
			continue
		}
		if changed[p] {
			if len(batch) == 1 {
				return err // its changes roll back
			}
			return errReportRefused
		}
		p.res, p.err = nil, err
	}
	return nil
}

func validateBatch(list, workerID string, ids []uuid.UUID, more func(*validation.Errors)) error {
	var v validation.Errors
	if workerID == "" {
		v.Add("worker_id", "is required")
	}
	switch {
	case len(ids) == 0:
		v.Add(list, "must hold at least one item")
	case len(ids) > MaxBatch:
		v.Add(list, fmt.Sprintf("must hold at most %d items", MaxBatch))
	}
	seen := make(map[uuid.UUID]bool, len(ids))
	for i, id := range ids {
		if seen[id] {
			v.Add(fmt.Sprintf("%s[%d].id", list, i), "repeats an earlier item")
		}
		seen[id] = true
	}
	if more != nil {
		more(&v)
	}
	return v.Err()
}
