package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// claimN submits n tasks to a queue of their own and claims them for
// workerID (registered if new).
func claimN(t *testing.T, s services, workerID string, n int) []task.Snapshot {
	t.Helper()
	ctx := t.Context()
	_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: workerID})
	require.NoError(t, err)
	queue := "q-" + uuid.NewString()
	for range n {
		_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: queue})
		require.NoError(t, err)
	}
	got, err := claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: workerID, Queue: queue, Limit: ptr(n)}))
	require.NoError(t, err)
	require.Len(t, got, n)
	out := make([]task.Snapshot, n)
	for i, tk := range got {
		out[i] = tk.Snapshot()
	}
	return out
}

func (s services) get(t *testing.T, id uuid.UUID) task.Snapshot {
	t.Helper()
	tk, err := s.tasks.Get(t.Context(), id)
	require.NoError(t, err)
	return tk.Snapshot()
}

// age moves a task's claim back by d, as if it had been claimed that long ago.
func (s services) age(t *testing.T, id uuid.UUID, d time.Duration) {
	t.Helper()
	_, err := s.db.Exec(`UPDATE tasks SET claimed_at = claimed_at - $2 * interval '1 millisecond' WHERE id = $1`, id, d.Milliseconds())
	require.NoError(t, err)
}

func ref(v task.Snapshot) task.LeaseRef { return task.LeaseRef{ID: v.ID, LeaseID: v.LeaseID} }

func TestHeartbeatListingRenewsOrphansAndReports(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	mine := claimN(t, s, "w", 4)
	listed, staleListed, unlisted, young := mine[0], mine[1], mine[2], mine[3]
	theirs := claimN(t, s, "other", 1)[0]
	interval := worker.DefaultLivenessConfig().HeartbeatInterval()
	for _, v := range []task.Snapshot{listed, staleListed, unlisted} {
		s.age(t, v.ID, interval+time.Second)
	}
	_, err := s.tasks.Cancel(ctx, listed.ID)
	require.NoError(t, err)
	gone := task.LeaseRef{ID: uuid.New(), LeaseID: uuid.New()}
	stale := task.LeaseRef{ID: staleListed.ID, LeaseID: uuid.New()}

	refs := []task.LeaseRef{ref(listed), stale, ref(theirs), gone}
	res, err := s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w", ListsTasks: true, Tasks: refs})
	require.NoError(t, err)

	require.Equal(t, worker.StatusActive, res.Worker.Status())
	require.Equal(t, []task.LeaseRef{stale, ref(theirs), gone}, res.Lost, "listed, not held under that lease: in listing order")
	require.Equal(t, []task.LeaseRef{ref(listed)}, res.Cancel)
	require.False(t, res.Drain)

	// The listed task's lease was renewed from the heartbeat's time.
	got := s.get(t, listed.ID)
	require.Equal(t, task.StatusRunning, got.Status)
	require.True(t, got.LeaseExpiresAt.After(*listed.LeaseExpiresAt))
	require.Equal(t, got.UpdatedAt.Add(task.DefaultLeaseSeconds*time.Second), *got.LeaseExpiresAt)
	// Held but not listed under their lease, and claimed over an interval
	// ago: orphaned, the attempt counted.
	for _, v := range []task.Snapshot{staleListed, unlisted} {
		got := s.get(t, v.ID)
		require.Equal(t, task.StatusPending, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Empty(t, got.WorkerID)
	}
	// Claimed too recently to be missing from the list: left alone.
	require.Equal(t, young, s.get(t, young.ID))
	// Another worker's task is only reported, never touched.
	require.Equal(t, theirs, s.get(t, theirs.ID))

	var reasons []string
	require.NoError(t, s.db.Select(&reasons, `
		SELECT e->>'reason' FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.requeued' ORDER BY e->>'task_id'`))
	require.Equal(t, []string{"orphaned", "orphaned"}, reasons)
}

func TestHeartbeatWithoutListingRenewsAndOrphansNothing(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	held := claimN(t, s, "w", 2)
	for _, v := range held {
		s.age(t, v.ID, time.Hour)
	}
	_, err := s.tasks.Cancel(ctx, held[1].ID)
	require.NoError(t, err)
	cancelled := s.get(t, held[1].ID)

	res, err := s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w"})
	require.NoError(t, err)
	require.Empty(t, res.Lost)
	require.NotNil(t, res.Lost)
	require.Equal(t, []task.LeaseRef{ref(held[1])}, res.Cancel, "a worker that does not list its tasks still learns of cancels")
	got := s.get(t, held[0].ID)
	require.Equal(t, task.StatusRunning, got.Status)
	require.Equal(t, held[0].LeaseExpiresAt, got.LeaseExpiresAt, "not renewed")
	require.Equal(t, cancelled, s.get(t, held[1].ID))
}

// A heartbeat the worker cannot make (unknown, DEAD) changes nothing: the
// renewals and orphans roll back with it.
func TestRefusedHeartbeatChangesNoTask(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	held := claimN(t, s, "w", 2)
	s.age(t, held[1].ID, time.Hour)
	_, err := s.db.Exec(`UPDATE workers SET status = 'DEAD'`)
	require.NoError(t, err)
	_, err = s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w", ListsTasks: true, Tasks: []task.LeaseRef{ref(held[0])}})
	require.ErrorIs(t, err, worker.ErrDead)
	require.Equal(t, held[0], s.get(t, held[0].ID))
	require.Equal(t, task.StatusRunning, s.get(t, held[1].ID).Status)

	_, err = s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "nobody", ListsTasks: true})
	require.ErrorIs(t, err, worker.ErrNotFound)

	_, err = s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w", ListsTasks: true, Tasks: make([]task.LeaseRef, application.MaxHeartbeatTasks+1)})
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	require.Equal(t, "tasks", verr.Fields[0].Field)
}

