// Package postgres implements the storage ports on PostgreSQL with sqlx and
// lib/pq: the transaction runner (which also appends each transaction's
// events to the Watermill SQL outbox), the task and worker stores, queue
// statistics, leadership leases and migrations.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
)

// PoolConfig sizes the connection pool and bounds its connections.
type PoolConfig struct {
	// MaxOpen is the most open connections (default 20).
	MaxOpen int
	// MaxIdle is the most idle connections kept (default MaxOpen).
	MaxIdle int
	// MaxLifetime recycles connections after this long (default 30 min).
	MaxLifetime time.Duration
	// Conn bounds how long a call on one connection can block.
	Conn ConnConfig
	// StatementCacheSize is how many prepared statements each connection
	// keeps (see NewCachingConnector); 0 means
	// DefaultStatementCacheSize, a negative value none (every statement
	// unnamed, parsed and planned each time).
	StatementCacheSize int
}

// DefaultPoolConfig returns the pool defaults.
func DefaultPoolConfig() PoolConfig {
	return PoolConfig{MaxOpen: 20, MaxIdle: 20, MaxLifetime: 30 * time.Minute, Conn: DefaultConnConfig(),
		StatementCacheSize: DefaultStatementCacheSize}
}

// Validate reports whether the pool config can be used.
func (c PoolConfig) Validate() error {
	if c.MaxOpen < 1 {
		return errors.New("pool max open connections must be at least 1")
	}
	return nil
}

// ConnConfig bounds how long anything can block on one database connection,
// so that neither a frozen client nor a vanished host (a half-open TCP
// connection) holds locks or calls for long. It applies to every connection
// Taskmaster opens: the pools and the notification listener. Zero turns a
// bound off.
type ConnConfig struct {
	// StatementTimeout is the server's statement_timeout: a statement that
	// runs (or waits for a lock) longer is cancelled. Migrations lift it for
	// their own session.
	StatementTimeout time.Duration
	// IdleInTransactionTimeout is the server's
	// idle_in_transaction_session_timeout: a session left idle inside a
	// transaction this long (its client frozen or gone) is ended, and its
	// locks are released with it.
	IdleInTransactionTimeout time.Duration
	// TCPUserTimeout is how long sent data may stay unacknowledged, or a
	// silent connection unanswered to keepalive probes, before the
	// connection is closed: on the client's side (TCP_USER_TIMEOUT on Linux,
	// keepalive probes every third of it) and on the server's
	// (tcp_user_timeout and tcp_keepalives_*). It also bounds connecting.
	// Zero leaves the operating systems' defaults (keepalives every 15 s on
	// the client, two hours on a default server).
	TCPUserTimeout time.Duration
	// TargetSessionAttrs is the target_session_attrs of connections whose
	// connection string sets none: "read-write" (the default) connects only
	// to a server that accepts writes, so that with several hosts listed
	// every connection goes to the primary, whichever it is now, and a
	// standby is never mistaken for it; empty leaves lib/pq's default
	// ("any").
	TargetSessionAttrs string
}

// DefaultConnConfig returns the connection defaults: statements end after
// 30 s, sessions idle in a transaction after 10 s, dead connections are
// noticed within 30 s, and only a primary is connected to.
func DefaultConnConfig() ConnConfig {
	return ConnConfig{
		StatementTimeout:         30 * time.Second,
		IdleInTransactionTimeout: 10 * time.Second,
		TCPUserTimeout:           30 * time.Second,
		TargetSessionAttrs:       TargetReadWrite,
	}
}

// TargetReadWrite is the target_session_attrs that accepts only a server
// that takes writes: the primary.
const TargetReadWrite = "read-write"

// keepaliveProbes is how many unanswered keepalive probes close a
// connection.
const keepaliveProbes = 3

// defaultConnectTimeout bounds connecting when TCPUserTimeout is zero.
const defaultConnectTimeout = 30 * time.Second

// probeInterval is the keepalive idle time and interval: a third of the user
// timeout, at least a second (the kernel's resolution).
func (c ConnConfig) probeInterval() time.Duration {
	return max(c.TCPUserTimeout/keepaliveProbes, time.Second)
}

