package app_test

import (
	"io"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
)

func load(env map[string]string, args ...string) (app.Config, error) {
	env["TASKMASTER_DATABASE_URL"] = "postgres://u@localhost/db"
	return app.LoadConfig("serve", args, func(k string) string { return env[k] }, io.Discard)
}

func TestDatabaseTimeouts(t *testing.T) {
	t.Parallel()
	cfg, err := load(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, cfg.Pool.Conn.StatementTimeout)
	require.Equal(t, 10*time.Second, cfg.Pool.Conn.IdleInTransactionTimeout)
	require.Equal(t, 30*time.Second, cfg.Pool.Conn.TCPUserTimeout)

	cfg, err = load(map[string]string{
		"TASKMASTER_DB_STATEMENT_TIMEOUT_MS":           "0",
		"TASKMASTER_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": "2500",
	}, "-db-tcp-user-timeout-ms", "0")
	require.NoError(t, err)
	require.Zero(t, cfg.Pool.Conn.StatementTimeout, "0 turns it off")
	require.Equal(t, 2500*time.Millisecond, cfg.Pool.Conn.IdleInTransactionTimeout)
	require.Zero(t, cfg.Pool.Conn.TCPUserTimeout)

	for name, value := range map[string]string{
		"TASKMASTER_DB_STATEMENT_TIMEOUT_MS":           "50",
		"TASKMASTER_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS": "-1",
		"TASKMASTER_DB_TCP_USER_TIMEOUT_MS":            "soon",
	} {
		_, err := load(map[string]string{name: value})
		var cerr *app.ConfigError
		require.ErrorAs(t, err, &cerr, name)
		require.ErrorContains(t, err, name)
	}
}

func TestLeaderLeaseTTL(t *testing.T) {
	t.Parallel()
	cfg, err := load(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, 15*time.Second, cfg.LeaderLeaseTTL)
	cfg, err = load(map[string]string{"TASKMASTER_LEADER_LEASE_SECONDS": "2.5"})
	require.NoError(t, err)
	require.Equal(t, 2500*time.Millisecond, cfg.LeaderLeaseTTL)
	for _, v := range []string{"0.5", "0", "-3", "long"} {
		_, err := load(map[string]string{"TASKMASTER_LEADER_LEASE_SECONDS": v})
		require.ErrorContains(t, err, "TASKMASTER_LEADER_LEASE_SECONDS", v)
	}
}

func TestDatabaseURLTakesBothFormsOfLibpq(t *testing.T) {
	t.Parallel()
	for _, v := range []string{
		"postgres://u@h1:5432,h2:5433/db?target_session_attrs=read-write",
		"postgresql://u@%2Fvar%2Frun%2Fpostgresql/db",
		"host=h1,h2 port=5432,5433 dbname=db user=u connect_timeout=3",
	} {
		env := map[string]string{}
		cfg, err := app.LoadConfig("serve", nil, func(k string) string {
			if k == "TASKMASTER_DATABASE_URL" {
				return v
			}
			return env[k]
		}, io.Discard)
		require.NoError(t, err, v)
		require.Equal(t, v, cfg.DatabaseURL)
	}
	for _, v := range []string{"mysql://h/db", "localhost", "postgres://h/db?sslmode", "postgres://[::1/db", "host='h",
		// lib/pq loops forever on it when no host answers.
		"postgres://h1,h2/db?target_session_attrs=prefer-standby"} {
		_, err := app.LoadConfig("serve", nil, func(k string) string {
			if k == "TASKMASTER_DATABASE_URL" {
				return v
			}
			return ""
		}, io.Discard)
		require.ErrorContains(t, err, "TASKMASTER_DATABASE_URL", v)
	}
}

func TestListenDatabaseURL(t *testing.T) {
	t.Parallel()
	cfg, err := load(map[string]string{})
	require.NoError(t, err)
	require.Equal(t, cfg.DatabaseURL, cfg.ListenURL(), "by default the notifier listens on the main database")
	cfg, err = load(map[string]string{"TASKMASTER_LISTEN_DATABASE_URL": "host=pg-primary port=5432 dbname=db"})
	require.NoError(t, err)
	require.Equal(t, "host=pg-primary port=5432 dbname=db", cfg.ListenURL())
	_, err = load(map[string]string{"TASKMASTER_LISTEN_DATABASE_URL": "pg-primary"})
	require.ErrorContains(t, err, "TASKMASTER_LISTEN_DATABASE_URL")
}

func TestTransactionPooling(t *testing.T) {
	t.Parallel()
	cfg, err := load(map[string]string{})
	require.NoError(t, err)
	require.False(t, cfg.TransactionPooling)
	require.Zero(t, cfg.PoolConfig().StatementCacheSize, "the default cache")

	cfg, err = load(map[string]string{"TASKMASTER_DB_TRANSACTION_POOLING": "on", "TASKMASTER_LISTEN_DATABASE_URL": "host=pg dbname=db"})
	require.NoError(t, err)
	require.True(t, cfg.TransactionPooling)
	require.Negative(t, cfg.PoolConfig().StatementCacheSize, "no prepared statements behind a transaction pooler")

	_, err = load(map[string]string{"TASKMASTER_DB_TRANSACTION_POOLING": "on"})
	require.ErrorContains(t, err, "TASKMASTER_LISTEN_DATABASE_URL: is required")
	_, err = load(map[string]string{"TASKMASTER_DB_TRANSACTION_POOLING": "on", "TASKMASTER_LISTEN_DATABASE_URL": "host=pg",
		"TASKMASTER_DB_STATEMENT_CACHE_SIZE": "64"})
	require.ErrorContains(t, err, "TASKMASTER_DB_STATEMENT_CACHE_SIZE: must be 0")
	cfg, err = load(map[string]string{"TASKMASTER_DB_TRANSACTION_POOLING": "on", "TASKMASTER_LISTEN_DATABASE_URL": "host=pg",
		"TASKMASTER_DB_STATEMENT_CACHE_SIZE": "0"})
	require.NoError(t, err)
	require.Negative(t, cfg.PoolConfig().StatementCacheSize)
	_, err = load(map[string]string{"TASKMASTER_DB_TRANSACTION_POOLING": "maybe"})
	require.ErrorContains(t, err, "TASKMASTER_DB_TRANSACTION_POOLING")
}
