package task

import (
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Execution time limits: an attempt may run at most its limit from its
// claim, whatever its heartbeats and extensions say (a lease proves the
// holder is alive; a limit bounds what it may spend). The limit of an
// attempt is the task's own TimeoutSeconds, else the queue's default at the
// claim (ClaimParams.DefaultTimeoutSeconds), else none.

// Bounds of a time limit, in whole seconds.
const (
	// MinTimeoutSeconds is the shortest time limit.
	MinTimeoutSeconds = 1
	// MaxTimeoutSeconds is the longest time limit (24 h).
	MaxTimeoutSeconds = 24 * 60 * 60
)

// CheckTimeoutSeconds adds to v when seconds, in field, is not a time
// limit.
func CheckTimeoutSeconds(v *validation.Errors, field string, seconds int) {
	if seconds < MinTimeoutSeconds || seconds > MaxTimeoutSeconds {
		v.Add(field, fmt.Sprintf("must be a whole number of seconds between %d and %d (24 h)", MinTimeoutSeconds, MaxTimeoutSeconds))
	}
}

// TimedOut reports whether the running attempt has used up its time limit
// at now: the task is RUNNING under a limit whose end (timeout_at) is not
// after now. The timeout reaper's query encodes exactly this rule.
func (t *Task) TimedOut(now time.Time) bool {
	return t.s.Status == StatusRunning && t.s.TimeoutAt != nil && !t.s.TimeoutAt.After(now)
}

// TimeoutError is the last error of an attempt that ran past its limit.
func TimeoutError(seconds int) string {
	return fmt.Sprintf("execution timeout after %ds", seconds)
}

// TimeOut ends a RUNNING attempt that used up its time limit (TimedOut),
// whatever its holder's heartbeats say: the attempt ends with outcome
// timed_out and the task's last error says so ("execution timeout after
// Ns"). Then the usual rule of a retryable failure applies: with attempts
// left the task is PENDING again after the backoff of its retry policy
// (the task's own, else policy) for its attempts, jittered with rand; on
// its last attempt it is DEAD exhausted. A task an operator asked to
// cancel ends DEAD cancelled. The holder's later reports are refused: its
// lease is gone.
//
// The event is task.requeued (reason timed_out) or task.dead_lettered
// (reason exhausted, or cancelled).
func (t *Task) TimeOut(policy backoff.Policy, rand backoff.Source, now time.Time) (event.Event, error) {
	if t.s.Status != StatusRunning {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusPending}
	}
	if !t.TimedOut(now) {
		return event.Event{}, ErrNotTimedOut
	}
	limit := 0
	if t.s.ClaimedAt != nil {
		limit = int(t.s.TimeoutAt.Sub(*t.s.ClaimedAt).Round(time.Second) / time.Second)
	}
	msg := TimeoutError(limit)
	t.s.LastError = msg
	if t.s.CancelRequestedAt != nil {
		return t.die(event.TaskDeadLettered, DeadCancelled, now), nil
	}
	t.endAttempt(OutcomeTimedOut, msg, now)
	if t.s.Attempts >= t.s.MaxAttempts {
		return t.die(event.TaskDeadLettered, DeadExhausted, now), nil
	}
	if t.s.Retry != nil {
		policy = *t.s.Retry
	}
	return t.requeue(event.TaskRequeued, RequeueTimedOut, now.Add(policy.Wait(t.s.Attempts, rand)), now), nil
}

// timeoutEnd is when an attempt claimed at now ends under a limit of
// seconds (nil: no limit).
func timeoutEnd(now time.Time, seconds int) *time.Time {
	if seconds <= 0 {
		return nil
	}
	end := now.Add(time.Duration(seconds) * time.Second)
	return &end
}
