package task_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// A snooze gives the task back for later without spending its attempt: on
// its last attempt it is PENDING again, not DEAD, and the next claim is the
// same attempt again.
func TestSnoozeDoesNotSpendAnAttempt(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(3)) // the last of 3 attempts
	now := at(20 * time.Second)
	ev, err := tk.Snooze(task.SnoozeParams{WorkerID: holder, LeaseID: leaseID, DelaySeconds: 90}, now)
	require.NoError(t, err)

	s := tk.Snapshot()
	require.Equal(t, task.StatusPending, s.Status)
	require.Equal(t, 2, s.Attempts, "the claim's attempt is given back")
	require.Equal(t, 1, s.Snoozes)
	require.Equal(t, now.Add(90*time.Second), s.RunAt)
	require.Equal(t, now, s.UpdatedAt)
	require.Empty(t, s.WorkerID)
	require.Equal(t, uuid.Nil, s.LeaseID)
	require.Nil(t, s.LeaseExpiresAt)
	require.Nil(t, s.FinishedAt)

	want := taskEvent(event.TaskSnoozed, task.StatusRunning, task.StatusPending, "snoozed", 2, holder, now)
	want.ExecutionSeconds = event.Seconds(15 * time.Second)
	want.DelaySeconds = event.Seconds(90 * time.Second)
	require.Equal(t, want, ev)
	ended, ok := tk.EndedAttempt()
	require.True(t, ok)
	require.Equal(t, 3, ended.Number, "the snoozed attempt keeps the number it was claimed with")
	require.Equal(t, task.OutcomeSnoozed, ended.Outcome)
	require.Equal(t, now, *ended.FinishedAt)

	require.False(t, tk.Claimable(nil, now.Add(89*time.Second)))
	require.True(t, tk.Claimable([]string{"eu"}, now.Add(90*time.Second)))
	_, err = tk.Claim(task.ClaimParams{WorkerID: holder, WorkerTags: []string{"eu"}, LeaseID: staleID, LeaseSeconds: 60}, now.Add(90*time.Second))
	require.NoError(t, err)
	require.Equal(t, 3, tk.Snapshot().Attempts, "still the third attempt")
	require.Equal(t, 1, tk.Snapshot().Snoozes)
}

// checkHolderReportFenced runs report, a holder's report of a task
// (worker and lease name the reporter), against every start it must refuse:
// a stale lease, another worker, a task taken back (a lease error), a
// finished task (a transition error). A refused report changes nothing.
func checkHolderReportFenced(t *testing.T, report func(tk *task.Task, worker string, lease uuid.UUID) error) {
	t.Helper()
	cases := []struct {
		name     string
		worker   string
		lease    uuid.UUID
		start    task.Snapshot
		lost     bool
		finished bool
	}{
		{"stale lease", holder, staleID, running(1), true, false},
		{"another worker", "worker-2", leaseID, running(1), true, false},
		{"taken back", holder, leaseID, pending(), true, false},
		{"done", holder, leaseID, done(), false, true},
		{"dead", holder, leaseID, dead(), false, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(c.start)
			before := tk.Snapshot()
			err := report(tk, c.worker, c.lease)
			if c.lost {
				require.ErrorIs(t, err, task.ErrLeaseLost)
			}
			if c.finished {
				var terr *task.TransitionError
				require.ErrorAs(t, err, &terr)
			}
			require.Equal(t, before, tk.Snapshot(), "a refused report changes nothing")
			_, ended := tk.EndedAttempt()
			require.False(t, ended)
		})
	}
}

func TestSnoozeIsFenced(t *testing.T) {
	t.Parallel()
	checkHolderReportFenced(t, func(tk *task.Task, worker string, lease uuid.UUID) error {
		_, err := tk.Snooze(task.SnoozeParams{WorkerID: worker, LeaseID: lease, DelaySeconds: 10}, at(time.Minute))
		return err
	})
}

func TestSnoozeDelayBounds(t *testing.T) {
	t.Parallel()
	for _, d := range []int{0, -1, task.MaxSnoozeSeconds + 1} {
		tk := task.Restore(running(1))
		before := tk.Snapshot()
		_, err := tk.Snooze(task.SnoozeParams{WorkerID: holder, LeaseID: leaseID, DelaySeconds: d}, at(time.Minute))
		var verr *validation.Error
		require.ErrorAs(t, err, &verr, "delay %d", d)
		require.Equal(t, []string{"delay_seconds"}, fields(verr))
		require.Equal(t, before, tk.Snapshot())
	}
	for _, d := range []int{task.MinSnoozeSeconds, task.MaxSnoozeSeconds} {
		tk := task.Restore(running(1))
		_, err := tk.Snooze(task.SnoozeParams{WorkerID: holder, LeaseID: leaseID, DelaySeconds: d}, at(time.Minute))
		require.NoError(t, err, "delay %d", d)
	}
}

// An operator's cancel request wins over the holder's snooze.
func TestSnoozeOfACancelRequestedTaskEndsItCancelled(t *testing.T) {
	t.Parallel()
	tk := task.Restore(cancelRequested(1))
	ev, err := tk.Snooze(task.SnoozeParams{WorkerID: holder, LeaseID: leaseID, DelaySeconds: 10}, at(time.Minute))
	require.NoError(t, err)
	require.Equal(t, task.StatusDead, tk.Status())
	require.Equal(t, task.DeadCancelled, tk.Snapshot().DeadReason)
	require.Equal(t, event.TaskDeadLettered, ev.Type)
	require.Equal(t, 0, tk.Snapshot().Snoozes)
}

func TestUnfinishedStatuses(t *testing.T) {
	t.Parallel()
	for _, s := range allStatuses {
		want := s == task.StatusPending || s == task.StatusRunning || s == task.StatusBlocked
		require.Equal(t, want, s.Unfinished(), s)
	}
	require.False(t, task.Status("").Unfinished())
}
