package application_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/leadership"
	"github.com/taskmaster/taskmaster/ports"
)

// fakeElector hands its one lease to this instance while free; a free lease
// is renewed in the same term, a lease given back (or taken by "another
// instance" meanwhile) is granted again in a new term.
type fakeElector struct {
	mu       sync.Mutex
	free     bool
	busy     bool
	term     int64
	held     bool
	attempts int
	released []ports.Fence
	ttl      time.Duration
}

func (e *fakeElector) Lead(_ context.Context, job string) (ports.Fence, bool, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.attempts++
	switch {
	case e.busy:
		return ports.Fence{}, false, ports.ErrLeaseBusy
	case !e.free:
		e.held = false
		return ports.Fence{}, false, nil
	case !e.held:
		e.term++
		e.held = true
	}
	return e.fence(job), true, nil
}

func (e *fakeElector) fence(job string) ports.Fence {
	return ports.Fence{Job: job, Owner: "me", Term: e.term, TTL: e.ttl}
}

func (e *fakeElector) Release(_ context.Context, f ports.Fence) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.released = append(e.released, f)
	if f.Term == e.term {
		e.held = false
	}
	return nil
}

func (e *fakeElector) TTL() time.Duration { return e.ttl }

func (e *fakeElector) set(fn func(e *fakeElector)) {
	e.mu.Lock()
	defer e.mu.Unlock()
	fn(e)
}

func (e *fakeElector) tries() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.attempts
}

// current returns the fence of the term this instance holds, or the zero
// Fence.
func (e *fakeElector) current(job string) ports.Fence {
	e.mu.Lock()
	defer e.mu.Unlock()
	if !e.held {
		return ports.Fence{}
	}
	return e.fence(job)
}

func (e *fakeElector) releases() []ports.Fence {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]ports.Fence(nil), e.released...)
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

func newTestService(t *testing.T, elector ports.Elector, interval time.Duration, cycle application.CycleFunc) (*application.BackgroundService, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(zapcore.InfoLevel)
	s := application.NewBackgroundService(application.BackgroundParams{
		Name: "test-job", Interval: interval, Cycle: cycle, Elector: elector, Logger: zap.New(core),
	})
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	return s, logs
}

// Each cycle runs with the fence of the term it runs in.
func TestBackgroundServiceRunsOnlyWhileItLeadsUnderItsFence(t *testing.T) {
	t.Parallel()
	elector := &fakeElector{ttl: time.Minute}
	var (
		cycles atomic.Int64
		mu     sync.Mutex
		fences []ports.Fence
	)
	s, logs := newTestService(t, elector, 5*time.Millisecond, func(ctx context.Context) (application.Report, error) {
		f, ok := ports.FenceFrom(ctx)
		require.True(t, ok, "a cycle runs fenced")
		mu.Lock()
		fences = append(fences, f)
		mu.Unlock()
		cycles.Add(1)
		return countReport(0), nil
	})
	require.NoError(t, s.Start(context.Background()))

	awaitCond(t, func() bool { return elector.tries() >= 3 }, "keeps asking for the lease")
	require.Zero(t, cycles.Load(), "no cycle while another instance leads")
	require.False(t, s.Leading())

	elector.set(func(e *fakeElector) { e.free = true })
	awaitCond(t, func() bool { return cycles.Load() >= 2 }, "runs once it leads")
	require.True(t, s.Leading())
	require.Equal(t, 1, logs.FilterMessage("leading").Len())

	// Another instance takes the lease over.
	elector.set(func(e *fakeElector) { e.free = false })
	awaitCond(t, func() bool { return !s.Leading() }, "notices it lost the lead")
	require.Equal(t, 1, logs.FilterMessage("lost leadership").Len())
	stopped := cycles.Load()
	tries := elector.tries()
	awaitCond(t, func() bool { return elector.tries() >= tries+3 }, "asks for the lease again")
	require.Equal(t, stopped, cycles.Load(), "no cycle without the lead")

	elector.set(func(e *fakeElector) { e.free = true })
	awaitCond(t, func() bool { return cycles.Load() > stopped }, "takes the lead back")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, int64(1), fences[0].Term)
	require.Equal(t, int64(2), fences[len(fences)-1].Term, "a new term after the takeover")
	for _, f := range fences {
		require.Equal(t, "test-job", f.Job)
		require.Equal(t, "me", f.Owner)
	}
}

