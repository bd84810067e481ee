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

func TestTaskRuleViolationsNamesEveryBrokenRule(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := context.Background()
	insert := func(id, set string) {
		t.Helper()
		_, err := db.Exec(`INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at)
			VALUES ($1, 'q', 'PENDING', 3, now(), now(), now())`, id)
		require.NoError(t, err)
		if set != "" {
			_, err = db.Exec(`UPDATE tasks SET `+set+` WHERE id = $1`, id)
			require.NoError(t, err)
		}
	}
	insert("00000000-0000-0000-0000-000000000001", "")
	none, err := pgtest.TaskRuleViolations(ctx, db.DB)
	require.NoError(t, err)
	require.Empty(t, none, "a task as the service writes it")

	insert("00000000-0000-0000-0000-000000000002", `status = 'LOST'`)
	insert("00000000-0000-0000-0000-000000000003", `max_attempts = 101`)
	insert("00000000-0000-0000-0000-000000000004", `group_key = ''`)
	insert("00000000-0000-0000-0000-000000000005", `retry_base_seconds = 1`)
	insert("00000000-0000-0000-0000-000000000006", `retry_base_seconds = 1, retry_max_seconds = 2, retry_jitter = 'half'`)
	insert("00000000-0000-0000-0000-000000000007", `schedule_name = 's'`)
	_, err = db.Exec(`INSERT INTO task_attempts (task_id, attempt, worker_id, claimed_at, finished_at, outcome, http_status) VALUES
		('00000000-0000-0000-0000-000000000001', 1, 'w', now(), now(), 'vanished', NULL),
		('00000000-0000-0000-0000-000000000001', 1, 'w', now(), now(), 'failed', 600),
		('00000000-0000-0000-0000-0000000000ff', 1, 'w', now(), now(), 'completed', NULL)`)
	require.NoError(t, err)

	bad, err := pgtest.TaskRuleViolations(ctx, db.DB)
	require.NoError(t, err)
	want := []string{
		"task 00000000-0000-0000-0000-000000000002: status 'LOST'",
		"task 00000000-0000-0000-0000-000000000003: max_attempts 101",
		"task 00000000-0000-0000-0000-000000000004: group_key of 0 characters",
		"task 00000000-0000-0000-0000-000000000005: retry policy partly set or jitter NULL",
		"task 00000000-0000-0000-0000-000000000006: retry policy partly set or jitter 'half'",
		"task 00000000-0000-0000-0000-000000000007: schedule name without tick, or tick without name",
		"attempt 00000000-0000-0000-0000-000000000001/1: outcome 'vanished'",
		"attempt 00000000-0000-0000-0000-000000000001/2: http_status 600",
		"attempt 00000000-0000-0000-0000-0000000000ff/3: its task does not exist",
	}
	require.ElementsMatch(t, want, bad)

	// Leave the database as the service would, or the test's own end-of-test check fails it.
	for _, table := range []string{"task_attempts", "tasks"} {
		_, err = db.Exec(`DELETE FROM ` + table)
		require.NoError(t, err)
	}
}
