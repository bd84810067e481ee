package localpg

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PgBouncerBinary is where Debian's pgbouncer package installs the pooler.
const PgBouncerBinary = "/usr/sbin/pgbouncer"

// BouncerConfig configures StartPgBouncer.
type BouncerConfig struct {
	// Dir holds the pooler's configuration, user list and log; it is created if missing.
	Dir string
	// ServerPort is the port of the PostgreSQL server on 127.0.0.1 every database is pooled
	// to (Server.Port()).
	ServerPort int
	// PoolMode is session, transaction (the default) or statement.
	PoolMode string
	// PoolSize is the server connections per database and user (default 20).
	PoolSize int
	// MaxClients is the most client connections (default 2000).
	MaxClients int
}

// Bouncer is a running PgBouncer started by StartPgBouncer. Stop it with Stop.
type Bouncer struct {
	port     int
	cfg      BouncerConfig
	dir      string
	owner    *owner
	cmd      *exec.Cmd
	done     chan struct{}
	stopOnce sync.Once
	logPath  string
}

// IgnoredStartupParameters are the run-time parameters a client may send at connection start
// that PgBouncer ignores instead of refusing the connection: those Taskmaster sends
// (postgres.ConnConfig). Behind the pooler they are not applied; set them on the role
// (ALTER ROLE ... SET) instead.
var IgnoredStartupParameters = []string{
	"statement_timeout", "idle_in_transaction_session_timeout", "tcp_user_timeout",
	"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count", "extra_float_digits",
}

// StartPgBouncer starts Debian's PgBouncer (PgBouncerBinary) on a free port of 127.0.0.1 in
// front of the server at cfg.ServerPort: every database name is passed through to it, every user is trusted (as
// the server trusts them), in cfg.PoolMode. It runs as the server's user (PgBouncer refuses
// root) and waits until a query through it answers.
func StartPgBouncer(ctx context.Context, cfg BouncerConfig) (*Bouncer, error) {
	if cfg.ServerPort == 0 || cfg.Dir == "" {
		return nil, errors.New("start pgbouncer: BouncerConfig.ServerPort and Dir are required")
	}
	if _, err := os.Stat(PgBouncerBinary); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w (install Debian's pgbouncer package)", err)
	}
	if cfg.PoolMode == "" {
		cfg.PoolMode = "transaction"
	}
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 20
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = 2000
	}
	dir, err := filepath.Abs(cfg.Dir)
	if err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	owner, err := serverOwner()
	if err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	if err := owner.makeReachable(dir); err != nil {
		return nil, fmt.Errorf("start pgbouncer: %w", err)
	}
	var lastErr error
	for attempt := 1; attempt <= bindAttempts; attempt++ {
		port, err := freePort()
		if err != nil {
			return nil, fmt.Errorf("start pgbouncer: %w", err)
		}
		b, err := launchBouncer(ctx, cfg, dir, port, owner)
		if err == nil {
			return b, nil
		}
		lastErr = err
		if !errors.Is(err, errBind) {
			break
		}
	}
	return nil, fmt.Errorf("start pgbouncer: %w", lastErr)
}

