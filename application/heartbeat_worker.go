package application

import (
	"context"
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

// MaxHeartbeatTasks is the most tasks one heartbeat may list. A longer list
// is refused and changes nothing; it cannot be split over several heartbeats
// either (each takes back the tasks it does not list), so it is also the
// most tasks a worker that lists its tasks may hold. Registration
// advertises it.
const MaxHeartbeatTasks = 10000

// MaxHeartbeatClaimsInFlight is the most claims a heartbeat may name as in
// flight (a worker has one or a few claims outstanding at a time).
const MaxHeartbeatClaimsInFlight = 100

// Heartbeat records a worker's sign of life (a STALE worker becomes ACTIVE
// again; a DEAD one gets worker.ErrDead and must register again) and answers
// with what the worker must act on: the listed tasks it lost, the held tasks
// an operator asked to cancel, and whether it must drain.
//
// A heartbeat that lists the worker's tasks also, in the same transaction,
// renews the lease of every listed task the worker still holds under the
// listed lease, and takes back as orphaned every task the worker holds but
// did not list and claimed more than one heartbeat interval ago (a claim
// whose response never reached it). A heartbeat that lists nothing renews
// and orphans nothing.
func (s *WorkerService) Heartbeat(ctx context.Context, cmd ports.HeartbeatCommand) (ports.HeartbeatResult, error) {
	var v validation.Errors
	if len(cmd.Tasks) > MaxHeartbeatTasks {
		v.Add("tasks", fmt.Sprintf("must list at most %d tasks", MaxHeartbeatTasks))
	}
	if len(cmd.ClaimsInFlight) > MaxHeartbeatClaimsInFlight {
		v.Add("claims_in_flight", fmt.Sprintf("must name at most %d claims", MaxHeartbeatClaimsInFlight))
	} else {
		for i, id := range cmd.ClaimsInFlight {
			task.CheckRequestID(&v, fmt.Sprintf("claims_in_flight[%d]", i), id)
		}
	}
	progress := map[uuid.UUID]ports.ProgressReport{}
	for i, p := range cmd.Progress {
		if p == nil || i >= len(cmd.Tasks) {
			continue
		}
		checkProgressReport(&v, fmt.Sprintf("tasks[%d].", i), *p)
		progress[cmd.Tasks[i].ID] = *p
	}
	if err := v.Err(); err != nil {
		return ports.HeartbeatResult{}, err
	}
	principal := ports.Principal(ctx)
	if err := principal.CheckWorkerID(cmd.WorkerID); err != nil {
		return ports.HeartbeatResult{}, err
	}
	var (
		out      ports.HeartbeatResult
		reported []*task.Task
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if len(progress) > 0 {
			// One allowance for the whole heartbeat, as for every request
			// that stores several JSON values (see storedJSON).
			var v validation.Errors
			j := newStoredJSON(st)
			for i, p := range cmd.Progress {
				if p != nil && i < len(cmd.Tasks) {
					j.check(&v, fmt.Sprintf("tasks[%d].details", i), p.Details)
				}
			}
			j.total(&v, "tasks")
			if err := v.Err(); err != nil {
				return err
			}
		}
		// The worker's tasks are locked before its row, in the order reports
		// lock them (task, then worker), so the two never deadlock. The
		// worker's owner is checked on the row's load below: another key's
		// heartbeat rolls back whatever it did to the tasks.
		var (
			held []*task.Task
			err  error
		)
		listing := task.NewListing(cmd.WorkerID, cmd.Tasks, s.cfg.Liveness.HeartbeatInterval()).WithClaimsInFlight(cmd.ClaimsInFlight)
		if cmd.ListsTasks {
			held, err = st.Tasks.UpdateHeld(ctx, cmd.WorkerID, func(t *task.Task, now time.Time) ([]event.Event, bool, error) {
				es, changed, err := leaseDecision(t, listing, now)
				if p, ok := progress[t.ID()]; ok && err == nil && listing.Lists(t) {
					// A listed task's report, under the listed lease.
					v := t.Snapshot()
					pe, perr := reportProgress(t, progressParams(p, v.WorkerID, v.LeaseID), now)
					es, err = append(es, pe...), perr
				}
				return es, changed, err
			})
		} else {
			held, err = st.Tasks.Held(ctx, cmd.WorkerID)
		}
		if err != nil {
			return err
		}
		w, err := st.Workers.Update(ctx, cmd.WorkerID, func(w *worker.Worker, now time.Time) ([]event.Event, error) {
			if err := principal.CheckActAs(w.ID(), w.Owner()); err != nil {
				return nil, err
			}
			return w.Heartbeat(now)
		})
		if err != nil {
			return err
		}
		out = ports.HeartbeatResult{Worker: w, Lost: []task.LeaseRef{}, Cancel: []task.LeaseRef{}, Drain: w.Draining()}
		if cmd.ListsTasks {
			out.Lost = listing.Lost(cmd.Tasks, held)
		}
		for _, t := range held {
			if t.CancelRequested() {
				v := t.Snapshot()
				out.Cancel = append(out.Cancel, task.LeaseRef{ID: v.ID, LeaseID: v.LeaseID})
			}
		}
		if len(out.Lost) > 0 {
			// A lost task whose attempt under this worker ran past its
			// time limit: the worker must stop it (its reports are
			// refused), as it stops a cancelled one.
			ids := make([]uuid.UUID, len(out.Lost))
			for i, r := range out.Lost {
				ids[i] = r.ID
			}
			timedOut, err := st.Tasks.TimedOutUnder(ctx, cmd.WorkerID, ids)
			if err != nil {
				return err
			}
			for _, r := range out.Lost {
				if slices.Contains(timedOut, r.ID) {
					out.Cancel = append(out.Cancel, r)
				}
			}
		}
		reported = held
		return nil
	})
	if err != nil {
		return ports.HeartbeatResult{}, fmt.Errorf("heartbeat: %w", err)
	}
	if len(progress) > 0 {
		for _, t := range reported {
			s.progress.ScheduleFor(t)
		}
	}
	return out, nil
}

