package postgres

import (
	"context"
	"database/sql/driver"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// scriptedConnector stands in for lib/pq's connector: each Connect takes
// the next outcome from its channel (nil: a connection).
type scriptedConnector struct {
	calls    atomic.Int64
	outcomes chan error
}

func (c *scriptedConnector) Connect(ctx context.Context) (driver.Conn, error) {
	c.calls.Add(1)
	select {
	case err := <-c.outcomes:
		if err != nil {
			return nil, err
		}
		return fakeConn{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (c *scriptedConnector) Driver() driver.Driver { return nil }

type fakeConn struct{ driver.Conn }

var errDown = errors.New("connection refused")

func TestConnectGate(t *testing.T) {
	t.Parallel()
	inner := &scriptedConnector{outcomes: make(chan error, 16)}
	g := newConnectGate(inner)
	ctx := t.Context()

	// Healthy: every Connect is an attempt.
	inner.outcomes <- nil
	_, err := g.Connect(ctx)
	require.NoError(t, err)

	// A failure shuts the gate for GateMinDelay: Connects fail at once
	// with it, as connection failures, and attempt nothing.
	inner.outcomes <- errDown
	_, err = g.Connect(ctx)
	require.ErrorIs(t, err, errDown)
	for range 100 {
		_, err = g.Connect(ctx)
		require.ErrorIs(t, err, errDown)
		require.True(t, IsConnectionFailure(err), "%v", err)
	}
	require.Equal(t, int64(2), inner.calls.Load())

	// After the delay one Connect attempts; those that come meanwhile
	// wait for it and, as it succeeds, connect themselves.
	time.Sleep(GateMinDelay)
	probing := make(chan error, 1)
	go func() {
		_, err := g.Connect(ctx)
		probing <- err
	}()
	require.Eventually(t, func() bool { return inner.calls.Load() == 3 }, 5*time.Second, time.Millisecond)
	var (
		wg     sync.WaitGroup
		waited atomic.Int64
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := g.Connect(ctx); err == nil {
				waited.Add(1)
			}
		}()
	}
	time.Sleep(20 * time.Millisecond)
	require.Equal(t, int64(3), inner.calls.Load(), "one attempt at a time")
	for range 5 {
		inner.outcomes <- nil
	}
	require.NoError(t, <-probing)
	wg.Wait()
	require.Equal(t, int64(4), waited.Load())
	require.Equal(t, int64(7), inner.calls.Load())

	// Failures go on: the delay doubles, to GateMaxDelay.
	for i, want := range []time.Duration{GateMinDelay, 2 * GateMinDelay, 4 * GateMinDelay, 8 * GateMinDelay, GateMaxDelay, GateMaxDelay} {
		if i > 0 {
			time.Sleep(g.notUntilFromNow())
		}
		inner.outcomes <- errDown
		_, err = g.Connect(ctx)
		require.ErrorIs(t, err, errDown)
		g.mu.Lock()
		require.Equal(t, want, g.delay, "after failure %d", i+1)
		g.mu.Unlock()
	}

	// An attempt its caller gave up on says nothing of the database: the
	// next Connect after the delay attempts again.
	time.Sleep(g.notUntilFromNow())
	cancelled, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := g.Connect(cancelled)
		done <- err
	}()
	require.Eventually(t, func() bool { return inner.calls.Load() == 14 }, 5*time.Second, time.Millisecond)
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
	inner.outcomes <- nil
	_, err = g.Connect(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(15), inner.calls.Load())
}

// notUntilFromNow is how long the gate stays shut.
func (g *connectGate) notUntilFromNow() time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	return max(time.Until(g.notUntil), 0)
}