// params are the server settings of c, as connection run-time parameters.
func (c ConnConfig) params() map[string]string {
	ms := func(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
	p := map[string]string{}
	if c.StatementTimeout > 0 {
		p["statement_timeout"] = ms(c.StatementTimeout)
	}
	if c.IdleInTransactionTimeout > 0 {
		p["idle_in_transaction_session_timeout"] = ms(c.IdleInTransactionTimeout)
	}
	if c.TCPUserTimeout > 0 {
		secs := strconv.FormatInt(int64(c.probeInterval()/time.Second), 10)
		p["tcp_user_timeout"] = ms(c.TCPUserTimeout)
		p["tcp_keepalives_idle"] = secs
		p["tcp_keepalives_interval"] = secs
		p["tcp_keepalives_count"] = strconv.Itoa(keepaliveProbes)
	}
	return p
}

// DSN returns the connection string to open with c's settings, in the
// key=value form lib/pq reads as libpq does (ParseConnString: several hosts,
// target_session_attrs, connect_timeout per host): databaseURL (either
// form) plus binary_parameters=yes (a parameterised statement's parse, bind
// and execute then go in one round trip instead of two), connect_timeout
// and c's server settings as run-time parameters, each unless the string
// sets it.
func (c ConnConfig) DSN(databaseURL string) (string, error) {
	p, err := ParseConnString(databaseURL)
	if err != nil {
		return "", fmt.Errorf("database connection string: %w", err)
	}
	if err := p.CheckDriverSupport(); err != nil {
		return "", fmt.Errorf("database connection string: %w", err)
	}
	params := c.params()
	params["binary_parameters"] = "yes"
	// lib/pq ignores context deadlines while it connects: only
	// connect_timeout bounds a host that accepts and never answers. It
	// applies to each host of a list in turn.
	params["connect_timeout"] = strconv.Itoa(int(DefaultConnectTimeout / time.Second))
	if c.TargetSessionAttrs != "" {
		params["target_session_attrs"] = c.TargetSessionAttrs
	}
	for k, v := range params {
		if _, set := p[k]; !set && !strings.Contains(p["options"], k) {
			p[k] = v
		}
	}
	return p.String(), nil
}

// Dialer returns the dialer of c's connections: keepalive probes every
// probeInterval, TCP_USER_TIMEOUT where the platform has it, and connecting
// bounded by TCPUserTimeout.
func (c ConnConfig) Dialer() pq.Dialer {
	d := net.Dialer{Timeout: defaultConnectTimeout}
	if c.TCPUserTimeout > 0 {
		probe := c.probeInterval()
		d.Timeout = c.TCPUserTimeout
		d.KeepAliveConfig = net.KeepAliveConfig{Enable: true, Idle: probe, Interval: probe, Count: keepaliveProbes}
		d.Control = userTimeoutControl(c.TCPUserTimeout)
	}
	return DialFunc(func(ctx context.Context, network, address string) (net.Conn, error) {
		conn, err := d.DialContext(ctx, network, address)
		if err == nil {
			if t, ok := ctx.Value(dialTrackerKey{}).(*dialTracker); ok {
				t.add(conn) // an attempt of a pool (connectGate.connect)
			}
		}
		return conn, err
	})
}

// DialFunc adapts a dial function to lib/pq's Dialer and DialerContext.
type DialFunc func(ctx context.Context, network, address string) (net.Conn, error)

var _ pq.DialerContext = DialFunc(nil)

// DialContext implements pq.DialerContext.
func (f DialFunc) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	return f(ctx, network, address)
}

// Dial implements pq.Dialer.
func (f DialFunc) Dial(network, address string) (net.Conn, error) {
	return f(context.Background(), network, address)
}

// DialTimeout implements pq.Dialer.
func (f DialFunc) DialTimeout(network, address string, timeout time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return f(ctx, network, address)
}

// OneConnDialer returns the dialer of c's connections for a client that
// holds one connection at a time (the notifier's pq.Listener, which
// reconnects only once its connection is gone): dialing again means that
// every socket dialed before is done with, and it is closed. lib/pq's
// fallback from sslmode=prefer would leave one open otherwise (see
// dialTracker, which does the same for the pools' attempts).
func (c ConnConfig) OneConnDialer() pq.Dialer {
	dial := c.Dialer().(DialFunc)
	var (
		mu   sync.Mutex
		last net.Conn
	)
	return DialFunc(func(ctx context.Context, network, address string) (net.Conn, error) {
		mu.Lock()
		if last != nil {
			_ = last.Close()
			last = nil
		}
		mu.Unlock()
		conn, err := dial(ctx, network, address)
		if err == nil {
			mu.Lock()
			last = conn
			mu.Unlock()
		}
		return conn, err
	})
}

// dialTracker holds the sockets dialed for one attempt to connect
// (connectGate.connect). lib/pq (1.12) dials again without closing the
// first socket when it falls back from sslmode=prefer (or allow) to the
// other mode: the server's backend then waits for a startup packet until
// authentication_timeout, holding a connection slot, and the socket stays
// open until the garbage collector finds it. An attempt that connected
// uses the socket dialed last, so every other is closed once it returns
// (closing one lib/pq closed already does nothing); one that failed uses
// none.
type dialTracker struct {
	mu    sync.Mutex
	conns []net.Conn
}

type dialTrackerKey struct{}

func (t *dialTracker) add(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.conns = append(t.conns, c)
}

// closeAbandoned closes the sockets the attempt does not use.
func (t *dialTracker) closeAbandoned(connected bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(t.conns)
	if connected && n > 0 {
		n--
	}
	for _, c := range t.conns[:n] {
		_ = c.Close()
	}
}

// Open connects to databaseURL with cfg's pool size and connection bounds
// (see ConnConfig.DSN and ConnConfig.Dialer) and checks the connection.
func Open(ctx context.Context, databaseURL string, cfg PoolConfig) (*sqlx.DB, error) {
	connector, err := newConnector(databaseURL, cfg.Conn)
	if err != nil {
		return nil, err
	}
	db := openPool(connector, cfg)
	if err := db.PingContext(ctx); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return db, nil
}

// newConnector returns the driver connector of databaseURL with conn's
// settings and dialer, its failures to connect marked (connectError) and
// its attempts gated while they fail (connectGate).
func newConnector(databaseURL string, conn ConnConfig) (driver.Connector, error) {
	dsn, err := conn.DSN(databaseURL)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	connector, err := pq.NewConnector(dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	connector.Dialer(conn.Dialer())
	return newConnectGate(connector), nil
}

// openPool returns a pool of connector's connections sized by cfg, each
// keeping prepared statements unless cfg turns them off.
func openPool(connector driver.Connector, cfg PoolConfig) *sqlx.DB {
	if cfg.StatementCacheSize >= 0 {
		connector = NewCachingConnector(connector, cfg.StatementCacheSize)
	}
	// Outermost, so that it sees the errors of prepared statements too.
	connector = guardingConnector{connector}
	db := sqlx.NewDb(sql.OpenDB(connector), "postgres")
	db.SetMaxOpenConns(cfg.MaxOpen)
	if cfg.MaxIdle == 0 {
		cfg.MaxIdle = cfg.MaxOpen
	}
	db.SetMaxIdleConns(cfg.MaxIdle)
	db.SetConnMaxLifetime(cfg.MaxLifetime)
	return db
}
