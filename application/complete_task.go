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

// Complete marks a task DONE. Only the worker holding it, under its current
// lease, may do so. A command that enqueues takes CompleteEnqueue's path.
func (s *TaskService) Complete(ctx context.Context, cmd ports.CompleteCommand) (*task.Task, error) {
	if cmd.Enqueue != nil {
		c, err := s.CompleteEnqueue(ctx, cmd)
		return c.Task, err
	}
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	if err := v.Err(); err != nil {
		return nil, err
	}
	check := func(st ports.Stores) error {
		var v validation.Errors
		checkJSON(&v, st, "result", cmd.Result)
		return v.Err()
	}
	r, err := singleReport(ctx, cmd.TaskID, cmd.WorkerID, check, completeFunc(cmd), nil)
	if err != nil {
		return nil, fmt.Errorf("complete task: %w", err)
	}
	r.completes = []ports.CompleteRef{{ID: cmd.TaskID, WorkerID: cmd.WorkerID, LeaseID: *cmd.LeaseID, Result: cmd.Result}}
	out, err := s.reportedOne(ctx, r)
	if err != nil {
		return nil, fmt.Errorf("complete task: %w", err)
	}
	return out, nil
}

// completeFunc is the domain's decision on a completion.
func completeFunc(cmd ports.CompleteCommand) ports.TaskUpdateFunc {
	return func(t *task.Task, now time.Time) ([]event.Event, error) {
		e, err := t.Complete(task.CompleteParams{WorkerID: cmd.WorkerID, LeaseID: *cmd.LeaseID, Result: cmd.Result}, now)
		return []event.Event{e}, err
	}
}

// updateReported applies a holder's report to its task (fn fences it) and
// counts the report as the worker's sign of life, in a transaction shared
// with concurrent reports (see report). check, when not nil, refuses what
// storage cannot hold before anything is loaded; then, when not nil, runs
// in that transaction once the report was applied (not when it was
// refused).
func (s *TaskService) updateReported(ctx context.Context, id uuid.UUID, workerID string, check func(ports.Stores) error,
	fn ports.TaskUpdateFunc, then func(context.Context, ports.Stores) error) (*task.Task, error) {
	r, err := singleReport(ctx, id, workerID, check, fn, then)
	if err != nil {
		return nil, err
	}
	return s.reportedOne(ctx, r)
}

// singleReport is updateReported's request, to serve with reportedOne.
func singleReport(ctx context.Context, id uuid.UUID, workerID string, check func(ports.Stores) error,
	fn ports.TaskUpdateFunc, then func(context.Context, ports.Stores) error) (report, error) {
	if err := ports.Principal(ctx).CheckWorkerID(workerID); err != nil {
		return report{}, err
	}
	decide := visibleTaskFunc(ctx, fn)
	r := report{workerID: workerID, ids: []uuid.UUID{id}, decide: func(_ int, t *task.Task, now time.Time) ([]event.Event, error) {
		return decide(t, now)
	}}
	if check != nil {
		r.refuse = func(st ports.Stores) []error { return []error{check(st)} }
	}
	if then != nil {
		r.then = func(ctx context.Context, st ports.Stores, res []ports.TaskResult) error {
			if res[0].Err != nil {
				return nil // refused: nothing follows
			}
			return then(ctx, st)
		}
	}
	return r, nil
}

// reportedOne serves the report of one task r and returns the task, or the
// item's error.
func (s *TaskService) reportedOne(ctx context.Context, r report) (*task.Task, error) {
	out, err := s.reports.do(ctx, r)
	if err != nil {
		return nil, err
	}
	if out[0].Err != nil {
		return nil, out[0].Err
	}
	return out[0].Task, nil
}

// checkReporter adds to v when a holder's report names no worker.
func checkReporter(v *validation.Errors, workerID string) {
	if workerID == "" {
		v.Add("worker_id", "is required")
	}
}

// checkLease adds to v when a holder's report (field names it) does not
// carry the lease it holds the task under: fencing is never optional.
func checkLease(v *validation.Errors, field string, leaseID *uuid.UUID) {
	if leaseID == nil {
		v.Add(field, "is required: the lease_id the claim returned")
	}
}
