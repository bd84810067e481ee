package localpg_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
)

func TestStartPersistsDataAcrossRestarts(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()

	srv := start(t, localpg.Config{DataDir: dir, Fast: true})
	db := open(t, srv.URL("postgres"))
	_, err := db.Exec(`CREATE TABLE persisted (id int); INSERT INTO persisted VALUES (42)`)
	require.NoError(t, err)
	require.NoError(t, db.Close())
	require.NoError(t, srv.Stop())
	require.NoError(t, srv.Stop(), "a second Stop is a no-op")

	srv = start(t, localpg.Config{DataDir: dir, Fast: true})
	var id int
	require.NoError(t, open(t, srv.URL("postgres")).Get(&id, `SELECT id FROM persisted`))
	require.Equal(t, 42, id)
}

// A restart (Stop, then StartAgain) keeps the port and the data: a pool
// opened before it works after it.
func TestStartAgainRestartsOnTheSamePortAndData(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Config{DataDir: t.TempDir(), Fast: true})
	db := open(t, srv.URL("postgres"))
	_, err := db.Exec(`CREATE TABLE persisted (id int); INSERT INTO persisted VALUES (7)`)
	require.NoError(t, err)
	_, err = srv.StartAgain(context.Background())
	require.ErrorContains(t, err, "Stop it first")

	require.NoError(t, srv.Stop())
	var id int
	require.Error(t, db.Get(&id, `SELECT id FROM persisted`), "the server is down")
	again, err := srv.StartAgain(context.Background())
	require.NoError(t, err)
	t.Cleanup(func() { _ = again.Stop() })
	require.Equal(t, srv.Port(), again.Port())
	require.Equal(t, srv.URL("postgres"), again.URL("postgres"))
	require.Eventually(t, func() bool { return db.Get(&id, `SELECT id FROM persisted`) == nil }, 10*time.Second, 10*time.Millisecond,
		"the old pool reconnects")
	require.Equal(t, 7, id)
}

func TestStartTwoServersGetDifferentPorts(t *testing.T) {
	t.Parallel()
	a := start(t, localpg.Config{DataDir: t.TempDir(), Fast: true})
	b := start(t, localpg.Config{DataDir: t.TempDir(), Fast: true})
	require.NotEqual(t, a.Port(), b.Port())
	for _, srv := range []*localpg.Server{a, b} {
		var dir string
		require.NoError(t, open(t, srv.URL("postgres")).Get(&dir, `SHOW data_directory`))
		require.Equal(t, srv.DataDir(), dir, "each URL reaches its own server")
	}
}

func TestStartRefusesDataDirOfLiveServer(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start(t, localpg.Config{DataDir: dir, Fast: true})

	_, err := localpg.Start(context.Background(), localpg.Config{DataDir: dir, Fast: true})
	require.ErrorContains(t, err, "in use by a running PostgreSQL server")
}

func TestStartReplacesStalePidFile(t *testing.T) {
	t.Parallel()
	exited := exec.Command("true")
	require.NoError(t, exited.Run())
	// A live process that is neither a postmaster nor the new postmaster's parent, run by the
	// server's user: PostgreSQL itself ignores a lock file naming its parent, or a process it
	// may not signal.
	unrelated := exec.Command("sleep", "600")
	unrelated.SysProcAttr = asServerUser(t)
	require.NoError(t, unrelated.Start())
	t.Cleanup(func() {
		require.NoError(t, unrelated.Process.Kill())
		_ = unrelated.Wait() // "signal: killed"
	})

	for name, pid := range map[string]int{
		"dead process":                       exited.Process.Pid,
		"pid reused by an unrelated process": unrelated.Process.Pid,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			srv := start(t, localpg.Config{DataDir: dir, Fast: true})
			pidFile := filepath.Join(dir, "postmaster.pid")
			content, err := os.ReadFile(pidFile)
			require.NoError(t, err)
			require.NoError(t, srv.Stop())

			// What a crash leaves behind: the lock file of a postmaster that no longer runs here.
			_, rest, _ := strings.Cut(string(content), "\n")
			require.NoError(t, os.WriteFile(pidFile, []byte(fmt.Sprintf("%d\n%s", pid, rest)), 0o600))

			srv = start(t, localpg.Config{DataDir: dir, Fast: true})
			var one int
			require.NoError(t, open(t, srv.URL("postgres")).Get(&one, `SELECT 1`))
		})
	}
}

func TestStartReportsLogTailWhenServerExits(t *testing.T) {
	t.Parallel()
	for name, log := range map[string]*bytes.Buffer{"Config.Log": new(bytes.Buffer), "default log file": nil} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := localpg.Config{
				DataDir:       t.TempDir(),
				Fast:          true,
				ExtraSettings: map[string]string{"max_connections": "lots"},
			}
			if log != nil {
				cfg.Log = log
			}
			_, err := localpg.Start(context.Background(), cfg)
			require.ErrorContains(t, err, `invalid value for parameter "max_connections"`)
			if log != nil {
				require.Contains(t, log.String(), "max_connections", "the server's output also reaches Config.Log")
			}
		})
	}
}

func TestStartWritesDefaultLogFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	srv := start(t, localpg.Config{DataDir: dir, Fast: true})
	require.NoError(t, srv.Stop())

	log, err := os.ReadFile(filepath.Join(dir, "logfile"))
	require.NoError(t, err)
	require.Contains(t, string(log), "database system is shut down")
}

func TestServerURL(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Config{DataDir: t.TempDir(), Fast: true})
	require.Equal(t, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/app?sslmode=disable", srv.Port()), srv.URL("app"))
}

// A standby streams from its primary, and after the primary is killed
// (SIGKILL of every process, as a crash) and the standby promoted, the
// standby accepts writes and keeps what was replicated to it.
func TestStandbyFollowsItsPrimaryAndIsPromoted(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	primary, err := localpg.Start(ctx, localpg.Config{DataDir: t.TempDir(), Fast: true,
		// Every commit waits for the standby: what a client was told is
		// committed is on both.
		ExtraSettings: map[string]string{"synchronous_standby_names": "replica1", "synchronous_commit": "on"}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() }) // killed below
	standby, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(t.TempDir(), "standby"), Fast: true,
		Primary: primary, StandbyName: "replica1"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	pdb, sdb := open(t, primary.URL("postgres")), open(t, standby.URL("postgres"))
	var inRecovery bool
	require.NoError(t, sdb.Get(&inRecovery, `SELECT pg_is_in_recovery()`))
	require.True(t, inRecovery, "a hot standby")
	require.Eventually(t, func() bool {
		var syncState string
		return pdb.Get(&syncState, `SELECT sync_state FROM pg_stat_replication WHERE application_name = 'replica1'`) == nil &&
			syncState == "sync"
	}, 30*time.Second, 10*time.Millisecond, "the primary waits for this standby once it has caught up")
	_, err = pdb.Exec(`CREATE TABLE kept (id int); INSERT INTO kept VALUES (1)`)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var n int
		return sdb.Get(&n, `SELECT count(*) FROM kept`) == nil && n == 1
	}, 30*time.Second, 10*time.Millisecond, "replicated")
	_, err = sdb.Exec(`INSERT INTO kept VALUES (2)`)
	require.ErrorContains(t, err, "read-only transaction")

	held, err := pdb.Conn(ctx)
	require.NoError(t, err)
	require.NoError(t, primary.Kill())
	require.NoError(t, primary.Kill(), "a second Kill is a no-op")
	require.Error(t, held.PingContext(ctx), "no backend of the killed server answers on a connection it held")
	_ = held.Close()
	require.Error(t, pdb.Ping(), "the primary is gone")
	require.ErrorContains(t, primary.Stop(), "had already exited")

	require.NoError(t, standby.Promote(ctx))
	require.NoError(t, sdb.Get(&inRecovery, `SELECT pg_is_in_recovery()`))
	require.False(t, inRecovery, "promoted")
	_, err = sdb.Exec(`INSERT INTO kept VALUES (2)`)
	require.NoError(t, err)
	var n int
	require.NoError(t, sdb.Get(&n, `SELECT count(*) FROM kept`))
	require.Equal(t, 2, n)
}

// Through PgBouncer in transaction pooling, two client connections share
// one server connection: each holds it only for a transaction.
func TestPgBouncerPoolsTransactions(t *testing.T) {
	t.Parallel()
	srv := start(t, localpg.Config{DataDir: t.TempDir(), Fast: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := localpg.StartPgBouncer(ctx, localpg.BouncerConfig{Dir: t.TempDir(), ServerPort: srv.Port(), PoolSize: 1})
	require.NoError(t, err)
	t.Cleanup(b.Stop)
	db := open(t, b.URL("postgres"))
	a, err := db.Conn(ctx)
	require.NoError(t, err)
	defer a.Close()
	c, err := db.Conn(ctx)
	require.NoError(t, err)
	defer c.Close()
	var pidA, pidC int
	require.NoError(t, a.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pidA))
	require.NoError(t, c.QueryRowContext(ctx, `SELECT pg_backend_pid()`).Scan(&pidC), "a second client while the first stays connected")
	require.Equal(t, pidA, pidC, "one server connection serves both")
	b.Stop()
	b.Stop()
	require.Error(t, c.PingContext(ctx), "stopped")
}

func TestFindBinaries(t *testing.T) {
	t.Parallel()
	dir, err := localpg.FindBinaries()
	require.NoError(t, err)
	for _, name := range []string{"initdb", "postgres"} {
		require.FileExists(t, filepath.Join(dir, name))
	}
}

// asServerUser returns process attributes that run a command as the user localpg runs the
// server as: the current user, or "postgres" for root.
func asServerUser(t *testing.T) *syscall.SysProcAttr {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup(localpg.Superuser)
	require.NoError(t, err)
	uid, err := strconv.Atoi(u.Uid)
	require.NoError(t, err)
	gid, err := strconv.Atoi(u.Gid)
	require.NoError(t, err)
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
}

// start starts a server and stops it when the test ends.
func start(t *testing.T, cfg localpg.Config) *localpg.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	srv, err := localpg.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, srv.Stop()) })
	return srv
}

// open connects to url and closes the connection when the test ends.
func open(t *testing.T, url string) *sqlx.DB {
	t.Helper()
	db, err := sqlx.Connect("postgres", url)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}
