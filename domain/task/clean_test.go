package task_test

import (
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
)

func TestCleanExpiredFinishedTasks(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 8, 12, 0, 0, 0, time.UTC)
	const ttl = 7 * 24 * time.Hour
	old := now.Add(-ttl)
	young := now.Add(-ttl + time.Microsecond)
	cases := []struct {
		name     string
		status   task.Status
		reason   task.DeadReason
		finished *time.Time
		ttl      time.Duration
		want     bool
	}{
		{"DONE exactly ttl ago", task.StatusDone, "", &old, ttl, true},
		{"DEAD exactly ttl ago", task.StatusDead, task.DeadDeadline, &old, ttl, true},
		{"DONE a microsecond too young", task.StatusDone, "", &young, ttl, false},
		{"DEAD a microsecond too young", task.StatusDead, task.DeadExhausted, &young, ttl, false},
		{"PENDING never", task.StatusPending, "", &old, ttl, false},
		{"RUNNING never", task.StatusRunning, "", &old, ttl, false},
		{"finished without finished_at", task.StatusDone, "", nil, ttl, false},
		{"ttl 0 disables", task.StatusDone, "", &old, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			id := uuid.New()
			tk := task.Restore(task.Snapshot{
				ID: id, Queue: "q", Status: c.status, DeadReason: c.reason, Attempts: 2, MaxAttempts: 3,
				FinishedAt: c.finished, CreatedAt: old.Add(-time.Hour), UpdatedAt: old,
			})
			before := tk.Snapshot()
			require.Equal(t, c.want, tk.Expired(c.ttl, now))
			e, err := tk.Clean(c.ttl, now)
			require.Equal(t, before, tk.Snapshot(), "cleaning changes nothing in the task")
			if !c.want {
				require.ErrorIs(t, err, task.ErrRetained)
				return
			}
			require.NoError(t, err)
			require.Equal(t, event.Event{
				Version: event.Version, Type: event.TaskCleaned, TaskID: id.String(), Queue: "q",
				From: string(c.status), Reason: string(c.reason), Attempt: 2, OccurredAt: now,
			}, e)
		})
	}
}
