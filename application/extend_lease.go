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

// Extend sets the lease of a task the worker holds under cmd.LeaseID to run
// out cmd.LeaseSeconds from now (the task's lease length when absent), which
// becomes the length later renewals reuse. It is fenced like a report; it
// counts as the worker's sign of life. Workers whose heartbeats list their
// tasks need not call it: each such heartbeat renews the listed leases.
func (s *TaskService) Extend(ctx context.Context, cmd ports.ExtendCommand) (*task.Task, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	if cmd.LeaseSeconds != nil {
		task.CheckLeaseSeconds(&v, "lease_seconds", *cmd.LeaseSeconds)
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	out, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, nil, func(t *task.Task, now time.Time) ([]event.Event, error) {
		return nil, t.ExtendLease(task.ExtendParams{WorkerID: cmd.WorkerID, LeaseID: *cmd.LeaseID, LeaseSeconds: cmd.LeaseSeconds}, now)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("extend lease: %w", err)
	}
	return out, nil
}
