package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// reaperLiveness are the thresholds of the reaper store tests.
var reaperLiveness = worker.LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second}

// reaperFixture is a migrated database with the use cases that put rows in
// it; tests then age rows with SQL instead of waiting.
type reaperFixture struct {
	db      *sqlx.DB
	tx      *postgres.TxRunner
	tasks   *application.TaskService
	workers *application.WorkerService
}

func newReaperFixture(t *testing.T) *reaperFixture {
	t.Helper()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: reaperLiveness}
	return &reaperFixture{db: db, tx: tx, tasks: application.NewTaskService(tx, cfg), workers: application.NewWorkerService(tx, cfg)}
}

func (f *reaperFixture) register(t *testing.T, id string) {
	t.Helper()
	_, _, err := f.workers.Register(context.Background(), worker.RegisterParams{ID: id})
	require.NoError(t, err)
}

func (f *reaperFixture) submit(t *testing.T, p task.SubmitParams) uuid.UUID {
	t.Helper()
	if p.Queue == "" {
		p.Queue = "q"
	}
	tk, _, err := f.tasks.Submit(context.Background(), p)
	require.NoError(t, err)
	return tk.ID()
}

// running submits a task and has workerID claim it.
func (f *reaperFixture) running(t *testing.T, workerID string, maxAttempts int) uuid.UUID {
	t.Helper()
	queue := "q-" + uuid.NewString()
	id := f.submit(t, task.SubmitParams{Queue: queue, MaxAttempts: ptr(maxAttempts)})
	claimed, err := f.tasks.Claim(context.Background(), ports.ClaimCommand{WorkerID: workerID, Queue: queue, Limit: ptr(1)})
	require.NoError(t, err)
	require.Len(t, claimed.Tasks, 1)
	return id
}

// setWorker sets a worker's status and makes it silent for silence.
func (f *reaperFixture) setWorker(t *testing.T, id string, status worker.Status, silence time.Duration) {
	t.Helper()
	_, err := f.db.Exec(`UPDATE workers SET status = $2, last_heartbeat_at = now() - $3 * interval '1 millisecond' WHERE id = $1`,
		id, string(status), silence.Milliseconds())
	require.NoError(t, err)
}

func (f *reaperFixture) task(t *testing.T, id uuid.UUID) task.Snapshot {
	t.Helper()
	var out *task.Task
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Tasks.Get(ctx, id)
		return err
	}))
	return out.Snapshot()
}

func (f *reaperFixture) workerStatus(t *testing.T, id string) worker.Status {
	t.Helper()
	var s string
	require.NoError(t, f.db.Get(&s, `SELECT status FROM workers WHERE id = $1`, id))
	return worker.Status(s)
}

// outboxEvents returns the events of the given type in the outbox, in the
// order they were appended, and how many outbox messages carried them.
func (f *reaperFixture) outboxEvents(t *testing.T, typ event.Type) ([]event.Event, int) {
	t.Helper()
	var rows []struct {
		Offset int64  `db:"offset"`
		Event  []byte `db:"event"`
	}
	require.NoError(t, f.db.Select(&rows, `
		SELECT m."offset", e::text AS event
		FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = $1 ORDER BY m."offset"`, string(typ)))
	events := make([]event.Event, len(rows))
	messages := map[int64]bool{}
	for i, r := range rows {
		require.NoError(t, json.Unmarshal(r.Event, &events[i]))
		messages[r.Offset] = true
	}
	return events, len(messages)
}

func (f *reaperFixture) silentWorkers(t *testing.T, limit int) []*worker.Worker {
	t.Helper()
	var out []*worker.Worker
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Reaper.UpdateSilentWorkers(ctx, reaperLiveness, limit, func(w *worker.Worker, now time.Time) ([]event.Event, error) {
			e, changed := w.CheckLiveness(reaperLiveness, now)
			if !changed {
				return nil, errors.New("selected a worker whose liveness does not change")
			}
			return []event.Event{e}, nil
		})
		return err
	}))
	return out
}

