package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq" // postgres driver

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
// process, unless opts.URL targets a running server.
func startEnvironment(ctx context.Context, opts Options, log io.Writer) (*environment, error) {
	if opts.URL != "" {
		env := &environment{api: newAPI(strings.TrimRight(opts.URL, "/"), opts.Workers+opts.Producers), stop: func() {}}
		if opts.DatabaseURL != "" {
			db, err := sqlx.Open("postgres", opts.DatabaseURL)
			if err != nil {
				return nil, err
			}
			env.db = db
			env.stop = func() { _ = db.Close() }
		}
		return env, nil
	}
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
	cleanup := func() {
		_ = pg.Stop()
		_ = os.RemoveAll(dir)
	}
	admin, err := sqlx.Open("postgres", pg.URL("postgres"))
	if err == nil {
		_, err = admin.ExecContext(ctx, "CREATE DATABASE "+benchDatabase)
		_ = admin.Close()
	}
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("create database: %w", err)
	}
	dbURL := pg.URL(benchDatabase)
	port, err := freePort()
	if err != nil {
		cleanup()
		return nil, err
	}
	self, err := serverBinary(opts)
	if err != nil {
		cleanup()
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(self, "serve")
	cmd.Env = append(os.Environ(),
		"TASKMASTER_DATABASE_URL="+dbURL,
		"TASKMASTER_HTTP_ADDR="+addr,
		"TASKMASTER_LOG_LEVEL=warn",
	)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		cleanup()
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
		postmasterPID: postmasterPID(pg.DataDir())}
	db, err := sqlx.Open("postgres", dbURL)
	if err != nil {
		stopServer()
		cleanup()
		return nil, err
	}
	env.db = db
	env.stop = func() {
		stopServer()
		_ = db.Close()
		cleanup()
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
	fmt.Fprintf(log, "server pid %d on http://%s\n", env.serverPID, addr)
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

// monitor samples the server process (CPU, RSS) and the projection lag
// while a scenario runs.
type monitor struct {
	env *environment

	mu      sync.Mutex
	last    sample
	peakRSS int64
	maxLag  time.Duration
	groups  int
	stop    chan struct{}
	done    chan struct{}
}

func newMonitor(env *environment) *monitor {
	m := &monitor{env: env, stop: make(chan struct{}), done: make(chan struct{})}
	m.read()
	go m.loop()
	return m
}

func (m *monitor) loop() {
	defer close(m.done)
	t := time.NewTicker(500 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			m.read()
			return
		case <-t.C:
			m.read()
		}
	}
}

func (m *monitor) read() {
	s := sample{}
	if m.env.serverPID != 0 {
		s.cpuSeconds, _ = processCPU(m.env.serverPID)
		s.rssBytes, s.peakRSS, _ = processRSS(m.env.serverPID)
	}
	var groups int
	if m.env.db != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		s.lag, groups = projectionLag(ctx, m.env.db)
		cancel()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.last = s
	if s.rssBytes > m.peakRSS {
		m.peakRSS = s.rssBytes
	}
	if s.lag > m.maxLag {
		m.maxLag = s.lag
	}
	if groups > m.groups {
		m.groups = groups
	}
}

// finish stops sampling and returns the last sample, the peak RSS, the
// largest lag seen and how many consumer groups were seen.
func (m *monitor) finish() (sample, int64, time.Duration, int) {
	close(m.stop)
	<-m.done
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last, m.peakRSS, m.maxLag, m.groups
}

func (m *monitor) current() sample {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.last
}

// projectionLag is the age of the oldest outbox event some consumer group
// has not consumed yet (0 when all are caught up), and the number of groups.
func projectionLag(ctx context.Context, db *sqlx.DB) (time.Duration, int) {
	var row struct {
		Lag    float64 `db:"lag"`
		Groups int     `db:"groups"`
	}
	err := db.GetContext(ctx, &row, `
		SELECT coalesce(max(lag), 0) AS lag, count(*) AS groups FROM (
			SELECT coalesce((
				SELECT extract(epoch FROM clock_timestamp()::timestamp - e.created_at)
				FROM watermill_taskmaster_events e
				WHERE (e.transaction_id, e."offset") > (o.last_processed_transaction_id, coalesce(o.offset_acked, 0))
				ORDER BY e.transaction_id, e."offset"
				LIMIT 1), 0) AS lag
			FROM watermill_offsets_taskmaster_events o) x`)
	if err != nil {
		return 0, 0
	}
	return time.Duration(row.Lag * float64(time.Second)), row.Groups
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

func dbSize(ctx context.Context, db *sqlx.DB) int64 {
	if db == nil {
		return 0
	}
	var n int64
	_ = db.GetContext(ctx, &n, `SELECT pg_database_size(current_database())`)
	return n
}
