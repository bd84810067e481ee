package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
)

// environment is the system under test: a server (started here or
// reached by URL) and, when known, its database.
type environment struct {
	api       *api
	db        *sqlx.DB // nil when only --url is known
	serverPID int      // 0 when the server is not ours
	stop      func()

	// postmasterPID is the benchmark's PostgreSQL (0 when not ours).
	postmasterPID int
}

const benchDatabase = "taskmaster"

// startEnvironment starts a durable throwaway PostgreSQL (default
// settings: fsync and synchronous_commit on) and a `taskmaster serve`
// process, unless opts.URL targets a running server. Its stop stops both.
func startEnvironment(ctx context.Context, opts Options, log io.Writer) (*environment, error) {
	if opts.URL != "" {
		env := &environment{api: newAPI(strings.TrimRight(opts.URL, "/"), opts.Workers+opts.Producers), stop: func() {}}
		env.api.key = opts.APIKey
		if opts.DatabaseURL != "" {
			// Either of libpq's forms, several hosts included.
			p, err := postgres.ParseConnString(opts.DatabaseURL)
			if err != nil {
				return nil, fmt.Errorf("--database-url: %w", err)
			}
			db, err := sqlx.Open("postgres", p.String())
			if err != nil {
				return nil, err
			}
			env.db = db
			env.stop = func() { _ = db.Close() }
		}
		return env, nil
	}
	c, err := startCluster(ctx, opts, log)
	if err != nil {
		return nil, err
	}
	bin, err := serverBinary(opts)
	if err != nil {
		c.stop()
		return nil, err
	}
	env, err := startServer(ctx, c, opts, bin, benchDatabase, log)
	if err != nil {
		c.stop()
		return nil, err
	}
	stopServer := env.stop
	env.stop = func() {
		stopServer()
		c.stop()
	}
	return env, nil
}

// cluster is the benchmark's own PostgreSQL: every run of a server gets a
// database of its own on it (startServer), and a peer's benchmark another,
// so that they share one server's settings and state in one sitting.
type cluster struct {
	pg  *localpg.Server
	dir string
	// tcp connects over loopback TCP instead of the data directory's Unix
	// socket (--pg-tcp).
	tcp bool
	// bouncer, with --via pgbouncer, is Debian's PgBouncer in transaction
	// pooling in front of pg: the servers' connections go through it, their
	// LISTEN direct.
	bouncer *localpg.Bouncer
}

