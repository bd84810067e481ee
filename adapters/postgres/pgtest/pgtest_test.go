package pgtest_test

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func TestNewDBIsMigrated(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)

	pending, err := postgres.Pending(context.Background(), db)
	require.NoError(t, err)
	require.Empty(t, pending)
	var applied int
	require.NoError(t, db.Get(&applied, `SELECT count(*) FROM schema_migrations`))
	require.Positive(t, applied)
}

func TestNewDBIsolatesTests(t *testing.T) {
	t.Parallel()
	a, b := pgtest.NewDB(t), pgtest.NewDB(t)

	_, err := a.Exec(`CREATE TABLE only_in_a (id int)`)
	require.NoError(t, err)
	var found bool
	require.NoError(t, b.Get(&found, `SELECT to_regclass('only_in_a') IS NOT NULL`))
	require.False(t, found)
}

func TestNewDatabaseIsDroppedWhenTestEnds(t *testing.T) {
	t.Parallel()
	var name string
	// Not parallel: t.Run must return only after the subtest's cleanup has run.
	t.Run("uses a database", func(t *testing.T) {
		require.NoError(t, pgtest.NewDB(t).Get(&name, `SELECT current_database()`))
	})

	admin, err := sqlx.Connect("postgres", pgtest.ServerURL("postgres"))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, admin.Close()) })
	var count int
	require.NoError(t, admin.Get(&count, `SELECT count(*) FROM pg_database WHERE datname = $1`, name))
	require.Zero(t, count)
}

func TestNewEmptyDatabaseHasNoMigrations(t *testing.T) {
	t.Parallel()
	db, err := sqlx.Connect("postgres", pgtest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })

	pending, err := postgres.Pending(context.Background(), db)
	require.NoError(t, err)
	require.NotEmpty(t, pending)
}
