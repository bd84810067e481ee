package task_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
)

// A release hands the task back, claimable at once, without spending its
// attempt: on its last attempt it is PENDING again, not DEAD, and the next
// claim is the same attempt again.
func TestReleaseDoesNotSpendAnAttempt(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(3)) // the last of 3 attempts
	now := at(20 * time.Second)
	ev, err := tk.Release(task.ReleaseParams{WorkerID: holder, LeaseID: leaseID}, now)
	require.NoError(t, err)

	s := tk.Snapshot()
	require.Equal(t, task.StatusPending, s.Status)
	require.Equal(t, 2, s.Attempts, "the claim's attempt is given back")
	require.Equal(t, 0, s.Snoozes, "a release is no snooze")
	require.Equal(t, now, s.RunAt, "claimable at once")
	require.Equal(t, now, s.UpdatedAt)
	require.Empty(t, s.WorkerID)
	require.Equal(t, uuid.Nil, s.LeaseID)
	require.Nil(t, s.LeaseExpiresAt)
	require.Nil(t, s.FinishedAt)
	require.Empty(t, s.DeadReason)

	want := taskEvent(event.TaskReleased, task.StatusRunning, task.StatusPending, "released", 2, holder, now)
	want.ExecutionSeconds = event.Seconds(15 * time.Second)
	require.Equal(t, want, ev)
	ended, ok := tk.EndedAttempt()
	require.True(t, ok)
	require.Equal(t, 3, ended.Number, "the released attempt keeps the number it was claimed with")
	require.Equal(t, task.OutcomeReleased, ended.Outcome)
	require.Empty(t, ended.Error)
	require.Equal(t, now, *ended.FinishedAt)

	require.True(t, tk.Claimable([]string{"eu"}, now))
	_, err = tk.Claim(task.ClaimParams{WorkerID: "worker-2", WorkerTags: []string{"eu"}, LeaseID: staleID, LeaseSeconds: 60}, now)
	require.NoError(t, err)
	require.Equal(t, 3, tk.Snapshot().Attempts, "still the third attempt")
}

func TestReleaseIsFenced(t *testing.T) {
	t.Parallel()
	checkHolderReportFenced(t, func(tk *task.Task, worker string, lease uuid.UUID) error {
		_, err := tk.Release(task.ReleaseParams{WorkerID: worker, LeaseID: lease}, at(time.Minute))
		return err
	})
}

// An operator's cancel request wins over the holder's release.
func TestReleaseOfACancelRequestedTaskEndsItCancelled(t *testing.T) {
	t.Parallel()
	tk := task.Restore(cancelRequested(1))
	ev, err := tk.Release(task.ReleaseParams{WorkerID: holder, LeaseID: leaseID}, at(time.Minute))
	require.NoError(t, err)
	require.Equal(t, task.StatusDead, tk.Status())
	require.Equal(t, task.DeadCancelled, tk.Snapshot().DeadReason)
	require.Equal(t, event.TaskDeadLettered, ev.Type)
	require.Equal(t, "cancelled", ev.Reason)
	ended, ok := tk.EndedAttempt()
	require.True(t, ok)
	require.Equal(t, task.OutcomeCancelled, ended.Outcome)
}