func releaseHeldTask(t *task.Task, judged task.Holder, now time.Time) ([]event.Event, bool, error) {
	e, err := t.ReleaseFromDeadWorker(judged, now)
	return []event.Event{e}, err == nil, err
}

func (f *reaperFixture) orphans(t *testing.T, limit int) []*task.Task {
	t.Helper()
	var out []*task.Task
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Reaper.UpdateOrphanedTasks(ctx, limit, releaseHeldTask)
		return err
	}))
	return out
}

func idsOfWorkers(ws []*worker.Worker) []string {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.ID()
	}
	return ids
}

func idsOfTasks(ts []*task.Task) []uuid.UUID {
	ids := make([]uuid.UUID, len(ts))
	for i, t := range ts {
		ids[i] = t.ID()
	}
	return ids
}

func TestReaperStoreSelectsExactlyTheWorkersWhoseLivenessChanges(t *testing.T) {
	t.Parallel()
	f := newReaperFixture(t)
	for id, s := range map[string]struct {
		status  worker.Status
		silence time.Duration
	}{
		"fresh":      {worker.StatusActive, 0},
		"active-40":  {worker.StatusActive, 40 * time.Second},
		"stale-40":   {worker.StatusStale, 40 * time.Second},
		"active-200": {worker.StatusActive, 200 * time.Second},
		"stale-300":  {worker.StatusStale, 300 * time.Second},
		"dead-900":   {worker.StatusDead, 900 * time.Second},
	} {
		f.register(t, id)
		f.setWorker(t, id, s.status, s.silence)
	}

	first := f.silentWorkers(t, 2)
	require.Equal(t, []string{"stale-300", "active-200"}, idsOfWorkers(first), "longest silent first, at most the limit")
	rest := f.silentWorkers(t, 10)
	require.Equal(t, []string{"active-40"}, idsOfWorkers(rest))
	require.Empty(t, f.silentWorkers(t, 10), "changed workers leave the selection")

	want := map[string]worker.Status{
		"fresh": worker.StatusActive, "active-40": worker.StatusStale, "stale-40": worker.StatusStale,
		"active-200": worker.StatusDead, "stale-300": worker.StatusDead, "dead-900": worker.StatusDead,
	}
	for id, status := range want {
		require.Equal(t, status, f.workerStatus(t, id), id)
	}
	died, messages := f.outboxEvents(t, event.WorkerDied)
	require.Len(t, died, 2)
	require.Equal(t, 1, messages, "one outbox message per transaction")
	require.Equal(t, "STALE", died[0].From)
	require.Equal(t, "ACTIVE", died[1].From)
	stale, _ := f.outboxEvents(t, event.WorkerStale)
	require.Len(t, stale, 1)
	require.Equal(t, "active-40", stale[0].WorkerID)
}

