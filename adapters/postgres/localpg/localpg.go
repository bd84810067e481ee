// Package localpg starts and stops a throwaway local PostgreSQL server.
//
// It is the one place that knows how to run PostgreSQL next to the service: `make run` keeps a
// persistent cluster in ./.data, the test harness (adapters/postgres/pgtest) starts a fast,
// non-durable one per test process, and benchmarks do the same. The server listens on
// 127.0.0.1 only and trusts every local connection as the superuser "postgres", so it is meant
// for development and tests, never for production.
//
// PostgreSQL refuses to run as root. When the calling process is root, initdb and the server
// run as the unprivileged operating-system user "postgres": the data directory is chowned to
// that user, and every parent directory of it gets the o+x bit so that user can reach it.
package localpg

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	// Registers the "postgres" database/sql driver used by the readiness check.
	_ "github.com/lib/pq"
)

// Timeouts and limits of Start and Stop.
const (
	// ReadyTimeout bounds how long Start waits for the server to accept connections.
	ReadyTimeout = 30 * time.Second
	// StopTimeout bounds how long Stop waits for a fast shutdown before it escalates to an
	// immediate shutdown and then to SIGKILL.
	StopTimeout = 60 * time.Second
	// DefaultMaxConnections is the max_connections setting unless Config.ExtraSettings overrides it.
	DefaultMaxConnections = 200
	// Superuser is the database superuser of every cluster localpg creates, and the
	// operating-system user the server runs as when the caller is root.
	Superuser = "postgres"
)

const (
	bindAttempts   = 5
	pollInterval   = 50 * time.Millisecond
	logTailBytes   = 8 << 10
	pidFileName    = "postmaster.pid"
	versionFile    = "PG_VERSION"
	defaultLogName = "logfile"
	// maxSocketPath leaves room under the kernel's 108-byte limit for a Unix socket path.
	maxSocketPath = 100
)

// Config for Start.
type Config struct {
	// DataDir is the cluster directory. It is initialised (initdb) when it has no PG_VERSION
	// yet, and reused otherwise. It may exist as long as it is empty.
	DataDir string
	// Port is the TCP port on 127.0.0.1; 0 picks a free one.
	Port int
	// Fast trades durability for speed (fsync, synchronous_commit and full_page_writes off)
	// and initialises DataDir by copying a cached, freshly initdb'd cluster. Tests only: a
	// crash of the machine can corrupt such a cluster.
	Fast bool
	// Log receives the server's output. Nil means the file "logfile" in DataDir.
	Log io.Writer
	// ExtraSettings are passed to the server as -c name=value, after (and so overriding)
	// localpg's own settings, e.g. {"max_connections": "400"}.
	ExtraSettings map[string]string
	// Primary, when set, makes the server a hot standby that streams from that server: an
	// empty DataDir is filled with a base backup of it (pg_basebackup, which also writes
	// standby.signal) instead of initdb, and the server follows it (primary_conninfo) until
	// promoted (Promote).
	Primary *Server
	// StandbyName is the standby's application_name on its primary, the name that the
	// primary's synchronous_standby_names lists to wait for it; default "standby".
	StandbyName string
}

// Server is a running PostgreSQL server started by Start. Stop it with Stop.
type Server struct {
	cfg     Config // as started: DataDir absolute, Port the one bound
	dataDir string
	port    int
	cmd     *exec.Cmd
	tail    fmt.Stringer // the end of the server's output since this start
	logFile *os.File     // opened by Start when Config.Log is nil; closed by Stop

	done    chan struct{} // closed when the postmaster has exited
	waitErr error         // the postmaster's exit status; read only after done is closed

	stopOnce sync.Once
	stopErr  error
}

