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
	if err := prepareBatch(ps, &v); err != nil {
		return nil, nil, err
	}
	if err := v.Err(); err != nil {
		return nil, nil, err
	}
	if err := checkBatchQueues(ctx, ps); err != nil {
		return nil, nil, err
	}
	var (
		out     []*task.Task
		created []bool
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if err := checkPayloads(st, "tasks", ps); err != nil {
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

// prepareBatch adds to v what is wrong with the batch's size and items
// ("tasks[i].field"), fills the items' defaults and gives each an id.
func prepareBatch(ps []task.SubmitParams, v *validation.Errors) error {
	switch {
	case len(ps) == 0:
		v.Add("tasks", "must hold at least one task")
		return nil
	case len(ps) > MaxBatch:
		v.Add("tasks", fmt.Sprintf("must hold at most %d tasks", MaxBatch))
		return nil
	}
	for i := range ps {
		checkSingleOnly(v, fmt.Sprintf("tasks[%d].", i), ps[i])
		if err := task.ValidateSubmit(&ps[i]); err != nil {
			v.Merge(fmt.Sprintf("tasks[%d].", i), err.(*validation.Error))
			continue
		}
		if ps[i].ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("new task id: %w", err)
			}
			ps[i].ID = id
		}
	}
	return nil
}

// checkBatchQueues returns a forbidden error for the first item whose
// queue the principal may not use.
func checkBatchQueues(ctx context.Context, ps []task.SubmitParams) error {
	principal := ports.Principal(ctx)
	for _, p := range ps {
		if err := principal.CheckQueue(p.Queue); err != nil {
			return err
		}
	}
	return nil
}

func asValidation(err error) *validation.Error {
	if ve, ok := err.(*validation.Error); ok {
		return ve
	}
	return &validation.Error{Fields: []validation.FieldError{{Field: "(item)", Message: err.Error()}}}
}
