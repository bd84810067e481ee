package postgres_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

func TestTaskStoreClaimGivesEachTaskItsLease(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submit(task.SubmitParams{Queue: "q"})
	f.submit(task.SubmitParams{Queue: "q"})
	claimed := f.claim(ports.ClaimParams{WorkerID: "w1", Limit: 2, LeaseSeconds: 90})
	require.Len(t, claimed, 2)
	for _, c := range claimed {
		got := f.get(c.ID())
		require.Equal(t, c.Snapshot(), got, "Claim returns the saved rows")
		require.Equal(t, 90, got.LeaseSeconds)
		require.NotNil(t, got.LeaseExpiresAt)
		require.Equal(t, got.ClaimedAt.Add(90*time.Second), *got.LeaseExpiresAt, "the lease runs from the claim's database time")
		require.Nil(t, got.CancelRequestedAt)
	}

	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Tasks.Claim(ctx, ports.ClaimParams{WorkerID: "w1", Limit: 1, LeaseSeconds: 0})
		return err
	})
	require.Error(t, err, "a claim without a lease length is refused before it reaches SQL")
}

// Update and the batch save path (saveTasks) write the lease columns, and
// clear them when the task leaves RUNNING.
func TestTaskStoreSavesAndClearsTheLeaseColumns(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	a := f.submit(task.SubmitParams{Queue: "q"})
	b := f.submit(task.SubmitParams{Queue: "q"})
	claimed := f.claim(ports.ClaimParams{WorkerID: "w1", Limit: 2, LeaseSeconds: 30})
	require.Len(t, claimed, 2)

	// Update: a cancel request and an extension.
	var decided time.Time
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, a.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
			decided = now
			e, err := t.Cancel(now)
			if err != nil {
				return nil, err
			}
			return []event.Event{e}, t.ExtendLease(task.ExtendParams{WorkerID: "w1", LeaseID: t.Snapshot().LeaseID, LeaseSeconds: ptr(600)}, now)
		})
		return err
	})
	got := f.get(a.ID())
	require.Equal(t, decided, *got.CancelRequestedAt)
	require.Equal(t, 600, got.LeaseSeconds)
	require.Equal(t, decided.Add(10*time.Minute), *got.LeaseExpiresAt)

	// saveTasks (a batch report): both leave RUNNING, the lease columns go.
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.UpdateEach(ctx, []uuid.UUID{a.ID(), b.ID()}, func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Fail(task.FailParams{WorkerID: "w1", LeaseID: t.Snapshot().LeaseID, Error: "stopped", Retryable: true}, backoff.DefaultPolicy(), now)
			return []event.Event{e}, err
		})
		return err
	})
	for _, id := range []uuid.UUID{a.ID(), b.ID()} {
		var row struct {
			LeaseSeconds   *int       `db:"lease_seconds"`
			LeaseExpiresAt *time.Time `db:"lease_expires_at"`
			CancelAt       *time.Time `db:"cancel_requested_at"`
		}
		require.NoError(t, f.db.Get(&row, `SELECT lease_seconds, lease_expires_at, cancel_requested_at FROM tasks WHERE id = $1`, id))
		require.Nil(t, row.LeaseSeconds)
		require.Nil(t, row.LeaseExpiresAt)
		require.Nil(t, row.CancelAt)
	}
	require.Equal(t, task.DeadCancelled, f.get(a.ID()).DeadReason, "the cancel request survived the round trip")
	require.Equal(t, task.StatusPending, f.get(b.ID()).Status)
}

