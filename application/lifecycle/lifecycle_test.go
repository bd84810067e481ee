package lifecycle_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application/lifecycle"
)

// counting is a service whose loop counts how many of it run at once.
type counting struct {
	lifecycle.Base
	running, maxRunning, runs atomic.Int64
}

func (c *counting) Start(ctx context.Context) error {
	return c.StartLoop(ctx, "counting", func(context.Context) (lifecycle.LoopFunc, error) {
		return func(ctx context.Context) {
			n := c.running.Add(1)
			for {
				m := c.maxRunning.Load()
				if n <= m || c.maxRunning.CompareAndSwap(m, n) {
					break
				}
			}
			c.runs.Add(1)
			<-ctx.Done()
			c.running.Add(-1)
		}, nil
	})
}

func (c *counting) Stop(ctx context.Context) error { return c.StopLoop(ctx) }

func TestBaseStartsOnceStopsTwiceAndRestarts(t *testing.T) {
	t.Parallel()
	var c counting
	ctx := context.Background()
	require.NoError(t, c.Stop(ctx), "stop before start does nothing")
	require.False(t, c.Running())

	require.NoError(t, c.Start(ctx))
	require.ErrorIs(t, c.Start(ctx), lifecycle.ErrAlreadyStarted)
	require.True(t, c.Running())

	require.NoError(t, c.Stop(ctx))
	require.NoError(t, c.Stop(ctx), "a second stop does nothing")
	require.False(t, c.Running())
	require.Zero(t, c.running.Load(), "stop waits for the loop")

	require.NoError(t, c.Start(ctx), "a stopped service starts again")
	require.True(t, c.Running())
	require.NoError(t, c.Stop(ctx))
	require.EqualValues(t, 2, c.runs.Load())
}

func TestBaseStartContextBoundsOnlyTheStart(t *testing.T) {
	t.Parallel()
	var c counting
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, c.Start(ctx))
	cancel()
	time.Sleep(20 * time.Millisecond) // would be long enough for a loop on ctx to end
	require.True(t, c.Running(), "the loop runs on its own context")
	require.NoError(t, c.Stop(context.Background()))
}

func TestBaseFailedPreparationLeavesItStopped(t *testing.T) {
	t.Parallel()
	var b lifecycle.Base
	boom := errors.New("boom")
	err := b.StartLoop(context.Background(), "svc", func(context.Context) (lifecycle.LoopFunc, error) { return nil, boom })
	require.ErrorIs(t, err, boom)
	require.False(t, b.Running())
	require.NoError(t, b.StopLoop(context.Background()))
}

func TestBaseStopWithExpiredContextLeavesALaterStopToWait(t *testing.T) {
	t.Parallel()
	var b lifecycle.Base
	release := make(chan struct{})
	require.NoError(t, b.StartLoop(context.Background(), "slow", func(context.Context) (lifecycle.LoopFunc, error) {
		return func(ctx context.Context) {
			<-ctx.Done()
			<-release // slow to stop
		}, nil
	}))
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	require.ErrorIs(t, b.StopLoop(expired), context.Canceled)
	require.ErrorIs(t, b.StartLoop(context.Background(), "slow", nil), lifecycle.ErrAlreadyStarted)
	close(release)
	require.NoError(t, b.StopLoop(context.Background()))
	require.False(t, b.Running())
}

// TestBaseStress starts and stops one service from many goroutines at once:
// never two loops at a time, and no goroutine left behind.
func TestBaseStress(t *testing.T) {
	t.Parallel()
	var c counting
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 200 {
				if (i+j)%2 == 0 {
					err := c.Start(context.Background())
					if err != nil {
						require.ErrorIs(t, err, lifecycle.ErrAlreadyStarted)
					}
				} else {
					require.NoError(t, c.Stop(context.Background()))
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, c.Stop(context.Background()))
	require.EqualValues(t, 1, c.maxRunning.Load(), "never two loops at once")
	require.Zero(t, c.running.Load())
	require.Positive(t, c.runs.Load())
}
