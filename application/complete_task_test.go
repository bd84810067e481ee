package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// claimed submits a task and claims it for a freshly registered worker.
func claimed(t *testing.T, s services, workerID string) *task.Task {
	t.Helper()
	ctx := t.Context()
	_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: workerID})
	require.NoError(t, err)
	_, _, err = s.tasks.Submit(ctx, task.SubmitParams{Queue: workerID})
	require.NoError(t, err)
	got, err := claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: workerID, Queue: workerID}))
	require.NoError(t, err)
	require.Len(t, got, 1)
	return got[0]
}

// A report is its worker's sign of life: it revives a STALE worker.
func TestReportsRefreshTheReportingWorker(t *testing.T) {
	t.Parallel()
	s := setup(t)
	reports := map[string]func(ctx context.Context, v task.Snapshot) error{
		"complete": func(ctx context.Context, v task.Snapshot) error {
			_, err := s.tasks.Complete(ctx, ports.CompleteCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID})
			return err
		},
		"fail": func(ctx context.Context, v task.Snapshot) error {
			_, err := s.tasks.Fail(ctx, ports.FailCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID, Retryable: true})
			return err
		},
	}
	for name, report := range reports {
		v := claimed(t, s, "w-"+name).Snapshot()
		_, err := s.db.Exec(`UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '40 seconds' WHERE id = $1`, v.WorkerID)
		require.NoError(t, err)

		require.NoError(t, report(t.Context(), v), name)
		var w struct {
			Status string    `db:"status"`
			Beat   time.Time `db:"last_heartbeat_at"`
		}
		require.NoError(t, s.db.Get(&w, `SELECT status, last_heartbeat_at FROM workers WHERE id = $1`, v.WorkerID))
		require.Equal(t, "ACTIVE", w.Status, name)
		require.WithinDuration(t, time.Now(), w.Beat, time.Minute, name)
	}
}

// A report that passed the fence stands even if its worker has since been
// declared dead or removed: the task's holder and lease decide, not the
// worker row.
func TestReportsFromADeadOrVanishedHolderStillCount(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()

	dead := claimed(t, s, "dead").Snapshot()
	_, err := s.db.Exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'dead'`)
	require.NoError(t, err)
	done, err := s.tasks.Complete(ctx, ports.CompleteCommand{TaskID: dead.ID, WorkerID: "dead", LeaseID: &dead.LeaseID})
	require.NoError(t, err)
	require.Equal(t, task.StatusDone, done.Status())
	var status string
	require.NoError(t, s.db.Get(&status, `SELECT status FROM workers WHERE id = 'dead'`))
	require.Equal(t, "DEAD", status, "a report does not resurrect a dead worker")

	gone := claimed(t, s, "gone").Snapshot()
	_, err = s.db.Exec(`DELETE FROM workers WHERE id = 'gone'`)
	require.NoError(t, err)
	failed, err := s.tasks.Fail(ctx, ports.FailCommand{TaskID: gone.ID, WorkerID: "gone", LeaseID: &gone.LeaseID, Retryable: false})
	require.NoError(t, err)
	require.Equal(t, task.StatusDead, failed.Status())
}
