package worker

import (
	"errors"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
)

// ErrRetained: retention was asked to delete a worker that is not DEAD, or
// was heard from less than the retention period ago.
var ErrRetained = errors.New("worker is within its retention period")

// Expired reports whether retention may delete the worker at now: it is
// DEAD and silent for at least ttl. A ttl of 0 or less keeps every worker.
// The retention query in storage encodes exactly this rule.
func (w *Worker) Expired(ttl time.Duration, now time.Time) bool {
	if ttl <= 0 || w.s.Status != StatusDead {
		return false
	}
	return !w.s.LastHeartbeatAt.Add(ttl).After(now)
}

// Clean is retention deleting a DEAD worker: it returns the worker.cleaned
// event (From DEAD, To empty) or ErrRetained when the worker is not Expired.
// The worker itself does not change; storage deletes it.
func (w *Worker) Clean(ttl time.Duration, now time.Time) (event.Event, error) {
	if !w.Expired(ttl, now) {
		return event.Event{}, ErrRetained
	}
	e := w.event(event.WorkerCleaned, w.s.Status, now)
	e.To = ""
	return e, nil
}
