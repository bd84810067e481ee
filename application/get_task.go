package application

import (
	"context"
	"errors"
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
// page when the page is full or the response byte cap cut it short. The
// query's filter is task.Filter's (storage: BulkStore.Search).
func (s *TaskService) List(ctx context.Context, q ports.ListQuery) (ports.TaskPage, error) {
	f := q.Filter()
	var v validation.Errors
	limit := optionalCount(&v, "limit", q.Limit, DefaultListLimit, MaxListLimit)
	if err := f.Validate(); err != nil {
		var fields *validation.Error
		if !errors.As(err, &fields) {
			return ports.TaskPage{}, err
		}
		v.Merge("", fields)
	}
	if err := v.Err(); err != nil {
		return ports.TaskPage{}, err
	}
	p := ports.BulkBatchParams{Filter: f, After: q.After, Limit: limit}
	if k := ports.Principal(ctx); k.Restricted() {
		if f.Queue != "" {
			if err := k.CheckQueue(f.Queue); err != nil {
				return ports.TaskPage{}, err
			}
		} else {
			p.Visible = k.QueuePatterns()
		}
	}
	var page ports.TaskPage
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		if page.Tasks, page.Truncated, err = st.Bulk.Search(ctx, p, s.cfg.maxResponseBytes()); err != nil {
			return err
		}
		return hideLeases(ctx, st, page.Tasks)
	})
	if err != nil {
		return ports.TaskPage{}, fmt.Errorf("list tasks: %w", err)
	}
	if n := len(page.Tasks); n > 0 && (n == limit || page.Truncated) {
		last := page.Tasks[n-1].ID()
		page.Next = &last
	}
	return page, nil
}