// Start initialises cfg.DataDir if needed, starts a PostgreSQL server on it and waits until it
// accepts connections. ctx bounds only the start; the server runs until Stop. A live server
// that already owns cfg.DataDir is reported as an error; a stale postmaster.pid left by a
// crashed earlier run is not.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.DataDir == "" {
		return nil, errors.New("start postgres: Config.DataDir is empty")
	}
	if cfg.Port < 0 || cfg.Port > 65535 {
		return nil, fmt.Errorf("start postgres: invalid port %d", cfg.Port)
	}
	binDir, err := FindBinaries()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	dataDir, err := filepath.Abs(cfg.DataDir)
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	owner, err := serverOwner()
	if err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if err := checkNotRunning(dataDir); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	if err := prepareDataDir(ctx, binDir, dataDir, cfg, owner); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}

	logw := cfg.Log
	var logFile *os.File
	if logw == nil {
		logFile, err = os.OpenFile(filepath.Join(dataDir, defaultLogName), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return nil, fmt.Errorf("start postgres: open log: %w", err)
		}
		// The server user reads it too: a base backup of this server copies it.
		if err := owner.chownTree(logFile.Name()); err != nil {
			closeFile(logFile)
			return nil, fmt.Errorf("start postgres: %w", err)
		}
		logw = logFile
	}

	for attempt := 1; ; attempt++ {
		port := cfg.Port
		if port == 0 {
			if port, err = freePort(); err != nil {
				closeFile(logFile)
				return nil, fmt.Errorf("start postgres: %w", err)
			}
		}
		s, err := launch(ctx, launchParams{
			binDir:  binDir,
			dataDir: dataDir,
			port:    port,
			cfg:     cfg,
			log:     logw,
			logFile: logFile,
			owner:   owner,
		})
		if err == nil {
			s.cfg = cfg
			s.cfg.DataDir, s.cfg.Port = dataDir, port
			return s, nil
		}
		// Another process may take the port between freePort and the server's bind.
		if cfg.Port == 0 && attempt < bindAttempts && errors.Is(err, errBind) {
			continue
		}
		closeFile(logFile)
		return nil, fmt.Errorf("start postgres: %w", err)
	}
}

// URL returns the connection URL of database on this server as the superuser.
func (s *Server) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, s.port, url.PathEscape(database))
}

// Port returns the TCP port the server listens on.
func (s *Server) Port() int { return s.port }

// DataDir returns the absolute path of the cluster directory.
func (s *Server) DataDir() string { return s.dataDir }

// Stop shuts the server down (a fast shutdown: open sessions are disconnected, committed work
// is kept) and waits for it to exit. If it has not exited after StopTimeout, Stop escalates to
// an immediate shutdown and then SIGKILL. Stop is idempotent and safe to call concurrently;
// every call returns the first call's result. It reports an error when the server had already
// died on its own or had to be killed.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() { s.stopErr = s.stop() })
	return s.stopErr
}

func (s *Server) stop() error {
	defer closeFile(s.logFile)
	select {
	case <-s.done:
		if s.waitErr != nil {
			return fmt.Errorf("stop postgres: server had already exited (%w); log tail:\n%s", s.waitErr, s.tail.String())
		}
		return nil
	default:
	}
	steps := []struct {
		sig     os.Signal
		timeout time.Duration
	}{
		{syscall.SIGINT, StopTimeout},       // fast shutdown
		{syscall.SIGQUIT, 10 * time.Second}, // immediate shutdown
		{syscall.SIGKILL, 0},
	}
	for i, step := range steps {
		if err := s.cmd.Process.Signal(step.sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stop postgres: signal %v: %w", step.sig, err)
		}
		if step.timeout == 0 {
			<-s.done
		} else {
			timer := time.NewTimer(step.timeout)
			select {
			case <-s.done:
			case <-timer.C:
				continue
			}
			timer.Stop()
		}
		if i > 0 {
			return fmt.Errorf("stop postgres: no clean exit after %v, sent %v; log tail:\n%s", StopTimeout, step.sig, s.tail.String())
		}
		if s.waitErr != nil {
			return fmt.Errorf("stop postgres: %w; log tail:\n%s", s.waitErr, s.tail.String())
		}
		return nil
	}
	return nil // unreachable: the SIGKILL step always waits for exit
}

// StartAgain starts a server on the same data directory and port, with the
// same configuration, after Stop: with Stop it is a restart (a fast shutdown,
// then a start on the same data), which clients see as a database restart.
// Committed data survives it, even with Config.Fast. It returns the new
// server; s stays stopped.
func (s *Server) StartAgain(ctx context.Context) (*Server, error) {
	select {
	case <-s.done:
	default:
		return nil, errors.New("start postgres again: the server still runs; Stop it first")
	}
	return Start(ctx, s.cfg)
}

