package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// workerState is a worker's stored row.
type workerState struct {
	Status        string    `db:"status"`
	LastHeartbeat time.Time `db:"last_heartbeat_at"`
}

func (f *storeFixture) workerState(id string) workerState {
	f.t.Helper()
	var s workerState
	require.NoError(f.t, f.db.Get(&s, `SELECT status, last_heartbeat_at FROM workers WHERE id = $1`, id))
	return s
}

// touch is WorkerStore.Touch with the domain's sign-of-life rule, in its own
// transaction.
func (f *storeFixture) touch(id string) (*worker.Worker, error) {
	var out *worker.Worker
	err := f.tx.Run(f.t.Context(), func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Workers.Touch(ctx, id, (*worker.Worker).SignOfLife)
		return err
	})
	return out, err
}

func TestWorkerStoreUpsertCreatesThenUpdates(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	first := f.register(worker.RegisterParams{ID: "w1", Queues: []string{"a"}, Tags: []string{"gpu"}})
	require.Equal(t, worker.StatusActive, first.Status())
	f.exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'w1'`)

	var (
		again   *worker.Worker
		created bool
		seen    worker.Status
	)
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		again, created, err = st.Workers.Upsert(ctx, "w1", func(existing *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error) {
			require.NotNil(t, existing, "fn gets the stored worker")
			seen = existing.Status()
			e, err := existing.Reregister(worker.RegisterParams{Queues: []string{"b", "c"}}, now)
			return existing, []event.Event{e}, err
		})
		return err
	})
	require.False(t, created)
	require.Equal(t, worker.StatusDead, seen)

	var stored struct {
		Queues       []byte    `db:"queues"`
		Tags         []byte    `db:"tags"`
		Status       string    `db:"status"`
		RegisteredAt time.Time `db:"registered_at"`
	}
	require.NoError(t, f.db.Get(&stored, `SELECT queues, tags, status, registered_at FROM workers WHERE id = 'w1'`))
	require.Equal(t, "{b,c}", string(stored.Queues))
	require.Equal(t, "{}", string(stored.Tags))
	require.Equal(t, "ACTIVE", stored.Status)
	require.True(t, stored.RegisteredAt.Equal(first.Snapshot().RegisteredAt), "registered_at is kept")
	require.Equal(t, again.Snapshot().Queues, []string{"b", "c"})

	msgs := f.outbox()
	require.Len(t, msgs, 2)
	e := msgs[1].Events[0]
	require.Equal(t, event.WorkerRegistered, e.Type)
	require.Equal(t, "DEAD", e.From)
	require.Equal(t, "ACTIVE", e.To)
}

func TestWorkerStoreTouchRefreshesAtMostOncePerSecond(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.register(worker.RegisterParams{ID: "w1"})
	f.exec(`UPDATE workers SET last_heartbeat_at = now() - interval '2 seconds' WHERE id = 'w1'`)
	before := f.workerState("w1").LastHeartbeat

	var first, second bool
	var txNow time.Time
	f.run(func(ctx context.Context, st ports.Stores) error {
		touch := func(changed *bool) error {
			_, err := st.Workers.Touch(ctx, "w1", func(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
				txNow = now
				events, ch, err := w.SignOfLife(now)
				*changed = ch
				return events, ch, err
			})
			return err
		}
		if err := touch(&first); err != nil {
			return err
		}
		return touch(&second)
	})
	require.True(t, first, "a heartbeat 2 s old is refreshed")
	require.False(t, second, "one just refreshed is left alone")
	after := f.workerState("w1")
	require.True(t, after.LastHeartbeat.Equal(txNow), "refreshed to the database time")
	require.True(t, after.LastHeartbeat.After(before))
	require.Equal(t, "ACTIVE", after.Status)
	require.Len(t, f.outbox(), 1, "refreshing an ACTIVE worker is no event")
}

func TestWorkerStoreTouchRevivesAStaleWorker(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.register(worker.RegisterParams{ID: "w1", Queues: []string{"q"}})
	f.exec(`UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '40 seconds' WHERE id = 'w1'`)

	w, err := f.touch("w1")
	require.NoError(t, err)
	require.Equal(t, worker.StatusActive, w.Status())
	stored := f.workerState("w1")
	require.Equal(t, "ACTIVE", stored.Status)
	require.True(t, stored.LastHeartbeat.Equal(w.Snapshot().LastHeartbeatAt))

	msgs := f.outbox()
	require.Len(t, msgs, 2)
	e := msgs[1].Events[0]
	require.Equal(t, event.WorkerRevived, e.Type)
	require.Equal(t, "STALE", e.From)
	require.Equal(t, "ACTIVE", e.To)
	require.Equal(t, []string{"q"}, e.Queues)
}

func TestWorkerStoreTouchOnADeadWorkerIsErrDead(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.register(worker.RegisterParams{ID: "w1"})
	f.exec(`UPDATE workers SET status = 'DEAD', last_heartbeat_at = now() - interval '1 hour' WHERE id = 'w1'`)
	before := f.workerState("w1")

	_, err := f.touch("w1")
	require.ErrorIs(t, err, worker.ErrDead)
	require.Equal(t, before, f.workerState("w1"), "nothing changed")

	_, err = f.touch("nobody")
	require.ErrorIs(t, err, worker.ErrNotFound)
}

// Touch does not lock the row: when another transaction changes the worker
// between Touch's read and its write, Touch leaves that change alone and
// records no event.
func TestWorkerStoreTouchYieldsToAConcurrentChange(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.register(worker.RegisterParams{ID: "w1"})
	f.exec(`UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '40 seconds' WHERE id = 'w1'`)

	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Workers.Touch(ctx, "w1", func(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
			// Another transaction (the reaper, say) commits first.
			f.exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'w1'`)
			return w.SignOfLife(now)
		})
		return err
	})
	require.Equal(t, "DEAD", f.workerState("w1").Status, "the concurrent change stands")
	require.Len(t, f.outbox(), 1, "no revival was recorded")
}

