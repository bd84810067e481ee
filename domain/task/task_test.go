package task_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// base is the database time every test starts from.
var base = time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)

// policy is the backoff policy of the tests: 2 s after the first attempt, 4 s
// after the second.
var policy = backoff.Policy{Base: time.Second, Cap: 5 * time.Minute}

var (
	taskID  = uuid.MustParse("11111111-1111-4111-8111-111111111111")
	leaseID = uuid.MustParse("22222222-2222-4222-8222-222222222222")
	staleID = uuid.MustParse("33333333-3333-4333-8333-333333333333")
)

const holder = "worker-1"

// leaseSeconds is the lease of the fixture's claims.
const leaseSeconds = 60

func at(d time.Duration) time.Time { return base.Add(d) }

func ptr[T any](v T) *T { return &v }

func secs(f float64) *float64 { return &f }

// pending is a PENDING task created at base, claimable from base.
func pending() task.Snapshot {
	return task.Snapshot{
		ID:          taskID,
		Queue:       "emails",
		Status:      task.StatusPending,
		Priority:    5,
		Payload:     json.RawMessage(`{"to":"a@example.com"}`),
		Tags:        []string{"eu"},
		MaxAttempts: 3,
		RunAt:       base,
		CreatedAt:   base,
		UpdatedAt:   base,
		WorkflowID:  taskID,
	}
}

// running is the pending task claimed by holder at base+5s, on attempt n,
// with a 60 s lease (it runs out at base+65s) and a time limit of 30 s
// from its queue's default (it is up at base+35s).
func running(n int) task.Snapshot {
	s := pending()
	s.Status = task.StatusRunning
	s.Attempts = n
	s.WorkerID = holder
	s.LeaseID = leaseID
	s.ClaimedAt = ptr(at(5 * time.Second))
	s.UpdatedAt = at(5 * time.Second)
	s.LeaseSeconds = leaseSeconds
	s.LeaseExpiresAt = ptr(at(65 * time.Second))
	s.TimeoutAt = ptr(at(35 * time.Second))
	return s
}

// cancelRequested is running(n) with an operator's cancel request made at
// base+10s.
func cancelRequested(n int) task.Snapshot {
	s := running(n)
	s.CancelRequestedAt = ptr(at(10 * time.Second))
	s.UpdatedAt = at(10 * time.Second)
	return s
}

// done is the running task completed at base+15s.
func done() task.Snapshot {
	s := running(1)
	endRun(&s, task.StatusDone, "", at(15*time.Second))
	s.Result = json.RawMessage(`{"sent":true}`)
	return s
}

// dead is the running task failed for good at base+15s on its last attempt.
func dead() task.Snapshot {
	s := running(3)
	endRun(&s, task.StatusDead, task.DeadExhausted, at(15*time.Second))
	s.LastError = "smtp: 550 mailbox unavailable"
	return s
}

// blocked is a task submitted at base waiting for two parents not yet DONE.
func blocked() task.Snapshot {
	s := pending()
	s.Status = task.StatusBlocked
	s.HasParents = true
	s.Blockers = 2
	return s
}

func snapshotIn(status task.Status) task.Snapshot {
	switch status {
	case task.StatusBlocked:
		return blocked()
	case task.StatusPending:
		return pending()
	case task.StatusRunning:
		return running(1)
	case task.StatusDone:
		return done()
	case task.StatusDead:
		return dead()
	}
	panic("unknown status " + status)
}

var allStatuses = []task.Status{task.StatusPending, task.StatusRunning, task.StatusDone, task.StatusDead, task.StatusBlocked}

// taskEvent is the event every task transition of the fixture produces, with
// the fields that vary left to the caller.
func taskEvent(typ event.Type, from, to task.Status, reason string, attempt int, workerID string, occurred time.Time) event.Event {
	return event.Event{
		Version:    event.Version,
		Type:       typ,
		TaskID:     taskID.String(),
		Queue:      "emails",
		From:       string(from),
		To:         string(to),
		Reason:     reason,
		Attempt:    attempt,
		WorkerID:   workerID,
		OccurredAt: occurred,
	}
}

func TestStatusValid(t *testing.T) {
	t.Parallel()
	for _, s := range allStatuses {
		require.True(t, s.Valid(), s)
	}
	for _, s := range []task.Status{"", "pending", "CANCELLED", "DONE "} {
		require.False(t, s.Valid(), "%q", s)
	}
}

func TestSubmit(t *testing.T) {
	t.Parallel()
	now := base
	later := at(time.Hour)
	deadline := at(2 * time.Hour)
	cases := []struct {
		name   string
		params task.SubmitParams
		want   task.Snapshot
	}{
		{
			name:   "defaults: max_attempts 3, run_at now, tags de-duplicated in order",
			params: task.SubmitParams{ID: taskID, Queue: "emails", Tags: []string{"gpu", "eu", "gpu", "eu"}},
			want: task.Snapshot{
				ID: taskID, Queue: "emails", Status: task.StatusPending,
				Tags: []string{"gpu", "eu"}, MaxAttempts: 3,
				RunAt: now, CreatedAt: now, UpdatedAt: now, WorkflowID: taskID,
			},
		},
		{
			name: "explicit values are kept",
			params: task.SubmitParams{
				ID: taskID, Queue: "emails", Payload: json.RawMessage(`{"n":1}`), Priority: -7,
				MaxAttempts: ptr(10), Tags: []string{"eu"}, Deadline: &deadline, RunAt: &later,
				IdempotencyKey: "order-42",
			},
			want: task.Snapshot{
				ID: taskID, Queue: "emails", Status: task.StatusPending, Priority: -7,
				Payload: json.RawMessage(`{"n":1}`), Tags: []string{"eu"}, MaxAttempts: 10,
				Deadline: &deadline, RunAt: later, IdempotencyKey: "order-42",
				CreatedAt: now, UpdatedAt: now, WorkflowID: taskID,
			},
		},
		{
			name:   "no tags stay no tags",
			params: task.SubmitParams{ID: taskID, Queue: "emails", MaxAttempts: ptr(1)},
			want: task.Snapshot{
				ID: taskID, Queue: "emails", Status: task.StatusPending, MaxAttempts: 1,
				RunAt: now, CreatedAt: now, UpdatedAt: now, WorkflowID: taskID,
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk, ev, err := task.Submit(c.params, now)
			require.NoError(t, err)
			got := tk.Snapshot()
			if len(c.want.Tags) == 0 { // nil or empty: either says "no tags"
				require.Empty(t, got.Tags)
				got.Tags = c.want.Tags
			}
			require.Equal(t, c.want, got)
			require.Equal(t, taskID, tk.ID())
			require.Equal(t, task.StatusPending, tk.Status())
			require.Equal(t, "emails", tk.Queue())
			require.Equal(t, taskEvent(event.TaskSubmitted, "", task.StatusPending, "", 0, "", now), ev)
		})
	}
}