// Kill ends the server and every one of its processes with SIGKILL, as a crash of its
// machine would (without the loss of what the operating system had not yet written to
// disk): no shutdown checkpoint, no goodbye to clients or standbys, and no backend left to
// answer a query on a connection it held. It waits until the postmaster is gone. Stop
// afterwards reports that it had exited.
func (s *Server) Kill() error {
	select {
	case <-s.done:
		return nil
	default:
	}
	pid := s.cmd.Process.Pid
	// Backends run in sessions of their own: each is killed by its pid.
	if err := KillProcessTree(pid); err != nil {
		return fmt.Errorf("kill postgres: %w", err)
	}
	if err := syscall.Kill(-pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("kill postgres: %w", err)
	}
	<-s.done
	return nil
}

// KillProcessTree kills pid and every process descended from it with SIGKILL, as a crash of
// their machine would. Each is frozen (SIGSTOP) before its children are listed, so that none
// starts another (a postmaster restarting a backend, a supervisor restarting its server) while
// the tree is taken down. Processes already gone are skipped.
func KillProcessTree(pid int) error {
	var all []int
	var freeze func(p int) error
	freeze = func(p int) error {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			if errors.Is(err, syscall.ESRCH) {
				return nil
			}
			return fmt.Errorf("stop process %d: %w", p, err)
		}
		all = append(all, p)
		for _, c := range children(p) {
			if err := freeze(c); err != nil {
				return err
			}
		}
		return nil
	}
	if err := freeze(pid); err != nil {
		return err
	}
	for i := len(all) - 1; i >= 0; i-- {
		if err := syscall.Kill(all[i], syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return fmt.Errorf("kill process %d: %w", all[i], err)
		}
	}
	return nil
}

// ServerUserCommand returns a command that runs as the user localpg runs servers as (the
// unprivileged "postgres" when the caller is root), in a process group of its own, signalled
// (SIGINT) when the calling process dies: for the other PostgreSQL tools a test drives
// (pg_autoctl, pgbouncer).
func ServerUserCommand(name string, args ...string) (*exec.Cmd, error) {
	o, err := serverOwner()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = o.sysProcAttr()
	return cmd, nil
}

// PrepareServerUserDir creates dir if needed and gives it (and what it holds) to the server's
// user, with every parent directory reachable by that user.
func PrepareServerUserDir(dir string) error {
	o, err := serverOwner()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := o.makeReachable(dir); err != nil {
		return err
	}
	return o.chownTree(dir)
}