// startCluster starts a durable throwaway PostgreSQL (default settings:
// fsync and synchronous_commit on) with the benchmark's settings.
func startCluster(ctx context.Context, opts Options, log io.Writer) (*cluster, error) {
	if _, err := localpg.EnsureBinaries(ctx, log); err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "taskmaster-bench-")
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(log, "starting PostgreSQL (durable defaults) in %s ...\n", dir)
	pg, err := localpg.Start(ctx, localpg.Config{
		DataDir:       filepath.Join(dir, "pg"),
		ExtraSettings: serverSettings(opts),
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	c := &cluster{pg: pg, dir: dir, tcp: opts.PGTCP}
	if !c.tcp && !c.hasSocket() {
		fmt.Fprintf(log, "no Unix socket in %s: connecting over TCP\n", pg.DataDir())
		c.tcp = true
	}
	if len(opts.Via) > 0 && opts.Via[0] == ViaPgBouncer {
		// As many server connections as the server's own pool has by
		// default.
		fmt.Fprintf(log, "starting PgBouncer (transaction pooling) in front of it ...\n")
		if c.bouncer, err = localpg.StartPgBouncer(ctx, localpg.BouncerConfig{Dir: filepath.Join(dir, "pgbouncer"), ServerPort: pg.Port(), PoolSize: 20}); err != nil {
			c.stop()
			return nil, err
		}
	}
	return c, nil
}

// serveEnv is the environment of a server of database on c: its database
// URL, and through PgBouncer the direct one for its LISTEN and
// transaction pooling on.
func (c *cluster) serveEnv(database string) []string {
	if c.bouncer == nil {
		return []string{"TASKMASTER_DATABASE_URL=" + c.url(database)}
	}
	return []string{"TASKMASTER_DATABASE_URL=" + c.bouncer.URL(database),
		"TASKMASTER_LISTEN_DATABASE_URL=" + c.url(database), "TASKMASTER_DB_TRANSACTION_POOLING=on"}
}

// hasSocket reports whether the cluster listens on a Unix socket in its
// data directory (localpg puts one there when the path is short enough).
func (c *cluster) hasSocket() bool {
	_, err := os.Stat(filepath.Join(c.pg.DataDir(), fmt.Sprintf(".s.PGSQL.%d", c.pg.Port())))
	return err == nil
}

// url is the connection URL of database on the cluster: by the Unix socket
// in its data directory, or over loopback TCP with --pg-tcp.
func (c *cluster) url(database string) string {
	if c.tcp {
		return c.pg.URL(database)
	}
	q := url.Values{"host": {c.pg.DataDir()}, "port": {strconv.Itoa(c.pg.Port())}, "sslmode": {"disable"}}
	return fmt.Sprintf("postgres://%s@/%s?%s", localpg.Superuser, url.PathEscape(database), q.Encode())
}

// postmasterPID is the cluster's postmaster.
func (c *cluster) postmasterPID() int { return postmasterPID(c.pg.DataDir()) }

// createDatabase makes an empty database name, dropping one left over.
func (c *cluster) createDatabase(ctx context.Context, name string) error {
	admin, err := sqlx.Open("postgres", c.url("postgres"))
	if err != nil {
		return err
	}
	defer admin.Close()
	if _, err := admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop database %s: %w", name, err)
	}
	if _, err := admin.ExecContext(ctx, "CREATE DATABASE "+pq.QuoteIdentifier(name)); err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// dropDatabase drops database name (a run's, once it is over: its disk goes
// back before the next run).
func (c *cluster) dropDatabase(ctx context.Context, name string) {
	if c.bouncer != nil {
		// Its server connections first (localpg.Bouncer.ReleaseDatabase).
		_ = c.bouncer.ReleaseDatabase(ctx, name)
	}
	admin, err := sqlx.Open("postgres", c.url("postgres"))
	if err != nil {
		return
	}
	defer admin.Close()
	_, _ = admin.ExecContext(ctx, "DROP DATABASE IF EXISTS "+pq.QuoteIdentifier(name)+" WITH (FORCE)")
}

func (c *cluster) stop() {
	if c.bouncer != nil {
		c.bouncer.Stop()
	}
	_ = c.pg.Stop()
	_ = os.RemoveAll(c.dir)
}

// startServer creates database on c and starts bin's `serve` on it. Its
// stop stops the server and closes the environment's connections; the
// database stays.
func startServer(ctx context.Context, c *cluster, opts Options, bin, database string, log io.Writer) (*environment, error) {
	if err := c.createDatabase(ctx, database); err != nil {
		return nil, err
	}
	dbURL := c.url(database)
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	key, authEnv, err := benchKey(ctx, bin, dbURL, opts.Auth)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(append(append(os.Environ(), c.serveEnv(database)...),
		"TASKMASTER_HTTP_ADDR="+addr,
		"TASKMASTER_LOG_LEVEL=warn",
	), authEnv...)
	if slices.Contains(opts.Scenarios, "push") {
		// The push scenario's endpoint; other scenarios run without push
		// delivery (no dispatcher at all).
		cmd.Env = append(cmd.Env, "TASKMASTER_PUSH_ALLOWED_HOSTS="+pushEndpointHost)
	}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stopServer := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	env := &environment{api: newAPI("http://"+addr, opts.Workers+opts.Producers), serverPID: cmd.Process.Pid,
		postmasterPID: c.postmasterPID()}
	env.api.key = key
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		stopServer()
		return nil, err
	}
	env.db = db
	env.stop = func() {
		stopServer()
		_ = db.Close()
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := env.api.get(ctx, "/readyz"); err == nil {
			break
		}
		select {
		case <-exited:
			env.stop()
			return nil, errors.New("the server exited during start-up (see its log above)")
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			env.stop()
			return nil, errors.New("the server did not become ready within 60 s")
		}
	}
	fmt.Fprintf(log, "server %s (pid %d) on http://%s, database %s\n", bin, env.serverPID, addr, database)
	return env, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// sample is one reading of the server process and the projections.
type sample struct {
	cpuSeconds float64
	rssBytes   int64
	peakRSS    int64
	lag        time.Duration
}

// lagSampleInterval is how often the monitor reads the projection lag: often
// enough that its percentiles describe a run of a few seconds.
const lagSampleInterval = 100 * time.Millisecond

// monitor samples the server process (CPU, RSS, every 500 ms) and the
// projection lag (every lagSampleInterval) while a scenario runs.
type monitor struct {
	env *environment

	mu      sync.Mutex
	last    sample
	peakRSS int64
	lags    recorder
	groups  int
	stop    chan struct{}
	done    chan struct{}
}

func newMonitor(env *environment) *monitor {
	m := &monitor{env: env, stop: make(chan struct{}), done: make(chan struct{})}
	m.readProcess()
	m.readLag()
	go m.loop()
	return m
}

func (m *monitor) loop() {
	defer close(m.done)
	proc := time.NewTicker(500 * time.Millisecond)
	defer proc.Stop()
	lag := time.NewTicker(lagSampleInterval)
	defer lag.Stop()
	for {
		select {
		case <-m.stop:
			m.readProcess()
			m.readLag()
			return
		case <-proc.C:
			m.readProcess()
		case <-lag.C:
			m.readLag()
		}
	}
}

func (m *monitor) readProcess() {
	if m.env.serverPID == 0 {
		return
	}
	cpu, _ := processCPU(m.env.serverPID)
	rss, peak, _ := processRSS(m.env.serverPID)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last.cpuSeconds, m.last.rssBytes, m.last.peakRSS = cpu, rss, peak
	m.peakRSS = max(m.peakRSS, rss)
}

func (m *monitor) readLag() {
	if m.env.db == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	lag, groups, err := projectionLag(ctx, m.env.db)
	cancel()
	if err != nil {
		return
	}
	m.lags.add(lag)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last.lag = lag
	m.groups = max(m.groups, groups)
}

// finish stops sampling and returns the last sample, the peak RSS, the
// percentiles of the lag samples and how many consumer groups were seen.
func (m *monitor) finish() (sample, int64, Percentiles, int) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.peakRSS, m.lags.percentiles(), m.groups
}

