// Package task is the task state machine: what a task is, which transitions
// exist between its statuses, and the events each transition produces. It is
// pure: time comes in as an argument (the database's clock), nothing here
// does I/O.
package task

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Status is where a task is in its lifecycle.
type Status string

const (
	// StatusPending is entered on submission, on a retryable failure with
	// attempts left (after backoff), when the holding worker dies with attempts
	// left, and on an operator retry. It is left by a claim (RUNNING), or for
	// DEAD past the deadline or on cancel.
	StatusPending Status = "PENDING"
	// StatusRunning is entered by a claim; exactly one worker holds the task
	// under a lease id until the lease expires (renewed by the holder's
	// heartbeats and by extend). It is left by complete (DONE), fail (PENDING
	// or DEAD), or when the service takes it back (PENDING, or DEAD on the
	// last attempt or after a cancel request): the holder died, its lease
	// expired, or its heartbeat showed it had lost track of the task.
	StatusRunning Status = "RUNNING"
	// StatusDone is entered when the holder completes the task. Terminal; only
	// retention deletes it.
	StatusDone Status = "DONE"
	// StatusDead is entered when the task cannot succeed (see DeadReason). It
	// is left only by an operator retry (PENDING) or retention.
	StatusDead Status = "DEAD"
	// StatusBlocked is entered on submission by a task that depends on
	// tasks not yet DONE (see SubmitAfter). It is never claimable. It is
	// left for PENDING when its last such parent completes, in that
	// parent's transaction (task.unblocked), or for DEAD: dependency_failed
	// when a parent ends DEAD, deadline when its deadline passes, cancelled
	// by an operator.
	StatusBlocked Status = "BLOCKED"
)

// Statuses lists every status, in the order the API documents them.
var Statuses = []Status{StatusPending, StatusRunning, StatusDone, StatusDead, StatusBlocked}

// Valid reports whether s is one of the statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusPending, StatusRunning, StatusDone, StatusDead, StatusBlocked:
		return true
	}
	return false
}

// UnfinishedStatuses are the statuses of a task that has not finished yet:
// the one place that lists them. A unique key is held while its task is in
// one of them, BLOCKED included (the partial index tasks_unique_active
// encodes this list, and a test compares the two), and a schedule with
// overlap skip creates nothing while its previous task is in one of them
// (a schedule's task has no dependencies, so it is never BLOCKED: one list
// serves both rules).
var UnfinishedStatuses = []Status{StatusPending, StatusRunning, StatusBlocked}

// Unfinished reports whether s is one of UnfinishedStatuses.
func (s Status) Unfinished() bool { return slices.Contains(UnfinishedStatuses, s) }

// DeadReason says why a task is DEAD.
type DeadReason string

const (
	// DeadExhausted: it failed on its last allowed attempt.
	DeadExhausted DeadReason = "exhausted"
	// DeadNonRetryable: the worker reported a failure that must not be retried.
	DeadNonRetryable DeadReason = "non_retryable"
	// DeadWorkerDead: its worker died while holding it on its last attempt.
	DeadWorkerDead DeadReason = "worker_dead"
	// DeadDeadline: it was still PENDING when its deadline passed.
	DeadDeadline DeadReason = "deadline"
	// DeadCancelled: an operator cancelled it: while PENDING, or while
	// RUNNING and then the holder failed it or lost it.
	DeadCancelled DeadReason = "cancelled"
	// DeadLeaseExpired: its lease ran out on its last attempt.
	DeadLeaseExpired DeadReason = "lease_expired"
	// DeadOrphaned: its worker's heartbeat did not list it (the worker never
	// learned of the claim, or forgot it) on its last attempt.
	DeadOrphaned DeadReason = "orphaned"
	// DeadDependencyFailed: a task it depends on ended DEAD (for any
	// reason, this one included), so it can never run.
	DeadDependencyFailed DeadReason = "dependency_failed"
	// DeadDependencySkipped: a task it depends on under a skip edge ended
	// DEAD, so it was skipped: it never ran, like a cancelled task, and
	// dead-letter views show it apart from failures.
	DeadDependencySkipped DeadReason = "dependency_skipped"
)

