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
// exactly one task: storage resolves the race on a unique index. A
// submission debounced on its unique key replaces the payload of the
// PENDING holder and pushes its run_at on (task.Task.Debounce) under the
// holder's row lock; a throttled one is answered by the key's last holder
// while that one finished recently (task.Task.Throttles).
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
		out, created, err = st.Tasks.CreateKeyed(ctx, func(now time.Time) (*task.Task, event.Event, error) {
			return task.Submit(p, now)
		}, keyRules(p))
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

// keyRules are what submission p asks of the holders of its unique key.
func keyRules(p task.SubmitParams) ports.KeyRules {
	var r ports.KeyRules
	if p.ThrottleSeconds != nil {
		r.ThrottleSeconds = *p.ThrottleSeconds
	}
	if p.Debounce != nil {
		r.Debounce = func(t *task.Task, now time.Time) ([]event.Event, bool, error) {
			e, changed := t.Debounce(p, now)
			if !changed {
				return nil, false, nil
			}
			return []event.Event{e}, true, nil
		}
	}
	return r
}

// checkSingleOnly adds to v, under prefix, the fields of p that only a
// single submission (POST /tasks/v1) may carry: debounce and throttle work
// on the holder of one unique key at a time.
func checkSingleOnly(v *validation.Errors, prefix string, p task.SubmitParams) {
	if p.Debounce != nil {
		v.Add(prefix+"debounce_seconds", "only a single submission (POST /tasks/v1) may be debounced")
	}
	if p.ThrottleSeconds != nil {
		v.Add(prefix+"throttle_seconds", "only a single submission (POST /tasks/v1) may be throttled")
	}
}
