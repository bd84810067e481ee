package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// cachedDB opens a one-connection pool whose connection keeps up to size
// prepared statements.
func cachedDB(t *testing.T, size int) *sqlx.DB {
	t.Helper()
	connector, err := pq.NewConnector(pgtest.NewDatabase(t))
	require.NoError(t, err)
	db := sqlx.NewDb(sql.OpenDB(postgres.NewCachingConnector(connector, size)), "postgres")
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// prepared lists the connection's prepared statements (a query without
// arguments is not prepared itself).
func prepared(t *testing.T, db *sqlx.DB) []string {
	t.Helper()
	var out []string
	require.NoError(t, db.SelectContext(t.Context(), &out, `SELECT statement FROM pg_prepared_statements ORDER BY prepare_time`))
	return out
}

func TestCachingConnectorPreparesEachStatementOncePerConnection(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := cachedDB(t, 2)
	for i := range 5 {
		var n int
		require.NoError(t, db.GetContext(ctx, &n, `SELECT $1::int + 1`, i))
		require.Equal(t, i+1, n)
	}
	require.Equal(t, []string{`SELECT $1::int + 1`}, prepared(t, db))

	// In a transaction, on the transaction's connection; it outlives a
	// rollback.
	tx, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	_, err = tx.ExecContext(ctx, `SELECT $1::text`, "x")
	require.NoError(t, err)
	require.NoError(t, tx.Rollback())
	require.Equal(t, []string{`SELECT $1::int + 1`, `SELECT $1::text`}, prepared(t, db))

	// Past the size the least recently used one is closed.
	_, err = db.ExecContext(ctx, `SELECT $1::int + 1`, 1)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `SELECT $1::bigint`, 1)
	require.NoError(t, err)
	require.Equal(t, []string{`SELECT $1::int + 1`, `SELECT $1::bigint`}, prepared(t, db))
}

// A statement whose result a schema change altered fails once (its
// transaction with it) and is prepared again on its next use.
func TestCachingConnectorPreparesAgainAfterASchemaChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := cachedDB(t, 0)
	_, err := db.ExecContext(ctx, `CREATE TABLE grows (a int)`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `INSERT INTO grows VALUES (1)`)
	require.NoError(t, err)
	const q = `SELECT * FROM grows WHERE a = $1`
	rows, err := db.QueryxContext(ctx, q, 1)
	require.NoError(t, err)
	require.NoError(t, rows.Close())
	_, err = db.ExecContext(ctx, `ALTER TABLE grows ADD COLUMN b int`)
	require.NoError(t, err)

	_, err = db.QueryxContext(ctx, q, 1)
	var pqErr *pq.Error
	require.True(t, errors.As(err, &pqErr), "%v", err)
	require.Equal(t, pq.ErrorCode("0A000"), pqErr.Code)

	var got []map[string]any
	rows, err = db.QueryxContext(ctx, q, 1)
	require.NoError(t, err)
	for rows.Next() {
		m := map[string]any{}
		require.NoError(t, rows.MapScan(m))
		got = append(got, m)
	}
	require.NoError(t, rows.Close())
	require.Len(t, got, 1)
	require.Len(t, got[0], 2, "the new column is there")
}

// A context that ends during a prepared statement sends a cancel request
// that could still arrive: the connection is not used again.
func TestCachingConnectorDropsAConnectionWhoseCallWasCancelled(t *testing.T) {
	t.Parallel()
	db := cachedDB(t, 0)
	var before int
	require.NoError(t, db.GetContext(t.Context(), &before, `SELECT pg_backend_pid() + $1`, 0))

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := db.ExecContext(ctx, `SELECT pg_sleep($1)`, 5)
	require.Error(t, err)

	var after int
	require.NoError(t, db.GetContext(t.Context(), &after, `SELECT pg_backend_pid() + $1`, 0))
	require.NotEqual(t, before, after, "a new connection")
}
