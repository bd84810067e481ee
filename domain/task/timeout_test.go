package task_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func TestClaimSetsTheAttemptsTimeLimit(t *testing.T) {
	t.Parallel()
	claim := func(own, queueDefault int) *time.Time {
		s := pending()
		s.TimeoutSeconds = own
		s.Progress = &task.Progress{Percent: 50, UpdatedAt: base}
		tk := task.Restore(s)
		_, err := tk.Claim(task.ClaimParams{WorkerID: holder, WorkerTags: []string{"eu"}, LeaseID: leaseID,
			LeaseSeconds: leaseSeconds, DefaultTimeoutSeconds: queueDefault}, at(10*time.Second))
		require.NoError(t, err)
		require.Nil(t, tk.Snapshot().Progress, "a claim starts without progress")
		return tk.Snapshot().TimeoutAt
	}
	require.Equal(t, ptr(at(40*time.Second)), claim(30, 0), "the task's own limit")
	require.Equal(t, ptr(at(40*time.Second)), claim(30, 600), "the task's own limit wins over the queue's")
	require.Equal(t, ptr(at(70*time.Second)), claim(0, 60), "the queue's default")
	require.Nil(t, claim(0, 0), "no limit")
}

func TestTimedOut(t *testing.T) {
	t.Parallel()
	r := task.Restore(running(1))
	require.False(t, r.TimedOut(at(34*time.Second)))
	require.True(t, r.TimedOut(at(35*time.Second)), "the limit is up at timeout_at")
	require.True(t, r.TimedOut(at(time.Hour)))
	noLimit := running(1)
	noLimit.TimeoutAt = nil
	require.False(t, task.Restore(noLimit).TimedOut(at(time.Hour)))
	for _, s := range []task.Snapshot{pending(), done(), dead(), blocked()} {
		s.TimeoutAt = ptr(base)
		require.False(t, task.Restore(s).TimedOut(at(time.Hour)), s.Status)
	}
}

func TestTimeOutRetriesAfterBackoff(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	now := at(36 * time.Second)
	ev, err := tk.TimeOut(policy, nil, now)
	require.NoError(t, err)
	want := running(1)
	backToPending(&want, now.Add(2*time.Second), now)
	want.LastError = "execution timeout after 30s"
	require.Equal(t, want, tk.Snapshot())
	e := taskEvent(event.TaskRequeued, task.StatusRunning, task.StatusPending, "timed_out", 1, holder, now)
	e.ExecutionSeconds = secs(31)
	require.Equal(t, e, ev)
	a, ok := tk.EndedAttempt()
	require.True(t, ok)
	require.Equal(t, task.Attempt{TaskID: taskID, Number: 1, WorkerID: holder, ClaimedAt: at(5 * time.Second),
		FinishedAt: &now, Outcome: task.OutcomeTimedOut, Error: "execution timeout after 30s"}, a)
	require.False(t, tk.Finished())
}

func TestTimeOutUsesTheTasksOwnRetryPolicy(t *testing.T) {
	t.Parallel()
	s := running(2)
	s.Retry = &backoff.Policy{Base: 10 * time.Second, Cap: time.Hour}
	tk := task.Restore(s)
	now := at(40 * time.Second)
	_, err := tk.TimeOut(policy, nil, now)
	require.NoError(t, err)
	require.Equal(t, now.Add(40*time.Second), tk.Snapshot().RunAt, "2^2 x 10 s")
}

func TestTimeOutOnTheLastAttemptIsDeadExhausted(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(3))
	now := at(35 * time.Second)
	ev, err := tk.TimeOut(policy, nil, now)
	require.NoError(t, err)
	v := tk.Snapshot()
	require.Equal(t, task.StatusDead, v.Status)
	require.Equal(t, task.DeadExhausted, v.DeadReason)
	require.Equal(t, "execution timeout after 30s", v.LastError)
	require.Nil(t, v.TimeoutAt)
	require.Equal(t, event.TaskDeadLettered, ev.Type)
	require.Equal(t, "exhausted", ev.Reason)
	require.True(t, tk.Finished())
	a, _ := tk.EndedAttempt()
	require.Equal(t, task.OutcomeTimedOut, a.Outcome)
}

func TestTimeOutOfACancelRequestedTaskIsDeadCancelled(t *testing.T) {
	t.Parallel()
	s := cancelRequested(1)
	tk := task.Restore(s)
	ev, err := tk.TimeOut(policy, nil, at(40*time.Second))
	require.NoError(t, err)
	require.Equal(t, task.DeadCancelled, tk.Snapshot().DeadReason)
	require.Equal(t, "cancelled", ev.Reason)
	a, _ := tk.EndedAttempt()
	require.Equal(t, task.OutcomeCancelled, a.Outcome)
}

func TestTimeOutRefusesAnAttemptWithTimeLeft(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]task.Snapshot{"time left": running(1), "no limit": func() task.Snapshot {
		s := running(1)
		s.TimeoutAt = nil
		return s
	}()} {
		tk := task.Restore(s)
		before := tk.Snapshot()
		_, err := tk.TimeOut(policy, nil, at(20*time.Second))
		require.ErrorIs(t, err, task.ErrNotTimedOut, name)
		require.Equal(t, before, tk.Snapshot(), name)
	}
}

// A holder keeps renewing its lease: the limit does not move.
func TestExtendingTheLeaseDoesNotMoveTheTimeLimit(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	require.NoError(t, tk.ExtendLease(task.ExtendParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: ptr(3600)}, at(30*time.Second)))
	require.True(t, tk.TimedOut(at(35*time.Second)))
	_, err := tk.Complete(task.CompleteParams{WorkerID: holder, LeaseID: leaseID, Result: json.RawMessage(`1`)}, at(34*time.Second))
	require.NoError(t, err, "a report before the limit is accepted")
}

func TestTimeoutSecondsAreValidated(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1, 86401} {
		p := task.SubmitParams{Queue: "q", TimeoutSeconds: ptr(n)}
		err := task.ValidateSubmit(&p)
		var verr *validation.Error
		require.ErrorAs(t, err, &verr, n)
		require.Equal(t, "timeout_seconds", verr.Fields[0].Field)
	}
	for _, n := range []int{1, 86400} {
		p := task.SubmitParams{Queue: "q", TimeoutSeconds: ptr(n)}
		require.NoError(t, task.ValidateSubmit(&p))
		tk, _, err := task.Submit(p, base)
		require.NoError(t, err)
		require.Equal(t, n, tk.Snapshot().TimeoutSeconds)
	}
}
