package task

import (
	"errors"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
)

// ErrRetained: retention was asked to delete a task that is not finished, or
// finished less than the retention period ago.
var ErrRetained = errors.New("task is within its retention period")

// Expired reports whether retention may delete the task at now: it is DONE
// or DEAD and finished at least ttl ago. A ttl of 0 or less keeps every task.
// The retention query in storage encodes exactly this rule.
func (t *Task) Expired(ttl time.Duration, now time.Time) bool {
	if ttl <= 0 || (t.s.Status != StatusDone && t.s.Status != StatusDead) || t.s.FinishedAt == nil {
		return false
	}
	return !t.s.FinishedAt.Add(ttl).After(now)
}

// Clean is retention deleting a finished task: it returns the task.cleaned
// event (From the deleted status, To empty) or ErrRetained when the task is
// not Expired. The task itself does not change; storage deletes it.
func (t *Task) Clean(ttl time.Duration, now time.Time) (event.Event, error) {
	if !t.Expired(ttl, now) {
		return event.Event{}, ErrRetained
	}
	e := t.event(event.TaskCleaned, t.s.Status, string(t.s.DeadReason), now)
	e.To = ""
	return e, nil
}
