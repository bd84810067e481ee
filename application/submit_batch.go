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

// SubmitBatch creates up to MaxBatch tasks in one transaction and one
// statement. Validation is all-or-nothing: one *validation.Error lists every
// bad item by index ("tasks[3].queue"). Idempotency keys are honoured per
// item, including repeats within the batch.
func (s *TaskService) SubmitBatch(ctx context.Context, ps []task.SubmitParams) ([]*task.Task, []bool, error) {
	var v validation.Errors
	switch {
	case len(ps) == 0:
		v.Add("tasks", "must hold at least one task")
	case len(ps) > MaxBatch:
		v.Add("tasks", fmt.Sprintf("must hold at most %d tasks", MaxBatch))
	}
	if err := v.Err(); err != nil {
		return nil, nil, err
	}
	for i := range ps {
		if err := task.ValidateSubmit(&ps[i]); err != nil {
			v.Merge(fmt.Sprintf("tasks[%d].", i), err.(*validation.Error))
			continue
		}
		if ps[i].ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return nil, nil, fmt.Errorf("new task id: %w", err)
			}
			ps[i].ID = id
		}
	}
	if err := v.Err(); err != nil {
		return nil, nil, err
	}
	principal := ports.Principal(ctx)
	for _, p := range ps {
		if err := principal.CheckQueue(p.Queue); err != nil {
			return nil, nil, err
		}
	}
	var (
		out     []*task.Task
		created []bool
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var v validation.Errors
		for i, p := range ps {
			checkJSON(&v, st, fmt.Sprintf("tasks[%d].payload", i), p.Payload)
		}
		if err := v.Err(); err != nil {
			return err
		}
		var err error
		out, created, err = st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			ts := make([]*task.Task, len(ps))
			es := make([]event.Event, len(ps))
			var v validation.Errors
			for i, p := range ps {
				t, e, err := task.Submit(p, now)
				if err != nil {
					// Only rules that need the database time can fail here
					// (a deadline already past).
					v.Merge(fmt.Sprintf("tasks[%d].", i), asValidation(err))
					continue
				}
				ts[i], es[i] = t, e
			}
			if err := v.Err(); err != nil {
				return nil, nil, err
			}
			return ts, es, nil
		})
		if err != nil {
			return err
		}
		return hideLeases(ctx, st, out) // existing tasks may be RUNNING
	})
	if err != nil {
		return nil, nil, fmt.Errorf("submit batch: %w", err)
	}
	return out, created, nil
}

func asValidation(err error) *validation.Error {
	if ve, ok := err.(*validation.Error); ok {
		return ve
	}
	return &validation.Error{Fields: []validation.FieldError{{Field: "(item)", Message: err.Error()}}}
}
