package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// open is postgres.Open with conn's bounds, closed when the test ends.
func open(t *testing.T, databaseURL string, conn postgres.ConnConfig) *sqlx.DB {
	t.Helper()
	db, err := postgres.Open(t.Context(), databaseURL, postgres.PoolConfig{MaxOpen: 4, Conn: conn})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func show(t *testing.T, db *sqlx.DB, setting string) string {
	t.Helper()
	var v string
	require.NoError(t, db.GetContext(t.Context(), &v, `SELECT current_setting($1)`, setting))
	return v
}

func TestOpenBoundsEverySession(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.NewDatabase(t)
	db := open(t, databaseURL, postgres.ConnConfig{
		StatementTimeout: 1500 * time.Millisecond, IdleInTransactionTimeout: 2500 * time.Millisecond, TCPUserTimeout: 6 * time.Second,
	})
	for setting, want := range map[string]string{
		"statement_timeout":                   "1500ms",
		"idle_in_transaction_session_timeout": "2500ms",
		// The server's side of the connection (the harness connects over TCP).
		"tcp_user_timeout":        "6000",
		"tcp_keepalives_idle":     "2",
		"tcp_keepalives_interval": "2",
		"tcp_keepalives_count":    "3",
	} {
		require.Equal(t, want, show(t, db, setting), setting)
	}

	// What the URL sets wins.
	u, err := url.Parse(databaseURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("statement_timeout", "7000")
	u.RawQuery = q.Encode()
	db = open(t, u.String(), postgres.DefaultConnConfig())
	require.Equal(t, "7s", show(t, db, "statement_timeout"))
	require.Equal(t, "10s", show(t, db, "idle_in_transaction_session_timeout"))

	// Zero bounds send nothing: the server's defaults stay.
	db = open(t, databaseURL, postgres.ConnConfig{})
	require.Equal(t, "0", show(t, db, "statement_timeout"))
	require.Equal(t, "0", show(t, db, "tcp_user_timeout"))
}

func TestStatementTimeoutCancelsALongStatement(t *testing.T) {
	t.Parallel()
	db := open(t, pgtest.NewDatabase(t), postgres.ConnConfig{StatementTimeout: 200 * time.Millisecond})
	_, err := db.ExecContext(t.Context(), `SELECT pg_sleep(30)`)
	var pqErr *pq.Error
	require.ErrorAs(t, err, &pqErr)
	require.Equal(t, "57014", string(pqErr.Code), "query_canceled: %v", err)
}

// A client frozen (SIGSTOP, a pause) or gone in the middle of a transaction
// holds its row locks only until the server ends its idle session.
func TestIdleInTransactionTimeoutReleasesAFrozenClientsLocks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	databaseURL := pgtest.NewDatabase(t)
	frozen := open(t, databaseURL, postgres.ConnConfig{IdleInTransactionTimeout: 300 * time.Millisecond})
	other := open(t, databaseURL, postgres.ConnConfig{})
	_, err := other.ExecContext(ctx, `INSERT INTO workers (id, status, registered_at, last_heartbeat_at) VALUES ('w', 'ACTIVE', now(), now())`)
	require.NoError(t, err)

	tx, err := frozen.BeginTxx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT 1 FROM workers WHERE id = 'w' FOR UPDATE`)
	require.NoError(t, err)

	// The other session waits for the row, then gets it once the server has
	// ended the frozen one (within the statement's own 30 s).
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = other.ExecContext(wctx, `UPDATE workers SET status = 'STALE' WHERE id = 'w'`)
	require.NoError(t, err)
	t.Logf("the row was free after %s", time.Since(start))

	_, err = tx.ExecContext(ctx, `SELECT 1`)
	require.Error(t, err, "the frozen transaction is gone")
	_ = tx.Rollback()
}

// Migrate runs (and waits for another instance's migration) without the
// pool's statement timeout.
func TestMigrateOutlastsTheStatementTimeout(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	databaseURL := pgtest.NewEmptyDatabase(t)
	const timeout = 200 * time.Millisecond
	db := open(t, databaseURL, postgres.ConnConfig{StatementTimeout: timeout})
	holder := connect(t, databaseURL)
	conn, err := holder.Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, postgres.MigrationLockKey)
	require.NoError(t, err)

	migrated := make(chan error, 1)
	go func() { migrated <- postgres.Migrate(context.WithoutCancel(ctx), db) }()
	waiting := func() bool {
		var n int
		require.NoError(t, holder.GetContext(ctx, &n, `SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`))
		return n == 1
	}
	require.Eventually(t, waiting, 30*time.Second, 5*time.Millisecond, "Migrate waits for the other instance")
	// Longer than the statement timeout: Migrate still waits.
	time.Sleep(3 * timeout)
	select {
	case err := <-migrated:
		t.Fatalf("Migrate gave up waiting: %v", err)
	default:
	}
	require.True(t, waiting())

	_, err = conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, postgres.MigrationLockKey)
	require.NoError(t, err)
	select {
	case err := <-migrated:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("Migrate did not finish")
	}
	pending, err := postgres.Pending(ctx, db)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Equal(t, "200ms", show(t, db, "statement_timeout"), "the pool's sessions keep their timeout")
}