// DeadReasons lists every dead reason, in the order the API documents them.
var DeadReasons = []DeadReason{
	DeadExhausted, DeadNonRetryable, DeadWorkerDead, DeadDeadline, DeadCancelled,
	DeadLeaseExpired, DeadOrphaned, DeadDependencyFailed, DeadDependencySkipped,
}

// Failure reports whether a task DEAD for this reason failed (rather than
// being stopped without running: cancelled, or skipped for a parent under
// a skip edge). Dead-letter views show the two apart.
func (r DeadReason) Failure() bool { return r != DeadCancelled && r != DeadDependencySkipped }

// RequeueReason says why a task went back to PENDING.
type RequeueReason string

const (
	// RequeueFailed: the holder reported a retryable failure.
	RequeueFailed RequeueReason = "failed"
	// RequeueWorkerDead: the holding worker was declared dead.
	RequeueWorkerDead RequeueReason = "worker_dead"
	// RequeueRetried: an operator retried a DEAD task.
	RequeueRetried RequeueReason = "retried"
	// RequeueLeaseExpired: the holder's lease ran out.
	RequeueLeaseExpired RequeueReason = "lease_expired"
	// RequeueOrphaned: the holder's heartbeat did not list the task.
	RequeueOrphaned RequeueReason = "orphaned"
	// RequeueSnoozed: the holder put the task back for later without
	// spending an attempt.
	RequeueSnoozed RequeueReason = "snoozed"
	// RequeueReleased: the holder handed the task back, claimable at once,
	// without spending an attempt.
	RequeueReleased RequeueReason = "released"
	// RequeueTimedOut: the running attempt used up its time limit; the
	// task waits for its retry's backoff.
	RequeueTimedOut RequeueReason = "timed_out"
)

// RequeueReasons lists every requeue reason.
var RequeueReasons = []RequeueReason{
	RequeueFailed, RequeueWorkerDead, RequeueLeaseExpired, RequeueOrphaned, RequeueRetried, RequeueSnoozed, RequeueReleased,
	RequeueTimedOut,
}

// Limits on submitted values.
const (
	// MaxQueueLength is the longest queue name.
	MaxQueueLength = 128
	// DefaultMaxAttempts applies when a submission gives none.
	DefaultMaxAttempts = 3
	// MaxMaxAttempts is the largest max_attempts accepted.
	MaxMaxAttempts = 100
	// MaxTags is the most tags a task may carry.
	MaxTags = 16
	// MaxTagLength is the longest tag.
	MaxTagLength = 64
	// MaxErrorLength is the longest failure message kept, in bytes.
	MaxErrorLength = 64 << 10
	// MaxIdempotencyKeyLength is the longest idempotency key.
	MaxIdempotencyKeyLength = 255
	// MaxUniqueKeyLength is the longest unique key, in bytes.
	MaxUniqueKeyLength = 255
	// MaxGroupKeyLength is the longest group key, in characters.
	MaxGroupKeyLength = 128
	// MinLeaseSeconds is the shortest lease a claim or extension may ask.
	MinLeaseSeconds = 1
	// MaxLeaseSeconds is the longest lease (12 h).
	MaxLeaseSeconds = 12 * 60 * 60
	// DefaultLeaseSeconds is the lease of a claim that asks for none, unless
	// configured otherwise (5 min).
	DefaultLeaseSeconds = 300
)

