package reapers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
)

func TestDeadlineReaperDeadLettersOverduePendingTasks(t *testing.T) {
	t.Parallel()
	// Workers live long here: the worker holding claimedInTime must not die
	// (and have its task requeued) while the overdue task's deadline passes.
	s := start(t, pgtest.NewDatabase(t), func(cfg *app.Config) {
		cfg.App.Liveness.StaleAfter, cfg.App.Liveness.DeadAfter = time.Minute, 2*time.Minute
	})
	queue := "q-" + uuid.NewString()
	overdue := s.submit(t, map[string]any{"queue": queue, "deadline": dueSoon()})
	open := s.submit(t, map[string]any{"queue": queue})
	// A task claimed in time whose deadline then passes.
	claimedInTime := s.submit(t, map[string]any{"queue": "other-" + queue, "deadline": time.Now().Add(time.Hour)})
	s.register(t, "w")
	require.Len(t, s.claim(t, "w", "other-"+queue, 1), 1)
	_, err := s.DB.Exec(`UPDATE tasks SET deadline = now() - interval '1 second' WHERE id = $1`, claimedInTime.ID)
	require.NoError(t, err)

	dead := s.waitTask(t, overdue.ID, "DEAD")
	require.Equal(t, "deadline", *dead.DeadReason)
	require.Zero(t, dead.Attempts)
	require.False(t, dead.FinishedAt.Before(*dead.Deadline), "expired on the database clock, not before its deadline")
	require.Equal(t, "RUNNING", s.task(t, claimedInTime.ID).Status, "a deadline only applies while PENDING")
	require.Equal(t, "PENDING", s.task(t, open.ID).Status)

	events := outbox(t, s.DB, event.TaskDeadLettered)
	require.Equal(t, []string{"task.dead_lettered PENDING>DEAD deadline"}, transitions(events))
	require.Equal(t, overdue.ID, events[0].TaskID)
}

// Correctness does not hang on reaper timing: with the deadline reaper far
// behind, an overdue task is still never handed out.
func TestClaimNeverHandsOutAnOverdueTask(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), func(cfg *app.Config) { cfg.DeadlineReaperInterval = time.Hour })
	queue := "q-" + uuid.NewString()
	tk := s.submit(t, map[string]any{"queue": queue, "deadline": dueSoon()})
	eventually(t, func() bool {
		var passed bool
		require.NoError(t, s.DB.Get(&passed, `SELECT deadline <= now() FROM tasks WHERE id = $1`, tk.ID))
		return passed
	}, "the deadline passes")
	s.register(t, "w") // now: a worker silent since before would be dead by now
	require.Empty(t, s.claim(t, "w", queue, 10))
	require.Equal(t, "PENDING", s.task(t, tk.ID).Status, "the reaper has not run since")
}

func TestRetentionDeletesOldFinishedRowsInBatches(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), func(cfg *app.Config) {
		cfg.RetentionTTL = time.Hour
		cfg.RetentionBatchSize = 7
		// Workers are aged by hand here; keep the heartbeat reaper's
		// thresholds out of the way.
		cfg.App.Liveness.StaleAfter = time.Minute
		cfg.App.Liveness.DeadAfter = 2 * time.Minute
	})
	queue := "q-" + uuid.NewString()
	s.register(t, "w")
	submit := func(n int) []string {
		ids := make([]string, n)
		for i := range ids {
			ids[i] = s.submit(t, map[string]any{"queue": queue}).ID
		}
		return ids
	}

	// 50 finished long ago (25 DONE, 25 DEAD), 3 finished just now, 3
	// PENDING and 3 RUNNING created long ago.
	old := submit(50)
	young := submit(3)
	for i, tk := range s.claim(t, "w", queue, 53) {
		if i%2 == 0 {
			s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/complete", map[string]any{"worker_id": "w", "lease_id": *tk.LeaseID}, http.StatusOK, nil)
		} else {
			s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/fail",
				map[string]any{"worker_id": "w", "lease_id": *tk.LeaseID, "error": "no", "retryable": false}, http.StatusOK, nil)
		}
	}
	running := submit(3)
	require.Len(t, s.claim(t, "w", queue, 3), 3)
	pending := submit(3)
	s.register(t, "ghost")
	s.register(t, "recently-dead")
	_, err := s.DB.Exec(`UPDATE workers SET status = 'DEAD', last_heartbeat_at = now() - interval '2 hours' WHERE id = 'ghost'`)
	require.NoError(t, err)
	_, err = s.DB.Exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'recently-dead'`)
	require.NoError(t, err)
	// One statement ages every old row, so retention sees all of them at once.
	_, err = s.DB.Exec(`UPDATE tasks SET
			finished_at = CASE WHEN id = ANY($1) THEN now() - interval '2 hours' END,
			created_at = now() - interval '3 hours'
		WHERE id = ANY($1) OR id = ANY($2)`,
		pq.StringArray(old), pq.StringArray(append(append([]string{}, running...), pending...)))
	require.NoError(t, err)

	kept := append(append(append([]string{}, young...), running...), pending...)
	eventually(t, func() bool {
		var n int
		require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
		return n == len(kept)
	}, "retention deletes the 50 old finished tasks")
	var left []string
	require.NoError(t, s.DB.Select(&left, `SELECT id::text FROM tasks`))
	require.ElementsMatch(t, kept, left, "young finished, PENDING and RUNNING tasks stay")
	eventually(t, func() bool {
		var n int
		require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM workers WHERE id = 'ghost'`))
		return n == 0
	}, "retention deletes the long-dead worker")
	var workers []string
	require.NoError(t, s.DB.Select(&workers, `SELECT id FROM workers ORDER BY id`))
	require.Equal(t, []string{"recently-dead", "w"}, workers)

	// Each batch is one transaction, hence one outbox message of at most 7.
	cleaned := outbox(t, s.DB, event.TaskCleaned)
	require.Len(t, cleaned, 50)
	perMessage := map[int64]int{}
	from := map[string]int{}
	for _, e := range cleaned {
		perMessage[e.Message]++
		from[e.From]++
		require.Contains(t, old, e.TaskID)
		require.Empty(t, e.To)
	}
	require.Equal(t, map[string]int{"DONE": 25, "DEAD": 25}, from)
	require.GreaterOrEqual(t, len(perMessage), 8, "50 rows in batches of 7")
	for _, n := range perMessage {
		require.LessOrEqual(t, n, 7)
	}
	require.Equal(t, []string{"worker.cleaned DEAD> "}, transitions(outbox(t, s.DB, event.WorkerCleaned)))
}