func TestSubmitRejectsInvalidInput(t *testing.T) {
	t.Parallel()
	tk, ev, err := task.Submit(task.SubmitParams{ID: taskID, Queue: " ", MaxAttempts: ptr(101)}, base)
	require.Nil(t, tk)
	require.Equal(t, event.Event{}, ev)
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	require.ElementsMatch(t, []string{"queue", "max_attempts"}, fields(verr))
}

func TestSubmitRejectsDeadlineNotAfterNow(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		deadline time.Time
	}{
		{"deadline in the past", at(-time.Minute)},
		{"deadline exactly now", base},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk, _, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "emails", Deadline: &c.deadline}, base)
			require.Nil(t, tk)
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.Equal(t, []string{"deadline"}, fields(verr))
		})
	}
}

// endRun is what every move into DONE or DEAD does to a snapshot.
func endRun(s *task.Snapshot, status task.Status, reason task.DeadReason, now time.Time) {
	s.Status = status
	s.DeadReason = reason
	noLease(s)
	s.FinishedAt = &now
	s.UpdatedAt = now
}

// backToPending is what every move into PENDING does to a snapshot.
func backToPending(s *task.Snapshot, runAt, now time.Time) {
	s.Status = task.StatusPending
	noLease(s)
	s.RunAt = runAt
	s.UpdatedAt = now
}

// noLease clears what only a RUNNING task has.
func noLease(s *task.Snapshot) {
	s.TimeoutAt = nil
	s.WorkerID = ""
	s.LeaseID = uuid.Nil
	s.LeaseSeconds = 0
	s.LeaseExpiresAt = nil
	s.CancelRequestedAt = nil
}

