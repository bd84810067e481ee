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
	"github.com/taskmaster/taskmaster/domain/worker"
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
	out, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, check, completeFunc(cmd), nil)
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
// counts the report as the worker's sign of life, in one transaction. check,
// when not nil, refuses what storage cannot hold before anything is loaded;
// then, when not nil, runs in the transaction after the report was applied.
func (s *TaskService) updateReported(ctx context.Context, id uuid.UUID, workerID string, check func(ports.Stores) error,
	fn ports.TaskUpdateFunc, then func(context.Context, ports.Stores) error) (*task.Task, error) {
	if err := ports.Principal(ctx).CheckWorkerID(workerID); err != nil {
		return nil, err
	}
	var out *task.Task
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if check != nil {
			if err := check(st); err != nil {
				return err
			}
		}
		var err error
		if out, err = st.Tasks.Update(ctx, id, visibleTaskFunc(ctx, fn)); err != nil {
			return checkRefusedReporter(ctx, st, workerID, err)
		}
		if then != nil {
			if err := then(ctx, st); err != nil {
				return err
			}
		}
		return touchReporter(ctx, st, workerID)
	})
	return out, err
}

// touchReporter counts a task report as its worker's sign of life, and
// checks on that read of the worker that the principal owns it (else the
// report rolls back). The report was already fenced, so a worker that died
// since does not undo it; one that vanished belongs to no key, which only
// the unrestricted principal and admin may report for.
func touchReporter(ctx context.Context, st ports.Stores, workerID string) error {
	_, err := st.Workers.Touch(ctx, workerID, actAsFunc(ctx, signOfLife))
	switch {
	case errors.Is(err, worker.ErrNotFound):
		return ports.Principal(ctx).CheckActAs(workerID, "")
	case errors.Is(err, worker.ErrDead):
		return nil
	}
	return err
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
