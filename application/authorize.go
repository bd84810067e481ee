package application

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// How the use cases apply domain/apikey's rules to the principal in the
// context (ports.Principal; nil, the unrestricted principal, passes every
// check without a query):
//
//   - queues a caller names (submit, claim, register, list filters) must be
//     the key's, else 403; a task in a queue the key may not see is "not
//     found", like a missing one;
//   - a worker belongs to the key that registered it: only that key (or
//     admin) may heartbeat, claim or report as it. The check rides on reads
//     the use case makes anyway: the worker row a claim or heartbeat loads,
//     the sign of life a report gives (refused reports too, so that a
//     foreign worker is a 403 whatever the task's state). In a transaction
//     shared by several requests each is checked against its own principal
//     (signOfLifeFor);
//   - lease ids (fencing tokens) are shown only to the key that owns the
//     holding worker, and to admin (hideLeases).

// actAsFunc wraps a worker decision so that the principal must own the
// worker first.
func actAsFunc(ctx context.Context, fn ports.WorkerTouchFunc) ports.WorkerTouchFunc {
	p := ports.Principal(ctx)
	return func(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
		if err := p.CheckActAs(w.ID(), w.Owner()); err != nil {
			return nil, false, err
		}
		return fn(w, now)
	}
}

// visibleTaskFunc wraps a decision about a task named by id: a task in a
// queue the principal may not use is not found.
func visibleTaskFunc[F ~func(*task.Task, time.Time) ([]event.Event, error)](ctx context.Context, fn F) F {
	p := ports.Principal(ctx)
	return func(t *task.Task, now time.Time) ([]event.Event, error) {
		if !p.QueueAllowed(t.Queue()) {
			return nil, task.ErrNotFound
		}
		return fn(t, now)
	}
}

// hideLease is hideLeases for one task: it returns t, or a copy of it
// without its lease id.
func hideLease(ctx context.Context, st ports.Stores, t *task.Task) (*task.Task, error) {
	ts := []*task.Task{t}
	err := hideLeases(ctx, st, ts)
	return ts[0], err
}

// hideLeases removes from ts (in place) the lease ids the principal may not
// see: those of tasks held by workers of other keys, or of none. nil
// entries are skipped.
func hideLeases(ctx context.Context, st ports.Stores, ts []*task.Task) error {
	p := ports.Principal(ctx)
	if p.SeesLeaseOf("") { // unrestricted or admin: every lease
		return nil
	}
	var holders []string
	for _, t := range ts {
		if t != nil && t.Status() == task.StatusRunning {
			holders = append(holders, t.Snapshot().WorkerID)
		}
	}
	if len(holders) == 0 {
		return nil
	}
	owners, err := st.Workers.Owners(ctx, holders)
	if err != nil {
		return err
	}
	for i, t := range ts {
		if t == nil || t.Status() != task.StatusRunning {
			continue
		}
		if v := t.Snapshot(); !p.SeesLeaseOf(owners[v.WorkerID]) {
			v.LeaseID = uuid.Nil
			ts[i] = task.Restore(v)
		}
	}
	return nil
}

// signOfLifeFor is the sign of life that a batch of requests gives their
// workers, each request checked on this read of its worker: allowed says
// whether the request may act as the worker; a request it refuses gets its
// error in denied. A worker that no request of the batch may act as is
// refused (with the first refusal) and not touched, so a request that may
// not act as a worker never refreshes it. gives (nil: every request) says
// whether an allowed request is a sign of life; a worker whose allowed
// requests all give none is only checked (a DEAD one is refused), not
// touched.
func signOfLifeFor[Req, Res any](batch []*pending[Req, Res], workerOf func(*pending[Req, Res]) string,
	allowed func(*pending[Req, Res], *worker.Worker) error, gives func(*pending[Req, Res]) bool,
	denied map[*pending[Req, Res]]error) ports.WorkerTouchFunc {
	return func(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
		var refusal error
		some, lively := false, false
		for _, p := range batch {
			if workerOf(p) != w.ID() {
				continue
			}
			if err := allowed(p, w); err != nil {
				denied[p] = err
				if refusal == nil {
					refusal = err
				}
				continue
			}
			some = true
			lively = lively || gives == nil || gives(p)
		}
		if !some && refusal != nil {
			return nil, false, refusal
		}
		if some && !lively {
			return nil, false, w.CanClaim()
		}
		return signOfLife(w, now)
	}
}
