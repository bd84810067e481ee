package ha_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/tests/workload"
)

// AutoFailoverEnv, set to 1, runs TestAutomaticFailoverWithPgAutoFailover:
// it takes about two minutes (pg_auto_failover's default timeouts: a node is
// unhealthy 20 s after its last answer, and the monitor waits 30 s for the
// old primary to demote itself before the new one takes writes), so `make
// test` skips it unless asked; `.ci/run` asks.
const AutoFailoverEnv = "TASKMASTER_TEST_AUTO_FAILOVER"

// pgAutoctl is Debian's pg_auto_failover command (package pg-auto-failover-cli,
// with postgresql-15-auto-failover for the extension).
const pgAutoctl = "/usr/bin/pg_autoctl"

// A real automatic failover: pg_auto_failover (a monitor and two data nodes,
// Debian's packages) runs the cluster, Taskmaster connects with the URL
// `pg_autoctl show uri` prints, and when the primary's machine dies
// (every process of its node killed: the keeper and PostgreSQL) the monitor
// notices and promotes the secondary. The test does not promote anything.
func TestAutomaticFailoverWithPgAutoFailover(t *testing.T) {
	if os.Getenv(AutoFailoverEnv) != "1" {
		t.Skipf("set %s=1 to run it (a minute or two; .ci/run does)", AutoFailoverEnv)
	}
	if _, err := os.Stat(pgAutoctl); err != nil {
		t.Fatalf("%s: %v (install Debian's pg-auto-failover-cli and postgresql-15-auto-failover)", pgAutoctl, err)
	}
	t.Parallel()
	paf := startAutoFailover(t)
	url := paf.uri + "&user=postgres" // the formation's URI names no user
	t.Logf("pg_autoctl show uri: %s", paf.uri)

	// The gap lasts about a minute (pg_auto_failover's timeouts): the
	// workers' dead threshold must outlast it, or the long poll's worker,
	// silent since before the kill, is declared dead once the database is
	// back, and the long poll that follows is refused (409).
	f := start(t, url, "TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=600")
	f.killAndPromote(t, paf.killPrimary, paf.waitForPromotion)
	db := openURL(t, url)
	f.requireResumed(t, db)
	f.finish(t, db, func() bool { return f.stream.Count() >= f.cfg.Tasks() })

	o := workload.Check(t, db, f.cfg, f.l)
	fig := f.l.Figures()
	figures(t, "pg_auto_failover", o, fig)
	t.Logf("pg_auto_failover, with its default timeouts, had node2 take writes %v after the kill",
		f.promotedAt.Sub(f.killedAt).Round(time.Millisecond))
	require.Empty(t, fig.Unexpected, "answers that are neither success nor a 503 problem with Retry-After")
	require.Zero(t, fig.Status500)
	require.Positive(t, fig.Refused503)
	require.Empty(t, fig.Vanished)
	o.RequireNothingLost(t, f.cfg)
	var done []string
	require.NoError(t, db.Select(&done, `SELECT id::text FROM tasks WHERE queue = $1`, queue))
	f.stream.RequireEveryCompletionOnce(t, done)
}

// autoFailover is a pg_auto_failover formation: a monitor, node1 (the first
// primary) and node2 (its synchronous secondary), each a `pg_autoctl create
// ... --run` process running as the server's user.
type autoFailover struct {
	t       *testing.T
	dir     string
	env     []string
	monitor string // the monitor's URI
	uri     string // the formation's, both nodes
	mon     *sqlx.DB
	node1   *exec.Cmd
	node2   int // node2's port
}

