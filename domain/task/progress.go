package task

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Progress: the holder of a running task reports how far it got. The last
// report is kept on the task (every view shows it) until the next claim,
// which starts without; a task.progress event announces it, at most one
// per task per ProgressEventInterval: a report that comes sooner is kept
// and announced by a later event (FlushProgress), carrying the latest
// values.

// Limits of a progress report.
const (
	// MaxProgressMessageBytes is the longest progress message.
	MaxProgressMessageBytes = 1 << 10
	// MaxProgressDetailsBytes is the longest progress details, as JSON
	// text.
	MaxProgressDetailsBytes = 16 << 10
	// ProgressEventInterval is the least time between two task.progress
	// events of one task.
	ProgressEventInterval = time.Second
)

// Progress is what the holder of a task last reported of its advance.
type Progress struct {
	// Percent is how far the work is, from 0 to 100.
	Percent float64
	// Message says what it is doing, for a human (may be empty).
	Message string
	// Details is any JSON value the worker attached (nil: none).
	Details json.RawMessage
	// UpdatedAt is when the report was stored (database time).
	UpdatedAt time.Time
	// EventAt is when the last task.progress event of the attempt was
	// recorded (zero: none yet). A report newer than it waits for
	// FlushProgress.
	EventAt time.Time
}

func cloneProgress(p *Progress) *Progress {
	if p == nil {
		return nil
	}
	c := *p
	c.Details = slices.Clone(p.Details)
	return &c
}

// ProgressParams are a holder's progress report.
type ProgressParams struct {
	WorkerID string
	// LeaseID must be the task's current lease.
	LeaseID uuid.UUID
	// Percent is required: 0 to 100.
	Percent float64
	// Message is at most MaxProgressMessageBytes of UTF-8.
	Message string
	// Details, when not empty, is a JSON value of at most
	// MaxProgressDetailsBytes.
	Details json.RawMessage
}

// CheckProgress adds to v, naming its fields with prefix, what is wrong
// with p's values.
func CheckProgress(v *validation.Errors, prefix string, p ProgressParams) {
	if math.IsNaN(p.Percent) || p.Percent < 0 || p.Percent > 100 {
		v.Add(prefix+"percent", "must be a number from 0 to 100")
	}
	if len(p.Message) > MaxProgressMessageBytes || !utf8.ValidString(p.Message) {
		v.Add(prefix+"message", fmt.Sprintf("must be at most %d bytes of UTF-8", MaxProgressMessageBytes))
	}
	if len(p.Details) > MaxProgressDetailsBytes {
		v.Add(prefix+"details", fmt.Sprintf("must be at most %d bytes of JSON", MaxProgressDetailsBytes))
	} else if len(p.Details) > 0 && !json.Valid(p.Details) {
		v.Add(prefix+"details", "must be valid JSON")
	}
}

// ReportProgress stores the holder's report on a RUNNING task held by
// p.WorkerID under p.LeaseID (fenced like Complete). It is not a
// transition: the status does not change. It returns a task.progress event
// and true unless the task's last such event is less than
// ProgressEventInterval old; the report is then kept for FlushProgress.
func (t *Task) ReportProgress(p ProgressParams, now time.Time) (event.Event, bool, error) {
	var v validation.Errors
	CheckProgress(&v, "", p)
	if err := v.Err(); err != nil {
		return event.Event{}, false, err
	}
	if err := t.fence(p.WorkerID, p.LeaseID, ""); err != nil {
		return event.Event{}, false, err
	}
	next := &Progress{Percent: p.Percent, Message: withoutNUL(p.Message), Details: slices.Clone(p.Details), UpdatedAt: now}
	if t.s.Progress != nil {
		next.EventAt = t.s.Progress.EventAt
	}
	t.s.Progress = next
	t.progressChanged = true
	return t.progressEvent(now)
}

// ProgressDue returns when the task's last progress report, not yet
// announced, may be (FlushProgress), and true; false when there is none to
// announce.
func (t *Task) ProgressDue() (time.Time, bool) {
	p := t.s.Progress
	if t.s.Status != StatusRunning || p == nil || !p.UpdatedAt.After(p.EventAt) {
		return time.Time{}, false
	}
	if p.EventAt.IsZero() {
		return p.UpdatedAt, true
	}
	return p.EventAt.Add(ProgressEventInterval), true
}

// FlushProgress announces the task's last progress report when it was not
// announced yet and may be now (ProgressDue): it returns the task.progress
// event and true. A task that left RUNNING has nothing to announce (its
// transition's event came after the report).
func (t *Task) FlushProgress(now time.Time) (event.Event, bool) {
	if at, ok := t.ProgressDue(); !ok || at.After(now) {
		return event.Event{}, false
	}
	e, ok, _ := t.progressEvent(now)
	return e, ok
}

// progressEvent records a task.progress event of the task's progress at
// now, unless the last one is less than ProgressEventInterval old.
func (t *Task) progressEvent(now time.Time) (event.Event, bool, error) {
	p := t.s.Progress
	if !p.EventAt.IsZero() && now.Before(p.EventAt.Add(ProgressEventInterval)) {
		return event.Event{}, false, nil
	}
	p.EventAt = now
	t.progressChanged = true
	e := t.event(event.TaskProgress, StatusRunning, "", now)
	e.Progress = &event.Progress{Percent: p.Percent, Message: p.Message, Details: slices.Clone(p.Details)}
	return e, true, nil
}

// ProgressChanged reports whether a call since the task was restored
// changed its stored progress (storage writes it then).
func (t *Task) ProgressChanged() bool { return t.progressChanged }