// Held and UpdateHeld load exactly the worker's RUNNING tasks, without their
// payload; UpdateHeld saves only what fn changed and records its events.
func TestTaskStoreHeldTasks(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	mine := f.submit(task.SubmitParams{Queue: "mine", Payload: json.RawMessage(`{"big":true}`)})
	alsoMine := f.submit(task.SubmitParams{Queue: "mine"})
	f.submit(task.SubmitParams{Queue: "theirs"})
	f.submit(task.SubmitParams{Queue: "pending"})
	done := f.submit(task.SubmitParams{Queue: "done"})
	require.Len(t, f.claim(ports.ClaimParams{WorkerID: "w1", Queues: []string{"mine", "done"}}), 3)
	require.Len(t, f.claim(ports.ClaimParams{WorkerID: "w2", Queues: []string{"theirs"}}), 1)
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, done.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Complete(task.CompleteParams{WorkerID: "w1", LeaseID: t.Snapshot().LeaseID}, now)
			return []event.Event{e}, err
		})
		return err
	})

	var held []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		held, err = st.Tasks.Held(ctx, "w1")
		return err
	})
	want := []uuid.UUID{mine.ID(), alsoMine.ID()}
	if want[0].String() > want[1].String() {
		want[0], want[1] = want[1], want[0]
	}
	require.Equal(t, want, taskIDs(held), "the worker's RUNNING tasks, in id order")
	for _, h := range held {
		require.Nil(t, h.Snapshot().Payload, "no payload")
		full := f.get(h.ID())
		full.Payload = nil
		require.Equal(t, full, h.Snapshot(), "every other column")
	}

	before := len(f.outbox())
	var updated []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		updated, err = st.Tasks.UpdateHeld(ctx, "w1", func(t *task.Task, now time.Time) ([]event.Event, bool, error) {
			if t.ID() != mine.ID() {
				return nil, false, nil
			}
			e, err := t.Cancel(now)
			return []event.Event{e}, true, err
		})
		return err
	})
	require.Equal(t, want, taskIDs(updated))
	require.NotNil(t, f.get(mine.ID()).CancelRequestedAt, "the changed task is saved")
	require.JSONEq(t, `{"big":true}`, string(f.get(mine.ID()).Payload), "saving never touches the payload")
	require.Nil(t, f.get(alsoMine.ID()).CancelRequestedAt)
	msgs := f.outbox()
	require.Len(t, msgs, before+1)
	require.Equal(t, []event.Type{event.TaskCancelRequested}, eventTypes(msgs[len(msgs)-1].Events))

	f.run(func(ctx context.Context, st ports.Stores) error {
		none, err := st.Tasks.Held(ctx, "nobody\x00")
		require.Empty(t, none, "an id no worker can have names no task")
		return err
	})
}

// A heartbeat renewal changes only columns no index holds: PostgreSQL makes
// it a HOT update, which writes no index entry, whenever the row's page has
// room for the new version (fillfactor 85 and autovacuum keep room; the five
// small rows here leave plenty). An index on lease_expires_at would make
// every renewal a non-HOT update (see migrations/0004_leases.sql).
func TestTaskStoreLeaseRenewalIsAHOTUpdate(t *testing.T) {
	t.Parallel()
	// One connection, so that the statistics this test reads are that
	// session's, flushed on demand.
	db, err := sqlx.Open("postgres", pgtest.NewDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	f := &storeFixture{t: t, db: db, tx: postgres.NewTxRunner(db)}
	for range 5 {
		f.submit(task.SubmitParams{Queue: "q"})
	}
	require.Len(t, f.claim(ports.ClaimParams{WorkerID: "w1", Limit: 5}), 5)

	type counts struct {
		Updates int64 `db:"n_tup_upd"`
		HOT     int64 `db:"n_tup_hot_upd"`
	}
	flushed := func() counts {
		t.Helper()
		f.exec(`SELECT pg_stat_force_next_flush()`)
		var c counts
		require.NoError(t, db.Get(&c, `SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'tasks'`))
		return c
	}
	before := flushed()
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.UpdateHeld(ctx, "w1", func(t *task.Task, now time.Time) ([]event.Event, bool, error) {
			v := t.Snapshot()
			return nil, true, t.ExtendLease(task.ExtendParams{WorkerID: v.WorkerID, LeaseID: v.LeaseID}, now)
		})
		return err
	})
	var after counts
	deadline := time.Now().Add(20 * time.Second)
	for after = flushed(); after.Updates < before.Updates+5; after = flushed() {
		require.False(t, time.Now().After(deadline), "statistics never showed the renewals: %+v -> %+v", before, after)
		time.Sleep(10 * time.Millisecond)
	}
	require.Equal(t, counts{Updates: 5, HOT: 5}, counts{after.Updates - before.Updates, after.HOT - before.HOT},
		"every renewal is a HOT update")
}

