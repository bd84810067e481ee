package postgres_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// lockHolder returns the backend pid holding the advisory lock called name,
// or 0.
func lockHolder(t *testing.T, db *sqlx.DB, name string) int {
	t.Helper()
	key := uint64(postgres.LockKey(name))
	var pids []int
	require.NoError(t, db.Select(&pids, `
		SELECT pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1
			AND classid::bigint = $1 AND objid::bigint = $2
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
		int64(key>>32), int64(key&0xffffffff)))
	require.LessOrEqual(t, len(pids), 1)
	if len(pids) == 0 {
		return 0
	}
	return pids[0]
}

func TestAdvisoryLockerElectsOneHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	// Two pools, as two instances would have.
	a := postgres.NewAdvisoryLocker(connect(t, url))
	b := postgres.NewAdvisoryLocker(connect(t, url))
	observer := connect(t, url)

	la, err := a.TryLock(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, la)
	require.NotZero(t, lockHolder(t, observer, "job"))
	lb, err := b.TryLock(ctx, "job")
	require.NoError(t, err)
	require.Nil(t, lb, "held elsewhere")
	other, err := b.TryLock(ctx, "other-job")
	require.NoError(t, err)
	require.NotNil(t, other, "locks are per name")
	require.NoError(t, other.Release(ctx))
	require.NoError(t, la.Check(ctx))

	require.NoError(t, la.Release(ctx))
	require.NoError(t, la.Release(ctx), "release is idempotent")
	require.Error(t, la.Check(ctx), "a released lock is not held")
	require.Zero(t, lockHolder(t, observer, "job"))
	lb, err = b.TryLock(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, lb, "free once released")
	require.NoError(t, lb.Release(ctx))
}

func TestAdvisoryLockIsLostWithItsSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	a := postgres.NewAdvisoryLocker(connect(t, url))
	b := postgres.NewAdvisoryLocker(connect(t, url))
	observer := connect(t, url)

	la, err := a.TryLock(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, la)
	pid := lockHolder(t, observer, "job")
	require.NotZero(t, pid)

	// The holder's connection dies (a crash, a network cut, an operator).
	var terminated bool
	require.NoError(t, observer.Get(&terminated, `SELECT pg_terminate_backend($1, 5000)`, pid))
	require.True(t, terminated)

	require.Error(t, la.Check(ctx), "the holder learns it lost the lock")
	require.Error(t, la.Release(ctx), "unlocking on a dead session fails")
	lb, err := b.TryLock(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, lb, "another instance takes over")
	require.NoError(t, lb.Check(ctx))
	require.NoError(t, lb.Release(ctx))

	// The failed release dropped the broken connection; the pool still works.
	la, err = a.TryLock(ctx, "job")
	require.NoError(t, err)
	require.NotNil(t, la)
	require.NoError(t, la.Release(ctx))
}