func launchBouncer(ctx context.Context, cfg BouncerConfig, dir string, port int, o *owner) (*Bouncer, error) {
	b := &Bouncer{port: port, cfg: cfg, dir: dir, owner: o, done: make(chan struct{}), logPath: filepath.Join(dir, "pgbouncer.log")}
	if err := b.writeConfig(); err != nil {
		return nil, err
	}
	ini := filepath.Join(dir, "pgbouncer.ini")
	cmd := exec.Command(PgBouncerBinary, ini)
	cmd.Dir = "/"
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard // it logs to logfile
	cmd.SysProcAttr = o.sysProcAttr()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("run pgbouncer: %w", err)
	}
	b.cmd = cmd
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	if err := b.waitReady(ctx); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// writeConfig writes the pooler's configuration and user list for b.cfg.
func (b *Bouncer) writeConfig() error {
	users := filepath.Join(b.dir, "userlist.txt")
	conf := strings.Join([]string{
		"[databases]",
		fmt.Sprintf("* = host=127.0.0.1 port=%d", b.cfg.ServerPort),
		"[pgbouncer]",
		"listen_addr = 127.0.0.1",
		fmt.Sprintf("listen_port = %d", b.port),
		"unix_socket_dir =",
		"auth_type = trust",
		"auth_file = " + users,
		"pool_mode = " + b.cfg.PoolMode,
		fmt.Sprintf("default_pool_size = %d", b.cfg.PoolSize),
		fmt.Sprintf("max_client_conn = %d", b.cfg.MaxClients),
		"ignore_startup_parameters = " + strings.Join(IgnoredStartupParameters, ","),
		"logfile = " + b.logPath,
		"admin_users = " + Superuser,
		"",
	}, "\n")
	if err := os.WriteFile(filepath.Join(b.dir, "pgbouncer.ini"), []byte(conf), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(users, []byte(fmt.Sprintf("%q \"\"\n", Superuser)), 0o644); err != nil {
		return err
	}
	return b.owner.chownTree(b.dir)
}

// PointAt makes the pooler pool to the server at port from now on, as a
// failover manager repoints a pooler: its configuration is rewritten and
// reloaded, and its server connections to the former server are closed once
// released (RECONNECT). Client connections stay open: their next
// transaction runs on the new server.
func (b *Bouncer) PointAt(ctx context.Context, port int) error {
	b.cfg.ServerPort = port
	if err := b.writeConfig(); err != nil {
		return err
	}
	db, err := sql.Open("postgres", b.URL("pgbouncer"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	for _, cmd := range []string{`RELOAD`, `RECONNECT`} {
		if _, err := db.ExecContext(ctx, cmd); err != nil {
			return fmt.Errorf("pgbouncer: %s: %w", cmd, err)
		}
	}
	return nil
}

// waitReady polls a query through the pooler until it answers, the pooler exits, ctx ends or
// ReadyTimeout passes.
func (b *Bouncer) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, ReadyTimeout)
	defer cancel()
	db, err := sql.Open("postgres", b.URL("postgres"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxIdleConns(0)
	var lastErr error
	for {
		qctx, qcancel := context.WithTimeout(ctx, 2*time.Second)
		var one int
		lastErr = db.QueryRowContext(qctx, `SELECT 1`).Scan(&one)
		qcancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-b.done:
			log := b.Log()
			if strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: pgbouncer could not listen on port %d", errBind, b.port)
			}
			return fmt.Errorf("pgbouncer exited during start; log:\n%s", log)
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer not ready on port %d: %w (last error: %v); log:\n%s", b.port, ctx.Err(), lastErr, b.Log())
		case <-time.After(pollInterval):
		}
	}
}

// URL returns the connection URL of database through the pooler, as the superuser.
func (b *Bouncer) URL(database string) string {
	return fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", Superuser, b.port, url.PathEscape(database))
}

// ReleaseDatabase makes the pooler close its server connections to database once they are
// released (the admin console's RECONNECT), and waits until none of those left is linked to a
// client or being cancelled, so that the database can be dropped without the server ending a
// session under a client's request: PgBouncer 1.18 crashes when the server ends one that is
// being cancelled (pgbouncer#822). Clients stay connected; their next transaction gets a new
// server connection.
func (b *Bouncer) ReleaseDatabase(ctx context.Context, database string) error {
	db, err := sql.Open("postgres", b.URL("pgbouncer"))
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	// The admin console takes only the simple query protocol: no parameters.
	if _, err := db.ExecContext(ctx, `RECONNECT "`+strings.ReplaceAll(database, `"`, `""`)+`"`); err != nil {
		return fmt.Errorf("pgbouncer: RECONNECT %s: %w", database, err)
	}
	for {
		servers, err := b.serverConnections(ctx, db, database)
		if err != nil {
			return err
		}
		var busy []string
		for _, sv := range servers {
			if sv["link"] != "" || (sv["state"] != "idle" && sv["state"] != "used" && sv["state"] != "tested") {
				busy = append(busy, fmt.Sprintf("state=%s link=%s", sv["state"], sv["link"]))
			}
		}
		if len(busy) == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgbouncer: server connections to %s still in use: %w: %s", database, ctx.Err(), strings.Join(busy, "; "))
		case <-time.After(pollInterval):
		}
	}
}

// serverConnections lists the pooler's server connections to database (SHOW SERVERS), each
// as its columns.
func (b *Bouncer) serverConnections(ctx context.Context, admin *sql.DB, database string) ([]map[string]string, error) {
	rows, err := admin.QueryContext(ctx, `SHOW SERVERS`)
	if err != nil {
		return nil, fmt.Errorf("pgbouncer: SHOW SERVERS: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return nil, err
	}
	var out []map[string]string
	for rows.Next() {
		vals := make([]sql.RawBytes, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			return nil, err
		}
		sv := make(map[string]string, len(cols))
		for i, c := range cols {
			sv[c] = string(vals[i])
		}
		if sv["database"] == database {
			out = append(out, sv)
		}
	}
	return out, rows.Err()
}

// Port returns the TCP port the pooler listens on.
func (b *Bouncer) Port() int { return b.port }

// Log returns the end of the pooler's log.
func (b *Bouncer) Log() string {
	return (&fileTail{path: b.logPath}).String()
}

// Stop shuts the pooler down at once (SIGTERM: client connections are closed) and waits for
// it; calling it again does nothing.
func (b *Bouncer) Stop() {
	b.stopOnce.Do(func() {
		_ = b.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-b.done:
		case <-time.After(StopTimeout):
			_ = b.cmd.Process.Kill()
			<-b.done
		}
	})
}