func TestReaperStoreTakesBackExactlyTheTasksWhoseLeaseRanOut(t *testing.T) {
	t.Parallel()
	f := newReaperFixture(t)
	f.register(t, "w")
	expired := f.running(t, "w", 3)
	exhausted := f.running(t, "w", 1)
	cancelled := f.running(t, "w", 3)
	alive := f.running(t, "w", 3)
	pending := f.submit(t, task.SubmitParams{})
	_, err := f.tasks.Cancel(context.Background(), cancelled)
	require.NoError(t, err)
	_, err = f.db.Exec(`UPDATE tasks SET lease_expires_at = now() - interval '1 millisecond' WHERE id = ANY($1)`,
		[]string{expired.String(), exhausted.String(), cancelled.String()})
	require.NoError(t, err)

	var got []*task.Task
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		got, err = st.Reaper.UpdateExpiredLeases(ctx, 10, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.ExpireLease(now)
			return []event.Event{e}, err
		})
		return err
	}))
	require.ElementsMatch(t, []uuid.UUID{expired, exhausted, cancelled}, idsOfTasks(got))

	s := f.task(t, expired)
	require.Equal(t, task.StatusPending, s.Status)
	require.Equal(t, 1, s.Attempts, "the attempt counts")
	require.Nil(t, s.LeaseExpiresAt)
	require.Zero(t, s.LeaseSeconds)
	s = f.task(t, exhausted)
	require.Equal(t, task.StatusDead, s.Status)
	require.Equal(t, task.DeadLeaseExpired, s.DeadReason)
	s = f.task(t, cancelled)
	require.Equal(t, task.StatusDead, s.Status)
	require.Equal(t, task.DeadCancelled, s.DeadReason)
	require.Nil(t, s.CancelRequestedAt)
	require.Equal(t, task.StatusRunning, f.task(t, alive).Status)
	require.Equal(t, task.StatusPending, f.task(t, pending).Status)

	requeued, _ := f.outboxEvents(t, event.TaskRequeued)
	require.Len(t, requeued, 1)
	require.Equal(t, "lease_expired", requeued[0].Reason)
	dead, messages := f.outboxEvents(t, event.TaskDeadLettered)
	require.ElementsMatch(t, []string{"lease_expired", "cancelled"}, []string{dead[0].Reason, dead[1].Reason})
	require.Equal(t, 1, messages, "one batch, one transaction, one outbox message")

	// The reaper skips rows other transactions hold, and leaves them for its
	// next cycle.
	again := f.running(t, "w", 3)
	_, err = f.db.Exec(`UPDATE tasks SET lease_expires_at = now() - interval '1 millisecond' WHERE id = $1`, again)
	require.NoError(t, err)
	lock, err := f.db.Beginx()
	require.NoError(t, err)
	defer func() { _ = lock.Rollback() }()
	_, err = lock.Exec(`SELECT 1 FROM tasks WHERE id = $1 FOR UPDATE`, again)
	require.NoError(t, err)
	require.NoError(t, f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		got, err = st.Reaper.UpdateExpiredLeases(ctx, 10, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.ExpireLease(now)
			return []event.Event{e}, err
		})
		return err
	}))
	require.Empty(t, got)
}

func TestWorkerStoreKeepsTheDrainFlagUntilReregistration(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.register(worker.RegisterParams{ID: "w1"})
	f.run(func(ctx context.Context, st ports.Stores) error {
		w, err := st.Workers.Update(ctx, "w1", func(w *worker.Worker, now time.Time) ([]event.Event, error) {
			return w.Drain(now), nil
		})
		require.True(t, w.Draining())
		return err
	})
	_, err := f.touch("w1")
	require.NoError(t, err)
	var draining bool
	require.NoError(t, f.db.Get(&draining, `SELECT draining FROM workers WHERE id = 'w1'`))
	require.True(t, draining, "saved, and kept by signs of life")
	f.run(func(ctx context.Context, st ports.Stores) error {
		w, err := st.Workers.Get(ctx, "w1")
		require.True(t, w.Draining())
		return err
	})
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Workers.Upsert(ctx, "w1", func(existing *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error) {
			e, err := existing.Reregister(worker.RegisterParams{}, now)
			return existing, []event.Event{e}, err
		})
		return err
	})
	require.NoError(t, f.db.Get(&draining, `SELECT draining FROM workers WHERE id = 'w1'`))
	require.False(t, draining, "registering again clears it")
}