// Snapshot is a task's full state as plain data: what storage saves and
// transports show. Changing a Snapshot changes nothing; only Task's methods
// move a task between statuses.
type Snapshot struct {
	ID             uuid.UUID
	Queue          string
	Status         Status
	Priority       int
	Payload        json.RawMessage
	Tags           []string
	Attempts       int
	MaxAttempts    int
	WorkerID       string
	LeaseID        uuid.UUID
	LastError      string
	DeadReason     DeadReason
	Result         json.RawMessage
	Deadline       *time.Time
	RunAt          time.Time
	IdempotencyKey string
	CreatedAt      time.Time
	ClaimedAt      *time.Time
	FinishedAt     *time.Time
	UpdatedAt      time.Time
	// LeaseSeconds is the lease length of the running attempt, which
	// renewals reuse; 0 unless RUNNING.
	LeaseSeconds int
	// LeaseExpiresAt is when the running attempt's lease runs out; nil
	// unless RUNNING.
	LeaseExpiresAt *time.Time
	// CancelRequestedAt is when an operator asked to cancel the running
	// attempt; nil unless RUNNING with such a request pending.
	CancelRequestedAt *time.Time
	// ClaimRequestID is the request id of the claim that made the task
	// RUNNING (see ClaimedUnder); empty when the claim sent none, and
	// unless RUNNING.
	ClaimRequestID string
	// HasParents is true when the task was submitted depending on other
	// tasks (see SubmitAfter).
	HasParents bool
	// Blockers counts the parents not yet DONE; above 0 only while
	// BLOCKED.
	Blockers int
	// HasDependants is true once a task was submitted depending on this
	// one, whatever this one's status then: its end (DONE or DEAD) is
	// passed on to them (ParentsFinished), and retention keeps it while
	// one of them is unfinished.
	HasDependants bool
	// UniqueKey, when not empty, is held by the task while it is
	// unfinished: no other unfinished task of its queue has it.
	UniqueKey string
	// Retry is the task's own retry policy (nil: the server's).
	Retry *backoff.Policy
	// Snoozes counts the times the holder snoozed the task (each gave its
	// attempt back).
	Snoozes int
	// GroupKey, when not empty, is the task's group in its queue (a
	// tenant, a customer): claims take tasks round-robin across a queue's
	// groups, and a queue's max_running_per_group caps each group.
	GroupKey string
	// TimeoutSeconds is the task's own time limit on each attempt (0:
	// none; the queue's default applies at each claim).
	TimeoutSeconds int
	// TimeoutAt is when the running attempt's time limit is up; nil
	// unless RUNNING under a limit.
	TimeoutAt *time.Time
	// Metadata is the producer's free-form data (nil: none).
	Metadata map[string]string
	// Trace is the trace context the task was submitted under (zero:
	// none).
	Trace Trace
	// Progress is the last progress report of the running attempt, or of
	// the attempt that ran last (nil: none since the last claim).
	Progress *Progress
	// Awaited is true once a producer waited for the task to finish:
	// storage announces its end (DONE or DEAD) when it commits.
	Awaited bool
	// ScheduleName and ScheduleTick, when ScheduleTick is not nil, mark
	// the task of a recurring schedule's tick. Only SubmitTick sets them,
	// never a submission: storage finds a tick's task by them alone.
	ScheduleName string
	ScheduleTick *time.Time
	// WorkflowID is the run the task belongs to: its own id for a task
	// submitted alone, its run's for a task created by a complete's
	// enqueue, a spawn or a batch graph (see SubmitParams.WorkflowID).
	// Never uuid.Nil once restored or created.
	WorkflowID uuid.UUID
	// ReplayOf is the DONE or DEAD task this one was replayed from
	// (uuid.Nil: not a replay; see Replay).
	ReplayOf uuid.UUID
	// DebounceUntil, when not nil, is the latest run_at a debounced
	// submission may push the task to (see Debounce).
	DebounceUntil *time.Time
}

// Task is a unit of work in a queue. Its fields are reachable only through
// Snapshot; its methods are the only way to change it.
type Task struct {
	s Snapshot
	// ended is the attempt the last transition ended (see EndedAttempt).
	ended *Attempt
	// finished is set by a transition into DONE or DEAD (see Finished).
	finished bool
	// progressChanged is set when the stored progress changed (see
	// ProgressChanged).
	progressChanged bool
}

// Restore rebuilds a task from stored state.
func Restore(s Snapshot) *Task {
	if s.WorkflowID == uuid.Nil {
		s.WorkflowID = s.ID
	}
	s.Tags = slices.Clone(s.Tags)
	s.Retry = clonePolicy(s.Retry)
	s.Metadata = cloneMetadata(s.Metadata)
	s.Progress = cloneProgress(s.Progress)
	return &Task{s: s}
}

// Snapshot returns a copy of the task's state.
func (t *Task) Snapshot() Snapshot {
	s := t.s
	s.Tags = slices.Clone(t.s.Tags)
	s.Retry = clonePolicy(t.s.Retry)
	s.Metadata = cloneMetadata(t.s.Metadata)
	s.Progress = cloneProgress(t.s.Progress)
	return s
}

func clonePolicy(p *backoff.Policy) *backoff.Policy {
	if p == nil {
		return nil
	}
	c := *p
	return &c
}

// ID returns the task id.
func (t *Task) ID() uuid.UUID { return t.s.ID }