func TestLegalTransitions(t *testing.T) {
	t.Parallel()
	result := json.RawMessage(`{"sent":true}`)
	withDeadline := func(d time.Duration) task.Snapshot {
		s := pending()
		s.Deadline = ptr(at(d))
		return s
	}
	requeued := func() task.Snapshot { // after a retryable failure of attempt 1
		s := running(1)
		backToPending(&s, at(17*time.Second), at(15*time.Second))
		s.LastError = "timeout"
		return s
	}
	blockedWithDeadline := func(d time.Duration) task.Snapshot {
		s := blocked()
		s.Deadline = ptr(at(d))
		return s
	}
	deadCancelled := func() task.Snapshot {
		s := pending()
		endRun(&s, task.StatusDead, task.DeadCancelled, at(time.Second))
		return s
	}
	claim := func(workerID string, l uuid.UUID) func(*task.Task, time.Time) (event.Event, error) {
		return func(tk *task.Task, now time.Time) (event.Event, error) {
			return tk.Claim(task.ClaimParams{WorkerID: workerID, WorkerTags: []string{"eu", "gpu"}, LeaseID: l, LeaseSeconds: leaseSeconds}, now)
		}
	}
	complete := func(l uuid.UUID) func(*task.Task, time.Time) (event.Event, error) {
		return func(tk *task.Task, now time.Time) (event.Event, error) {
			return tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: l, Result: result}, now)
		}
	}
	fail := func(msg string, retryable bool) func(*task.Task, time.Time) (event.Event, error) {
		return func(tk *task.Task, now time.Time) (event.Event, error) {
			return tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: msg, Retryable: retryable}, policy, now)
		}
	}
	release := func(tk *task.Task, now time.Time) (event.Event, error) {
		return tk.ReleaseFromDeadWorker(task.Holder{WorkerID: holder, LeaseID: leaseID}, now)
	}
	expireLease := (*task.Task).ExpireLease
	orphan := func(listed ...task.LeaseRef) func(*task.Task, time.Time) (event.Event, error) {
		return func(tk *task.Task, now time.Time) (event.Event, error) {
			return tk.ReleaseOrphan(task.NewListing(holder, listed, 10*time.Second), now)
		}
	}
	expire := (*task.Task).ExpireDeadline
	cancel := (*task.Task).Cancel
	retry := (*task.Task).Retry

	cases := []struct {
		name  string
		start task.Snapshot
		now   time.Time
		act   func(*task.Task, time.Time) (event.Event, error)
		// want changes start into the expected snapshot.
		want func(s *task.Snapshot, now time.Time)
		// event holds the event's Type, Reason, Attempt, WorkerID and
		// durations; Version, TaskID, Queue, From (the start status), To (the
		// new status) and OccurredAt (now) are the same for every case.
		event event.Event
		// attempt is the outcome of the attempt the transition ends (empty:
		// it ends none); the attempt's error is the failure's, its worker
		// and claim time the start's.
		attempt task.Outcome
	}{
		{
			name: "PENDING -> RUNNING: claim", start: pending(), now: at(5 * time.Second),
			act: claim(holder, leaseID),
			want: func(s *task.Snapshot, now time.Time) {
				s.Status, s.Attempts, s.WorkerID, s.LeaseID = task.StatusRunning, 1, holder, leaseID
				s.ClaimedAt, s.UpdatedAt = &now, now
				s.LeaseSeconds, s.LeaseExpiresAt = leaseSeconds, ptr(now.Add(time.Minute))
			},
			event: event.Event{Type: event.TaskClaimed, Attempt: 1, WorkerID: holder, QueueWaitSeconds: secs(5)},
		},
		{
			name: "PENDING -> RUNNING: second claim after a retry counts attempt 2", start: requeued(), now: at(20 * time.Second),
			act: claim("worker-2", staleID),
			want: func(s *task.Snapshot, now time.Time) {
				s.Status, s.Attempts, s.WorkerID, s.LeaseID = task.StatusRunning, 2, "worker-2", staleID
				s.ClaimedAt, s.UpdatedAt = &now, now
				s.LeaseSeconds, s.LeaseExpiresAt = leaseSeconds, ptr(now.Add(time.Minute))
			},
			event: event.Event{Type: event.TaskClaimed, Attempt: 2, WorkerID: "worker-2", QueueWaitSeconds: secs(20)},
		},
		{
			name: "RUNNING -> DONE: complete with lease", start: running(1), now: at(15 * time.Second),
			act: complete(leaseID),
			want: func(s *task.Snapshot, now time.Time) {
				endRun(s, task.StatusDone, "", now)
				s.Result = result
			},
			attempt: task.OutcomeCompleted,
			event:   event.Event{Type: event.TaskCompleted, Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(10), EndToEndSeconds: secs(15)},
		},
		{
			name: "RUNNING -> PENDING: retryable fail after attempt 1 waits 2s", start: running(1), now: at(15 * time.Second),
			act: fail("timeout", true),
			want: func(s *task.Snapshot, now time.Time) {
				backToPending(s, now.Add(2*time.Second), now)
				s.LastError = "timeout"
			},
			attempt: task.OutcomeFailed,
			event:   event.Event{Type: event.TaskFailed, Reason: "failed", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(10)},
		},
		{
			name: "RUNNING -> PENDING: retryable fail after attempt 2 waits 4s", start: running(2), now: at(15 * time.Second),
			act: fail("timeout again", true),
			want: func(s *task.Snapshot, now time.Time) {
				backToPending(s, now.Add(4*time.Second), now)
				s.LastError = "timeout again"
			},
			attempt: task.OutcomeFailed,
			event:   event.Event{Type: event.TaskFailed, Reason: "failed", Attempt: 2, WorkerID: holder, ExecutionSeconds: secs(10)},
		},
		{
			name: "RUNNING -> DEAD: retryable fail on the last attempt is exhausted", start: running(3), now: at(15 * time.Second),
			act: fail("timeout", true),
			want: func(s *task.Snapshot, now time.Time) {
				endRun(s, task.StatusDead, task.DeadExhausted, now)
				s.LastError = "timeout"
			},
			attempt: task.OutcomeFailed,
			event:   event.Event{Type: event.TaskFailed, Reason: "exhausted", Attempt: 3, WorkerID: holder, ExecutionSeconds: secs(10), EndToEndSeconds: secs(15)},
		},
		{
			name: "RUNNING -> DEAD: non-retryable fail with attempts left", start: running(1), now: at(15 * time.Second),
			act: fail("bad payload", false),
			want: func(s *task.Snapshot, now time.Time) {
				endRun(s, task.StatusDead, task.DeadNonRetryable, now)
				s.LastError = "bad payload"
			},
			attempt: task.OutcomeFailed,
			event:   event.Event{Type: event.TaskFailed, Reason: "non_retryable", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(10), EndToEndSeconds: secs(15)},
		},
		{
			name: "RUNNING -> PENDING: holder declared dead with attempts left", start: running(1), now: at(125 * time.Second),
			act:     release,
			want:    func(s *task.Snapshot, now time.Time) { backToPending(s, now, now) },
			attempt: task.OutcomeWorkerDead,
			event:   event.Event{Type: event.TaskRequeued, Reason: "worker_dead", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(120)},
		},
		{
			name: "RUNNING -> DEAD: holder declared dead on the last attempt", start: running(3), now: at(125 * time.Second),
			act:     release,
			want:    func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadWorkerDead, now) },
			attempt: task.OutcomeWorkerDead,
			event:   event.Event{Type: event.TaskDeadLettered, Reason: "worker_dead", Attempt: 3, WorkerID: holder, ExecutionSeconds: secs(120), EndToEndSeconds: secs(125)},
		},
		{
			name: "RUNNING -> DONE: complete of a task an operator asked to cancel (the work is done)", start: cancelRequested(1), now: at(15 * time.Second),
			act: complete(leaseID),
			want: func(s *task.Snapshot, now time.Time) {
				endRun(s, task.StatusDone, "", now)
				s.Result = result
			},
			attempt: task.OutcomeCompleted,
			event:   event.Event{Type: event.TaskCompleted, Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(10), EndToEndSeconds: secs(15)},
		},
		{
			name: "RUNNING -> DEAD: fail of a task an operator asked to cancel is cancelled, not retried", start: cancelRequested(1), now: at(15 * time.Second),
			act: fail("context canceled", true),
			want: func(s *task.Snapshot, now time.Time) {
				endRun(s, task.StatusDead, task.DeadCancelled, now)
				s.LastError = "context canceled"
			},
			attempt: task.OutcomeCancelled,
			event:   event.Event{Type: event.TaskFailed, Reason: "cancelled", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(10), EndToEndSeconds: secs(15)},
		},
		{
			name: "RUNNING -> DEAD: non-retryable fail of a task an operator asked to cancel is cancelled", start: cancelRequested(1), now: at(15 * time.Second),
			act: fail("stopped", false),
			want: func(s *task.Snapshot, now time.Time) {
				endRun(s, task.StatusDead, task.DeadCancelled, now)
				s.LastError = "stopped"
			},
			attempt: task.OutcomeCancelled,
			event:   event.Event{Type: event.TaskFailed, Reason: "cancelled", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(10), EndToEndSeconds: secs(15)},
		},
		{
			name: "RUNNING -> RUNNING: cancel records the request", start: running(1), now: at(20 * time.Second),
			act:   cancel,
			want:  func(s *task.Snapshot, now time.Time) { s.CancelRequestedAt, s.UpdatedAt = &now, now },
			event: event.Event{Type: event.TaskCancelRequested, Attempt: 1, WorkerID: holder},
		},
		{
			name: "RUNNING -> RUNNING: a repeated cancel keeps the first request's time", start: cancelRequested(1), now: at(20 * time.Second),
			act:   cancel,
			want:  func(s *task.Snapshot, now time.Time) {},
			event: event.Event{Type: event.TaskCancelRequested, Attempt: 1, WorkerID: holder},
		},
		{
			name: "RUNNING -> DEAD: holder declared dead after a cancel request", start: cancelRequested(1), now: at(125 * time.Second),
			act:     release,
			want:    func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadCancelled, now) },
			attempt: task.OutcomeCancelled,
			event:   event.Event{Type: event.TaskDeadLettered, Reason: "cancelled", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(120), EndToEndSeconds: secs(125)},
		},
		{
			name: "RUNNING -> PENDING: lease ran out exactly now, attempts left", start: running(1), now: at(65 * time.Second),
			act:     expireLease,
			want:    func(s *task.Snapshot, now time.Time) { backToPending(s, now, now) },
			attempt: task.OutcomeLeaseExpired,
			event:   event.Event{Type: event.TaskRequeued, Reason: "lease_expired", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(60)},
		},
		{
			name: "RUNNING -> PENDING: lease ran out a while ago, attempts left", start: running(2), now: at(90 * time.Second),
			act:     expireLease,
			want:    func(s *task.Snapshot, now time.Time) { backToPending(s, now, now) },
			attempt: task.OutcomeLeaseExpired,
			event:   event.Event{Type: event.TaskRequeued, Reason: "lease_expired", Attempt: 2, WorkerID: holder, ExecutionSeconds: secs(85)},
		},
		{
			name: "RUNNING -> DEAD: lease ran out on the last attempt", start: running(3), now: at(65 * time.Second),
			act:     expireLease,
			want:    func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadLeaseExpired, now) },
			attempt: task.OutcomeLeaseExpired,
			event:   event.Event{Type: event.TaskDeadLettered, Reason: "lease_expired", Attempt: 3, WorkerID: holder, ExecutionSeconds: secs(60), EndToEndSeconds: secs(65)},
		},
		{
			name: "RUNNING -> DEAD: lease ran out after a cancel request the holder ignored", start: cancelRequested(1), now: at(65 * time.Second),
			act:     expireLease,
			want:    func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadCancelled, now) },
			attempt: task.OutcomeCancelled,
			event:   event.Event{Type: event.TaskDeadLettered, Reason: "cancelled", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(60), EndToEndSeconds: secs(65)},
		},
		{
			name: "RUNNING -> PENDING: orphaned by a heartbeat listing nothing", start: running(1), now: at(16 * time.Second),
			act:     orphan(),
			want:    func(s *task.Snapshot, now time.Time) { backToPending(s, now, now) },
			attempt: task.OutcomeOrphaned,
			event:   event.Event{Type: event.TaskRequeued, Reason: "orphaned", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(11)},
		},
		{
			name: "RUNNING -> PENDING: orphaned by a heartbeat listing it under a stale lease", start: running(1), now: at(16 * time.Second),
			act:     orphan(task.LeaseRef{ID: taskID, LeaseID: staleID}),
			want:    func(s *task.Snapshot, now time.Time) { backToPending(s, now, now) },
			attempt: task.OutcomeOrphaned,
			event:   event.Event{Type: event.TaskRequeued, Reason: "orphaned", Attempt: 1, WorkerID: holder, ExecutionSeconds: secs(11)},
		},
		{
			name: "RUNNING -> DEAD: orphaned on the last attempt", start: running(3), now: at(16 * time.Second),
			act:     orphan(),
			want:    func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadOrphaned, now) },
			attempt: task.OutcomeOrphaned,
			event:   event.Event{Type: event.TaskDeadLettered, Reason: "orphaned", Attempt: 3, WorkerID: holder, ExecutionSeconds: secs(11), EndToEndSeconds: secs(16)},
		},
		{
			name: "RUNNING -> DEAD: orphaned after a cancel request", start: cancelRequested(2), now: at(16 * time.Second),
			act:     orphan(),
			want:    func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadCancelled, now) },
			attempt: task.OutcomeCancelled,
			event:   event.Event{Type: event.TaskDeadLettered, Reason: "cancelled", Attempt: 2, WorkerID: holder, ExecutionSeconds: secs(11), EndToEndSeconds: secs(16)},
		},
		{
			name: "PENDING -> DEAD: deadline passed", start: withDeadline(10 * time.Second), now: at(11 * time.Second),
			act:   expire,
			want:  func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadDeadline, now) },
			event: event.Event{Type: event.TaskDeadLettered, Reason: "deadline", EndToEndSeconds: secs(11)},
		},
		{
			name: "PENDING -> DEAD: deadline reached exactly", start: withDeadline(10 * time.Second), now: at(10 * time.Second),
			act:   expire,
			want:  func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadDeadline, now) },
			event: event.Event{Type: event.TaskDeadLettered, Reason: "deadline", EndToEndSeconds: secs(10)},
		},
		{
			name: "PENDING -> DEAD: cancel", start: pending(), now: at(time.Minute),
			act:   cancel,
			want:  func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadCancelled, now) },
			event: event.Event{Type: event.TaskDeadLettered, Reason: "cancelled", EndToEndSeconds: secs(60)},
		},
		{
			name: "PENDING -> DEAD: cancel while waiting for a retry keeps the attempt count", start: requeued(), now: at(time.Minute),
			act:   cancel,
			want:  func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadCancelled, now) },
			event: event.Event{Type: event.TaskDeadLettered, Reason: "cancelled", Attempt: 1, EndToEndSeconds: secs(60)},
		},
		{
			name: "BLOCKED -> DEAD: deadline passed while waiting for parents", start: blockedWithDeadline(10 * time.Second), now: at(11 * time.Second),
			act:   expire,
			want:  func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadDeadline, now) },
			event: event.Event{Type: event.TaskDeadLettered, Reason: "deadline", EndToEndSeconds: secs(11)},
		},
		{
			name: "BLOCKED -> DEAD: cancel", start: blocked(), now: at(time.Minute),
			act:   cancel,
			want:  func(s *task.Snapshot, now time.Time) { endRun(s, task.StatusDead, task.DeadCancelled, now) },
			event: event.Event{Type: event.TaskDeadLettered, Reason: "cancelled", EndToEndSeconds: secs(60)},
		},
		{
			name: "DEAD -> PENDING: retry keeps the history in last_error", start: dead(), now: at(time.Hour),
			act: retry,
			want: func(s *task.Snapshot, now time.Time) {
				backToPending(s, now, now)
				s.Attempts, s.DeadReason, s.FinishedAt = 0, "", nil
				s.LastError = "retried after DEAD (exhausted); last error: smtp: 550 mailbox unavailable"
			},
			event: event.Event{Type: event.TaskRetried, Reason: "retried"},
		},
		{
			name: "DEAD -> PENDING: retry of a cancelled task without error", start: deadCancelled(), now: at(time.Hour),
			act: retry,
			want: func(s *task.Snapshot, now time.Time) {
				backToPending(s, now, now)
				s.DeadReason, s.FinishedAt = "", nil
				s.LastError = "retried after DEAD (cancelled)"
			},
			event: event.Event{Type: event.TaskRetried, Reason: "retried"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(c.start)
			ev, err := c.act(tk, c.now)
			require.NoError(t, err)

			want := task.Restore(c.start).Snapshot()
			c.want(&want, c.now)
			require.Equal(t, want, tk.Snapshot())
			require.Equal(t, want.Status, tk.Status())

			wantEvent := c.event
			wantEvent.Version = event.Version
			wantEvent.TaskID = taskID.String()
			wantEvent.Queue = "emails"
			wantEvent.From = string(c.start.Status)
			wantEvent.To = string(want.Status)
			wantEvent.OccurredAt = c.now
			require.Equal(t, wantEvent, ev)

			ended, ok := tk.EndedAttempt()
			if c.attempt == "" {
				require.False(t, ok, "no attempt ends: %+v", ended)
				return
			}
			require.True(t, ok, "the running attempt ends")
			wantAttempt := task.Attempt{
				TaskID: taskID, Number: c.start.Attempts, WorkerID: c.start.WorkerID,
				ClaimedAt: *c.start.ClaimedAt, FinishedAt: ptr(c.now), Outcome: c.attempt,
			}
			if ev.Type == event.TaskFailed {
				wantAttempt.Error = want.LastError
			}
			require.Equal(t, wantAttempt, ended)
		})
	}
}

