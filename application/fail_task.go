package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// Fail records a failed attempt: the task is retried after backoff when the
// error is retryable and attempts remain, else it is dead-lettered. Only the
// holder, under its current lease, may report it.
func (s *TaskService) Fail(ctx context.Context, cmd ports.FailCommand) (*task.Task, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	if len(cmd.Error) > task.MaxErrorLength {
		v.Add("error", fmt.Sprintf("must be at most %d bytes", task.MaxErrorLength))
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	out, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, nil, func(t *task.Task, now time.Time) ([]event.Event, error) {
		e, err := t.Fail(task.FailParams{
			WorkerID: cmd.WorkerID, LeaseID: *cmd.LeaseID, Error: cmd.Error, Retryable: cmd.Retryable, Rand: s.rand,
		}, s.cfg.Backoff, now)
		return []event.Event{e}, err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("fail task: %w", err)
	}
	return out, nil
}