func TestDrainedWorkerClaimsNothingUntilItRegistersAgain(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: "w"})
	require.NoError(t, err)
	_, _, err = s.tasks.Submit(ctx, task.SubmitParams{Queue: "q"})
	require.NoError(t, err)

	w, err := s.workers.Drain(ctx, "w")
	require.NoError(t, err)
	require.True(t, w.Draining())
	_, err = s.workers.Drain(ctx, "nobody")
	require.ErrorIs(t, err, worker.ErrNotFound)

	got, err := claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w"}))
	require.NoError(t, err)
	require.Empty(t, got)
	require.NotNil(t, got)
	// With a wait, the answer comes when the wait is over, like a claim on
	// empty queues: a worker that does not read its heartbeats does not spin.
	start := time.Now()
	got, err = claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", WaitMillis: ptr(int64(200))}))
	require.NoError(t, err)
	require.Empty(t, got)
	require.GreaterOrEqual(t, time.Since(start), 200*time.Millisecond)
	res, err := s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w"})
	require.NoError(t, err)
	require.True(t, res.Drain)

	_, _, err = s.workers.Register(ctx, worker.RegisterParams{ID: "w"})
	require.NoError(t, err)
	got, err = claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w"}))
	require.NoError(t, err)
	require.Len(t, got, 1)
	res, err = s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w"})
	require.NoError(t, err)
	require.False(t, res.Drain)
}

func TestClaimLeaseSeconds(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	held := claimN(t, s, "w", 1)[0]
	require.Equal(t, task.DefaultLeaseSeconds, held.LeaseSeconds, "the default")
	require.Equal(t, held.ClaimedAt.Add(task.DefaultLeaseSeconds*time.Second), *held.LeaseExpiresAt)

	configured := application.NewTaskService(s.tx, application.Config{DefaultLeaseSeconds: 7})
	_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: "seven"})
	require.NoError(t, err)
	got, err := claimedTasks(configured.Claim(ctx, ports.ClaimCommand{WorkerID: "w", Queue: "seven"}))
	require.NoError(t, err)
	require.Equal(t, 7, got[0].Snapshot().LeaseSeconds, "the configured default")

	for _, n := range []int{-1, task.MaxLeaseSeconds + 1} {
		_, err := s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", LeaseSeconds: ptr(n)})
		var verr *validation.Error
		require.ErrorAs(t, err, &verr, n)
		require.Equal(t, "lease_seconds", verr.Fields[0].Field)
	}
	require.Error(t, application.Config{DefaultLeaseSeconds: task.MaxLeaseSeconds + 1}.Validate())
}