func TestRetryClearsResult(t *testing.T) {
	t.Parallel()
	s := dead()
	s.Result = json.RawMessage(`{"partial":true}`)
	tk := task.Restore(s)
	_, err := tk.Retry(at(time.Hour))
	require.NoError(t, err)
	require.Nil(t, tk.Snapshot().Result)
}

func TestFailTruncatesErrorOnARuneBoundary(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name string
		msg  string
		want string
	}{
		{"short message kept", "boom", "boom"},
		{"exactly the limit kept", strings.Repeat("x", task.MaxErrorLength), strings.Repeat("x", task.MaxErrorLength)},
		{"ASCII cut at the limit", strings.Repeat("x", task.MaxErrorLength+10), strings.Repeat("x", task.MaxErrorLength)},
		// "a" then 2-byte runes: byte MaxErrorLength is a continuation byte.
		{"multi-byte rune not split", "a" + strings.Repeat("é", 40000), "a" + strings.Repeat("é", (task.MaxErrorLength-2)/2)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(running(1))
			_, err := tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: c.msg, Retryable: true}, policy, at(15*time.Second))
			require.NoError(t, err)
			got := tk.Snapshot().LastError
			require.Equal(t, c.want, got)
			require.LessOrEqual(t, len(got), task.MaxErrorLength)
		})
	}
}