// TouchEach and TouchLiveEach are Touch for several workers: results in
// the order of the ids (which may repeat), a missing worker ErrNotFound, a
// DEAD one ErrDead and untouched, a STALE one revived with its event, an
// ACTIVE one refreshed; a worker another transaction changed between the
// read and the write keeps that change and gets no event.
func TestWorkerStoreTouchEachIsTouchForEveryWorker(t *testing.T) {
	t.Parallel()
	for _, live := range []bool{false, true} {
		f := newStoreFixture(t)
		for _, id := range []string{"active", "stale", "dead", "raced"} {
			f.register(worker.RegisterParams{ID: id})
		}
		f.exec(`UPDATE workers SET last_heartbeat_at = now() - interval '2 seconds' WHERE id = 'active'`)
		f.exec(`UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '40 seconds' WHERE id IN ('stale', 'raced')`)
		f.exec(`UPDATE workers SET status = 'DEAD', last_heartbeat_at = now() - interval '1 hour' WHERE id = 'dead'`)
		dead := f.workerState("dead")
		ids := []string{"stale", "active", "nobody", "dead", "active", "raced"}
		var out []ports.WorkerResult
		f.run(func(ctx context.Context, st ports.Stores) error {
			touch := st.Workers.TouchEach
			if live {
				touch = st.Workers.TouchLiveEach
			}
			var err error
			out, err = touch(ctx, ids, func(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
				if w.ID() == "raced" {
					// Another transaction (the reaper, say) commits first.
					f.exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'raced'`)
				}
				return w.SignOfLife(now)
			})
			return err
		})
		require.Len(t, out, len(ids))
		for i, id := range ids {
			require.Equal(t, id, out[i].ID)
		}
		require.NoError(t, out[0].Err)
		require.Equal(t, worker.StatusActive, out[0].Worker.Status())
		require.NoError(t, out[1].Err)
		require.NoError(t, out[4].Err)
		require.ErrorIs(t, out[2].Err, worker.ErrNotFound)
		require.Nil(t, out[2].Worker)
		require.ErrorIs(t, out[3].Err, worker.ErrDead)

		require.Equal(t, "ACTIVE", f.workerState("stale").Status)
		require.True(t, f.workerState("stale").LastHeartbeat.Equal(out[0].Worker.Snapshot().LastHeartbeatAt))
		require.True(t, f.workerState("active").LastHeartbeat.Equal(out[1].Worker.Snapshot().LastHeartbeatAt), "refreshed")
		require.Equal(t, dead, f.workerState("dead"), "nothing changed")
		require.Equal(t, "DEAD", f.workerState("raced").Status, "the concurrent change stands")
		msgs := f.outbox()
		last := msgs[len(msgs)-1].Events
		require.Len(t, last, 1, "one revival: stale's; raced's was not saved")
		require.Equal(t, event.WorkerRevived, last[0].Type)
		require.Equal(t, "stale", last[0].WorkerID)
	}
}

func TestWorkerStoreListIsInIDOrder(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, id := range []string{"c", "a", "b"} {
		f.register(worker.RegisterParams{ID: id})
	}
	var got []string
	f.run(func(ctx context.Context, st ports.Stores) error {
		ws, err := st.Workers.List(ctx)
		for _, w := range ws {
			got = append(got, w.ID())
		}
		return err
	})
	require.Equal(t, []string{"a", "b", "c"}, got)
}