// Status returns the task's status.
func (t *Task) Status() Status { return t.s.Status }

// Queue returns the task's queue.
func (t *Task) Queue() string { return t.s.Queue }

// WorkflowID returns the run the task belongs to (see
// Snapshot.WorkflowID).
func (t *Task) WorkflowID() uuid.UUID { return t.s.WorkflowID }

// SubmitParams describe a new task.
type SubmitParams struct {
	ID       uuid.UUID
	Queue    string
	Payload  json.RawMessage
	Priority int
	// MaxAttempts is how many claims the task gets (1..MaxMaxAttempts); nil
	// means DefaultMaxAttempts, which ValidateSubmit fills in.
	MaxAttempts    *int
	Tags           []string
	Deadline       *time.Time
	RunAt          *time.Time // nil means now
	IdempotencyKey string
	// UniqueKey, when not nil, is the task's active-unique key (1 to
	// MaxUniqueKeyLength printable bytes): while an unfinished task of the
	// queue holds it, a submission returns that task instead.
	UniqueKey *string
	// Retry, when not nil, overrides the server's backoff for this task.
	Retry *RetryParams
	// GroupKey, when not nil, is the task's group (1 to MaxGroupKeyLength
	// printable characters).
	GroupKey *string
	// TimeoutSeconds, when not nil, is the task's time limit on each
	// attempt (MinTimeoutSeconds..MaxTimeoutSeconds); nil leaves the
	// queue's default.
	TimeoutSeconds *int
	// Metadata is the producer's free-form data (see CheckMetadata); nil
	// or empty: none.
	Metadata map[string]string
	// Trace is the trace context of the submission (zero: none).
	Trace Trace
	// Awaited says the submitter waits for the task to finish (see
	// Snapshot.Awaited).
	Awaited bool
	// WorkflowID is the run the task joins (uuid.Nil: its own, a run of
	// its own). The use cases set it: a complete's enqueue and a spawn
	// give their tasks the reporting task's run, a batch graph its own
	// (or the one the batch names).
	WorkflowID uuid.UUID
	// Debounce, when not nil, debounces the submission on its unique key
	// (see CheckDebounce and Task.Debounce).
	Debounce *DebounceParams
	// ThrottleSeconds, when not nil, answers the submission with the last
	// holder of its unique key while that one finished less than this
	// many seconds ago (see Task.Throttles).
	ThrottleSeconds *int
}

// Submit creates a PENDING task at time now.
func Submit(p SubmitParams, now time.Time) (*Task, event.Event, error) {
	if err := ValidateSubmit(&p); err != nil {
		return nil, event.Event{}, err
	}
	runAt := now
	if p.RunAt != nil {
		runAt = *p.RunAt
	}
	if p.Debounce != nil {
		// The first submission waits its debounce: later ones push it on,
		// up to DebounceUntil.
		runAt = now.Add(time.Duration(p.Debounce.Seconds) * time.Second)
	}
	if p.Deadline != nil && !p.Deadline.After(runAt) {
		var v validation.Errors
		v.Add("deadline", "must be after run_at (or after now when run_at is absent)")
		return nil, event.Event{}, v.Err()
	}
	t := &Task{s: Snapshot{
		ID:             p.ID,
		Queue:          p.Queue,
		Status:         StatusPending,
		Priority:       p.Priority,
		Payload:        p.Payload,
		Tags:           p.Tags,
		MaxAttempts:    *p.MaxAttempts,
		Deadline:       p.Deadline,
		RunAt:          runAt,
		IdempotencyKey: p.IdempotencyKey,
		CreatedAt:      now,
		UpdatedAt:      now,
		Retry:          p.Retry.policy(),
		Metadata:       cloneMetadata(p.Metadata),
		Trace:          p.Trace,
		Awaited:        p.Awaited,
		WorkflowID:     p.WorkflowID,
	}}
	if t.s.WorkflowID == uuid.Nil {
		t.s.WorkflowID = p.ID
	}
	if p.Debounce != nil {
		until := now.Add(time.Duration(*p.Debounce.MaxSeconds) * time.Second)
		t.s.DebounceUntil = &until
	}
	if p.TimeoutSeconds != nil {
		t.s.TimeoutSeconds = *p.TimeoutSeconds
	}
	if p.UniqueKey != nil {
		t.s.UniqueKey = *p.UniqueKey
	}
	if p.GroupKey != nil {
		t.s.GroupKey = *p.GroupKey
	}
	return t, t.event(event.TaskSubmitted, "", "", now), nil
}

