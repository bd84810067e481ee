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

// Snooze puts a task the worker holds under cmd.LeaseID back to PENDING,
// claimable cmd.DelaySeconds from now, without spending an attempt (the
// claim's attempt is given back; the task counts the snooze). It is fenced
// like a report and counts as the worker's sign of life; the task.snoozed
// event goes to the outbox in the same transaction.
func (s *TaskService) Snooze(ctx context.Context, cmd ports.SnoozeCommand) (*task.Task, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	if cmd.DelaySeconds == nil {
		v.Add("delay_seconds", "is required")
	} else {
		task.CheckSnoozeSeconds(&v, "delay_seconds", *cmd.DelaySeconds)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	out, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, nil, func(t *task.Task, now time.Time) ([]event.Event, error) {
		e, err := t.Snooze(task.SnoozeParams{WorkerID: cmd.WorkerID, LeaseID: *cmd.LeaseID, DelaySeconds: *cmd.DelaySeconds}, now)
		return []event.Event{e}, err
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("snooze task: %w", err)
	}
	return out, nil
}
