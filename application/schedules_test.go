package application_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/cron"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/leadership"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// A leader that lost its term in the middle of a tick (another instance
// took the lease over) commits nothing of it: no task, no advance; the new
// leader runs that tick, once.
func TestSchedulerUnderAFormerLeadersFenceCommitsNothing(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	schedules := application.NewScheduleService(s.tx, cron.Parse)
	_, err := schedules.Create(ctx, schedule.CreateParams{Name: "due", Cron: "@every 1h", Task: task.SubmitParams{Queue: "q"}})
	require.NoError(t, err)
	_, err = s.db.ExecContext(ctx, `UPDATE schedules SET next_run_at = now() - interval '1 minute'`)
	require.NoError(t, err)

	old := postgres.NewElector(s.db, "old", time.Minute)
	oldFence, ok, err := old.Lead(ctx, "scheduler")
	require.NoError(t, err)
	require.True(t, ok)
	// The lease expires and another instance takes it over, in a new term.
	_, err = s.db.ExecContext(ctx, `UPDATE leader_leases SET expires_at = now() - interval '1 second' WHERE job = 'scheduler'`)
	require.NoError(t, err)
	newFence, ok, err := postgres.NewElector(s.db, "new", time.Minute).Lead(ctx, "scheduler")
	require.NoError(t, err)
	require.True(t, ok)
	require.Greater(t, newFence.Term, oldFence.Term)

	scheduler := application.NewScheduler(s.tx, cron.Parse, 0)
	rep, err := scheduler.Run(ports.WithFence(ctx, oldFence))
	require.ErrorIs(t, err, leadership.ErrLost)
	require.True(t, rep.Idle())
	var tasks int
	require.NoError(t, s.db.GetContext(ctx, &tasks, `SELECT count(*) FROM tasks`))
	require.Zero(t, tasks, "the former leader created nothing")

	rep, err = scheduler.Run(ports.WithFence(ctx, newFence))
	require.NoError(t, err)
	require.Equal(t, application.SchedulerReport{Created: 1}, rep)
	rep, err = scheduler.Run(ports.WithFence(ctx, newFence))
	require.NoError(t, err)
	require.True(t, rep.Idle(), "the tick ran once")
	require.NoError(t, s.db.GetContext(ctx, &tasks, `SELECT count(*) FROM tasks WHERE schedule_name = 'due'`))
	require.Equal(t, 1, tasks)
}
