package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/ports"
)

// Read replicas.
//
// A ReadPool is a connection pool for the reads that may lag behind the
// primary (listings, queue statistics, the dashboard's pages): its
// connections go to a read replica (a hot standby) while the replica keeps
// up, and to the primary otherwise. It checks the replica's lag every
// CheckInterval on a connection of its own; when the replica is unreachable,
// not streaming from its primary, or more than MaxLag behind, new
// connections go to the primary, and pooled ones to the replica are closed
// when next taken from the pool (or returned to it); once the replica is
// back within half of MaxLag, the other way round. The pool is a *sqlx.DB
// like any other, so the stores and readers work on it unchanged: use cases
// that only read run on it through NewReadOnlyTxRunner.

// DefaultReadMaxLag is how far behind the primary a read replica may be for
// the reads to go to it, unless configured.
const DefaultReadMaxLag = 5 * time.Second

// DefaultReadCheckInterval is how often a read replica's lag is checked.
const DefaultReadCheckInterval = time.Second

// ReadPoolConfig configures OpenReadPool.
type ReadPoolConfig struct {
	// ReplicaURL is the read replica's connection string.
	ReplicaURL string
	// PrimaryURL is the primary's (TASKMASTER_DATABASE_URL): the reads go
	// there while the replica does not keep up.
	PrimaryURL string
	// Pool sizes the pool and bounds its connections, both ways; the
	// replica's connections take any host of its connection string (no
	// target_session_attrs unless the string sets one).
	Pool PoolConfig
	// MaxLag is the lag beyond which the primary serves the reads
	// (DefaultReadMaxLag when zero).
	MaxLag time.Duration
	// CheckInterval is how often the replica's lag is checked
	// (DefaultReadCheckInterval when zero).
	CheckInterval time.Duration
	// Logger receives the changes of route.
	Logger *zap.Logger
}

// ReadPool is the pool of the reads that may lag, and the check of the read
// replica that routes them. It is a lifecycle.Service (the check's loop) and
// a ports.ReadSource.
type ReadPool struct {
	lifecycle.Base
	cfg    ReadPoolConfig
	db     *sqlx.DB
	probe  *sql.DB
	logger *zap.Logger

	// onReplica says where new connections go.
	onReplica atomic.Bool
	mu        sync.Mutex
	status    ports.ReadStatus
}

var (
	_ ports.ReadSource  = (*ReadPool)(nil)
	_ lifecycle.Service = (*ReadPool)(nil)
)

// OpenReadPool returns the read pool; its reads go to the primary until
// Start has checked the replica. Close it after Stop.
func OpenReadPool(cfg ReadPoolConfig) (*ReadPool, error) {
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = DefaultReadMaxLag
	}
	if cfg.CheckInterval <= 0 {
		cfg.CheckInterval = DefaultReadCheckInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	replicaConn := cfg.Pool.Conn
	replicaConn.TargetSessionAttrs = ""
	replica, err := newConnector(cfg.ReplicaURL, replicaConn)
	if err != nil {
		return nil, fmt.Errorf("read replica: %w", err)
	}
	primary, err := newConnector(cfg.PrimaryURL, cfg.Pool.Conn)
	if err != nil {
		return nil, err
	}
	p := &ReadPool{cfg: cfg, logger: cfg.Logger,
		status: ports.ReadStatus{Replica: true, MaxLag: cfg.MaxLag, Reason: "not checked yet"}}
	p.db = openPool(routingConnector{replica: replica, primary: primary, pool: p}, cfg.Pool)
	p.probe = sql.OpenDB(replica)
	p.probe.SetMaxOpenConns(1)
	return p, nil
}

// DB returns the pool.
func (p *ReadPool) DB() *sqlx.DB { return p.db }

// ReadStatus implements ports.ReadSource.
func (p *ReadPool) ReadStatus() ports.ReadStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// Start checks the replica once, then every CheckInterval until Stop.
func (p *ReadPool) Start(ctx context.Context) error {
	return p.StartLoop(ctx, "read replica check", func(startCtx context.Context) (lifecycle.LoopFunc, error) {
		p.check(startCtx)
		return func(ctx context.Context) {
			t := time.NewTicker(p.cfg.CheckInterval)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					p.check(ctx)
				}
			}
		}, nil
	})
}

// Stop stops the checks; it is idempotent.
func (p *ReadPool) Stop(ctx context.Context) error { return p.StopLoop(ctx) }

// Close closes the pool and the check's connection.
func (p *ReadPool) Close() error {
	err := p.db.Close()
	if perr := p.probe.Close(); err == nil {
		err = perr
	}
	return err
}

