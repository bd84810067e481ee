package reapers_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
)

func TestSilentWorkerDiesAndItsTasksAreTakenBack(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), nil)
	queue := "q-" + uuid.NewString()
	retried := s.submit(t, map[string]any{"queue": queue, "max_attempts": 3, "priority": 1})
	last := s.submit(t, map[string]any{"queue": queue, "max_attempts": 1})
	s.register(t, "silent")
	claimed := s.claim(t, "silent", queue, 2)
	require.Len(t, claimed, 2)
	require.Equal(t, retried.ID, claimed[0].ID)
	lease := *claimed[0].LeaseID

	s.waitWorker(t, "silent", "STALE")
	dead := s.waitWorker(t, "silent", "DEAD")

	// Its task with attempts left is PENDING again, the attempt counted.
	requeued := s.waitTask(t, retried.ID, "PENDING")
	require.Equal(t, 1, requeued.Attempts)
	require.Nil(t, requeued.WorkerID)
	require.Nil(t, requeued.LeaseID)
	require.Nil(t, requeued.DeadReason)
	// Its task on its last attempt is DEAD, worker_dead.
	exhausted := s.waitTask(t, last.ID, "DEAD")
	require.Equal(t, "worker_dead", *exhausted.DeadReason)
	require.Equal(t, 1, exhausted.Attempts)
	require.NotNil(t, exhausted.FinishedAt)

	// The dead worker is fenced off: 409 on heartbeat, claim and report.
	s.expect(t, http.MethodPost, "/workers/v1/silent/heartbeat", nil, http.StatusConflict, nil)
	s.expect(t, http.MethodPost, "/tasks/v1/claim", map[string]any{"worker_id": "silent"}, http.StatusConflict, nil)
	s.expect(t, http.MethodPost, "/tasks/v1/"+retried.ID+"/complete",
		map[string]any{"worker_id": "silent", "lease_id": lease}, http.StatusConflict, nil)

	// Another worker gets it, on its second attempt.
	s.register(t, "rescuer")
	again := s.claim(t, "rescuer", queue, 10)
	require.Len(t, again, 1)
	require.Equal(t, retried.ID, again[0].ID)
	require.Equal(t, 2, again[0].Attempts)
	require.NotEqual(t, lease, *again[0].LeaseID)
	s.expect(t, http.MethodPost, "/tasks/v1/"+retried.ID+"/complete",
		map[string]any{"worker_id": "rescuer", "lease_id": *again[0].LeaseID}, http.StatusOK, nil)

	// Re-registering brings the dead worker back.
	s.expect(t, http.MethodPost, "/workers/v1/register", map[string]any{"id": "silent"}, http.StatusOK, nil)
	s.expect(t, http.MethodPost, "/workers/v1/silent/heartbeat", nil, http.StatusOK, nil)

	// Every reaper transition produced its event, once.
	events := outbox(t, s.DB, event.WorkerStale, event.WorkerDied, event.TaskRequeued, event.TaskDeadLettered)
	require.Equal(t, []string{"worker.stale ACTIVE>STALE ", "worker.died STALE>DEAD "}, transitions(about(events, "silent")))
	require.Equal(t, []string{"task.requeued RUNNING>PENDING worker_dead"}, transitions(about(events, retried.ID)))
	require.Equal(t, []string{"task.dead_lettered RUNNING>DEAD worker_dead"}, transitions(about(events, last.ID)))
	died, taken := about(events, "silent")[1], about(events, retried.ID)[0]
	require.Equal(t, died.Message, taken.Message, "the death and the requeue commit in one transaction")
	require.Equal(t, "silent", taken.WorkerID)
	require.Equal(t, 1, taken.Attempt)
	require.GreaterOrEqual(t, died.OccurredAt.Sub(dead.LastHeartbeatAt), deadAfter, "declared dead only after the dead threshold")
}

func TestHeartbeatAndOtherSignsOfLifeReviveAStaleWorker(t *testing.T) {
	t.Parallel()
	// The worker must be STALE, not DEAD, when it beats or claims: a loaded
	// machine can take longer than the fast settings' 0.5 s between the two.
	s := start(t, pgtest.NewDatabase(t), func(cfg *app.Config) { cfg.App.Liveness.DeadAfter = time.Minute })
	s.register(t, "w")

	s.waitWorker(t, "w", "STALE")
	var w struct {
		Status string `json:"status"`
	}
	s.expect(t, http.MethodPost, "/workers/v1/w/heartbeat", nil, http.StatusOK, &w)
	require.Equal(t, "ACTIVE", w.Status)

	// A STALE worker may still claim, and the claim revives it.
	s.waitWorker(t, "w", "STALE")
	require.Empty(t, s.claim(t, "w", "nothing-here", 1))
	require.Equal(t, "ACTIVE", s.worker(t, "w").Status)

	events := transitions(about(outbox(t, s.DB, event.WorkerStale, event.WorkerRevived, event.WorkerDied), "w"))
	require.GreaterOrEqual(t, len(events), 4)
	require.Equal(t, []string{
		"worker.stale ACTIVE>STALE ", "worker.revived STALE>ACTIVE ",
		"worker.stale ACTIVE>STALE ", "worker.revived STALE>ACTIVE ",
	}, events[:4])
}

// A claim reads its worker without locking it, so it can commit a task under
// a worker that the reaper declared dead in the meantime. The sweep takes
// such tasks back too.
func TestTasksRunningUnderADeadWorkerAreSwept(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), nil)
	queue := "q-" + uuid.NewString()
	tk := s.submit(t, map[string]any{"queue": queue})
	s.register(t, "w")
	require.Len(t, s.claim(t, "w", queue, 1), 1)
	s.waitWorker(t, "w", "DEAD")
	s.waitTask(t, tk.ID, "PENDING")

	// Replay the race: the task is RUNNING under the already DEAD worker.
	_, err := s.DB.Exec(`UPDATE tasks SET status = 'RUNNING', attempts = attempts + 1, worker_id = 'w',
		lease_id = gen_random_uuid(), claimed_at = now(), updated_at = now() WHERE id = $1`, tk.ID)
	require.NoError(t, err)
	swept := s.waitTask(t, tk.ID, "PENDING")
	require.Equal(t, 2, swept.Attempts)
	requeues := about(outbox(t, s.DB, event.TaskRequeued), tk.ID)
	require.Len(t, requeues, 2)
	require.NotEqual(t, requeues[0].Message, requeues[1].Message)
}