// Promote makes a standby (Config.Primary) a primary, as a failover manager does
// (`pg_ctl promote`), and waits until it accepts writes.
func (s *Server) Promote(ctx context.Context) error {
	binDir, err := FindBinaries()
	if err != nil {
		return fmt.Errorf("promote postgres: %w", err)
	}
	owner, err := serverOwner()
	if err != nil {
		return fmt.Errorf("promote postgres: %w", err)
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_ctl"), "promote", "-D", s.dataDir, "-w", "-t", strconv.Itoa(int(ReadyTimeout/time.Second)))
	cmd.Dir = "/"
	cmd.SysProcAttr = owner.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("promote postgres: pg_ctl promote: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// FindBinaries returns a directory that holds the initdb and postgres programs: the directory
// of `postgres` on PATH (symlinks resolved) if initdb is beside it, else the newest
// /usr/lib/postgresql/*/bin.
func FindBinaries() (string, error) {
	if p, err := exec.LookPath("postgres"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && hasBinaries(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin") // the pattern is valid
	sort.Slice(dirs, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(dirs[i])), filepath.Base(filepath.Dir(dirs[j])))
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if hasBinaries(dirs[i]) {
			return dirs[i], nil
		}
	}
	return "", errors.New("PostgreSQL server binaries (initdb, postgres) not found on PATH or in /usr/lib/postgresql/*/bin; install them, e.g. apt-get install postgresql")
}

// EnsureBinaries is FindBinaries, but when none are found, the process is root and apt-get
// exists, it first installs the Debian package postgresql (writing apt's output to log, which
// may be nil).
func EnsureBinaries(ctx context.Context, log io.Writer) (string, error) {
	dir, err := FindBinaries()
	if err == nil {
		return dir, nil
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("ensure postgres binaries: %w (not root, so not installing them)", err)
	}
	aptGet, lookErr := exec.LookPath("apt-get")
	if lookErr != nil {
		return "", fmt.Errorf("ensure postgres binaries: %w (no apt-get to install them with)", err)
	}
	if log == nil {
		log = io.Discard
	}
	for _, args := range [][]string{{"update"}, {"install", "-y", "postgresql"}} {
		cmd := exec.CommandContext(ctx, aptGet, args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Run(); err != nil {
			return "", fmt.Errorf("ensure postgres binaries: apt-get %s: %w", strings.Join(args, " "), err)
		}
	}
	dir, err = FindBinaries()
	if err != nil {
		return "", fmt.Errorf("ensure postgres binaries: after apt-get install postgresql: %w", err)
	}
	return dir, nil
}

// errBind marks a start that failed because the port was taken.
var errBind = errors.New("port already in use")

type launchParams struct {
	binDir  string
	dataDir string
	port    int
	cfg     Config
	log     io.Writer
	logFile *os.File
	owner   *owner
}

// launch starts the postmaster on p.port and waits until it serves connections.
func launch(ctx context.Context, p launchParams) (*Server, error) {
	settings := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": "",
		"max_connections":         strconv.Itoa(DefaultMaxConnections),
	}
	// A socket in the data directory lets `psql -h DATADIR` work, where the path is short enough.
	if len(p.dataDir)+len("/.s.PGSQL.65535.lock") <= maxSocketPath {
		settings["unix_socket_directories"] = p.dataDir
	}
	if p.cfg.Fast {
		settings["fsync"] = "off"
		settings["synchronous_commit"] = "off"
		settings["full_page_writes"] = "off"
	}
	if p.cfg.Primary != nil {
		settings["primary_conninfo"] = p.cfg.primaryConninfo()
	}
	for k, v := range p.cfg.ExtraSettings {
		settings[k] = v
	}
	names := make([]string, 0, len(settings))
	for k := range settings {
		names = append(names, k)
	}
	sort.Strings(names)
	args := []string{"-D", p.dataDir, "-p", strconv.Itoa(p.port)}
	for _, k := range names {
		args = append(args, "-c", k+"="+settings[k])
	}

	cmd := exec.Command(filepath.Join(p.binDir, "postgres"), args...)
	cmd.Dir = "/"
	var tail fmt.Stringer
	if p.logFile != nil {
		// The server writes its own log file, so what it logs after we are gone is kept too.
		info, err := p.logFile.Stat()
		if err != nil {
			return nil, fmt.Errorf("stat log: %w", err)
		}
		tail = &fileTail{path: p.logFile.Name(), from: info.Size()}
		cmd.Stdout, cmd.Stderr = p.logFile, p.logFile
	} else {
		buf := &tailBuffer{max: logTailBytes}
		tail = buf
		out := io.MultiWriter(p.log, buf)
		cmd.Stdout, cmd.Stderr = out, out
		// Children of the postmaster inherit the pipe; do not let them hold up Wait forever.
		cmd.WaitDelay = 10 * time.Second
	}
	cmd.SysProcAttr = p.owner.sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run postgres: %w", err)
	}
	s := &Server{
		dataDir: p.dataDir,
		port:    p.port,
		cmd:     cmd,
		tail:    tail,
		logFile: p.logFile,
		done:    make(chan struct{}),
	}
	go func() {
		s.waitErr = cmd.Wait()
		close(s.done)
	}()
	if err := s.waitReady(ctx); err != nil {
		s.logFile = nil // still owned by Start, which may retry with it
		_ = s.Stop()    // the start error says what went wrong
		return nil, err
	}
	return s, nil
}

// waitReady polls the server with a real query until it answers, it exits, ctx ends or
// ReadyTimeout passes.
func (s *Server) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	db, err := sql.Open("postgres", s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("open readiness connection: %w", err)
	}
	defer db.Close()
	db.SetMaxIdleConns(0)

	ticker := time.NewTicker(pollInterval)
	defer ticker.Stop()
	var lastErr error
	for {
		if lastErr = s.ping(ctx, db); lastErr == nil {
			return nil
		}
		select {
		case <-s.done:
			msg := s.tail.String()
			if strings.Contains(msg, "could not bind") || strings.Contains(msg, "could not create any TCP/IP sockets") {
				return fmt.Errorf("%w: postgres could not listen on port %d; log tail:\n%s", errBind, s.port, msg)
			}
			return fmt.Errorf("postgres exited during start (%v); log tail:\n%s", s.waitErr, msg)
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready on port %d: %w (last error: %v); log tail:\n%s", s.port, ctx.Err(), lastErr, s.tail.String())
		case <-ticker.C:
		}
	}
}

// ping runs one query and checks that the server that answered is ours: another process could
// own the port if ours failed to bind it.
func (s *Server) ping(ctx context.Context, db *sql.DB) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var dir string
	if err := db.QueryRowContext(ctx, "SELECT current_setting('data_directory')").Scan(&dir); err != nil {
		return err
	}
	if !sameFile(dir, s.dataDir) {
		return fmt.Errorf("port %d is served by another PostgreSQL (data directory %s)", s.port, dir)
	}
	return nil
}