// SubmitTick creates the PENDING task of the tick of the recurring
// schedule name, at time now: the schedule's submission p, marked as the
// tick's (Snapshot.ScheduleName, ScheduleTick). Only the scheduler calls it;
// nothing a client sends reaches the mark, so no producer can make a task
// the scheduler takes for a tick's. p may not carry an idempotency key (a
// schedule's task is found by its mark).
func SubmitTick(p SubmitParams, name string, tick, now time.Time) (*Task, event.Event, error) {
	if p.IdempotencyKey != "" {
		return nil, event.Event{}, fmt.Errorf("submit the tick of schedule %q: a tick's task has no idempotency key", name)
	}
	t, e, err := Submit(p, now)
	if err != nil {
		return nil, e, err
	}
	tick = tick.UTC()
	t.s.ScheduleName, t.s.ScheduleTick = name, &tick
	return t, e, nil
}

// IsTick reports whether t is the task of the tick of the schedule name.
func (t *Task) IsTick(name string, tick time.Time) bool {
	return t.s.ScheduleTick != nil && t.s.ScheduleName == name && t.s.ScheduleTick.Equal(tick)
}

// ClaimParams identify the claiming worker and the lease it gets.
type ClaimParams struct {
	WorkerID   string
	WorkerTags []string
	LeaseID    uuid.UUID
	// LeaseSeconds is the lease length (MinLeaseSeconds..MaxLeaseSeconds).
	LeaseSeconds int
	// RequestID is the claim's client-generated request id (ValidRequestID),
	// or empty.
	RequestID string
	// DefaultTimeoutSeconds is the time limit of the queue's attempts
	// whose task has none of its own (0: none).
	DefaultTimeoutSeconds int
}

// Claimable reports whether a worker with workerTags may claim the task at
// now: it is PENDING, its run_at has come, its deadline (if any) has not
// passed, and its tags are a subset of the worker's (untagged tasks match any
// worker). The claim query in storage encodes exactly this rule.
func (t *Task) Claimable(workerTags []string, now time.Time) bool {
	if t.s.Status != StatusPending || t.s.RunAt.After(now) {
		return false
	}
	if t.s.Deadline != nil && !t.s.Deadline.After(now) {
		return false
	}
	for _, tag := range t.s.Tags {
		if !slices.Contains(workerTags, tag) {
			return false
		}
	}
	return true
}

// Deliverable reports whether a push queue's dispatcher may claim the task
// at now: it is Claimable whatever its tags (tags are workers'
// capabilities; a push queue's endpoint takes every task). The push
// dispatchers' claim statement encodes exactly this rule.
func (t *Task) Deliverable(now time.Time) bool { return t.Claimable(t.s.Tags, now) }

// Claim moves a claimable PENDING task to RUNNING under the worker, with a
// fresh lease of p.LeaseSeconds from now, counting an attempt.
func (t *Task) Claim(p ClaimParams, now time.Time) (event.Event, error) {
	if t.s.Status != StatusPending {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusRunning}
	}
	if err := ValidateLeaseSeconds("lease_seconds", p.LeaseSeconds); err != nil {
		return event.Event{}, err
	}
	if !t.Claimable(p.WorkerTags, now) {
		return event.Event{}, ErrNotClaimable
	}
	t.s.Status = StatusRunning
	t.s.Attempts++
	t.s.WorkerID = p.WorkerID
	t.s.LeaseID = p.LeaseID
	t.s.ClaimedAt = &now
	t.s.UpdatedAt = now
	t.s.LeaseSeconds = p.LeaseSeconds
	t.s.LeaseExpiresAt = leaseEnd(now, p.LeaseSeconds)
	t.s.ClaimRequestID = p.RequestID
	t.s.TimeoutAt = timeoutEnd(now, t.AttemptTimeoutSeconds(p.DefaultTimeoutSeconds))
	t.s.Progress = nil
	return Claimed(t), nil
}

