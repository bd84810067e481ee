package task

import (
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Debounce and throttle: two ways for a submission with a unique key to
// collapse bursts of the same work.
//
// A debounced submission (debounce_seconds) that finds the key held by a
// PENDING task replaces that task's payload with its own and pushes its
// run_at on to debounce_seconds from now, but never past the bound set by
// the first submission (DebounceUntil: its time plus
// debounce_max_seconds), so that a steady stream cannot starve it. The
// first submission itself waits debounce_seconds. A holder that is not
// PENDING any more (RUNNING, BLOCKED) is answered as any unique key's
// holder is, unchanged.
//
// A throttled submission (throttle_seconds) that finds no unfinished
// holder is answered with the key's last holder while that one finished
// (DONE or DEAD) less than throttle_seconds ago; after that, a new task.

// Bounds of debounce and throttle windows, in whole seconds.
const (
	// MinWindowSeconds is the shortest debounce or throttle window.
	MinWindowSeconds = 1
	// MaxWindowSeconds is the longest (30 days).
	MaxWindowSeconds = 30 * 24 * 60 * 60
	// DebounceMaxFactor: without debounce_max_seconds, the bound is this
	// many debounce windows after the first submission.
	DebounceMaxFactor = 10
)

// DebouncedReason is the reason of a task.debounced event.
const DebouncedReason = "debounced"

// DebounceParams debounce a submission on its unique key.
type DebounceParams struct {
	// Seconds is how long the task waits after the latest submission
	// (MinWindowSeconds..MaxWindowSeconds).
	Seconds int
	// MaxSeconds bounds, from the first submission, how far later ones may
	// push the task (Seconds..MaxWindowSeconds); nil means
	// DebounceMaxFactor × Seconds (at most MaxWindowSeconds), which
	// ValidateSubmit fills in.
	MaxSeconds *int
}

// checkWindows adds to v what is wrong with a submission's debounce and
// throttle, and fills the debounce's bound.
func checkWindows(v *validation.Errors, p *SubmitParams) {
	window := func(field string, n int) bool {
		if n < MinWindowSeconds || n > MaxWindowSeconds {
			v.Add(field, fmt.Sprintf("must be a whole number of seconds between %d and %d (30 days)", MinWindowSeconds, MaxWindowSeconds))
			return false
		}
		return true
	}
	if d := p.Debounce; d != nil {
		if p.UniqueKey == nil {
			v.Add("debounce_seconds", "needs a unique_key: submissions are debounced on it")
		}
		if p.RunAt != nil {
			v.Add("run_at", "cannot be given with debounce_seconds, which sets it")
		}
		ok := window("debounce_seconds", d.Seconds)
		switch {
		case d.MaxSeconds == nil && ok:
			m := min(DebounceMaxFactor*d.Seconds, MaxWindowSeconds)
			d.MaxSeconds = &m
		case d.MaxSeconds != nil && window("debounce_max_seconds", *d.MaxSeconds) && ok && *d.MaxSeconds < d.Seconds:
			v.Add("debounce_max_seconds", "must be at least debounce_seconds")
		}
	}
	if n := p.ThrottleSeconds; n != nil {
		if p.UniqueKey == nil {
			v.Add("throttle_seconds", "needs a unique_key: submissions are throttled on it")
		}
		window("throttle_seconds", *n)
	}
}

// Debounce applies the debounced submission p to t, the unfinished task
// holding p's unique key, at now. A PENDING t takes p's payload, and its
// run_at moves on to p.Debounce.Seconds from now, never back and never
// past its DebounceUntil (set now, from its creation and
// p.Debounce.MaxSeconds, for a holder that was not submitted debounced):
// changed true, with its task.debounced event. Any other status is left
// alone (changed false): the holder is answered as it is.
func (t *Task) Debounce(p SubmitParams, now time.Time) (event.Event, bool) {
	if t.s.Status != StatusPending || p.Debounce == nil || p.Debounce.MaxSeconds == nil {
		return event.Event{}, false
	}
	if t.s.DebounceUntil == nil {
		until := t.s.CreatedAt.Add(time.Duration(*p.Debounce.MaxSeconds) * time.Second)
		t.s.DebounceUntil = &until
	}
	runAt := now.Add(time.Duration(p.Debounce.Seconds) * time.Second)
	if runAt.After(*t.s.DebounceUntil) {
		runAt = *t.s.DebounceUntil
	}
	if runAt.After(t.s.RunAt) {
		t.s.RunAt = runAt
	}
	t.s.Payload = p.Payload
	t.s.UpdatedAt = now
	e := t.event(event.TaskDebounced, StatusPending, DebouncedReason, now)
	e.DelaySeconds = event.Seconds(t.s.RunAt.Sub(now))
	return e, true
}

// Throttles reports whether t, a task that held the unique key of a
// submission throttled for seconds, answers that submission at now: it
// finished (DONE or DEAD) less than seconds ago. Storage's look-up of the
// last holder encodes exactly this rule.
func (t *Task) Throttles(seconds int, now time.Time) bool {
	if t.s.Status != StatusDone && t.s.Status != StatusDead || t.s.FinishedAt == nil {
		return false
	}
	return now.Before(t.s.FinishedAt.Add(time.Duration(seconds) * time.Second))
}
