package app

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
)

// Serve runs the service until ctx is cancelled (SIGINT/SIGTERM), then
// stops it gracefully: stop accepting, finish in-flight requests, stop the
// background services, close the pool.
func Serve(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := LoadConfig("serve", args, getenv, stderr)
	if err != nil {
		return err
	}
	return serve(ctx, cfg)
}

func serve(ctx context.Context, cfg Config) error {
	logger, err := NewLogger(cfg.LogLevel, cfg.LogFormat)
	if err != nil {
		return &ConfigError{Err: err}
	}
	defer func() { _ = logger.Sync() }()
	gc := applyGC()
	logger.Debug("garbage collector", zap.Int("gc_percent", gc.Percent), zap.Int64("memory_limit", gc.MemoryLimit))
	fxApp := New(cfg, logger)
	startCtx, cancel := context.WithTimeout(ctx, 90*time.Second)
	defer cancel()
	if err := fxApp.Start(startCtx); err != nil {
		return fmt.Errorf("start: %w", err)
	}
	<-ctx.Done()
	logger.Info("shutting down")
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancelStop()
	if err := fxApp.Stop(stopCtx); err != nil {
		return fmt.Errorf("stop: %w", err)
	}
	return nil
}

// MigrateCommand applies pending migrations and exits.
func MigrateCommand(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	cfg, err := LoadConfig("migrate", args, getenv, stderr)
	if err != nil {
		return err
	}
	// A one-shot command: no prepared statements (it could go through a
	// transaction pooler, which cannot keep them).
	db, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{MaxOpen: 2, MaxIdle: 2, Conn: cfg.Pool.Conn, StatementCacheSize: -1})
	if err != nil {
		return err
	}
	defer db.Close()
	if err := postgres.Migrate(ctx, db); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	fmt.Fprintln(stderr, "migrations applied")
	return nil
}

// DevDatabase is the database `taskmaster dev` creates in its local server.
const DevDatabase = "taskmaster"

// Dev serves on a local PostgreSQL it starts in ./.data (installing the
// server binaries with apt when none are found and that is possible),
// unless TASKMASTER_DATABASE_URL is set. Ctrl-C stops both.
func Dev(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	env := getenv
	var server *localpg.Server
	if getenv("TASKMASTER_DATABASE_URL") == "" {
		var err error
		server, err = startDevDatabase(ctx, stderr)
		if err != nil {
			return err
		}
		defer func() {
			if err := server.Stop(); err != nil {
				fmt.Fprintln(stderr, "stop local postgres:", err)
			}
		}()
		url := server.URL(DevDatabase)
		env = func(k string) string {
			if k == "TASKMASTER_DATABASE_URL" {
				return url
			}
			if k == "TASKMASTER_LOG_FORMAT" && getenv(k) == "" {
				return "console"
			}
			return getenv(k)
		}
	}
	cfg, err := LoadConfig("dev", args, env, stderr)
	if err != nil {
		return err
	}
	base := "http://" + cfg.HTTP.Addr
	if host, port, err := net.SplitHostPort(cfg.HTTP.Addr); err == nil && (host == "" || host == "0.0.0.0") {
		base = "http://127.0.0.1:" + port
	}
	fmt.Fprintf(stdout, "\nTaskmaster is starting on %s\n", base)
	if server != nil {
		fmt.Fprintf(stdout, "Database: %s (data in %s)\n", server.URL(DevDatabase), server.DataDir())
	}
	fmt.Fprintf(stdout, "Try:\n  curl -s -X POST %s/tasks/v1 -H 'Content-Type: application/json' -d '{\"queue\":\"emails\",\"payload\":{\"to\":\"a@example.com\"}}'\n", base)
	fmt.Fprintf(stdout, "  curl -s %s/queues/v1\nPress Ctrl-C to stop.\n\n", base)
	return serve(ctx, cfg)
}

func startDevDatabase(ctx context.Context, stderr io.Writer) (*localpg.Server, error) {
	if _, err := localpg.EnsureBinaries(ctx, stderr); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(".data/postgres")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		return nil, fmt.Errorf("create .data: %w", err)
	}
	fmt.Fprintf(stderr, "starting local PostgreSQL in %s ...\n", dir)
	srv, err := localpg.Start(ctx, localpg.Config{DataDir: dir, Port: 0})
	if err != nil {
		return nil, fmt.Errorf("start local postgres: %w", err)
	}
	if err := createDatabase(ctx, srv.URL("postgres"), DevDatabase); err != nil {
		_ = srv.Stop()
		return nil, err
	}
	return srv, nil
}

func createDatabase(ctx context.Context, adminURL, name string) error {
	db, err := sqlx.Open("postgres", adminURL)
	if err != nil {
		return err
	}
	defer db.Close()
	var exists bool
	if err := db.GetContext(ctx, &exists, `SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)`, name); err != nil {
		return fmt.Errorf("check database: %w", err)
	}
	if exists {
		return nil
	}
	if _, err := db.ExecContext(ctx, `CREATE DATABASE `+name); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}