// AttemptTimeoutSeconds is the time limit of an attempt of the task
// claimed from a queue whose default limit is queueDefault (0: none): the
// task's own, else the queue's; 0 when neither has one. The claim in
// storage encodes exactly this rule.
func (t *Task) AttemptTimeoutSeconds(queueDefault int) int {
	if t.s.TimeoutSeconds > 0 {
		return t.s.TimeoutSeconds
	}
	return max(queueDefault, 0)
}

// ClaimedUnder reports whether the task is RUNNING under workerID from the
// claim that carried requestID: a repeat of that claim (same worker, same
// request id) answers with such tasks instead of claiming more. The store's
// lookup of a repeated claim encodes exactly this rule.
func (t *Task) ClaimedUnder(workerID, requestID string) bool {
	return requestID != "" && t.s.Status == StatusRunning && t.s.WorkerID == workerID && t.s.ClaimRequestID == requestID
}

// Claimed returns the event of a claim that storage carried out in bulk (the
// task is already RUNNING with its claimed_at set).
func Claimed(t *Task) event.Event {
	at := t.s.UpdatedAt
	if t.s.ClaimedAt != nil {
		at = *t.s.ClaimedAt
	}
	e := t.event(event.TaskClaimed, StatusPending, "", at)
	e.QueueWaitSeconds = event.Seconds(at.Sub(t.s.CreatedAt))
	return e
}

// CompleteParams identify the reporting worker and carry the result.
type CompleteParams struct {
	WorkerID string
	// LeaseID is the lease the worker claimed the task under; it must be
	// the task's current one.
	LeaseID uuid.UUID
	Result  json.RawMessage
	// HTTPStatus is the endpoint's response status when a push queue's
	// dispatcher delivered the task (0: none); the ended attempt records
	// it.
	HTTPStatus int
}

// Complete moves a RUNNING task held by the worker to DONE.
func (t *Task) Complete(p CompleteParams, now time.Time) (event.Event, error) {
	if err := t.fence(p.WorkerID, p.LeaseID, StatusDone); err != nil {
		return event.Event{}, err
	}
	t.s.Result = p.Result
	e := t.finishRun(event.TaskCompleted, StatusDone, "", now)
	t.recordHTTPStatus(p.HTTPStatus)
	return e, nil
}

// recordHTTPStatus puts a push delivery's response status on the attempt
// the transition ended.
func (t *Task) recordHTTPStatus(status int) {
	if t.ended != nil && status != 0 {
		t.ended.HTTPStatus = status
	}
}

// FailParams identify the reporting worker and describe the failure.
type FailParams struct {
	WorkerID string
	// LeaseID is the lease the worker claimed the task under; it must be
	// the task's current one.
	LeaseID   uuid.UUID
	Error     string
	Retryable bool
	// Rand is the randomness of a jittered retry delay (nil: a jittered
	// delay is its longest).
	Rand backoff.Source
	// HTTPStatus is the endpoint's response status when a push queue's
	// dispatcher delivered the task (0: none, as for a timeout or a
	// connection error); the ended attempt records it.
	HTTPStatus int
	// RetryAfter, when not nil, is how long a retry waits instead of the
	// retry policy's delay: what the endpoint asked for (Retry-After).
	RetryAfter *time.Duration
}

// Fail records a failed attempt of a RUNNING task held by the worker. With
// attempts left and a retryable error the task goes back to PENDING, claimable
// after the wait of its retry policy (the task's own, else policy, the
// server's) for its attempts: Delay(attempts), jittered with p.Rand when the
// policy asks (or after p.RetryAfter, when set); otherwise it goes to DEAD
// (exhausted or non_retryable). A task
// an operator asked to cancel goes to DEAD cancelled, whatever the error: the
// cancellation is what the holder reports.
func (t *Task) Fail(p FailParams, policy backoff.Policy, now time.Time) (event.Event, error) {
	if err := t.fence(p.WorkerID, p.LeaseID, ""); err != nil {
		return event.Event{}, err
	}
	t.s.LastError = truncate(withoutNUL(p.Error), MaxErrorLength)
	var e event.Event
	switch {
	case t.s.CancelRequestedAt != nil:
		e = t.die(event.TaskFailed, DeadCancelled, now)
	case !p.Retryable:
		e = t.die(event.TaskFailed, DeadNonRetryable, now)
	case t.s.Attempts >= t.s.MaxAttempts:
		e = t.die(event.TaskFailed, DeadExhausted, now)
	default:
		if t.s.Retry != nil {
			policy = *t.s.Retry
		}
		wait := policy.Wait(t.s.Attempts, p.Rand)
		if p.RetryAfter != nil {
			wait = max(*p.RetryAfter, 0)
		}
		e = t.requeue(event.TaskFailed, RequeueFailed, now.Add(wait), now)
	}
	t.recordHTTPStatus(p.HTTPStatus)
	return e, nil
}

