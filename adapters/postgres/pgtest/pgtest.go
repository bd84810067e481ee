// Package pgtest is the test harness of every storage test: each test gets its own freshly
// migrated PostgreSQL database, cloned in milliseconds from a template database that is
// migrated once per test process.
//
// A package that uses it calls Main from its TestMain:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
// and its tests call NewDB (or NewDatabase for a URL). Unless URLEnv names a server, the first
// test that needs a database starts a throwaway, non-durable server (package localpg) that
// Main stops when the tests are done.
package pgtest

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
)

// URLEnv names the environment variable that points the harness at an existing server instead
// of starting one: a URL such as postgres://user:pass@host:5432/postgres?sslmode=disable whose
// user may CREATE DATABASE. The harness creates and drops only databases named tm_<pid>_...,
// so several test processes can share the server.
const URLEnv = "TASKMASTER_TEST_DATABASE_URL"

const (
	setUpTimeout = 2 * time.Minute
	opTimeout    = time.Minute
)

// harness is the per-process state: the server, an admin connection and the template.
type harness struct {
	base     *url.URL        // the admin URL; other databases swap its path
	srv      *localpg.Server // nil when URLEnv names the server
	dir      string          // the throwaway server's directory
	admin    *sql.DB
	prefix   string // tm_<pid>_<random>: this process's database names start with it
	template string

	bouncerOnce sync.Once
	bouncer     atomic.Pointer[localpg.Bouncer] // started by BouncerURL
	bouncerErr  error
}

var (
	mainCalled atomic.Bool
	counter    atomic.Int64

	setUpOnce sync.Once
	current   *harness
	setUpErr  error

	shutdownOnce sync.Once
	shutdownErr  error
)

// Main is used from TestMain: func TestMain(m *testing.M) { pgtest.Main(m) }.
// Unless URLEnv is set, the first test that asks for a database starts a throwaway server in
// a temporary directory; Main runs the tests, then drops the template, stops the server,
// removes its directory, and exits with m.Run's code (1 if the tests passed but the server
// could not be stopped). An interrupt (SIGINT, SIGTERM) also stops the server before exiting.
func Main(m *testing.M) {
	mainCalled.Store(true)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		select {
		case sig := <-sigs:
			fmt.Fprintf(os.Stderr, "pgtest: %v: stopping the test server\n", sig)
			if err := shutdown(); err != nil {
				fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
			}
			os.Exit(1)
		case <-done:
		}
	}()

	code := m.Run()
	signal.Stop(sigs)
	close(done)
	wg.Wait()
	if err := shutdown(); err != nil {
		fmt.Fprintf(os.Stderr, "pgtest: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// NewDatabase returns the URL of a fresh database for this test, cloned (CREATE DATABASE x
// TEMPLATE tpl) from a template database that was created and migrated once per test process.
// The database is dropped (WITH (FORCE)) when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	h := mustHarness(t)
	return h.createDatabase(t, h.template)
}

// NewEmptyDatabase returns the URL of a fresh database without any migration applied (a copy
// of template0), dropped when the test ends. Tests of the migrations use it.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	return mustHarness(t).createDatabase(t, "template0")
}

// NewDB is NewDatabase plus an open *sqlx.DB (driver "postgres"), closed when the test ends.
// Its connections keep prepared statements as the service's do
// (postgres.NewCachingConnector), so every storage test runs them that way.
func NewDB(t testing.TB) *sqlx.DB {
	t.Helper()
	connector, err := pq.NewConnector(NewDatabase(t))
	require.NoError(t, err, "pgtest: connector")
	db := sqlx.NewDb(sql.OpenDB(postgres.NewCachingConnector(connector, 0)), "postgres")
	require.NoError(t, db.Ping(), "pgtest: connect")
	t.Cleanup(func() { require.NoError(t, db.Close(), "pgtest: close") })
	return db
}

// BouncerURL returns the URL of the same database as databaseURL (one of the harness's), reached
// through a PgBouncer in transaction pooling in front of the harness's server: the first call
// starts it (Debian's pgbouncer), Main stops it. Only with the harness's own server (not
// URLEnv).
func BouncerURL(t testing.TB, databaseURL string) string {
	t.Helper()
	h := mustHarness(t)
	require.NotNil(t, h.srv, "pgtest: a PgBouncer needs the harness's own server, not %s", URLEnv)
	h.bouncerOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setUpTimeout)
		defer cancel()
		var b *localpg.Bouncer
		b, h.bouncerErr = localpg.StartPgBouncer(ctx, localpg.BouncerConfig{
			Dir: filepath.Join(h.dir, "pgbouncer"), ServerPort: h.srv.Port(), PoolSize: 10})
		h.bouncer.Store(b)
	})
	require.NoError(t, h.bouncerErr, "pgtest: start pgbouncer")
	u, err := url.Parse(databaseURL)
	require.NoError(t, err)
	return h.bouncer.Load().URL(strings.TrimPrefix(u.Path, "/"))
}

// ServerURL returns the URL of database on the test server, as the harness's user;
// ServerURL("postgres") is the maintenance database. It starts the server if no test has yet,
// and panics if that fails (or Main was not called), since it has no test to fail.
func ServerURL(database string) string {
	h, err := getHarness()
	if err != nil {
		panic(err.Error())
	}
	return h.url(database)
}

func mustHarness(t testing.TB) *harness {
	t.Helper()
	h, err := getHarness()
	require.NoError(t, err)
	return h
}

