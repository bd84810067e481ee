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

// Submit creates a task, or returns the queue's existing task with the same
// idempotency key (created false). Concurrent identical submissions create
// exactly one task: storage resolves the race on a unique index.
func (s *TaskService) Submit(ctx context.Context, p task.SubmitParams) (*task.Task, bool, error) {
	if err := task.ValidateSubmit(&p); err != nil {
		return nil, false, err
	}
	if err := ports.Principal(ctx).CheckQueue(p.Queue); err != nil {
		return nil, false, err
	}
	if p.ID == uuid.Nil {
		id, err := uuid.NewV7()
		if err != nil {
			return nil, false, fmt.Errorf("new task id: %w", err)
		}
		p.ID = id
	}
	var (
		out     *task.Task
		created bool
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var v validation.Errors
		checkJSON(&v, st, "payload", p.Payload)
		if err := v.Err(); err != nil {
			return err
		}
		var err error
		out, created, err = st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
			return task.Submit(p, now)
		})
		if err != nil || created {
			return err
		}
		out, err = hideLease(ctx, st, out) // the existing task may be RUNNING
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("submit task: %w", err)
	}
	return out, created, nil
}