// ReleaseFromDeadWorker takes a RUNNING task back from a worker that was
// declared dead. dead is the holder that was judged dead: the worker and the
// lease the task ran under when it was found. If the task has another holder
// by now (it was requeued and claimed again in between), it is refused with a
// *LeaseError and left alone. The attempt counts: with attempts left the task
// is PENDING again at once, otherwise DEAD with reason worker_dead (see
// takeBack).
func (t *Task) ReleaseFromDeadWorker(dead Holder, now time.Time) (event.Event, error) {
	if t.s.Status != StatusRunning {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusPending}
	}
	if !t.HeldBy(dead.WorkerID, dead.LeaseID) {
		return event.Event{}, &LeaseError{ID: t.s.ID, Status: t.s.Status}
	}
	return t.takeBack(RequeueWorkerDead, DeadWorkerDead, now), nil
}

// ExpireDeadline moves a PENDING or BLOCKED task whose deadline has passed
// to DEAD with reason deadline: a BLOCKED task could only ever be unblocked
// into a PENDING task that no claim hands out, so it ends now, and its own
// dependants with it.
func (t *Task) ExpireDeadline(now time.Time) (event.Event, error) {
	if t.s.Status != StatusPending && t.s.Status != StatusBlocked {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusDead}
	}
	if t.s.Deadline == nil || t.s.Deadline.After(now) {
		return event.Event{}, ErrDeadlineNotPassed
	}
	return t.die(event.TaskDeadLettered, DeadDeadline, now), nil
}

// Cancel is an operator's cancellation. A PENDING or BLOCKED task moves to
// DEAD with reason cancelled (a BLOCKED task's dependants end DEAD
// dependency_failed with it). A RUNNING task stays RUNNING with the request recorded
// (task.cancel_requested; the first request's time is kept): its holder
// learns it from its heartbeats and should fail the task, which then ends
// DEAD cancelled, as it does if the service takes the task back instead
// (lease expired, worker dead, orphaned). Any other status is a
// TransitionError.
func (t *Task) Cancel(now time.Time) (event.Event, error) {
	switch t.s.Status {
	case StatusPending, StatusBlocked:
		return t.die(event.TaskDeadLettered, DeadCancelled, now), nil
	case StatusRunning:
		if t.s.CancelRequestedAt == nil {
			t.s.CancelRequestedAt = &now
			t.s.UpdatedAt = now
		}
		return t.event(event.TaskCancelRequested, StatusRunning, "", now), nil
	default:
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusDead}
	}
}

// Retry moves a DEAD task back to PENDING with its attempts reset, claimable
// at once. The previous dead reason and error stay in last_error.
func (t *Task) Retry(now time.Time) (event.Event, error) {
	if t.s.Status != StatusDead {
		return event.Event{}, &TransitionError{ID: t.s.ID, From: t.s.Status, To: StatusPending}
	}
	history := fmt.Sprintf("retried after DEAD (%s)", t.s.DeadReason)
	if t.s.LastError != "" {
		history += "; last error: " + t.s.LastError
	}
	t.s.LastError = truncate(history, MaxErrorLength)
	t.s.Attempts = 0
	t.s.DeadReason = ""
	t.s.FinishedAt = nil
	t.s.Result = nil
	return t.requeue(event.TaskRetried, RequeueRetried, now, now), nil
}

// fence checks that the task is RUNNING and held by workerID under leaseID:
// every holder's report names its lease, so a report of an earlier attempt
// (even by the same worker) can never pass for the current one. to is the
// status the caller wanted, for the error. A task that is PENDING (taken
// back, waiting for its next claim) or RUNNING under another worker or lease
// is a LeaseError: the caller's lease is gone. A finished task (DONE, DEAD)
// is a TransitionError.
func (t *Task) fence(workerID string, leaseID uuid.UUID, to Status) error {
	switch {
	case t.s.Status == StatusPending:
		return &LeaseError{ID: t.s.ID, Status: t.s.Status}
	case t.s.Status != StatusRunning:
		return &TransitionError{ID: t.s.ID, From: t.s.Status, To: to}
	case workerID != t.s.WorkerID || leaseID != t.s.LeaseID:
		return &LeaseError{ID: t.s.ID, Status: t.s.Status}
	}
	return nil
}