func TestReaperStoreReleasesTasksNoLiveWorkerHolds(t *testing.T) {
	t.Parallel()
	f := newReaperFixture(t)
	for _, id := range []string{"live", "stale", "dead", "gone"} {
		f.register(t, id)
	}
	live := f.running(t, "live", 3)
	stale := f.running(t, "stale", 3)
	dead := f.running(t, "dead", 3)
	deadLast := f.running(t, "dead", 1)
	gone := f.running(t, "gone", 3)
	before := f.task(t, dead)
	f.setWorker(t, "stale", worker.StatusStale, time.Minute)
	f.setWorker(t, "dead", worker.StatusDead, 5*time.Minute)
	_, err := f.db.Exec(`DELETE FROM workers WHERE id = 'gone'`)
	require.NoError(t, err)

	// A transaction holding one orphan makes the sweep skip it, not wait.
	lockTx, err := f.db.Beginx()
	require.NoError(t, err)
	_, err = lockTx.Exec(`SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, gone)
	require.NoError(t, err)
	require.ElementsMatch(t, []uuid.UUID{dead, deadLast}, idsOfTasks(f.orphans(t, 10)))
	require.NoError(t, lockTx.Rollback())
	require.Equal(t, []uuid.UUID{gone}, idsOfTasks(f.orphans(t, 10)))
	require.Empty(t, f.orphans(t, 10))

	for _, id := range []uuid.UUID{live, stale} {
		require.Equal(t, task.StatusRunning, f.task(t, id).Status, "tasks of live workers stay RUNNING")
	}
	requeued := f.task(t, dead)
	require.Equal(t, task.StatusPending, requeued.Status)
	require.Equal(t, 1, requeued.Attempts, "the attempt counts")
	require.Empty(t, requeued.WorkerID)
	require.Equal(t, uuid.Nil, requeued.LeaseID)
	require.Nil(t, requeued.FinishedAt)
	require.Equal(t, before.ClaimedAt, requeued.ClaimedAt)
	require.True(t, requeued.RunAt.After(*before.ClaimedAt), "claimable again at once (run_at is the reaper's now)")
	require.Equal(t, requeued.RunAt, requeued.UpdatedAt)

	exhausted := f.task(t, deadLast)
	require.Equal(t, task.StatusDead, exhausted.Status)
	require.Equal(t, task.DeadWorkerDead, exhausted.DeadReason)
	require.NotNil(t, exhausted.FinishedAt)
	require.Empty(t, exhausted.WorkerID)

	requeues, _ := f.outboxEvents(t, event.TaskRequeued)
	require.Len(t, requeues, 2)
	for _, e := range requeues {
		require.Equal(t, "worker_dead", e.Reason)
		require.Equal(t, "RUNNING", e.From)
		require.Equal(t, "PENDING", e.To)
		require.Equal(t, 1, e.Attempt)
	}
	deadLettered, _ := f.outboxEvents(t, event.TaskDeadLettered)
	require.Len(t, deadLettered, 1)
	require.Equal(t, deadLast.String(), deadLettered[0].TaskID)
	require.Equal(t, "dead", deadLettered[0].WorkerID)
	require.Equal(t, "worker_dead", deadLettered[0].Reason)
}

func TestReaperStoreExpiresOverduePendingTasks(t *testing.T) {
	t.Parallel()
	f := newReaperFixture(t)
	f.register(t, "w")
	later := time.Now().Add(time.Hour)
	overdue := f.submit(t, task.SubmitParams{Deadline: &later})
	future := f.submit(t, task.SubmitParams{Deadline: &later})
	none := f.submit(t, task.SubmitParams{})
	running := f.running(t, "w", 3)
	_, err := f.db.Exec(`UPDATE tasks SET deadline = now() - interval '1 second' WHERE id = ANY($1)`,
		[]string{overdue.String(), running.String()})
	require.NoError(t, err)

	var got []*task.Task
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		got, err = st.Reaper.UpdateOverdueTasks(ctx, 10, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.ExpireDeadline(now)
			return []event.Event{e}, err
		})
		return err
	}))
	require.Equal(t, []uuid.UUID{overdue}, idsOfTasks(got))
	s := f.task(t, overdue)
	require.Equal(t, task.StatusDead, s.Status)
	require.Equal(t, task.DeadDeadline, s.DeadReason)
	require.NotNil(t, s.FinishedAt)
	require.Equal(t, task.StatusPending, f.task(t, future).Status)
	require.Equal(t, task.StatusPending, f.task(t, none).Status)
	require.Equal(t, task.StatusRunning, f.task(t, running).Status, "a deadline only applies while PENDING")
	events, _ := f.outboxEvents(t, event.TaskDeadLettered)
	require.Len(t, events, 1)
	require.Equal(t, "deadline", events[0].Reason)
}

func TestReaperStoreDeletesExpiredRowsOldestFirst(t *testing.T) {
	t.Parallel()
	f := newReaperFixture(t)
	const ttl = time.Hour
	f.register(t, "w")
	finish := func(status string, age time.Duration) uuid.UUID {
		id := f.submit(t, task.SubmitParams{})
		_, err := f.db.Exec(`UPDATE tasks SET status = $2, finished_at = now() - $3 * interval '1 second',
			dead_reason = CASE WHEN $2 = 'DEAD' THEN 'exhausted' END WHERE id = $1`, id, status, int(age.Seconds()))
		require.NoError(t, err)
		return id
	}
	oldest := finish("DEAD", 3*time.Hour)
	old := finish("DONE", 2*time.Hour)
	young := finish("DONE", 30*time.Minute)
	pending := f.submit(t, task.SubmitParams{})
	running := f.running(t, "w", 3)
	_, err := f.db.Exec(`UPDATE tasks SET created_at = now() - interval '1 day', updated_at = now() - interval '1 day'
		WHERE id = ANY($1)`, []string{pending.String(), running.String()})
	require.NoError(t, err)
	for id, s := range map[string]struct {
		status worker.Status
		age    time.Duration
	}{"dead-old": {worker.StatusDead, 2 * ttl}, "dead-young": {worker.StatusDead, ttl / 2}, "active-old": {worker.StatusActive, 2 * ttl}} {
		f.register(t, id)
		f.setWorker(t, id, s.status, s.age)
	}

	deleteTasks := func(limit int) []*task.Task {
		var out []*task.Task
		require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
			out, err = st.Reaper.DeleteExpiredTasks(ctx, ttl, limit, func(t *task.Task, now time.Time) ([]event.Event, error) {
				e, err := t.Clean(ttl, now)
				return []event.Event{e}, err
			})
			return err
		}))
		return out
	}
	require.Equal(t, []uuid.UUID{oldest}, idsOfTasks(deleteTasks(1)))
	require.Equal(t, []uuid.UUID{old}, idsOfTasks(deleteTasks(10)))
	require.Empty(t, deleteTasks(10))
	var left []uuid.UUID
	require.NoError(t, f.db.Select(&left, `SELECT id FROM tasks`))
	require.ElementsMatch(t, []uuid.UUID{young, pending, running}, left)

	var workers []*worker.Worker
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		workers, err = st.Reaper.DeleteExpiredWorkers(ctx, ttl, 10, func(w *worker.Worker, now time.Time) ([]event.Event, error) {
			e, err := w.Clean(ttl, now)
			return []event.Event{e}, err
		})
		return err
	}))
	require.Equal(t, []string{"dead-old"}, idsOfWorkers(workers))

	cleaned, _ := f.outboxEvents(t, event.TaskCleaned)
	require.Len(t, cleaned, 2)
	require.Equal(t, []string{"DEAD", "DONE"}, []string{cleaned[0].From, cleaned[1].From})
	require.Empty(t, cleaned[0].To)
	cleanedWorkers, _ := f.outboxEvents(t, event.WorkerCleaned)
	require.Len(t, cleanedWorkers, 1)
	require.Equal(t, "DEAD", cleanedWorkers[0].From)
}

func TestReaperStoreSavesNothingWhenTheDomainRefuses(t *testing.T) {
	t.Parallel()
	f := newReaperFixture(t)
	f.register(t, "w")
	id := f.running(t, "w", 3)
	f.setWorker(t, "w", worker.StatusDead, time.Hour)
	held := f.task(t, id)

	refuse := errors.New("refused")
	err := f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Reaper.UpdateOrphanedTasks(ctx, 10, func(*task.Task, task.Holder, time.Time) ([]event.Event, bool, error) {
			return nil, false, refuse
		})
		return err
	})
	require.ErrorIs(t, err, refuse)

	// A reaper transition may not touch what the worker reported.
	err = f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Reaper.UpdateOrphanedTasks(ctx, 10, func(t *task.Task, _ task.Holder, now time.Time) ([]event.Event, bool, error) {
			e, err := t.Fail(task.FailParams{WorkerID: "w", LeaseID: t.Snapshot().LeaseID, Error: "boom", Retryable: true}, backoff.DefaultPolicy(), now)
			return []event.Event{e}, true, err
		})
		return err
	})
	require.ErrorContains(t, err, "may not change the result or last error")

	require.Equal(t, held, f.task(t, id), "nothing saved")
	requeues, _ := f.outboxEvents(t, event.TaskRequeued)
	failures, _ := f.outboxEvents(t, event.TaskFailed)
	require.Empty(t, append(requeues, failures...), "no event recorded")
}
