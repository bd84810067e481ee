package task

import (
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Bounds of a snooze's delay, in whole seconds.
const (
	// MinSnoozeSeconds is the shortest snooze.
	MinSnoozeSeconds = 1
	// MaxSnoozeSeconds is the longest snooze (30 days).
	MaxSnoozeSeconds = 30 * 24 * 60 * 60
)

// CheckSnoozeSeconds adds to v when seconds, in field, is not a snooze
// delay.
func CheckSnoozeSeconds(v *validation.Errors, field string, seconds int) {
	if seconds < MinSnoozeSeconds || seconds > MaxSnoozeSeconds {
		v.Add(field, fmt.Sprintf("must be a whole number of seconds between %d and %d (30 days)", MinSnoozeSeconds, MaxSnoozeSeconds))
	}
}

// SnoozeParams identify the holder and say how long to wait.
type SnoozeParams struct {
	WorkerID string
	// LeaseID must be the task's current lease.
	LeaseID uuid.UUID
	// DelaySeconds is how long from now the task waits before it may be
	// claimed again (MinSnoozeSeconds..MaxSnoozeSeconds).
	DelaySeconds int
}

// Snooze puts a RUNNING task held by the worker under p.LeaseID back to
// PENDING, claimable p.DelaySeconds after now, without spending an attempt:
// the claim's attempt is given back (attempts is decremented) and Snoozes
// counts the snooze. It ends the running attempt like a report does, so it
// is fenced like Complete. A task an operator asked to cancel ends DEAD
// cancelled instead: the cancellation wins over the holder's wish to run it
// later.
//
// The event is task.snoozed (RUNNING -> PENDING, reason snoozed, with the
// attempt's execution time and DelaySeconds), or task.dead_lettered
// (reason cancelled).
func (t *Task) Snooze(p SnoozeParams, now time.Time) (event.Event, error) {
	var v validation.Errors
	CheckSnoozeSeconds(&v, "delay_seconds", p.DelaySeconds)
	if err := v.Err(); err != nil {
		return event.Event{}, err
	}
	if err := t.fence(p.WorkerID, p.LeaseID, StatusPending); err != nil {
		return event.Event{}, err
	}
	if t.s.CancelRequestedAt != nil {
		return t.die(event.TaskDeadLettered, DeadCancelled, now), nil
	}
	delay := time.Duration(p.DelaySeconds) * time.Second
	// End the attempt under the number it was claimed with, before giving
	// that number back.
	t.endAttempt(OutcomeSnoozed, "", now)
	t.s.Attempts--
	t.s.Snoozes++
	e := t.requeue(event.TaskSnoozed, RequeueSnoozed, now.Add(delay), now)
	e.DelaySeconds = event.Seconds(delay)
	return e, nil
}
