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

// Release hands a task the worker holds under cmd.LeaseID back to PENDING,
// claimable now, without spending an attempt (the claim's attempt is given
// back, and ends with outcome released): what a stopping worker does with
// the tasks it will not finish. It is fenced like a report and counts as
// the worker's sign of life; the task.released event goes to the outbox in
// the same transaction, whose commit wakes the claims waiting on the queue.
func (s *TaskService) Release(ctx context.Context, cmd ports.ReleaseCommand) (*task.Task, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	if err := v.Err(); err != nil {
		return nil, err
	}
	out, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, nil, releaseFunc(cmd.WorkerID, *cmd.LeaseID), nil)
	if err != nil {
		return nil, fmt.Errorf("release task: %w", err)
	}
	return out, nil
}

// ReleaseBatch hands many tasks of one worker back in one transaction, each
// item fenced on its own: a refused item does not stop the others. A
// draining worker gives back everything it holds with one request.
func (s *TaskService) ReleaseBatch(ctx context.Context, workerID string, items []ports.ReleaseItem) ([]ports.TaskResult, error) {
	ids := make([]uuid.UUID, len(items))
	for i, it := range items {
		ids[i] = it.TaskID
	}
	err := validateBatch("items", workerID, ids, func(v *validation.Errors) {
		for i, it := range items {
			checkLease(v, fmt.Sprintf("items[%d].lease_id", i), it.LeaseID)
		}
	})
	if err != nil {
		return nil, err
	}
	out, err := s.reportBatch(ctx, workerID, ids, nil, func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
		return releaseFunc(workerID, *items[i].LeaseID)(t, now)
	}, nil)
	if err != nil {
		return nil, fmt.Errorf("release batch: %w", err)
	}
	return out, nil
}

// releaseFunc is the domain's decision on a release.
func releaseFunc(workerID string, leaseID uuid.UUID) ports.TaskUpdateFunc {
	return func(t *task.Task, now time.Time) ([]event.Event, error) {
		e, err := t.Release(task.ReleaseParams{WorkerID: workerID, LeaseID: leaseID}, now)
		return []event.Event{e}, err
	}
}