// operation is one task method, called with arguments that would be valid if
// the task were in a status the method accepts.
type operation struct {
	name    string
	accepts []task.Status
	to      task.Status // TransitionError.To
	call    func(*task.Task) (event.Event, error)
	// lost are the statuses in which a refusal is a LeaseError, not a
	// TransitionError: a holder's report on a task taken back (PENDING).
	lost []task.Status
}

var operations = []operation{
	{"Claim", only(task.StatusPending), task.StatusRunning, func(tk *task.Task) (event.Event, error) {
		return tk.Claim(task.ClaimParams{WorkerID: holder, WorkerTags: []string{"eu"}, LeaseID: leaseID, LeaseSeconds: leaseSeconds}, at(time.Hour))
	}, nil},
	// A report on a PENDING task is a lease error (see
	// TestFencingAfterTakeBack).
	{"Complete", only(task.StatusRunning), task.StatusDone, func(tk *task.Task) (event.Event, error) {
		return tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID, Result: json.RawMessage(`1`)}, at(time.Hour))
	}, only(task.StatusPending)},
	{"Fail", only(task.StatusRunning), "", func(tk *task.Task) (event.Event, error) {
		return tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Error: "x", Retryable: true}, policy, at(time.Hour))
	}, only(task.StatusPending)},
	{"ReleaseFromDeadWorker", only(task.StatusRunning), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.ReleaseFromDeadWorker(task.Holder{WorkerID: holder, LeaseID: leaseID}, at(time.Hour))
	}, nil},
	{"ExpireLease", only(task.StatusRunning), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.ExpireLease(at(time.Hour))
	}, nil},
	{"ReleaseOrphan", only(task.StatusRunning), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.ReleaseOrphan(task.NewListing(holder, nil, time.Second), at(time.Hour))
	}, nil},
	{"ExpireDeadline", []task.Status{task.StatusPending, task.StatusBlocked}, task.StatusDead, func(tk *task.Task) (event.Event, error) {
		return tk.ExpireDeadline(at(time.Hour))
	}, nil},
	{"Cancel", []task.Status{task.StatusPending, task.StatusRunning, task.StatusBlocked}, task.StatusDead, func(tk *task.Task) (event.Event, error) {
		return tk.Cancel(at(time.Hour))
	}, nil},
	{"Retry", only(task.StatusDead), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.Retry(at(time.Hour))
	}, nil},
	{"Snooze", only(task.StatusRunning), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.Snooze(task.SnoozeParams{WorkerID: holder, LeaseID: leaseID, DelaySeconds: 30}, at(time.Hour))
	}, only(task.StatusPending)},
	{"Release", only(task.StatusRunning), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.Release(task.ReleaseParams{WorkerID: holder, LeaseID: leaseID}, at(time.Hour))
	}, only(task.StatusPending)},
	{"TimeOut", only(task.StatusRunning), task.StatusPending, func(tk *task.Task) (event.Event, error) {
		return tk.TimeOut(policy, nil, at(time.Hour))
	}, nil},
}

func only(s task.Status) []task.Status { return []task.Status{s} }