func startAutoFailover(t *testing.T) *autoFailover {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, localpg.PrepareServerUserDir(dir))
	bin, err := localpg.FindBinaries()
	require.NoError(t, err)
	a := &autoFailover{t: t, dir: dir, env: []string{
		"PATH=" + os.Getenv("PATH"),
		// pg_autoctl keeps its configuration and state under these.
		"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_DATA_HOME=" + filepath.Join(dir, "data"),
		"XDG_RUNTIME_DIR=" + filepath.Join(dir, "run"), "HOME=" + dir,
	}}
	pgctl := filepath.Join(bin, "pg_ctl")
	monPort, port1, port2 := freePort(t), freePort(t), freePort(t)
	a.node2 = port2

	a.run("monitor", "create", "monitor", "--pgdata", filepath.Join(dir, "monitor"), "--pgport", fmt.Sprint(monPort),
		"--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", pgctl, "--run")
	a.monitor = fmt.Sprintf("postgres://autoctl_node@127.0.0.1:%d/pg_auto_failover?sslmode=disable", monPort)
	workload.WaitUntil(t, "the monitor", func() bool {
		db, err := sqlx.Connect("postgres", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/pg_auto_failover?sslmode=disable", monPort))
		if err != nil {
			return false
		}
		a.mon = db
		return true
	})
	t.Cleanup(func() { _ = a.mon.Close() })
	node := func(name string, port int) *exec.Cmd {
		return a.run(name, "create", "postgres", "--pgdata", filepath.Join(dir, name), "--pgport", fmt.Sprint(port),
			"--listen", "127.0.0.1", "--hostname", "127.0.0.1", "--auth", "trust", "--no-ssl", "--pgctl", pgctl,
			"--monitor", a.monitor, "--dbname", "taskmaster", "--name", name, "--run")
	}
	a.node1 = node("node1", port1)
	a.waitState("node1 a single primary", map[string]string{"node1": "single"})
	node("node2", port2)
	// The secondary's base backup waits for a checkpoint (the next one is
	// up to checkpoint_timeout away): ask node1 for one until it is there.
	primary, err := sqlx.Connect("postgres", fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port1))
	require.NoError(t, err)
	defer primary.Close()
	workload.WaitUntil(t, "node2 a secondary of node1", func() bool {
		_, _ = primary.Exec(`CHECKPOINT`)
		return a.states()["node2"] == "secondary" && a.states()["node1"] == "primary"
	})
	var sync string
	require.NoError(t, primary.Get(&sync, `SHOW synchronous_standby_names`))
	require.NotEmpty(t, sync, "pg_auto_failover made node2 a synchronous standby")

	out, err := a.command("show", "uri", "--pgdata", filepath.Join(dir, "monitor"), "--formation", "default").Output()
	require.NoError(t, err)
	a.uri = strings.TrimSpace(string(out))
	require.Regexp(t, `^postgres://127\.0\.0\.1:\d+,127\.0\.0\.1:\d+/taskmaster\?`, a.uri)
	return a
}

// command is pg_autoctl with args, as the server's user, in the test's
// directories.
func (a *autoFailover) command(args ...string) *exec.Cmd {
	cmd, err := localpg.ServerUserCommand(pgAutoctl, args...)
	require.NoError(a.t, err)
	cmd.Env = a.env
	return cmd
}

// run starts a long-running pg_autoctl (create ... --run), logging to
// name.log, and kills its process tree when the test ends.
func (a *autoFailover) run(name string, args ...string) *exec.Cmd {
	cmd := a.command(args...)
	log, err := os.Create(filepath.Join(a.dir, name+".log"))
	require.NoError(a.t, err)
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(a.t, cmd.Start())
	var once sync.Once
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(done)
	}()
	a.t.Cleanup(func() {
		once.Do(func() {
			_ = localpg.KillProcessTree(cmd.Process.Pid)
			<-done
			_ = log.Close()
			if a.t.Failed() {
				a.t.Logf("%s.log:\n%s", name, tail(filepath.Join(a.dir, name+".log"), 40))
			}
		})
	})
	return cmd
}

// states are the nodes' reported states, from the monitor.
func (a *autoFailover) states() map[string]string {
	var rows []struct {
		Name  string `db:"nodename"`
		State string `db:"reportedstate"`
	}
	if err := a.mon.Select(&rows, `SELECT nodename, reportedstate::text FROM pgautofailover.node`); err != nil {
		return nil
	}
	out := map[string]string{}
	for _, r := range rows {
		out[r.Name] = r.State
	}
	return out
}

// waitState waits until every node named in want reports its state.
func (a *autoFailover) waitState(what string, want map[string]string) {
	workload.WaitUntil(a.t, what, func() bool {
		got := a.states()
		for name, state := range want {
			if got[name] != state {
				return false
			}
		}
		return true
	})
}

// killPrimary kills node1's whole process tree: its keeper and its
// PostgreSQL, as a crash of its machine would.
func (a *autoFailover) killPrimary() error { return localpg.KillProcessTree(a.node1.Process.Pid) }

// waitForPromotion waits until the monitor has promoted node2 and it takes
// writes: until a connection to the formation's URI, which takes only a
// writable primary (target_session_attrs=read-write), reaches node2. It
// decides nothing: pg_auto_failover does.
func (a *autoFailover) waitForPromotion(ctx context.Context) error {
	for {
		if db, err := postgres.Open(ctx, a.uri+"&user=postgres", postgres.PoolConfig{MaxOpen: 1, Conn: postgres.DefaultConnConfig()}); err == nil {
			var port int
			err = db.GetContext(ctx, &port, `SELECT inet_server_port()`)
			_ = db.Close()
			if err == nil && port == a.node2 {
				a.t.Logf("pg_auto_failover states once node2 took writes: %v", a.states())
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("node2 was not promoted: %w; states %v", ctx.Err(), a.states())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// tail returns the last n lines of a file.
func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