// prepareDataDir makes dataDir a cluster the server user can run: initialised, owned by that
// user, mode 0700 and reachable.
func prepareDataDir(ctx context.Context, binDir, dataDir string, cfg Config, o *owner) error {
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("create data directory: %w", err)
	}
	if err := o.makeReachable(dataDir); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(dataDir, versionFile)); errors.Is(err, fs.ErrNotExist) {
		entries, err := os.ReadDir(dataDir)
		if err != nil {
			return fmt.Errorf("read data directory: %w", err)
		}
		if len(entries) > 0 {
			return fmt.Errorf("data directory %s has no %s but is not empty; refusing to initialise it", dataDir, versionFile)
		}
		switch {
		case cfg.Primary != nil:
			if err := baseBackup(ctx, binDir, dataDir, cfg.Primary, o); err != nil {
				return err
			}
		case cfg.Fast:
			tpl, err := ensureTemplate(ctx, binDir, o)
			if err != nil {
				return err
			}
			if out, err := exec.CommandContext(ctx, "cp", "-a", tpl+"/.", dataDir).CombinedOutput(); err != nil {
				return fmt.Errorf("copy template cluster: %w: %s", err, bytes.TrimSpace(out))
			}
		default:
			if err := initdb(ctx, binDir, dataDir, false, o); err != nil {
				return err
			}
		}
	} else if err != nil {
		return fmt.Errorf("stat data directory: %w", err)
	}
	// PostgreSQL insists on 0700 (or 0750) for the data directory itself.
	if err := os.Chmod(dataDir, 0o700); err != nil {
		return fmt.Errorf("chmod data directory: %w", err)
	}
	return o.chownTree(dataDir)
}

// initdb creates a cluster in dir, which must be missing or empty.
func initdb(ctx context.Context, binDir, dir string, noSync bool, o *owner) error {
	if err := o.chownTree(dir); err != nil {
		return err
	}
	args := []string{"-D", dir, "-U", Superuser, "--auth=trust", "-E", "UTF8", "--locale=C"}
	if noSync {
		args = append(args, "--no-sync")
	}
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "initdb"), args...)
	cmd.Dir = "/"
	cmd.SysProcAttr = o.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, bytes.TrimSpace(out))
	}
	return nil
}

// baseBackup fills dir, which must be missing or empty, with a base backup of primary taken
// over its replication protocol, with the WAL written meanwhile and standby.signal: started
// on it, a server is a standby of primary.
func baseBackup(ctx context.Context, binDir, dir string, primary *Server, o *owner) error {
	if err := o.chownTree(dir); err != nil {
		return err
	}
	conninfo := fmt.Sprintf("host=127.0.0.1 port=%d user=%s", primary.port, Superuser)
	cmd := exec.CommandContext(ctx, filepath.Join(binDir, "pg_basebackup"),
		"-D", dir, "-d", conninfo, "--wal-method=stream", "--write-recovery-conf", "--checkpoint=fast", "--no-sync")
	cmd.Dir = "/"
	cmd.SysProcAttr = o.sysProcAttr()
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup: %w: %s", err, bytes.TrimSpace(out))
	}
	// The copy of the primary's log is the primary's story, not the standby's.
	if err := os.Remove(filepath.Join(dir, defaultLogName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove the primary's log from the base backup: %w", err)
	}
	return nil
}

