// Package testserver starts the real Taskmaster fx application over HTTP on
// a fresh test database, for end-to-end tests.
package testserver

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
)

// Server is a running instance.
type Server struct {
	// URL is the base URL, e.g. http://127.0.0.1:40123.
	URL string
	// DatabaseURL is the instance's database.
	DatabaseURL string
	// DB is a separate connection pool to that database, for assertions.
	DB *sqlx.DB
	// Config is the configuration the instance runs with.
	Config app.Config

	fxApp *fx.App
}

// PgBouncerEnv, set to 1, runs every instance through a PgBouncer in
// transaction pooling (pgtest.BouncerURL): TASKMASTER_DATABASE_URL through
// the pooler, TASKMASTER_LISTEN_DATABASE_URL direct,
// TASKMASTER_DB_TRANSACTION_POOLING on. Server.DatabaseURL and Server.DB
// stay direct. `.ci/run` runs the end-to-end tests so once more.
const PgBouncerEnv = "TASKMASTER_TEST_PGBOUNCER"

// OutboxRetention is the outbox retention instances start with unless mutate
// changes it: far longer than any test, so that the janitor (every second)
// never deletes outbox rows a test is about to count. The production default
// (a minute) is shorter than a slow test run; tests of the janitor itself set
// Outbox.Retention explicitly.
const OutboxRetention = 24 * time.Hour

// Start runs an instance on a fresh database. mutate, when not nil,
// adjusts the configuration (fast reaper intervals, thresholds, ...).
func Start(t testing.TB, mutate func(*app.Config)) *Server {
	t.Helper()
	return StartOn(t, pgtest.NewDatabase(t), mutate)
}

// StartOn runs an instance on an existing database (several instances may
// share one). The instance stops in t.Cleanup, or earlier with Stop.
func StartOn(t testing.TB, databaseURL string, mutate func(*app.Config), extra ...fx.Option) *Server {
	t.Helper()
	cfg := app.DefaultConfig()
	cfg.DatabaseURL = databaseURL
	cfg.HTTP.Addr = "127.0.0.1:0"
	cfg.HTTP.ShutdownTimeout = 5 * time.Second
	cfg.Pool.MaxOpen, cfg.Pool.MaxIdle = 10, 10
	cfg.Outbox.Retention = OutboxRetention
	if os.Getenv(PgBouncerEnv) == "1" {
		cfg.DatabaseURL = pgtest.BouncerURL(t, databaseURL)
		cfg.ListenDatabaseURL = databaseURL
		cfg.TransactionPooling = true
	}
	if mutate != nil {
		mutate(&cfg)
	}
	require.NoError(t, cfg.Validate())
	logger := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	var srv *httpadapter.Server
	fxApp := app.New(cfg, logger, append(extra, fx.Populate(&srv))...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, fxApp.Start(ctx))
	s := &Server{URL: "http://" + srv.Addr(), DatabaseURL: databaseURL, Config: cfg, fxApp: fxApp}
	t.Cleanup(s.Stop)
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	s.DB = db
	return s
}

// Stop stops the instance gracefully; calling it again does nothing.
func (s *Server) Stop() {
	if s.fxApp == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_ = s.fxApp.Stop(ctx)
	s.fxApp = nil
}
