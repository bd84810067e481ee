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
		t, err := visibleTask(ctx, st, id)
		if err != nil {
			return err
		}
		out, err = hideLease(ctx, st, t)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("get task: %w", err)
	}
	return out, nil
}

// List returns a page of tasks, newest first, and the cursor of the next
// page when the page is full or the response byte cap cut it short.
func (s *TaskService) List(ctx context.Context, q ports.ListQuery) (ports.TaskPage, error) {
	f := ports.TaskFilter{Queue: q.Queue, Status: q.Status, After: q.After, MaxBytes: s.cfg.maxResponseBytes()}
	var v validation.Errors
	if q.Queue != "" {
		task.CheckQueue(&v, "queue", q.Queue)
	}
	f.Limit = optionalCount(&v, "limit", q.Limit, DefaultListLimit, MaxListLimit)
	if f.Status != "" && !f.Status.Valid() {
		v.Add("status", "must be one of PENDING, RUNNING, DONE, DEAD")
	}
	if err := v.Err(); err != nil {
		return ports.TaskPage{}, err
	}
	if p := ports.Principal(ctx); p.Restricted() {
		if f.Queue != "" {
			if err := p.CheckQueue(f.Queue); err != nil {
				return ports.TaskPage{}, err
			}
		} else {
			f.Visible = p.QueuePatterns()
		}
	}
	var page ports.TaskPage
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		if page.Tasks, page.Truncated, err = st.Tasks.List(ctx, f); err != nil {
			return err
		}
		return hideLeases(ctx, st, page.Tasks)
	})
	if err != nil {
		return ports.TaskPage{}, fmt.Errorf("list tasks: %w", err)
	}
	if n := len(page.Tasks); n > 0 && (n == f.Limit || page.Truncated) {
		last := page.Tasks[n-1].ID()
		page.Next = &last
	}
	return page, nil
}