// getHarness sets the harness up on first use.
func getHarness() (*harness, error) {
	if !mainCalled.Load() {
		return nil, errors.New("pgtest: call pgtest.Main(m) from TestMain in this test package")
	}
	setUpOnce.Do(func() { current, setUpErr = setUp() })
	return current, setUpErr
}

func setUp() (*harness, error) {
	ctx, cancel := context.WithTimeout(context.Background(), setUpTimeout)
	defer cancel()
	random := make([]byte, 3)
	_, _ = rand.Read(random) // never fails
	h := &harness{prefix: fmt.Sprintf("tm_%d_%s", os.Getpid(), hex.EncodeToString(random))}
	h.template = h.prefix + "_template"

	if raw := os.Getenv(URLEnv); raw != "" {
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
			return nil, fmt.Errorf("pgtest: %s must be a postgres:// URL, got %q", URLEnv, raw)
		}
		h.base = u
	} else {
		dir, err := os.MkdirTemp("", "taskmaster-pgtest-*")
		if err != nil {
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		srv, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(dir, "data"), Fast: true})
		if err != nil {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		h.srv, h.dir = srv, dir
		if h.base, err = url.Parse(srv.URL("postgres")); err != nil {
			_ = h.close(context.Background())
			return nil, fmt.Errorf("pgtest: %w", err)
		}
	}
	if err := h.setUpTemplate(ctx); err != nil {
		_ = h.close(context.Background())
		return nil, fmt.Errorf("pgtest: %w", err)
	}
	return h, nil
}

// setUpTemplate creates the template database, migrates it, closes every connection to it
// (CREATE DATABASE ... TEMPLATE refuses a template that has sessions) and forbids new ones.
func (h *harness) setUpTemplate(ctx context.Context) error {
	admin, err := sql.Open("postgres", h.base.String())
	if err != nil {
		return fmt.Errorf("open admin connection: %w", err)
	}
	h.admin = admin
	tpl := pq.QuoteIdentifier(h.template)
	if _, err := h.admin.ExecContext(ctx, "CREATE DATABASE "+tpl+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("create template database: %w", err)
	}
	db, err := sqlx.Open("postgres", h.url(h.template))
	if err != nil {
		return fmt.Errorf("open template database: %w", err)
	}
	err = postgres.Migrate(ctx, db)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("migrate template database: %w", err)
	}
	if _, err := h.admin.ExecContext(ctx, "ALTER DATABASE "+tpl+" ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("lock template database: %w", err)
	}
	return nil
}

// createDatabase creates a database from template and drops it when t ends.
func (h *harness) createDatabase(t testing.TB, template string) string {
	t.Helper()
	name := fmt.Sprintf("%s_%d", h.prefix, counter.Add(1))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	_, err := h.admin.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)+" TEMPLATE "+pq.QuoteIdentifier(template))
	require.NoError(t, err, "pgtest: create database %s", name)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		defer cancel()
		if template == h.template {
			h.checkTaskRules(ctx, t, name)
		}
		if b := h.bouncer.Load(); b != nil {
			require.NoError(t, b.ReleaseDatabase(ctx, name), "pgtest: release the pooler's connections to %s", name)
		}
		require.NoError(t, h.dropDatabase(ctx, name), "pgtest: drop database %s", name)
	})
	return h.url(name)
}

// checkTaskRules fails t if its database (migrated) holds a row that breaks a rule of
// TaskRuleViolations. A database the check cannot reach is left to the test's own verdict.
func (h *harness) checkTaskRules(ctx context.Context, t testing.TB, name string) {
	db, err := sql.Open("postgres", h.url(name))
	if err != nil {
		t.Logf("pgtest: task rules of %s not checked: %v", name, err)
		return
	}
	defer db.Close()
	bad, err := TaskRuleViolations(ctx, db)
	if err != nil {
		t.Logf("pgtest: task rules of %s not checked: %v", name, err)
		return
	}
	for _, line := range bad {
		t.Errorf("pgtest: a statement broke a rule of the tasks tables (migration 0023): %s", line)
	}
}

func (h *harness) dropDatabase(ctx context.Context, name string) error {
	_, err := h.admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)")
	return err
}

// url returns the URL of database on the harness's server.
func (h *harness) url(database string) string {
	u := *h.base
	u.Path, u.RawPath = "/"+database, ""
	return u.String()
}

// shutdown tears the harness down once; it waits for a set-up in progress and prevents a later one.
func shutdown() error {
	shutdownOnce.Do(func() {
		setUpOnce.Do(func() { setUpErr = errors.New("pgtest: the harness has shut down") })
		if current != nil {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
			defer cancel()
			shutdownErr = current.close(ctx)
		}
	})
	return shutdownErr
}

// close drops the template, closes the admin connection, stops the server and removes its
// directory, as far as each was set up.
func (h *harness) close(ctx context.Context) error {
	var errs []error
	if h.admin != nil {
		if h.srv == nil { // a throwaway server goes away as a whole
			if err := h.dropDatabase(ctx, h.template); err != nil {
				errs = append(errs, fmt.Errorf("drop template database: %w", err))
			}
		}
		errs = append(errs, h.admin.Close())
	}
	if b := h.bouncer.Load(); b != nil {
		b.Stop()
	}
	if h.srv != nil {
		if err := h.srv.Stop(); err != nil {
			errs = append(errs, err)
		} else if err := os.RemoveAll(h.dir); err != nil {
			errs = append(errs, fmt.Errorf("remove server directory: %w", err))
		}
	}
	return errors.Join(errs...)
}
