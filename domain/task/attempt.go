package task

import (
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
)

// Outcome says how an attempt (one claim of a task, until the task left
// RUNNING) ended.
type Outcome string

const (
	// OutcomeCompleted: the holder completed the task (DONE).
	OutcomeCompleted Outcome = "completed"
	// OutcomeFailed: the holder failed the task (retried, or DEAD).
	OutcomeFailed Outcome = "failed"
	// OutcomeLeaseExpired: the lease ran out and the service took the task
	// back.
	OutcomeLeaseExpired Outcome = "lease_expired"
	// OutcomeOrphaned: the holder's heartbeat stopped listing the task and
	// the service took it back.
	OutcomeOrphaned Outcome = "orphaned"
	// OutcomeWorkerDead: the holder was declared dead and the service took
	// the task back.
	OutcomeWorkerDead Outcome = "worker_dead"
	// OutcomeCancelled: an operator had asked to cancel the running task,
	// and the attempt ended by the holder's fail or by the service taking
	// the task back (the task ends DEAD cancelled). A complete that wins
	// the race is OutcomeCompleted.
	OutcomeCancelled Outcome = "cancelled"
	// OutcomeSnoozed: the holder gave the task back for later without
	// spending the attempt.
	OutcomeSnoozed Outcome = "snoozed"
	// OutcomeReleased: the holder handed the task back, claimable at once,
	// without spending the attempt (a stopping worker's drain).
	OutcomeReleased Outcome = "released"
	// OutcomeTimedOut: the attempt ran past its time limit and the service
	// ended it (the task retried after backoff, or DEAD exhausted).
	OutcomeTimedOut Outcome = "timed_out"
)

// Outcomes lists every outcome, in the order the API documents them.
var Outcomes = []Outcome{
	OutcomeCompleted, OutcomeFailed, OutcomeLeaseExpired, OutcomeOrphaned, OutcomeWorkerDead,
	OutcomeCancelled, OutcomeSnoozed, OutcomeReleased, OutcomeTimedOut,
}

// Attempt is one claim of a task, from the claim until the task left
// RUNNING. Storage keeps one per ended attempt; the running attempt is the
// task itself (RunningAttempt).
type Attempt struct {
	// TaskID is the task.
	TaskID uuid.UUID
	// Number is the task's attempt count at the claim (1 for the first;
	// counting starts again at an operator's retry, and an attempt that
	// ended snoozed or released gives its number back).
	Number int
	// WorkerID held the task.
	WorkerID string
	// ClaimedAt is when the claim took it.
	ClaimedAt time.Time
	// FinishedAt is when it ended; nil while it runs.
	FinishedAt *time.Time
	// Outcome is how it ended; empty while it runs.
	Outcome Outcome
	// Error is the holder's failure message (OutcomeFailed, and
	// OutcomeCancelled when the holder failed the task), or the time limit
	// that ended it (OutcomeTimedOut); empty otherwise.
	Error string
	// HTTPStatus is the endpoint's response status of a push delivery
	// (0: the attempt was no delivery, or the delivery got no response:
	// a timeout, a connection error).
	HTTPStatus int
}

// EndedAttempt returns the attempt that a transition of this task ended
// (since it was restored or created), and true; false when none did. Every
// transition out of RUNNING ends the running attempt: storage saves the
// attempt in the transaction that saves the task.
func (t *Task) EndedAttempt() (Attempt, bool) {
	if t.ended == nil {
		return Attempt{}, false
	}
	return *t.ended, true
}

// RunningAttempt returns the attempt that holds the task now, and true;
// false unless it is RUNNING.
func (t *Task) RunningAttempt() (Attempt, bool) {
	if t.s.Status != StatusRunning || t.s.ClaimedAt == nil {
		return Attempt{}, false
	}
	return Attempt{TaskID: t.s.ID, Number: t.s.Attempts, WorkerID: t.s.WorkerID, ClaimedAt: *t.s.ClaimedAt}, true
}

// endAttempt records the end of the running attempt with outcome and the
// holder's error message (errText, empty unless it reported a failure), at
// now.
// It does nothing unless the task is RUNNING, and keeps the first record
// when called twice in one transition, so a transition that names its own
// outcome (a snooze: t.endAttempt(OutcomeSnoozed, "", now) before it
// changes the status) wins over the one finishRun and requeue derive.
//
// Every way out of RUNNING goes through finishRun (DONE, DEAD) or requeue
// (PENDING), which call it; a new transition out of RUNNING must too.
func (t *Task) endAttempt(outcome Outcome, errText string, now time.Time) {
	if t.s.Status != StatusRunning || t.s.ClaimedAt == nil || t.ended != nil {
		return
	}
	a, _ := t.RunningAttempt()
	a.FinishedAt = &now
	a.Outcome = outcome
	a.Error = errText
	t.ended = &a
}

// leaveRunning ends the running attempt, if any, for a transition of type
// typ with reason: a holder's failure report keeps its message.
func (t *Task) leaveRunning(typ event.Type, reason string, now time.Time) {
	errText := ""
	if typ == event.TaskFailed {
		errText = t.s.LastError
	}
	t.endAttempt(outcomeOf(typ, reason), errText, now)
}

// outcomeOf is the outcome of an attempt that a transition of type typ,
// with reason, ends: the holder's reports say what they did (a fail of a
// task an operator asked to cancel is cancelled); the service's takebacks
// say why it took the task (reason lease_expired, worker_dead, orphaned,
// or cancelled when a cancel request was pending).
func outcomeOf(typ event.Type, reason string) Outcome {
	switch {
	case typ == event.TaskCompleted:
		return OutcomeCompleted
	case typ == event.TaskFailed && reason != string(DeadCancelled):
		return OutcomeFailed
	default:
		return Outcome(reason)
	}
}
