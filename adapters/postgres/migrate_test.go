package postgres_test

import (
	"context"
	"io/fs"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/migrations"
)

// TestMain is the one TestMain of this package's tests: every storage test gets its database
// from pgtest.
func TestMain(m *testing.M) { pgtest.Main(m) }

func TestMigrateFromConcurrentInstancesAppliesEachMigrationOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := pgtest.NewEmptyDatabase(t)
	want := migrationVersions(t)

	pending, err := postgres.Pending(ctx, connect(t, url))
	require.NoError(t, err)
	require.Equal(t, want, pending, "an empty database needs every migration")

	const instances = 8
	dbs := make([]*sqlx.DB, instances)
	for i := range dbs {
		dbs[i] = connect(t, url) // one pool per instance, as separate processes would have
	}
	begin := make(chan struct{})
	errs := make(chan error, instances)
	var wg sync.WaitGroup
	for _, db := range dbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-begin
			errs <- postgres.Migrate(ctx, db)
		}()
	}
	close(begin)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	db := dbs[0]
	var applied []string
	require.NoError(t, db.Select(&applied, `SELECT version FROM schema_migrations ORDER BY version`))
	require.Equal(t, want, applied)
	pending, err = postgres.Pending(ctx, db)
	require.NoError(t, err)
	require.Empty(t, pending)
	var locks int
	require.NoError(t, db.Get(&locks, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`))
	require.Zero(t, locks, "Migrate releases its advisory lock")
}

func TestMigrateTwiceIsNoOp(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := connect(t, pgtest.NewEmptyDatabase(t))
	require.NoError(t, postgres.Migrate(ctx, db))
	before := appliedAt(t, db)

	require.NoError(t, postgres.Migrate(ctx, db))
	require.Equal(t, before, appliedAt(t, db))
	pending, err := postgres.Pending(ctx, db)
	require.NoError(t, err)
	require.Empty(t, pending)
}

// migrationVersions lists the embedded migrations as Migrate records them.
func migrationVersions(t *testing.T) []string {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, names)
	versions := make([]string, len(names))
	for i, name := range names {
		versions[i] = strings.TrimSuffix(name, ".sql")
	}
	return versions
}

// appliedAt returns schema_migrations as version → applied_at.
func appliedAt(t *testing.T, db *sqlx.DB) map[string]time.Time {
	t.Helper()
	var rows []struct {
		Version   string    `db:"version"`
		AppliedAt time.Time `db:"applied_at"`
	}
	require.NoError(t, db.Select(&rows, `SELECT version, applied_at FROM schema_migrations`))
	m := make(map[string]time.Time, len(rows))
	for _, r := range rows {
		m[r.Version] = r.AppliedAt
	}
	return m
}

// connect opens a pool on url, closed when the test ends.
func connect(t *testing.T, url string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Connect("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, db.Close()) })
	return db
}

// Deleting tasks deletes their attempts, whoever deletes them and however
// many at once (migration 0023's trigger, where a foreign key cascaded
// before), and no other task's.
func TestDeletingTasksDeletesTheirAttemptsOnly(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ids := []string{"00000000-0000-0000-0000-00000000000a", "00000000-0000-0000-0000-00000000000b", "00000000-0000-0000-0000-00000000000c"}
	for _, id := range ids {
		_, err := db.Exec(`INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at)
			VALUES ($1, 'q', 'DEAD', 3, now(), now(), now())`, id)
		require.NoError(t, err)
		for attempt := 1; attempt <= 2; attempt++ {
			_, err = db.Exec(`INSERT INTO task_attempts (task_id, attempt, worker_id, claimed_at, finished_at, outcome)
				VALUES ($1, $2, 'w', now(), now(), 'failed')`, id, attempt)
			require.NoError(t, err)
		}
	}
	attemptsOf := func() map[string]int {
		var rows []struct {
			ID string `db:"task_id"`
			N  int    `db:"n"`
		}
		require.NoError(t, db.Select(&rows, `SELECT task_id::text, count(*) AS n FROM task_attempts GROUP BY task_id`))
		m := map[string]int{}
		for _, r := range rows {
			m[r.ID] = r.N
		}
		return m
	}

	_, err := db.Exec(`DELETE FROM tasks WHERE id = ANY($1::uuid[])`, pq.StringArray{ids[0], ids[2]})
	require.NoError(t, err)
	require.Equal(t, map[string]int{ids[1]: 2}, attemptsOf())
	_, err = db.Exec(`DELETE FROM tasks WHERE id = $1`, ids[1])
	require.NoError(t, err)
	require.Empty(t, attemptsOf())
}

// Migration 0017 marks every task that some task was ever linked to depend
// on (has_dependants), whatever its status was then: before it, a parent
// already DONE when its dependant was linked was left unmarked, and
// retention deleted it under an unfinished dependant. A database made by
// the migrations before 0017, holding such a parent, comes out of the
// upgrade with it marked, and with no other task marked.
func TestMigration0017MarksParentsLinkedWhenFinished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := connect(t, pgtest.NewEmptyDatabase(t))
	versions := migrationVersions(t)
	var later []string
	for _, v := range versions {
		if v >= "0017" {
			later = append(later, v)
		}
	}
	require.NotEmpty(t, later)
	// Recorded as applied, the later migrations are skipped: the database
	// is left as the migrations before 0017 made it.
	_, err := db.Exec(`CREATE TABLE schema_migrations (version text PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())`)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO schema_migrations (version) SELECT unnest($1::text[])`, pq.StringArray(later))
	require.NoError(t, err)
	require.NoError(t, postgres.Migrate(ctx, db))
	var cols int
	require.NoError(t, db.Get(&cols, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'tasks' AND column_name = 'schedule_name'`))
	require.Zero(t, cols, "the database is as it was before 0017")

	// A parent DONE before its dependant was linked (unmarked, as the code
	// before 0017 left it), a parent linked while PENDING (marked then), a
	// dependant, and a task no one depends on.
	_, err = db.Exec(`
		INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at, finished_at, has_dependants, blockers) VALUES
		('00000000-0000-0000-0000-000000000001', 'q', 'DONE', 1, now(), now(), now(), now(), false, NULL),
		('00000000-0000-0000-0000-000000000002', 'q', 'PENDING', 1, now(), now(), now(), NULL, true, NULL),
		('00000000-0000-0000-0000-000000000003', 'q', 'BLOCKED', 1, now(), now(), now(), NULL, false, 1),
		('00000000-0000-0000-0000-000000000004', 'q', 'DONE', 1, now(), now(), now(), now(), false, NULL);
		INSERT INTO task_dependencies (parent_id, child_id, position) VALUES
		('00000000-0000-0000-0000-000000000001', '00000000-0000-0000-0000-000000000003', 0),
		('00000000-0000-0000-0000-000000000002', '00000000-0000-0000-0000-000000000003', 1);`)
	require.NoError(t, err)

	_, err = db.Exec(`DELETE FROM schema_migrations WHERE version = ANY($1)`, pq.StringArray(later))
	require.NoError(t, err)
	require.NoError(t, postgres.Migrate(ctx, db))
	pending, err := postgres.Pending(ctx, db)
	require.NoError(t, err)
	require.Empty(t, pending)

	var marked []string
	require.NoError(t, db.Select(&marked, `SELECT id::text FROM tasks WHERE has_dependants ORDER BY id`))
	require.Equal(t, []string{"00000000-0000-0000-0000-000000000001", "00000000-0000-0000-0000-000000000002"}, marked)
}