func (m *monitor) current() sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// projectionLagSQL is, per consumer group, the age of the first outbox
// message after its position (0 when it is caught up); it returns the
// largest and the number of groups. created_at may be timestamptz or (before
// migration 0006) a timestamp in the session's zone: both subtract right from
// clock_timestamp().
const projectionLagSQL = `
SELECT coalesce(max(lag), 0) AS lag, count(*) AS groups FROM (
	SELECT coalesce((
		SELECT extract(epoch FROM clock_timestamp() - e.created_at)
		FROM watermill_taskmaster_events e
		WHERE (e.transaction_id, e."offset") > (o.last_processed_transaction_id, coalesce(o.offset_acked, 0))
		ORDER BY e.transaction_id, e."offset"
		LIMIT 1), 0) AS lag
	FROM watermill_offsets_taskmaster_events o) x`

// projectionLag is the age of the oldest outbox event some consumer group
// has not consumed yet (0 when all are caught up), and the number of groups.
func projectionLag(ctx context.Context, db *sqlx.DB) (time.Duration, int, error) {
	var row struct {
		Lag    float64 `db:"lag"`
		Groups int     `db:"groups"`
	}
	if err := db.GetContext(ctx, &row, projectionLagSQL); err != nil {
		return 0, 0, err
	}
	return time.Duration(max(row.Lag, 0) * float64(time.Second)), row.Groups, nil
}

// processCPU is the user+system CPU seconds of pid (from /proc).
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces; fields start after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	const clockTicks = 100 // USER_HZ on Linux
	return (utime + stime) / clockTicks, nil
}

// processRSS is the current and peak resident set size of pid.
func processRSS(pid int) (cur, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		parse := func(prefix string) int64 {
			v := strings.TrimSpace(strings.TrimSuffix(strings.TrimPrefix(line, prefix), "kB"))
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n * 1024
		}
		switch {
		case strings.HasPrefix(line, "VmRSS:"):
			cur = parse("VmRSS:")
		case strings.HasPrefix(line, "VmHWM:"):
			peak = parse("VmHWM:")
		}
	}
	return cur, peak, sc.Err()
}

// outboxSize is the number of rows in the outbox and its size on disk with
// its index and TOAST data.
func outboxSize(ctx context.Context, db *sqlx.DB) (rows, bytes int64) {
	if db == nil {
		return 0, 0
	}
	var out struct {
		Rows  int64 `db:"rows"`
		Bytes int64 `db:"bytes"`
	}
	_ = db.GetContext(ctx, &out, `
		SELECT (SELECT count(*) FROM watermill_taskmaster_events) AS rows,
			pg_total_relation_size('watermill_taskmaster_events') AS bytes`)
	return out.Rows, out.Bytes
}

func dbSize(ctx context.Context, db *sqlx.DB) int64 {
	if db == nil {
		return 0
	}
	var n int64
	_ = db.GetContext(ctx, &n, `SELECT pg_database_size(current_database())`)
	return n
}

// benchKey returns the environment of the server for opts.Auth: off, or on
// with rate limits lifted (they would throttle the benchmark, and their own
// cost is a mutex and some arithmetic per request), and then a key with
// the produce, work and read scopes made on the database with `taskmaster
// keys create`, before the server starts.
func benchKey(ctx context.Context, self, dbURL string, auth bool) (key string, env []string, err error) {
	if !auth {
		return "", []string{"TASKMASTER_AUTH=off"}, nil
	}
	env = []string{"TASKMASTER_AUTH=on"}
	for _, scope := range []string{"ADMIN", "PRODUCE", "WORK", "READ"} {
		env = append(env, "TASKMASTER_RATE_LIMIT_"+scope+"=off")
	}
	cmd := exec.CommandContext(ctx, self, "keys", "create", "--name", "bench", "--scope", "produce,work,read", "--json")
	cmd.Env = append(os.Environ(), "TASKMASTER_DATABASE_URL="+dbURL)
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("create the benchmark's API key: %w", err)
	}
	var created struct {
		Key string `json:"key"`
	}
	if err := json.Unmarshal(out, &created); err != nil || created.Key == "" {
		return "", nil, fmt.Errorf("create the benchmark's API key: unexpected output %q", out)
	}
	return created.Key, env, nil
}