// replicaLagSQL reads, on the replica: whether it is in recovery (a standby),
// whether it has replayed everything it received, the age of the last
// transaction it replayed, and whether its WAL receiver streams from its
// primary (without the pg_read_all_stats privilege the status reads as NULL,
// and a running receiver counts as streaming).
const replicaLagSQL = `
SELECT pg_is_in_recovery(),
	pg_last_wal_receive_lsn() IS NOT DISTINCT FROM pg_last_wal_replay_lsn(),
	coalesce(extract(epoch FROM clock_timestamp() - pg_last_xact_replay_timestamp()), 0)::float8,
	EXISTS (SELECT 1 FROM pg_stat_wal_receiver WHERE pid IS NOT NULL AND coalesce(status, 'streaming') = 'streaming')`

// check reads the replica's lag and routes the reads accordingly.
func (p *ReadPool) check(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, max(p.cfg.CheckInterval, DefaultConnectTimeout))
	defer cancel()
	var (
		inRecovery, caughtUp, streaming bool
		age                             float64
	)
	err := p.probe.QueryRowContext(ctx, replicaLagSQL).Scan(&inRecovery, &caughtUp, &age, &streaming)
	st := ports.ReadStatus{Replica: true, MaxLag: p.cfg.MaxLag, CheckedAt: time.Now()}
	switch {
	case err != nil:
		st.Reason = "unreachable"
	case !inRecovery:
		// A standby that was promoted is a primary: it is behind nobody.
		st.LagKnown = true
	case !streaming:
		st.LagKnown, st.Lag, st.Reason = true, seconds(age), "not streaming"
	case caughtUp:
		st.LagKnown = true
	default:
		st.LagKnown, st.Lag = true, seconds(age)
	}
	if st.Reason == "" {
		// Back to the replica only once well within the bound, so that a
		// lag around it does not move every connection back and forth.
		limit := p.cfg.MaxLag
		if !p.onReplica.Load() {
			limit /= 2
		}
		if st.Lag > limit {
			st.Reason = "lagging"
		}
	}
	st.OnReplica = st.Reason == ""
	p.route(st, err)
}

// route records st and moves the reads where it says.
func (p *ReadPool) route(st ports.ReadStatus, err error) {
	p.mu.Lock()
	p.status = st
	p.mu.Unlock()
	if was := p.onReplica.Swap(st.OnReplica); was == st.OnReplica {
		return
	}
	if st.OnReplica {
		p.logger.Info("reads that may lag go to the read replica", zap.Duration("lag", st.Lag))
		return
	}
	p.logger.Warn("reads that may lag go to the primary", zap.String("replica", st.Reason),
		zap.Duration("lag", st.Lag), zap.Duration("max_lag", p.cfg.MaxLag), zap.Error(err))
}

// replicaFailed moves the reads to the primary at once when a connection to
// the replica fails between two checks; the next check decides again.
func (p *ReadPool) replicaFailed(err error) {
	p.mu.Lock()
	st := p.status
	p.mu.Unlock()
	st.OnReplica, st.Reason, st.LagKnown, st.CheckedAt = false, "unreachable", false, time.Now()
	p.route(st, err)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }

// routingConnector connects to the replica while the reads go there, to the
// primary otherwise (or when the replica refuses).
type routingConnector struct {
	replica, primary driver.Connector
	pool             *ReadPool
}

// Connect implements driver.Connector.
func (c routingConnector) Connect(ctx context.Context) (driver.Conn, error) {
	if c.pool.onReplica.Load() {
		conn, err := c.replica.Connect(ctx)
		if err == nil {
			return c.routed(conn, true)
		}
		c.pool.replicaFailed(err)
	}
	conn, err := c.primary.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return c.routed(conn, false)
}

func (c routingConnector) routed(conn driver.Conn, replica bool) (driver.Conn, error) {
	inner, ok := conn.(innerConn)
	if !ok {
		_ = conn.Close()
		return nil, fmt.Errorf("read pool: the driver's connection (%T) lacks an interface database/sql uses", conn)
	}
	return &routedConn{innerConn: inner, replica: replica, pool: c.pool}, nil
}

// Driver implements driver.Connector.
func (c routingConnector) Driver() driver.Driver { return c.primary.Driver() }

// routedConn is a connection of the read pool, to the replica or the primary;
// it is not reused once the reads go the other way.
type routedConn struct {
	innerConn
	replica bool
	pool    *ReadPool
}

// ResetSession implements driver.SessionResetter: a connection taken from the
// pool that goes the wrong way is replaced.
func (c *routedConn) ResetSession(ctx context.Context) error {
	if c.replica != c.pool.onReplica.Load() {
		return driver.ErrBadConn
	}
	return c.innerConn.ResetSession(ctx)
}

// IsValid implements driver.Validator: a connection returned to the pool
// that goes the wrong way is closed.
func (c *routedConn) IsValid() bool {
	return c.replica == c.pool.onReplica.Load() && c.innerConn.IsValid()
}