// A cycle whose transactions find the term over (the fence failed: another
// instance took over while this one was frozen) ends the leadership, quietly
// but for one warning, until the elector grants a term again.
func TestBackgroundServiceStepsDownWhenACycleFindsItsTermOver(t *testing.T) {
	t.Parallel()
	elector := &fakeElector{free: true, ttl: time.Minute}
	var cycles atomic.Int64
	s, logs := newTestService(t, elector, 5*time.Millisecond, func(ctx context.Context) (application.Report, error) {
		if cycles.Add(1) == 2 {
			return countReport(1), fmt.Errorf("reap: %w", leadership.ErrLost)
		}
		return countReport(0), nil
	})
	require.NoError(t, s.Start(context.Background()))
	awaitCond(t, func() bool { return cycles.Load() >= 4 }, "runs on")
	lost := logs.FilterMessage("lost leadership").All()
	require.Len(t, lost, 1)
	require.Equal(t, zapcore.WarnLevel, lost[0].Level)
	require.Equal(t, int64(1), lost[0].ContextMap()["term"])
	require.Equal(t, int64(1), lost[0].ContextMap()["changed"], "says what committed before the term ended")
	require.Zero(t, logs.FilterLevelExact(zapcore.ErrorLevel).Len(), "a lost term is not a failure")
	require.Equal(t, 2, logs.FilterMessage("leading").Len(), "leads again once the elector confirms it")
}

// While the lease row is busy (a batch of this very leader, or another
// instance asking) the service keeps the state it had.
func TestBackgroundServiceKeepsItsStateWhileTheLeaseIsBusy(t *testing.T) {
	t.Parallel()
	elector := &fakeElector{free: true, ttl: time.Minute}
	var cycles atomic.Int64
	s, logs := newTestService(t, elector, 5*time.Millisecond, func(context.Context) (application.Report, error) {
		cycles.Add(1)
		return countReport(0), nil
	})
	require.NoError(t, s.Start(context.Background()))
	awaitCond(t, func() bool { return cycles.Load() >= 1 }, "leads")
	elector.set(func(e *fakeElector) { e.busy = true })
	n := cycles.Load()
	awaitCond(t, func() bool { return cycles.Load() >= n+3 }, "a busy lease does not stop the leader")
	require.True(t, s.Leading())
	require.Zero(t, logs.FilterMessage("lost leadership").Len())
	require.Zero(t, logs.FilterMessage("take leadership").Len())
}

// The lease is renewed every third of its TTL even when the job's interval
// is longer; the job still runs once per interval.
func TestBackgroundServiceRenewsItsLeaseMoreOftenThanItsIntervalWhenNeeded(t *testing.T) {
	t.Parallel()
	elector := &fakeElector{free: true, ttl: 30 * time.Millisecond}
	var cycles atomic.Int64
	s, _ := newTestService(t, elector, time.Hour, func(context.Context) (application.Report, error) {
		cycles.Add(1)
		return countReport(0), nil
	})
	require.NoError(t, s.Start(context.Background()))
	awaitCond(t, func() bool { return elector.tries() >= 10 }, "renews every 10 ms")
	require.Equal(t, int64(1), cycles.Load(), "one cycle: the interval is an hour")
}

func TestBackgroundServiceStopCancelsWaitsAndReleases(t *testing.T) {
	t.Parallel()
	elector := &fakeElector{free: true, ttl: time.Minute}
	started := make(chan struct{})
	var finished atomic.Bool
	s, logs := newTestService(t, elector, 5*time.Millisecond, func(ctx context.Context) (application.Report, error) {
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
	held := elector.current("test-job")
	require.True(t, held.Valid())

	require.NoError(t, s.Stop(context.Background()))
	require.True(t, finished.Load(), "Stop returns after the cycle ended")
	require.Equal(t, []ports.Fence{held}, elector.releases(), "Stop gives the lease up")
	require.False(t, elector.current("test-job").Valid())
	require.False(t, s.Leading())
	require.NoError(t, s.Stop(context.Background())) // idempotent
	require.Zero(t, logs.FilterLevelExact(zapcore.ErrorLevel).Len(), "a cancelled cycle is not an error")

	// It can run again.
	elector2 := &fakeElector{free: true, ttl: time.Minute}
	var cycles atomic.Int64
	s2, _ := newTestService(t, elector2, 5*time.Millisecond, func(context.Context) (application.Report, error) {
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
	elector := &fakeElector{free: true, ttl: time.Minute}
	results := []struct {
		rep countReport
		err error
	}{{0, nil}, {3, nil}, {0, nil}, {0, errors.New("database on fire")}, {0, nil}, {2, nil}}
	var i atomic.Int64
	s, logs := newTestService(t, elector, 5*time.Millisecond, func(context.Context) (application.Report, error) {
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
