package postgres_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// What counts as "the database is unavailable" and what does not.
func TestTranslateErrorMarksConnectionFailuresOnly(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	cases := []struct {
		name string
		err  error
		want bool
	}{
		{"dial refused", fmt.Errorf("begin: %w", refused), true},
		{"reset", &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, true},
		{"bad connection", driver.ErrBadConn, true},
		{"connection done", sql.ErrConnDone, true},
		{"eof", io.EOF, true},
		{"unexpected eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"deadline", context.DeadlineExceeded, true},
		{"admin shutdown", &pq.Error{Code: "57P01"}, true},
		{"starting up", &pq.Error{Code: "57P03"}, true},
		{"connection exception class", &pq.Error{Code: "08006"}, true},
		{"too many connections", &pq.Error{Code: "53300"}, true},
		{"statement timeout", &pq.Error{Code: "57014"}, true},
		{"cancelled by the caller", context.Canceled, false},
		{"unique violation", &pq.Error{Code: "23505"}, false},
		{"syntax error", &pq.Error{Code: "42601"}, false},
		{"no rows", sql.ErrNoRows, false},
		{"domain error", task.ErrNotFound, false},
		{"anything else", errors.New("boom"), false},
	}
	for _, c := range cases {
		got := postgres.TranslateError(c.err)
		require.Equal(t, c.want, errors.Is(got, ports.ErrUnavailable), c.name)
		require.ErrorIs(t, got, c.err, "%s: the cause stays reachable", c.name)
		if !c.want {
			require.Same(t, c.err, got, "%s: left as it is", c.name)
		}
	}
	require.Nil(t, postgres.TranslateError(nil))
}

// setupTerminator returns a TxRunner on a pool of its own, and a function
// that ends every other session of that pool's database, as a fast shutdown
// of the server does (FATAL 57P01 to each).
func setupTerminator(t *testing.T) (*sqlx.DB, *postgres.TxRunner, func()) {
	t.Helper()
	url := pgtest.NewDatabase(t)
	db, err := postgres.Open(t.Context(), url, postgres.PoolConfig{MaxOpen: 8, MaxIdle: 8})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	admin, err := sqlx.Connect("postgres", url)
	require.NoError(t, err)
	admin.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = admin.Close() })
	terminate := func() {
		var n int
		require.NoError(t, admin.Get(&n, `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`))
	}
	return db, postgres.NewTxRunner(db), terminate
}

func submitIn(ctx context.Context, st ports.Stores) error {
	_, _, err := st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
		return task.Submit(task.SubmitParams{ID: uuid.Must(uuid.NewV7()), Queue: "q"}, now)
	})
	return err
}

// Pooled connections whose sessions the server ended (a restart) are
// replaced without the callers seeing an error.
func TestTxRunnerReplacesConnectionsTheServerEnded(t *testing.T) {
	t.Parallel()
	db, tx, terminate := setupTerminator(t)
	// Fill the pool with idle connections: 8 transactions that each wait,
	// holding a connection, until all 8 hold one.
	var wg, holding sync.WaitGroup
	holding.Add(8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
				_, err := st.Tasks.Get(ctx, uuid.Nil)
				holding.Done()
				holding.Wait()
				return err
			})
		}()
	}
	wg.Wait()
	require.Equal(t, 8, db.Stats().Idle)
	terminate()
	for i := range 12 {
		require.NoError(t, tx.Run(t.Context(), submitIn), "transaction %d after the sessions ended", i)
	}
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks`))
	require.Equal(t, 12, n)
}

// A connection that breaks inside a transaction, or while it commits,
// fails the transaction with ports.ErrUnavailable, and nothing of it is
// kept.
func TestTxRunnerConnectionLostMidTransactionIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, when := range []string{"before a statement", "before commit"} {
		db, tx, terminate := setupTerminator(t)
		err := tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
			if err := submitIn(ctx, st); err != nil {
				return err
			}
			terminate()
			if when == "before commit" {
				return nil // the outbox append or COMMIT meets the dead session
			}
			return submitIn(ctx, st)
		})
		require.ErrorIs(t, err, ports.ErrUnavailable, when)
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks`))
		require.Zero(t, n, "%s: nothing was committed", when)
	}
}

// A server that does not answer at all is unavailable, quickly.
func TestTxRunnerWithoutServerIsUnavailable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	db, err := sqlx.Open("postgres", "postgres://postgres@"+addr+"/x?sslmode=disable")
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	err = postgres.NewTxRunner(db).Run(t.Context(), submitIn)
	require.ErrorIs(t, err, ports.ErrUnavailable)
	_, err = outbox.NewStatsReader(db).Queues(t.Context(), ports.QueueFilter{Limit: 10})
	require.ErrorIs(t, err, ports.ErrUnavailable)
}

// lib/pq ignores the context while it establishes a connection: against a
// host that accepts TCP connections and never answers, only connect_timeout
// ends the wait. Open adds it, so such a database is unavailable within
// DefaultConnectTimeout instead of hanging whoever asked.
func TestOpenBoundsConnectingToASilentServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		var held []net.Conn // accepted, never answered
		defer func() {
			for _, c := range held {
				_ = c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := postgres.Open(context.Background(), "postgres://postgres@"+ln.Addr().String()+"/x?sslmode=disable", postgres.DefaultPoolConfig())
		done <- err
	}()
	select {
	case err := <-done:
		require.Error(t, err)
		require.True(t, postgres.IsConnectionFailure(err), "%v", err)
		require.Less(t, time.Since(start), postgres.DefaultConnectTimeout+10*time.Second)
	case <-time.After(postgres.DefaultConnectTimeout + 30*time.Second):
		require.FailNow(t, "connecting to a silent server hung")
	}
}