// primaryConninfo is the standby's primary_conninfo: its primary, and its name there.
func (c Config) primaryConninfo() string {
	name := c.StandbyName
	if name == "" {
		name = "standby"
	}
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s application_name=%s", c.Primary.port, Superuser, name)
}

// ensureTemplate returns a freshly initdb'd cluster for the server version in binDir, cached
// in os.TempDir(). Processes that race to create it serialise on a file lock; the cluster is
// built in a temporary directory and renamed into place, so a cluster found there is complete.
func ensureTemplate(ctx context.Context, binDir string, o *owner) (string, error) {
	version, err := serverVersion(ctx, binDir)
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("taskmaster-pg-template-%d-%s", os.Geteuid(), version)
	dir := filepath.Join(os.TempDir(), name)
	if _, err := os.Stat(filepath.Join(dir, versionFile)); err == nil {
		return dir, nil
	}

	lock, err := os.OpenFile(dir+".lock", os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return "", fmt.Errorf("open template lock: %w", err)
	}
	defer lock.Close() // closing the file releases the lock
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", fmt.Errorf("lock template: %w", err)
	}

	if _, err := os.Stat(filepath.Join(dir, versionFile)); err == nil {
		return dir, nil // built by another process while we waited
	}
	tmp, err := os.MkdirTemp(os.TempDir(), name+".build-")
	if err != nil {
		return "", fmt.Errorf("create template directory: %w", err)
	}
	defer os.RemoveAll(tmp) // gone after the rename; cleans up after a failure
	if err := o.makeReachable(tmp); err != nil {
		return "", err
	}
	if err := initdb(ctx, binDir, tmp, true, o); err != nil {
		return "", fmt.Errorf("build template cluster: %w", err)
	}
	if err := os.RemoveAll(dir); err != nil { // an incomplete leftover, if any
		return "", fmt.Errorf("remove old template cluster: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		return "", fmt.Errorf("install template cluster: %w", err)
	}
	return dir, nil
}

// serverVersion returns the version of the postgres binary in binDir, e.g. "15.18".
func serverVersion(ctx context.Context, binDir string) (string, error) {
	out, err := exec.CommandContext(ctx, filepath.Join(binDir, "postgres"), "--version").Output()
	if err != nil {
		return "", fmt.Errorf("postgres --version: %w", err)
	}
	// "postgres (PostgreSQL) 15.18 (Debian 15.18-0+deb12u1)"
	fields := strings.Fields(string(out))
	if len(fields) < 3 {
		return "", fmt.Errorf("postgres --version: unexpected output %q", out)
	}
	v := strings.Map(func(r rune) rune {
		if r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '.' || r == '-' {
			return r
		}
		return '_'
	}, fields[2])
	return v, nil
}

// checkNotRunning fails if a live postmaster owns dataDir. A postmaster.pid naming a dead
// process is left for PostgreSQL, which replaces it; one naming a live process that is not
// running in dataDir (the pid was reused) is removed, since PostgreSQL would refuse to start.
func checkNotRunning(dataDir string) error {
	pidPath := filepath.Join(dataDir, pidFileName)
	b, err := os.ReadFile(pidPath)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read %s: %w", pidPath, err)
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return nil // unreadable: PostgreSQL decides
	}
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return nil
	}
	if !runsIn(pid, dataDir) {
		if err := os.Remove(pidPath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove stale %s: %w", pidPath, err)
		}
		return nil
	}
	return fmt.Errorf("data directory %s is in use by a running PostgreSQL server (pid %d); stop it first (kill -INT %d)", dataDir, pid, pid)
}

