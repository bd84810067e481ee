package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/leadership"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

type leaseState struct {
	Owner   string `db:"owner"`
	Term    int64  `db:"term"`
	Expired bool   `db:"expired"`
}

func lease(t *testing.T, db *sqlx.DB, job string) leaseState {
	t.Helper()
	var s leaseState
	require.NoError(t, db.GetContext(t.Context(), &s,
		`SELECT owner, term, expires_at <= now() AS expired FROM leader_leases WHERE job = $1`, job))
	return s
}

func lead(t *testing.T, e *postgres.Elector, job string) (ports.Fence, bool) {
	t.Helper()
	f, ok, err := e.Lead(t.Context(), job)
	require.NoError(t, err)
	return f, ok
}

// leadWithin asks e for the lease until it gets it (the lease may be busy
// meanwhile).
func leadWithin(t *testing.T, e *postgres.Elector, job string) ports.Fence {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		f, ok, err := e.Lead(t.Context(), job)
		if !errors.Is(err, ports.ErrLeaseBusy) {
			require.NoError(t, err)
		}
		if ok {
			return f
		}
		require.False(t, time.Now().After(deadline), "%s takes %s over", e.Owner(), job)
		time.Sleep(10 * time.Millisecond)
	}
}

// registerFenced registers a worker in a transaction fenced by f.
func registerFenced(ctx context.Context, tx *postgres.TxRunner, f ports.Fence, id string) error {
	return tx.Run(ports.WithFence(ctx, f), func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Workers.Upsert(ctx, id, func(_ *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error) {
			w, e, err := worker.Register(worker.RegisterParams{ID: id}, now)
			return w, []event.Event{e}, err
		})
		return err
	})
}

func workerExists(t *testing.T, db *sqlx.DB, id string) bool {
	t.Helper()
	var n int
	require.NoError(t, db.GetContext(t.Context(), &n, `SELECT count(*) FROM workers WHERE id = $1`, id))
	return n == 1
}

func TestElectorHandsEachJobToOneInstanceAtATime(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	a := postgres.NewElector(db, "a", time.Minute)
	b := postgres.NewElector(db, "b", time.Minute)

	fa, ok := lead(t, a, "job")
	require.True(t, ok)
	require.Equal(t, ports.Fence{Job: "job", Owner: "a", Term: 1, TTL: time.Minute}, fa)
	_, ok = lead(t, b, "job")
	require.False(t, ok, "a leads")
	again, ok := lead(t, a, "job")
	require.True(t, ok)
	require.Equal(t, fa, again, "a renews in its term")
	fb, ok := lead(t, b, "other-job")
	require.True(t, ok, "leases are per job")
	require.Equal(t, int64(1), fb.Term)
	require.Equal(t, leaseState{Owner: "a", Term: 1}, lease(t, db, "job"))

	// A graceful stop gives the lease up: b takes over at once, in term 2.
	require.NoError(t, a.Release(t.Context(), fa))
	require.NoError(t, a.Release(t.Context(), fa), "releasing an ended term does nothing")
	fb, ok = lead(t, b, "job")
	require.True(t, ok)
	require.Equal(t, int64(2), fb.Term)
	_, ok = lead(t, a, "job")
	require.False(t, ok)
	require.NoError(t, a.Release(t.Context(), fa), "an old term's release leaves the new term alone")
	require.Equal(t, leaseState{Owner: "b", Term: 2}, lease(t, db, "job"))
}

// A leader that stops renewing (frozen, gone) loses its lease when it
// expires; whatever it then tries to commit under its old term is refused,
// while its fenced transactions commit (and renew the lease) as long as its
// term lasts.
func TestAFormerLeaderCommitsNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	const ttl = 300 * time.Millisecond
	a := postgres.NewElector(db, "a", ttl)
	b := postgres.NewElector(db, "b", ttl)

	fa, ok := lead(t, a, "job")
	require.True(t, ok)
	require.NoError(t, registerFenced(ctx, tx, fa, "by-a"))
	require.True(t, workerExists(t, db, "by-a"))
	require.False(t, lease(t, db, "job").Expired, "the fenced transaction renewed the lease")

	fb := leadWithin(t, b, "job")
	require.Equal(t, int64(2), fb.Term)

	err := registerFenced(ctx, tx, fa, "late-a")
	require.ErrorIs(t, err, leadership.ErrLost)
	require.False(t, workerExists(t, db, "late-a"), "nothing committed")
	var messages int
	require.NoError(t, db.GetContext(ctx, &messages, `SELECT count(*) FROM watermill_taskmaster_events`))
	require.Equal(t, 1, messages, "only by-a's event")
	require.NoError(t, registerFenced(ctx, tx, fb, "by-b"))
	require.Equal(t, leaseState{Owner: "b", Term: 2}, lease(t, db, "job"))
}

// While a fenced transaction runs, its term cannot end: a takeover waits for
// it to finish, even past the lease's expiry.
func TestATakeoverWaitsForTheLeadersTransaction(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	const ttl = 200 * time.Millisecond
	a := postgres.NewElector(db, "a", ttl)
	b := postgres.NewElector(db, "b", ttl)
	fa, ok := lead(t, a, "job")
	require.True(t, ok)

	inside, finish := make(chan struct{}), make(chan struct{})
	committed := make(chan error, 1)
	go func() {
		committed <- postgres.NewTxRunner(db).Run(ports.WithFence(context.WithoutCancel(ctx), fa), func(context.Context, ports.Stores) error {
			close(inside)
			<-finish
			return nil
		})
	}()
	<-inside
	require.Eventually(t, func() bool { return lease(t, db, "job").Expired }, 30*time.Second, 10*time.Millisecond)
	_, ok, err := b.Lead(ctx, "job")
	require.ErrorIs(t, err, ports.ErrLeaseBusy, "the lease is in use")
	require.False(t, ok)
	close(finish)
	require.NoError(t, <-committed, "the leader's transaction commits in its term")
	require.Equal(t, int64(2), leadWithin(t, b, "job").Term)
}

// A leader frozen inside a fenced transaction holds the lease row locked;
// the server ends its idle session after the idle-in-transaction timeout and
// the takeover proceeds once the lease has expired.
func TestAFrozenLeadersTransactionDoesNotBlockTheTakeoverForLong(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	databaseURL := pgtest.NewDatabase(t)
	frozenDB := open(t, databaseURL, postgres.ConnConfig{IdleInTransactionTimeout: 300 * time.Millisecond})
	db := open(t, databaseURL, postgres.ConnConfig{})
	const ttl = 500 * time.Millisecond
	a := postgres.NewElector(frozenDB, "a", ttl)
	b := postgres.NewElector(db, "b", ttl)
	fa, ok := lead(t, a, "job")
	require.True(t, ok)

	inside, thaw := make(chan struct{}), make(chan struct{})
	committed := make(chan error, 1)
	go func() {
		committed <- postgres.NewTxRunner(frozenDB).Run(ports.WithFence(context.WithoutCancel(ctx), fa), func(ctx context.Context, st ports.Stores) error {
			close(inside)
			<-thaw // frozen: the session sits idle in its transaction
			_, err := st.Workers.Get(ctx, "anyone")
			return err
		})
	}()
	<-inside
	start := time.Now()
	fb := leadWithin(t, b, "job")
	t.Logf("b took over %s after a froze (TTL %s, idle-in-transaction timeout 300ms)", time.Since(start), ttl)
	require.Equal(t, int64(2), fb.Term)
	close(thaw)
	require.Error(t, <-committed, "the frozen transaction was ended by the server")
}