// takeBack ends the running attempt of a task the service takes from its
// holder: DEAD cancelled when an operator asked to cancel it, DEAD with
// exhausted when it was on its last attempt, else PENDING again at once with
// requeue. The attempt counts.
func (t *Task) takeBack(requeue RequeueReason, exhausted DeadReason, now time.Time) event.Event {
	switch {
	case t.s.CancelRequestedAt != nil:
		return t.die(event.TaskDeadLettered, DeadCancelled, now)
	case t.s.Attempts >= t.s.MaxAttempts:
		return t.die(event.TaskDeadLettered, exhausted, now)
	default:
		return t.requeue(event.TaskRequeued, requeue, now, now)
	}
}

// leaseEnd is when a lease of seconds taken at now runs out.
func leaseEnd(now time.Time, seconds int) *time.Time {
	end := now.Add(time.Duration(seconds) * time.Second)
	return &end
}

// endLease clears what only a RUNNING task has.
func (t *Task) endLease() {
	t.s.WorkerID = ""
	t.s.LeaseID = uuid.Nil
	t.s.LeaseSeconds = 0
	t.s.LeaseExpiresAt = nil
	t.s.CancelRequestedAt = nil
	t.s.ClaimRequestID = ""
	t.s.TimeoutAt = nil
}

// finishRun moves the task into a terminal status, ending its running
// attempt if it has one.
func (t *Task) finishRun(typ event.Type, to Status, reason string, now time.Time) event.Event {
	from := t.s.Status
	e := t.event(typ, from, reason, now)
	if from == StatusRunning && t.s.ClaimedAt != nil {
		e.ExecutionSeconds = event.Seconds(now.Sub(*t.s.ClaimedAt))
	}
	e.EndToEndSeconds = event.Seconds(now.Sub(t.s.CreatedAt))
	t.leaveRunning(typ, reason, now)
	t.s.Status = to
	t.endLease()
	t.s.FinishedAt = &now
	t.s.UpdatedAt = now
	t.finished = true
	e.To = string(to)
	return e
}

func (t *Task) die(typ event.Type, reason DeadReason, now time.Time) event.Event {
	t.s.DeadReason = reason
	return t.finishRun(typ, StatusDead, string(reason), now)
}

func (t *Task) requeue(typ event.Type, reason RequeueReason, runAt, now time.Time) event.Event {
	from := t.s.Status
	e := t.event(typ, from, string(reason), now)
	if from == StatusRunning && t.s.ClaimedAt != nil {
		e.ExecutionSeconds = event.Seconds(now.Sub(*t.s.ClaimedAt))
	}
	t.leaveRunning(typ, string(reason), now)
	t.s.Status = StatusPending
	t.endLease()
	t.s.RunAt = runAt
	t.s.UpdatedAt = now
	e.To = string(StatusPending)
	return e
}

func (t *Task) event(typ event.Type, from Status, reason string, at time.Time) event.Event {
	var workflow string
	if t.s.WorkflowID != t.s.ID && t.s.WorkflowID != uuid.Nil {
		workflow = t.s.WorkflowID.String()
	}
	return event.Event{
		WorkflowID: workflow,
		Version:    event.Version,
		Type:       typ,
		TaskID:     t.s.ID.String(),
		Queue:      t.s.Queue,
		From:       string(from),
		To:         string(t.s.Status),
		Reason:     reason,
		Attempt:    t.s.Attempts,
		WorkerID:   t.s.WorkerID,
		OccurredAt: at,
		Metadata:   cloneMetadata(t.s.Metadata),
	}
}

// withoutNUL replaces NUL characters, which no text column can hold, with
// U+FFFD: a failure report must not be refused for the bytes of its message.
func withoutNUL(s string) string {
	return strings.ReplaceAll(s, "\x00", "\uFFFD")
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	// Cut on a rune boundary.
	for n > 0 && n < len(s) && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