// runsIn reports whether the live process pid may be a postmaster of dataDir: every PostgreSQL
// server process runs with the data directory as its working directory. Where /proc cannot
// tell (another user's process, or no /proc), it answers by the program's name, and without
// even that, yes.
func runsIn(pid int, dataDir string) bool {
	if cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", pid)); err == nil {
		return sameFile(cwd, dataDir)
	}
	if comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid)); err == nil {
		name := strings.TrimSpace(string(comm))
		return name == "postgres" || name == "postmaster"
	}
	return true
}

// owner is the operating-system user the server runs as. A nil *owner means the current user.
type owner struct {
	uid, gid int
}

// serverOwner returns nil unless the process is root, in which case it returns the
// unprivileged user "postgres".
func serverOwner() (*owner, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(Superuser)
	if err != nil {
		return nil, fmt.Errorf("running as root needs an unprivileged operating-system user %q to run PostgreSQL: %w", Superuser, err)
	}
	uid, err := strconv.Atoi(u.Uid)
	if err != nil {
		return nil, fmt.Errorf("uid of %q: %w", Superuser, err)
	}
	gid, err := strconv.Atoi(u.Gid)
	if err != nil {
		return nil, fmt.Errorf("gid of %q: %w", Superuser, err)
	}
	return &owner{uid: uid, gid: gid}, nil
}

// sysProcAttr returns the process attributes for initdb and the server: their own process
// group (a Ctrl-C in the terminal reaches only us; we stop the server ourselves), a signal when
// we die (where the platform has one), and o's credentials.
func (o *owner) sysProcAttr() *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{Setpgid: true}
	setParentDeathSignal(attr)
	if o != nil {
		attr.Credential = &syscall.Credential{Uid: uint32(o.uid), Gid: uint32(o.gid), Groups: []uint32{}}
	}
	return attr
}

// chownTree gives every file under dir to o (a no-op for the current user).
func (o *owner) chownTree(dir string) error {
	if o == nil {
		return nil
	}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if st, ok := info.Sys().(*syscall.Stat_t); ok && int(st.Uid) == o.uid && int(st.Gid) == o.gid {
			return nil
		}
		return os.Lchown(path, o.uid, o.gid)
	})
	if err != nil {
		return fmt.Errorf("chown %s to %s: %w", dir, Superuser, err)
	}
	return nil
}

// makeReachable adds o+x to every parent directory of dir that lacks it, so that o, which is
// neither their owner nor in their group, can reach dir (a no-op for the current user).
func (o *owner) makeReachable(dir string) error {
	if o == nil {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("make %s reachable: %w", dir, err)
		}
		if info.Mode().Perm()&0o001 == 0 {
			mode := info.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
			if err := os.Chmod(p, mode|0o001); err != nil {
				return fmt.Errorf("make %s reachable: %w", dir, err)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// hasBinaries reports whether dir holds executable initdb and postgres programs.
func hasBinaries(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionLess compares dotted version numbers such as "9.6" and "15" numerically.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		x, errX := strconv.Atoi(as[i])
		y, errY := strconv.Atoi(bs[i])
		if errX != nil || errY != nil {
			if as[i] != bs[i] {
				return as[i] < bs[i]
			}
			continue
		}
		if x != y {
			return x < y
		}
	}
	return len(as) < len(bs)
}

// sameFile reports whether paths a and b name the same existing file.
func sameFile(a, b string) bool {
	ia, errA := os.Stat(a)
	ib, errB := os.Stat(b)
	return errA == nil && errB == nil && os.SameFile(ia, ib)
}

func closeFile(f *os.File) {
	if f != nil {
		_ = f.Close()
	}
}

// fileTail reads the end of a log file, from offset from on.
type fileTail struct {
	path string
	from int64
}

// String returns at most logTailBytes from the end of the file, or why it could not.
func (t *fileTail) String() string {
	f, err := os.Open(t.path)
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	from := max(t.from, info.Size()-logTailBytes)
	b, err := io.ReadAll(io.NewSectionReader(f, from, info.Size()-from))
	if err != nil {
		return fmt.Sprintf("(log unreadable: %v)", err)
	}
	return strings.TrimSpace(string(b))
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// Write implements io.Writer.
func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if over := len(t.buf) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(p), nil
}

// String returns what the buffer holds.
func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}