func TestExtend(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	held := claimN(t, s, "w", 1)[0]

	got, err := s.tasks.Extend(ctx, ports.ExtendCommand{TaskID: held.ID, WorkerID: "w", LeaseID: &held.LeaseID, LeaseSeconds: ptr(3600)})
	require.NoError(t, err)
	v := got.Snapshot()
	require.Equal(t, 3600, v.LeaseSeconds)
	require.Equal(t, v.UpdatedAt.Add(time.Hour), *v.LeaseExpiresAt)
	require.Equal(t, v, s.get(t, held.ID))

	// A renewal keeps the new length.
	_, err = s.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w", ListsTasks: true, Tasks: []task.LeaseRef{ref(held)}})
	require.NoError(t, err)
	renewed := s.get(t, held.ID)
	require.Equal(t, renewed.UpdatedAt.Add(time.Hour), *renewed.LeaseExpiresAt)

	other := uuid.New()
	_, err = s.tasks.Extend(ctx, ports.ExtendCommand{TaskID: held.ID, WorkerID: "w", LeaseID: &other})
	require.ErrorIs(t, err, task.ErrLeaseLost)
	_, err = s.tasks.Extend(ctx, ports.ExtendCommand{TaskID: uuid.New(), WorkerID: "w", LeaseID: &other})
	require.ErrorIs(t, err, task.ErrNotFound)
	_, err = s.tasks.Extend(ctx, ports.ExtendCommand{TaskID: held.ID, LeaseSeconds: ptr(-1)})
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	require.ElementsMatch(t, []string{"worker_id", "lease_id", "lease_seconds"},
		[]string{verr.Fields[0].Field, verr.Fields[1].Field, verr.Fields[2].Field})
	require.Equal(t, renewed, s.get(t, held.ID))
}

func TestLeaseReaperReportsWhatItTookBack(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	held := claimN(t, s, "w", 3)
	_, err := s.db.Exec(`UPDATE tasks SET max_attempts = 1 WHERE id = $1`, held[1].ID)
	require.NoError(t, err)
	_, err = s.tasks.Cancel(ctx, held[2].ID)
	require.NoError(t, err)
	_, err = s.db.Exec(`UPDATE tasks SET lease_expires_at = now() - interval '1 second'`)
	require.NoError(t, err)

	r := application.NewLeaseReaper(s.tx, 2) // two batches
	rep, err := r.Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, application.LeaseReport{Requeued: 1, DeadLettered: 1, Cancelled: 1}, rep)
	require.Len(t, rep.Fields(), 3)
	rep, err = r.Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Idle())
}

// A heartbeat locks its worker's tasks before the worker's row, the order in
// which a report locks its task and then refreshes the worker: while a
// report holds a task, a waiting heartbeat holds nothing the report will
// need, so the two never deadlock.
func TestHeartbeatLocksTheWorkersTasksBeforeTheWorker(t *testing.T) {
	t.Parallel()
	s := setup(t)
	held := claimN(t, s, "w", 1)[0]

	report, err := s.db.Beginx()
	require.NoError(t, err)
	defer func() { _ = report.Rollback() }()
	_, err = report.Exec(`SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, held.ID)
	require.NoError(t, err)

	done := make(chan error, 1)
	go func() {
		_, err := s.workers.Heartbeat(context.Background(), ports.HeartbeatCommand{WorkerID: "w", ListsTasks: true, Tasks: []task.LeaseRef{ref(held)}})
		done <- err
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var waiting int
		require.NoError(t, s.db.Get(&waiting, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`))
		if waiting > 0 {
			break
		}
		require.False(t, time.Now().After(deadline), "the heartbeat never waited for the task's lock")
		time.Sleep(5 * time.Millisecond)
	}
	// The report can still take the worker's row: the heartbeat does not
	// hold it while it waits.
	_, err = report.Exec(`SELECT 1 FROM workers WHERE id = 'w' FOR UPDATE NOWAIT`)
	require.NoError(t, err)
	require.NoError(t, report.Commit())
	require.NoError(t, <-done)
}