func TestIllegalTransitions(t *testing.T) {
	t.Parallel()
	n, accepted := 0, 0
	for _, op := range operations {
		accepted += len(op.accepts)
		for _, status := range allStatuses {
			if slices.Contains(op.accepts, status) {
				continue
			}
			n++
			t.Run(op.name+" from "+string(status), func(t *testing.T) {
				t.Parallel()
				start := snapshotIn(status)
				// Give every start a passed deadline so ExpireDeadline has no
				// other reason to refuse.
				start.Deadline = ptr(at(time.Minute))
				tk := task.Restore(start)
				before := tk.Snapshot()
				ev, err := op.call(tk)
				if slices.Contains(op.lost, status) {
					require.ErrorIs(t, err, task.ErrLeaseLost)
					require.Equal(t, event.Event{}, ev)
					require.Equal(t, before, tk.Snapshot())
					return
				}
				var terr *task.TransitionError
				require.ErrorAs(t, err, &terr)
				require.Equal(t, status, terr.From)
				require.Equal(t, op.to, terr.To)
				require.Equal(t, taskID, terr.ID)
				require.Contains(t, terr.Error(), string(status))
				require.NotErrorIs(t, err, task.ErrLeaseLost)
				require.Equal(t, event.Event{}, ev)
				require.Equal(t, before, tk.Snapshot())
			})
		}
	}
	// Every method is refused in each status it does not accept.
	require.Equal(t, len(operations)*len(allStatuses)-accepted, n)
}

// TestAcceptedOperationsSucceed checks the other side of the illegal table:
// from the one status each method accepts, the same call succeeds.
func TestAcceptedOperationsSucceed(t *testing.T) {
	t.Parallel()
	for _, op := range operations {
		for _, status := range op.accepts {
			t.Run(op.name+" from "+string(status), func(t *testing.T) {
				t.Parallel()
				start := snapshotIn(status)
				start.Deadline = ptr(at(time.Minute))
				if op.name == "Claim" {
					start.Deadline = nil
				}
				tk := task.Restore(start)
				ev, err := op.call(tk)
				require.NoError(t, err)
				require.Equal(t, string(status), ev.From)
				require.NotEqual(t, start, tk.Snapshot())
			})
		}
	}
}

func TestFencing(t *testing.T) {
	t.Parallel()
	complete := func(workerID string, l uuid.UUID) func(*task.Task) error {
		return func(tk *task.Task) error {
			_, err := tk.Complete(task.CompleteParams{WorkerID: workerID, LeaseID: l, Result: json.RawMessage(`1`)}, at(15*time.Second))
			return err
		}
	}
	fail := func(workerID string, l uuid.UUID, retryable bool) func(*task.Task) error {
		return func(tk *task.Task) error {
			_, err := tk.Fail(task.FailParams{WorkerID: workerID, LeaseID: l, Error: "x", Retryable: retryable}, policy, at(15*time.Second))
			return err
		}
	}
	cases := []struct {
		name string
		call func(*task.Task) error
	}{
		{"complete by another worker with the lease", complete("worker-2", leaseID)},
		{"complete by the holder with a stale lease", complete(holder, staleID)},
		{"complete by the holder with the nil uuid", complete(holder, uuid.Nil)},
		{"complete with an empty worker id", complete("", leaseID)},
		{"fail by another worker", fail("worker-2", leaseID, true)},
		{"fail by the holder with a stale lease", fail(holder, staleID, true)},
		{"non-retryable fail with a stale lease", fail(holder, staleID, false)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(running(1))
			before := tk.Snapshot()
			err := c.call(tk)
			require.ErrorIs(t, err, task.ErrLeaseLost)
			var lerr *task.LeaseError
			require.ErrorAs(t, err, &lerr)
			require.Equal(t, taskID, lerr.ID)
			require.Equal(t, task.StatusRunning, lerr.Status)
			var terr *task.TransitionError
			require.False(t, errors.As(err, &terr), "a lease error is not a transition error")
			require.Equal(t, before, tk.Snapshot())
		})
	}
}

// The dead-worker sweep takes a task back only from the holder it judged
// dead: by the time it holds the row, the task may run under another worker,
// or under the same worker id with a new lease (it registered again and
// claimed the task again). Either is refused and changes nothing.
func TestReleaseFromDeadWorkerOnlyFromTheJudgedHolder(t *testing.T) {
	t.Parallel()
	for name, judged := range map[string]task.Holder{
		"another worker":       {WorkerID: "worker-2", LeaseID: leaseID},
		"another lease":        {WorkerID: holder, LeaseID: staleID},
		"no holder":            {},
		"another worker/lease": {WorkerID: "worker-2", LeaseID: staleID},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(running(3))
			_, err := tk.ReleaseFromDeadWorker(judged, at(125*time.Second))
			var lerr *task.LeaseError
			require.ErrorAs(t, err, &lerr)
			require.ErrorIs(t, err, task.ErrLeaseLost)
			require.Equal(t, task.StatusRunning, lerr.Status)
			require.Equal(t, running(3), tk.Snapshot(), "nothing changed")
		})
	}
}

func TestFencingAcrossReclaim(t *testing.T) {
	t.Parallel()
	// The holder is declared dead, the task is claimed again by the same
	// worker id under a new lease: a report under the old lease is refused,
	// the new lease is accepted.
	tk := task.Restore(running(1))
	_, err := tk.ReleaseFromDeadWorker(task.Holder{WorkerID: holder, LeaseID: leaseID}, at(2*time.Minute))
	require.NoError(t, err)
	_, err = tk.Claim(task.ClaimParams{WorkerID: holder, WorkerTags: []string{"eu"}, LeaseID: staleID, LeaseSeconds: leaseSeconds}, at(3*time.Minute))
	require.NoError(t, err)

	before := tk.Snapshot()
	_, err = tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID}, at(4*time.Minute))
	require.ErrorIs(t, err, task.ErrLeaseLost)
	require.Equal(t, before, tk.Snapshot())

	ev, err := tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: staleID}, at(4*time.Minute))
	require.NoError(t, err)
	require.Equal(t, 2, ev.Attempt)
	require.Equal(t, task.StatusDone, tk.Status())
}

func TestCompleteTwice(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		second func(*task.Task) error
		to     task.Status
	}{
		{"complete again", func(tk *task.Task) error {
			_, err := tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID}, at(20*time.Second))
			return err
		}, task.StatusDone},
		{"fail after complete", func(tk *task.Task) error {
			_, err := tk.Fail(task.FailParams{WorkerID: holder, LeaseID: leaseID, Retryable: true}, policy, at(20*time.Second))
			return err
		}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(running(1))
			_, err := tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID, Result: json.RawMessage(`"first"`)}, at(15*time.Second))
			require.NoError(t, err)
			before := tk.Snapshot()
			err = c.second(tk)
			var terr *task.TransitionError
			require.ErrorAs(t, err, &terr)
			require.Equal(t, task.StatusDone, terr.From)
			require.Equal(t, c.to, terr.To)
			require.NotErrorIs(t, err, task.ErrLeaseLost)
			require.Equal(t, before, tk.Snapshot())
			require.Equal(t, json.RawMessage(`"first"`), tk.Snapshot().Result)
		})
	}
}

