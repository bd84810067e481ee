package application_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// fakeLocker hands its one lock out when free.
type fakeLocker struct {
	mu       sync.Mutex
	free     bool
	attempts int
	held     *fakeLock
}

func (l *fakeLocker) TryLock(_ context.Context, name string) (ports.Lock, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.attempts++
	if !l.free || l.held != nil {
		return nil, nil
	}
	l.held = &fakeLock{locker: l}
	return l.held, nil
}

func (l *fakeLocker) setFree(free bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.free = free
}

func (l *fakeLocker) tries() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.attempts
}

// holder returns the lock currently handed out, or nil.
func (l *fakeLocker) holder() *fakeLock {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held
}

type fakeLock struct {
	locker *fakeLocker
	lost   atomic.Bool
}

func (k *fakeLock) Check(context.Context) error {
	if k.lost.Load() {
		return errors.New("session gone")
	}
	return nil
}

func (k *fakeLock) Release(context.Context) error {
	k.locker.mu.Lock()
	defer k.locker.mu.Unlock()
	if k.locker.held == k {
		k.locker.held = nil
	}
	return nil
}

// countReport is a cycle's report in these tests.
type countReport int

func (r countReport) Idle() bool { return r == 0 }

func (r countReport) Fields() []zap.Field { return []zap.Field{zap.Int("changed", int(r))} }

// awaitCond polls cond until it holds, failing the test after a deadline.
func awaitCond(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, 10*time.Second, time.Millisecond, msg)
}

func newTestService(t *testing.T, locker ports.Locker, cycle application.CycleFunc) (*application.BackgroundService, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	s := application.NewBackgroundService(application.BackgroundParams{
		Name: "test-job", Interval: 5 * time.Millisecond, Cycle: cycle, Locker: locker, Logger: zap.New(core),
	})
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, logs
}

func TestBackgroundServiceRunsOnlyWhileItLeads(t *testing.T) {
	t.Parallel()
	locker := &fakeLocker{}
	var cycles atomic.Int64
	s, _ := newTestService(t, locker, func(context.Context) (application.Report, error) {
		cycles.Add(1)
		return countReport(0), nil
	})
	require.NoError(t, s.Start(context.Background()))

	awaitCond(t, func() bool { return locker.tries() >= 3 }, "keeps trying to take the lead")
	require.Zero(t, cycles.Load(), "no cycle while another instance leads")
	require.False(t, s.Leading())

	locker.setFree(true)
	awaitCond(t, func() bool { return cycles.Load() >= 2 }, "runs once it leads")
	require.True(t, s.Leading())

	// The lock's session dies and another instance takes it.
	locker.setFree(false)
	lock := locker.holder()
	lock.lost.Store(true)
	awaitCond(t, func() bool { return locker.holder() == nil }, "releases a lost lock")
	require.False(t, s.Leading())
	stopped := cycles.Load()
	tries := locker.tries()
	awaitCond(t, func() bool { return locker.tries() >= tries+3 }, "tries to take the lead again")
	require.Equal(t, stopped, cycles.Load(), "no cycle without the lead")

	locker.setFree(true)
	awaitCond(t, func() bool { return cycles.Load() > stopped }, "takes the lead back")
}

func TestBackgroundServiceStopCancelsWaitsAndReleases(t *testing.T) {
	t.Parallel()
	locker := &fakeLocker{free: true}
	started := make(chan struct{})
	var finished atomic.Bool
	s, logs := newTestService(t, locker, func(ctx context.Context) (application.Report, error) {
		close(started)
		<-ctx.Done()
		time.Sleep(20 * time.Millisecond) // a rollback taking a moment: Stop must wait for it
		finished.Store(true)
		return nil, ctx.Err()
	})
	require.NoError(t, s.Stop(context.Background())) // before Start: nothing to do
	require.NoError(t, s.Start(context.Background()))
	require.Error(t, s.Start(context.Background()), "already started")
	<-started
	require.NotNil(t, locker.holder())

	require.NoError(t, s.Stop(context.Background()))
	require.True(t, finished.Load(), "Stop returns after the cycle ended")
	require.Nil(t, locker.holder(), "Stop releases the lock")
	require.False(t, s.Leading())
	require.NoError(t, s.Stop(context.Background())) // idempotent
	require.Zero(t, logs.FilterLevelExact(zapcore.ErrorLevel).Len(), "a cancelled cycle is not an error")

	// It can run again.
	locker2 := &fakeLocker{free: true}
	var cycles atomic.Int64
	s2, _ := newTestService(t, locker2, func(context.Context) (application.Report, error) {
		cycles.Add(1)
		return countReport(0), nil
	})
	require.NoError(t, s2.Start(context.Background()))
	awaitCond(t, func() bool { return cycles.Load() >= 1 }, "runs")
	require.NoError(t, s2.Stop(context.Background()))
	require.NoError(t, s2.Start(context.Background()))
	n := cycles.Load()
	awaitCond(t, func() bool { return cycles.Load() > n }, "runs again after a restart")
}

func TestBackgroundServiceLogsOnlyCyclesThatDidSomething(t *testing.T) {
	t.Parallel()
	locker := &fakeLocker{free: true}
	results := []struct {
		rep countReport
		err error
	}{{0, nil}, {3, nil}, {0, nil}, {0, errors.New("database on fire")}, {0, nil}, {2, nil}}
	var i atomic.Int64
	s, logs := newTestService(t, locker, func(context.Context) (application.Report, error) {
		n := i.Add(1) - 1
		if n >= int64(len(results)) {
			return countReport(0), nil
		}
		return results[n].rep, results[n].err
	})
	require.NoError(t, s.Start(context.Background()))
	awaitCond(t, func() bool { return i.Load() > int64(len(results)) }, "runs every cycle")
	require.NoError(t, s.Stop(context.Background()))

	cycles := logs.FilterMessage("background job cycle").All()
	require.Len(t, cycles, 2, "one line per cycle that did something, none when idle")
	for j, want := range []int64{3, 2} {
		require.Equal(t, zapcore.InfoLevel, cycles[j].Level)
		ctx := cycles[j].ContextMap()
		require.Equal(t, want, ctx["changed"])
		require.Equal(t, "test-job", ctx["job"])
		require.Contains(t, ctx, "took")
	}
	failures := logs.FilterLevelExact(zapcore.ErrorLevel).All()
	require.Len(t, failures, 1)
	require.Equal(t, "database on fire", failures[0].ContextMap()["error"])
}
