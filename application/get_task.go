package application

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// Get returns one task.
func (s *TaskService) Get(ctx context.Context, id uuid.UUID) (*task.Task, error) {
	var out *task.Task
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		if out, err = st.Tasks.Get(ctx, id); err != nil {
			return err
		}
		if !ports.Principal(ctx).QueueAllowed(out.Queue()) {
			return task.ErrNotFound // never tell a key of tasks it may not see
		}
		out, err = hideLease(ctx, st, out)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get task: %w", err)
	}
	return out, nil
}

// List returns a page of tasks, newest first.
func (s *TaskService) List(ctx context.Context, f ports.TaskFilter) ([]*task.Task, error) {
	var v validation.Errors
	if f.Limit == 0 {
		f.Limit = DefaultListLimit
	}
	if f.Limit < 1 || f.Limit > MaxListLimit {
		v.Add("limit", fmt.Sprintf("must be between 1 and %d", MaxListLimit))
	}
	if f.Status != "" && !f.Status.Valid() {
		v.Add("status", "must be one of PENDING, RUNNING, DONE, DEAD")
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	if p := ports.Principal(ctx); p.Restricted() {
		if f.Queue != "" {
			if err := p.CheckQueue(f.Queue); err != nil {
				return nil, err
			}
		} else {
			f.Visible = p.QueuePatterns()
		}
	}
	var out []*task.Task
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		if out, err = st.Tasks.List(ctx, f); err != nil {
			return err
		}
		return hideLeases(ctx, st, out)
	})
	if err != nil {
		return nil, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}
