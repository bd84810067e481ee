package postgres

import (
	"context"
	"database/sql/driver"
	"fmt"
	"sync"
	"time"
)

// Connecting while the database is away.
//
// A pool opens a connection whenever a request finds none idle, so during
// an outage every request (and every retry database/sql makes of it) dials
// the database anew. With a multi-host URL that is a storm on the standby:
// each attempt forks a backend there that logs in and is asked whether it
// takes writes, only to be dropped (target_session_attrs=read-write):
// hundreds a second from two instances under load in a pg_auto_failover
// test, where with lib/pq's sslmode=prefer leak (see dialTracker) they used
// up the standby's connection slots, the failover manager's own keeper was
// refused ("too many clients") and the promotion held up.
//
// connectGate is a breaker on connecting. Once an attempt failed, the next
// is made no sooner than a delay after the failure (GateMinDelay, doubling
// to GateMaxDelay while failures go on), one at a time: a Connect before
// then fails at once with the last failure (a connectError: its request
// gets its 503 as before, only sooner, and database/sql's queue of
// requests waiting for a connection drains at once instead of one attempt
// each); a Connect while the attempt is under way waits for it, and
// connects itself if it succeeded. The first success closes the breaker.
// The price: for up to GateMaxDelay (and one attempt) after the database
// is back, a request may still be refused; its client repeats it after the
// Retry-After. While attempts succeed the gate costs a lock.

// The delays between attempts once connecting fails: GateMinDelay after
// the first failure, doubling to GateMaxDelay.
const (
	GateMinDelay = 10 * time.Millisecond
	GateMaxDelay = 100 * time.Millisecond
)

// connectGate wraps a driver connector (see above). It marks the errors of
// Connect as connectError.
type connectGate struct {
	inner driver.Connector

	mu       sync.Mutex
	failing  bool          // the last attempt failed
	lastErr  error         // its failure
	delay    time.Duration // the delay after it
	notUntil time.Time     // no attempt before this
	probe    chan struct{} // closed when the attempt under way while failing ends
}

func newConnectGate(inner driver.Connector) *connectGate {
	return &connectGate{inner: inner}
}

// Connect implements driver.Connector.
func (g *connectGate) Connect(ctx context.Context) (driver.Conn, error) {
	for {
		g.mu.Lock()
		if !g.failing {
			g.mu.Unlock()
			conn, err := g.connect(ctx)
			g.record(ctx, err, false)
			return g.answer(conn, err)
		}
		if probe := g.probe; probe != nil {
			g.mu.Unlock()
			select {
			case <-probe:
				continue
			case <-ctx.Done():
				return nil, &connectError{err: ctx.Err()}
			}
		}
		if now := time.Now(); now.Before(g.notUntil) {
			err := fmt.Errorf("%w (not tried again: connecting failed %v ago)", g.lastErr,
				now.Sub(g.notUntil.Add(-g.delay)).Round(time.Millisecond))
			g.mu.Unlock()
			return nil, &connectError{err: err}
		}
		g.probe = make(chan struct{})
		g.mu.Unlock()
		conn, err := g.connect(ctx)
		g.record(ctx, err, true)
		return g.answer(conn, err)
	}
}

// connect is an attempt to connect, closing the sockets it dialed and
// left open (dialTracker).
func (g *connectGate) connect(ctx context.Context) (driver.Conn, error) {
	t := &dialTracker{}
	conn, err := g.inner.Connect(context.WithValue(ctx, dialTrackerKey{}, t))
	t.closeAbandoned(err == nil)
	return conn, err
}

// record notes an attempt's outcome (ending the probe when it was one). An
// attempt cut short by its caller's context (a request that gave up) says
// nothing of the database.
func (g *connectGate) record(ctx context.Context, err error, probe bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if probe {
		close(g.probe)
		g.probe = nil
	}
	switch {
	case err == nil:
		g.failing, g.lastErr, g.delay = false, nil, 0
	case ctx.Err() != nil:
	default:
		g.delay = min(max(2*g.delay, GateMinDelay), GateMaxDelay)
		g.failing, g.lastErr, g.notUntil = true, err, time.Now().Add(g.delay)
	}
}

func (g *connectGate) answer(conn driver.Conn, err error) (driver.Conn, error) {
	if err != nil {
		return nil, &connectError{err: err}
	}
	return conn, nil
}

// Driver implements driver.Connector.
func (g *connectGate) Driver() driver.Driver { return g.inner.Driver() }