func TestClaimable(t *testing.T) {
	t.Parallel()
	now := at(time.Minute)
	with := func(f func(s *task.Snapshot)) task.Snapshot {
		s := pending()
		s.Tags = nil
		f(&s)
		return s
	}
	cases := []struct {
		name       string
		snap       task.Snapshot
		workerTags []string
		want       bool
	}{
		{"run_at in the past", with(func(s *task.Snapshot) {}), nil, true},
		{"run_at exactly now", with(func(s *task.Snapshot) { s.RunAt = now }), nil, true},
		{"run_at in the future", with(func(s *task.Snapshot) { s.RunAt = now.Add(time.Nanosecond) }), nil, false},
		{"deadline in the future", with(func(s *task.Snapshot) { s.Deadline = ptr(now.Add(time.Second)) }), nil, true},
		{"deadline exactly now", with(func(s *task.Snapshot) { s.Deadline = ptr(now) }), nil, false},
		{"deadline passed", with(func(s *task.Snapshot) { s.Deadline = ptr(now.Add(-time.Second)) }), nil, false},
		{"untagged task, worker without tags", with(func(s *task.Snapshot) {}), nil, true},
		{"untagged task, worker with empty tags", with(func(s *task.Snapshot) {}), []string{}, true},
		{"untagged task, tagged worker", with(func(s *task.Snapshot) {}), []string{"gpu"}, true},
		{"task [a], worker [a b]", with(func(s *task.Snapshot) { s.Tags = []string{"a"} }), []string{"a", "b"}, true},
		{"task [a b], worker [b a]", with(func(s *task.Snapshot) { s.Tags = []string{"a", "b"} }), []string{"b", "a"}, true},
		{"task [a c], worker [a b]", with(func(s *task.Snapshot) { s.Tags = []string{"a", "c"} }), []string{"a", "b"}, false},
		{"task [a], worker without tags", with(func(s *task.Snapshot) { s.Tags = []string{"a"} }), nil, false},
		{"task [a], worker [A]", with(func(s *task.Snapshot) { s.Tags = []string{"a"} }), []string{"A"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(c.snap)
			require.Equal(t, c.want, tk.Claimable(c.workerTags, now))
			before := tk.Snapshot()
			_, err := tk.Claim(task.ClaimParams{WorkerID: holder, WorkerTags: c.workerTags, LeaseID: leaseID, LeaseSeconds: leaseSeconds}, now)
			if c.want {
				require.NoError(t, err)
				require.Equal(t, task.StatusRunning, tk.Status())
				return
			}
			require.ErrorIs(t, err, task.ErrNotClaimable)
			require.Equal(t, before, tk.Snapshot())
		})
	}
}

func TestClaimableOnlyWhenPending(t *testing.T) {
	t.Parallel()
	for _, status := range allStatuses {
		t.Run(string(status), func(t *testing.T) {
			t.Parallel()
			s := snapshotIn(status)
			require.Equal(t, status == task.StatusPending, task.Restore(s).Claimable([]string{"eu"}, at(time.Hour)))
		})
	}
}

func TestExpireDeadlineNotPassed(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		deadline *time.Time
	}{
		{"no deadline", nil},
		{"deadline in the future", ptr(at(time.Minute + time.Nanosecond))},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := pending()
			s.Deadline = c.deadline
			tk := task.Restore(s)
			before := tk.Snapshot()
			ev, err := tk.ExpireDeadline(at(time.Minute))
			require.ErrorIs(t, err, task.ErrDeadlineNotPassed)
			require.Equal(t, event.Event{}, ev)
			require.Equal(t, before, tk.Snapshot())
		})
	}
}

func TestClaimedEventForBulkClaims(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		claimedAt *time.Time
		wantAt    time.Time
	}{
		{"claimed_at set", ptr(at(7 * time.Second)), at(7 * time.Second)},
		{"claimed_at missing falls back to updated_at", nil, at(5 * time.Second)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := running(2)
			s.ClaimedAt = c.claimedAt
			ev := task.Claimed(task.Restore(s))
			want := taskEvent(event.TaskClaimed, task.StatusPending, task.StatusRunning, "", 2, holder, c.wantAt)
			want.QueueWaitSeconds = secs(c.wantAt.Sub(base).Seconds())
			require.Equal(t, want, ev)
		})
	}
}

func TestSnapshotIsACopy(t *testing.T) {
	t.Parallel()
	s := pending()
	s.Tags = []string{"a", "b"}
	tk := task.Restore(s)
	s.Tags[0] = "changed-after-restore"
	got := tk.Snapshot()
	require.Equal(t, []string{"a", "b"}, got.Tags)
	got.Tags[1] = "changed-in-copy"
	got.Status = task.StatusDone
	require.Equal(t, []string{"a", "b"}, tk.Snapshot().Tags)
	require.Equal(t, task.StatusPending, tk.Status())
}

func fields(err *validation.Error) []string {
	out := make([]string, len(err.Fields))
	for i, f := range err.Fields {
		out[i] = f.Field
	}
	return out
}