// leaseDecision is what a task-listing heartbeat does to one task its worker
// holds: renew its lease when listed, take it back when orphaned, else leave
// it (a claim too recent to be missing from the list).
func leaseDecision(t *task.Task, l task.Listing, now time.Time) ([]event.Event, bool, error) {
	switch {
	case l.Lists(t):
		v := t.Snapshot()
		return nil, true, t.ExtendLease(task.ExtendParams{WorkerID: v.WorkerID, LeaseID: v.LeaseID}, now)
	case t.Orphaned(l, now):
		e, err := t.ReleaseOrphan(l, now)
		return []event.Event{e}, true, err
	default:
		return nil, false, nil
	}
}

// Drain asks a worker to stop claiming: its claims return no tasks and its
// heartbeats answer drain: true until it registers again. Its tasks stay
// its own to finish. The operator's action is audited
// (audit.worker_drained), repeated or not.
func (s *WorkerService) Drain(ctx context.Context, id string) (*worker.Worker, error) {
	var out *worker.Worker
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Workers.Update(ctx, id, func(w *worker.Worker, now time.Time) ([]event.Event, error) {
			audit := event.Audit(event.AuditWorkerDrained, auditKeyID(ctx), now)
			audit.WorkerID, audit.Queues = w.ID(), w.Queues()
			return append(w.Drain(now), audit), nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("drain worker: %w", err)
	}
	return out, nil
}

// List returns every worker; a key limited to some queues sees the workers
// that serve one of them.
func (s *WorkerService) List(ctx context.Context) ([]*worker.Worker, error) {
	var out []*worker.Worker
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Workers.List(ctx)
		return err
	})
	if p := ports.Principal(ctx); p.Restricted() {
		out = slices.DeleteFunc(out, func(w *worker.Worker) bool { return !p.SeesQueues(w.Queues()) })
	}
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
