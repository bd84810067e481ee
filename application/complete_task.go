package application

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Complete marks a task DONE. Only the worker holding it, with the current
// lease when one is given, may do so.
func (s *TaskService) Complete(ctx context.Context, cmd ports.CompleteCommand) (*task.Task, error) {
	if cmd.WorkerID == "" {
		return nil, requiredWorkerID()
	}
	var out *task.Task
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Tasks.Update(ctx, cmd.TaskID, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Complete(task.CompleteParams{WorkerID: cmd.WorkerID, LeaseID: cmd.LeaseID, Result: cmd.Result}, now)
			return []event.Event{e}, err
		})
		if err != nil {
			return err
		}
		return touchReporter(ctx, st, cmd.WorkerID)
	})
	if err != nil {
		return nil, fmt.Errorf("complete task: %w", err)
	}
	return out, nil
}

// touchReporter counts a task report as its worker's sign of life. The report
// was already fenced, so a worker that vanished or died since does not undo
// it.
func touchReporter(ctx context.Context, st ports.Stores, workerID string) error {
	_, err := st.Workers.Touch(ctx, workerID, signOfLife)
	if errors.Is(err, worker.ErrNotFound) || errors.Is(err, worker.ErrDead) {
		return nil
	}
	return err
}

func requiredWorkerID() error {
	var v validation.Errors
	v.Add("worker_id", "is required")
	return v.Err()
}