func TestValidateSubmit(t *testing.T) {
	t.Parallel()
	runAt := at(time.Hour)
	tags := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("t%d", i)
		}
		return out
	}
	valid := func(f func(p *task.SubmitParams)) task.SubmitParams {
		p := task.SubmitParams{ID: taskID, Queue: "emails", Payload: json.RawMessage(`{"a":1}`)}
		f(&p)
		return p
	}
	cases := []struct {
		name            string
		params          task.SubmitParams
		wantFields      []string // nil: valid
		wantMaxAttempts int      // checked when valid
		wantTags        []string // checked when valid
	}{
		{"minimal", valid(func(p *task.SubmitParams) {}), nil, 3, nil},
		{"missing queue", valid(func(p *task.SubmitParams) { p.Queue = "" }), []string{"queue"}, 0, nil},
		{"blank queue", valid(func(p *task.SubmitParams) { p.Queue = " \t " }), []string{"queue"}, 0, nil},
		{"queue of 128 characters", valid(func(p *task.SubmitParams) { p.Queue = strings.Repeat("q", 128) }), nil, 3, nil},
		{"queue of every allowed character", valid(func(p *task.SubmitParams) { p.Queue = "AZaz09._:-" }), nil, 3, nil},
		{"queue with a non-ASCII letter", valid(func(p *task.SubmitParams) { p.Queue = "é" }), []string{"queue"}, 0, nil},
		{"queue with a slash", valid(func(p *task.SubmitParams) { p.Queue = "a/b" }), []string{"queue"}, 0, nil},
		{"queue with a space", valid(func(p *task.SubmitParams) { p.Queue = "a b" }), []string{"queue"}, 0, nil},
		{"queue too long", valid(func(p *task.SubmitParams) { p.Queue = strings.Repeat("q", 129) }), []string{"queue"}, 0, nil},
		{"queue with a control character", valid(func(p *task.SubmitParams) { p.Queue = "a\nb" }), []string{"queue"}, 0, nil},
		{"queue with invalid UTF-8", valid(func(p *task.SubmitParams) { p.Queue = "a\xffb" }), []string{"queue"}, 0, nil},
		{"max_attempts absent defaults to 3", valid(func(p *task.SubmitParams) { p.MaxAttempts = nil }), nil, 3, nil},
		{"max_attempts 0 is out of range, not the default", valid(func(p *task.SubmitParams) { p.MaxAttempts = ptr(0) }), []string{"max_attempts"}, 0, nil},
		{"max_attempts 1", valid(func(p *task.SubmitParams) { p.MaxAttempts = ptr(1) }), nil, 1, nil},
		{"max_attempts 100", valid(func(p *task.SubmitParams) { p.MaxAttempts = ptr(100) }), nil, 100, nil},
		{"max_attempts 101", valid(func(p *task.SubmitParams) { p.MaxAttempts = ptr(101) }), []string{"max_attempts"}, 0, nil},
		{"max_attempts -1", valid(func(p *task.SubmitParams) { p.MaxAttempts = ptr(-1) }), []string{"max_attempts"}, 0, nil},
		{"priority at int32 bounds", valid(func(p *task.SubmitParams) { p.Priority = math.MinInt32 }), nil, 3, nil},
		{"priority beyond int32", valid(func(p *task.SubmitParams) { p.Priority = math.MaxInt32 + 1 }), []string{"priority"}, 0, nil},
		{"16 tags", valid(func(p *task.SubmitParams) { p.Tags = tags(16) }), nil, 3, tags(16)},
		{"17 tags", valid(func(p *task.SubmitParams) { p.Tags = tags(17) }), []string{"tags"}, 0, nil},
		{"duplicate tags removed", valid(func(p *task.SubmitParams) { p.Tags = []string{"b", "a", "b"} }), nil, 3, []string{"b", "a"}},
		{"empty tag", valid(func(p *task.SubmitParams) { p.Tags = []string{"a", "b", ""} }), []string{"tags[2]"}, 0, nil},
		{"tag of 64 characters", valid(func(p *task.SubmitParams) { p.Tags = []string{strings.Repeat("t", 64)} }), nil, 3, []string{strings.Repeat("t", 64)}},
		{"tag of 65 characters", valid(func(p *task.SubmitParams) { p.Tags = []string{"a", strings.Repeat("t", 65)} }), []string{"tags[1]"}, 0, nil},
		{"tag with a control character", valid(func(p *task.SubmitParams) { p.Tags = []string{"a\x00"} }), []string{"tags[0]"}, 0, nil},
		{"two bad tags", valid(func(p *task.SubmitParams) { p.Tags = []string{"", "ok", strings.Repeat("t", 65)} }), []string{"tags[0]", "tags[2]"}, 0, nil},
		{"deadline after run_at", valid(func(p *task.SubmitParams) { p.RunAt = &runAt; p.Deadline = ptr(runAt.Add(time.Second)) }), nil, 3, nil},
		{"deadline equal to run_at", valid(func(p *task.SubmitParams) { p.RunAt = &runAt; p.Deadline = ptr(runAt) }), []string{"deadline"}, 0, nil},
		{"deadline before run_at", valid(func(p *task.SubmitParams) { p.RunAt = &runAt; p.Deadline = ptr(runAt.Add(-time.Second)) }), []string{"deadline"}, 0, nil},
		{"empty payload", valid(func(p *task.SubmitParams) { p.Payload = nil }), nil, 3, nil},
		{"invalid payload JSON", valid(func(p *task.SubmitParams) { p.Payload = json.RawMessage(`{"a":`) }), []string{"payload"}, 0, nil},
		{"idempotency key of 255 bytes", valid(func(p *task.SubmitParams) { p.IdempotencyKey = strings.Repeat("k", 255) }), nil, 3, nil},
		{"idempotency key too long", valid(func(p *task.SubmitParams) { p.IdempotencyKey = strings.Repeat("k", 256) }), []string{"idempotency_key"}, 0, nil},
		{"idempotency key with a control character", valid(func(p *task.SubmitParams) { p.IdempotencyKey = "k\r" }), []string{"idempotency_key"}, 0, nil},
		{"every field wrong at once", task.SubmitParams{
			Queue: "", MaxAttempts: ptr(-1), Tags: []string{"ok", ""},
			IdempotencyKey: strings.Repeat("k", 256), RunAt: &runAt, Deadline: &runAt,
			Payload: json.RawMessage(`nope`),
		}, []string{"queue", "max_attempts", "tags[1]", "idempotency_key", "deadline", "payload"}, 0, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			p := c.params
			err := task.ValidateSubmit(&p)
			if c.wantFields == nil {
				require.NoError(t, err)
				require.Equal(t, c.wantMaxAttempts, *p.MaxAttempts)
				if c.wantTags == nil { // nil or empty: either says "no tags"
					require.Empty(t, p.Tags)
				} else {
					require.Equal(t, c.wantTags, p.Tags)
				}
				return
			}
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.ElementsMatch(t, c.wantFields, fields(verr))
			for _, f := range verr.Fields {
				require.NotEmpty(t, f.Message, f.Field)
				require.Contains(t, verr.Error(), f.Field)
			}
		})
	}
}

func TestValidateSubmitDoesNotAliasCallerTags(t *testing.T) {
	t.Parallel()
	in := []string{"a", "a", "b"}
	p := task.SubmitParams{Queue: "q", Tags: in}
	require.NoError(t, task.ValidateSubmit(&p))
	require.Equal(t, []string{"a", "b"}, p.Tags)
	require.Equal(t, []string{"a", "a", "b"}, in)
}
