package task

import (
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// PurgeStatuses are the statuses a queue purge removes, one per purge:
// PENDING (the backlog; RUNNING tasks stay with their holders) or DEAD (the
// dead letters).
var PurgeStatuses = []Status{StatusPending, StatusDead}

// ForPurge returns the filter of a purge of queue's tasks of status, or a
// validation error naming the field.
func ForPurge(queue string, status Status) (Filter, error) {
	var v validation.Errors
	CheckQueue(&v, "queue", queue)
	if !slices.Contains(PurgeStatuses, status) {
		v.Add("status", fmt.Sprintf("must be %s", JoinStatuses(PurgeStatuses)))
	}
	return Filter{Queue: queue, Statuses: []Status{status}}, v.Err()
}

// Purge is an operator's purge removing the task: it returns the
// task.purged event (From the task's status, To empty: the task is gone)
// or a *TransitionError when the task is not in one of PurgeStatuses. The
// task itself does not change; storage deletes it, and passes its end on
// to its dependants as the end of a DEAD parent (they can never run).
func (t *Task) Purge(now time.Time) (event.Event, error) {
	if !slices.Contains(PurgeStatuses, t.s.Status) {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: ""}
	}
	e := t.event(event.TaskPurged, t.s.Status, string(t.s.DeadReason), now)
	e.To = ""
	return e, nil
}

// PurgeState is where a purge job is.
type PurgeState string

const (
	// PurgeRunning is entered when a large purge is accepted; the job's
	// batches then run in the background until none is left (PurgeDone)
	// or one fails for good (PurgeFailed).
	PurgeRunning PurgeState = "running"
	// PurgeDone is entered when no matching task is left. Terminal.
	PurgeDone PurgeState = "done"
	// PurgeFailed is entered when a batch failed other than by an outage
	// (which is retried). Terminal: the batches before it stay done.
	PurgeFailed PurgeState = "failed"
)

// PurgeJob is a large purge running in the background, batch by batch.
type PurgeJob struct {
	ID    uuid.UUID
	Queue string
	// Status is the status purged.
	Status Status
	State  PurgeState
	// Matched is how many tasks matched when the purge was accepted.
	Matched int64
	// Removed is how many the batches removed so far.
	Removed int64
	// AsOf is the database time of the count: the job removes the tasks
	// that matched then and have not changed since.
	AsOf       time.Time
	StartedAt  time.Time
	FinishedAt *time.Time
	// Error says why a failed job failed.
	Error string
	// KeyID is the API key that asked for the purge ("" without one).
	KeyID string
	// Cursor is where the current pass over the matching tasks stands (the
	// last task id a batch considered; nil: at the start).
	Cursor *uuid.UUID
	// Pass counts the passes over the matching tasks (0 for the first); a
	// pass that met tasks locked by other transactions is followed by
	// another, up to a limit.
	Pass int
	// Locked counts the tasks of the current pass that were locked.
	Locked int64
}

// Filter returns the filter of the job's batches.
func (j *PurgeJob) Filter() Filter {
	bound := j.AsOf.Add(time.Microsecond)
	return Filter{Queue: j.Queue, Statuses: []Status{j.Status}, UpdatedBefore: &bound}
}
