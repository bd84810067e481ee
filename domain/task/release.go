package task

import (
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
)

// ReleaseParams identify the holder giving its task back.
type ReleaseParams struct {
	WorkerID string
	// LeaseID must be the task's current lease.
	LeaseID uuid.UUID
}

// Release hands a RUNNING task held by the worker under p.LeaseID back to
// PENDING, claimable now, without spending an attempt: what a stopping
// worker does with the tasks it will not finish. Like a snooze, the
// claim's attempt is given back (attempts is decremented), and the attempt
// ends with outcome released; unlike a snooze, the task is claimable at
// once and Snoozes does not count it. It is fenced like Complete. A task
// an operator asked to cancel ends DEAD cancelled instead: the
// cancellation wins over handing the task to another worker.
//
// The event is task.released (RUNNING -> PENDING, reason released, with
// the attempt's execution time), or task.dead_lettered (reason
// cancelled).
func (t *Task) Release(p ReleaseParams, now time.Time) (event.Event, error) {
	if err := t.fence(p.WorkerID, p.LeaseID, StatusPending); err != nil {
		return event.Event{}, err
	}
	if t.s.CancelRequestedAt != nil {
		return t.die(event.TaskDeadLettered, DeadCancelled, now), nil
	}
	// End the attempt under the number it was claimed with, before giving
	// that number back.
	t.endAttempt(OutcomeReleased, "", now)
	t.s.Attempts--
	return t.requeue(event.TaskReleased, RequeueReleased, now, now), nil
}
