package application

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/domain/leadership"
	"github.com/taskmaster/taskmaster/ports"
)

// NowFunc returns the application's current time. Background services use it
// only to time and log their cycles: every decision reads the database clock,
// so instances whose clocks disagree still decide alike.
type NowFunc func() time.Time

// Report is what one cycle of a background job did.
type Report interface {
	// Idle reports whether the cycle changed nothing; idle cycles are not
	// logged.
	Idle() bool
	// Fields are the cycle's counts, for its log line.
	Fields() []zap.Field
}

// CycleFunc runs one cycle of a background job.
type CycleFunc func(ctx context.Context) (Report, error)

// Cycle adapts a use case's cycle method to a CycleFunc.
func Cycle[R Report](run func(ctx context.Context) (R, error)) CycleFunc {
	return func(ctx context.Context) (Report, error) { return run(ctx) }
}

// BackgroundParams describe a background service.
type BackgroundParams struct {
	// Name names the job in logs, and its leadership lease.
	Name string
	// Interval is the time between cycles.
	Interval time.Duration
	// Cycle is the job.
	Cycle CycleFunc
	// Elector elects the one instance that runs the job.
	Elector ports.Elector
	// Logger receives one INFO line per cycle that did something.
	Logger *zap.Logger
	// Now is the application clock (time.Now when nil).
	Now NowFunc
}

// releaseTimeout bounds giving the lease up when the service stops.
const releaseTimeout = 5 * time.Second

// BackgroundService runs a job every interval on the one instance that
// leads it. Every instance asks the elector for the job's lease at each
// tick (every interval, or every third of the lease's TTL when that is
// shorter): the leader renews its lease, the others take it over once it has
// expired. A leader that stops, crashes, freezes or loses the database is
// replaced within the TTL plus one tick. Each cycle runs with the leader's
// fence in its context, so every transaction of the cycle first renews the
// lease for that term and fails if the term is over: a former leader that
// wakes up commits nothing. Leadership keeps the job from running on every
// instance at once; correctness does not rest on it alone: the job's
// transactions lock the rows they change and re-check the domain rule under
// that lock.
type BackgroundService struct {
	lifecycle.Base
	p       BackgroundParams
	leading atomic.Bool
}

var _ lifecycle.Service = (*BackgroundService)(nil)

// NewBackgroundService returns a stopped service.
func NewBackgroundService(p BackgroundParams) *BackgroundService {
	if p.Now == nil {
		p.Now = time.Now
	}
	if p.Logger == nil {
		p.Logger = zap.NewNop()
	}
	p.Logger = p.Logger.With(zap.String("job", p.Name))
	return &BackgroundService{p: p}
}

// Name returns the job's name.
func (s *BackgroundService) Name() string { return s.p.Name }

// Leading reports whether this instance leads the job (as of its last
// tick).
func (s *BackgroundService) Leading() bool { return s.leading.Load() }

// tick is how often the service asks for the lease: every interval, or more
// often when a third of the lease's TTL is shorter, so that a leader renews
// its lease well before it expires.
func (s *BackgroundService) tick() time.Duration {
	if ttl := s.p.Elector.TTL(); ttl > 0 {
		return min(s.p.Interval, ttl/3)
	}
	return s.p.Interval
}

// Start starts the service's goroutine, which runs a first tick at once. ctx
// only bounds Start itself: the service runs until Stop.
func (s *BackgroundService) Start(ctx context.Context) error {
	return s.StartLoop(ctx, s.p.Name, func(context.Context) (lifecycle.LoopFunc, error) {
		if s.p.Interval <= 0 {
			return nil, errors.New("interval must be positive")
		}
		if s.tick() <= 0 {
			return nil, errors.New("lease TTL too short")
		}
		return s.run, nil
	})
}

// Stop cancels the cycle in progress (its transaction rolls back), gives
// the lease up and returns once the goroutine has ended (or ctx ends).
// Calling it again, or before Start, does nothing; the service can be started
// again afterwards.
func (s *BackgroundService) Stop(ctx context.Context) error { return s.StopLoop(ctx) }

// term is what the loop knows of its leadership.
type term struct {
	fence ports.Fence // valid while leading
	// lastCycle is when the last cycle of this term started (zero: none
	// yet, the next tick runs one).
	lastCycle time.Time
}

func (s *BackgroundService) run(ctx context.Context) {
	var cur term
	defer func() {
		s.leading.Store(false)
		if cur.fence.Valid() {
			rctx, cancel := context.WithTimeout(context.Background(), releaseTimeout)
			defer cancel()
			if err := s.p.Elector.Release(rctx, cur.fence); err != nil {
				s.p.Logger.Warn("release leadership", zap.Error(err))
			}
		}
	}()
	ticker := time.NewTicker(s.tick())
	defer ticker.Stop()
	for {
		cur = s.lead(ctx, cur)
		if s.leading.Load() && (cur.lastCycle.IsZero() || s.p.Now().Sub(cur.lastCycle) >= s.p.Interval) {
			cur.lastCycle = s.p.Now()
			cur = s.cycle(ctx, cur)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			if ctx.Err() != nil { // both were ready; select picked at random
				return
			}
		}
	}
}

// lead asks for the lease and returns the leadership after this tick,
// logging when it begins or ends.
func (s *BackgroundService) lead(ctx context.Context, cur term) term {
	f, ok, err := s.p.Elector.Lead(ctx, s.p.Name)
	switch {
	case errors.Is(err, ports.ErrLeaseBusy):
		return cur // in use by a batch or another instance's Lead: nothing changed we would know of
	case err != nil:
		if ctx.Err() == nil {
			s.p.Logger.Warn("take leadership", zap.Error(err))
		}
		s.leading.Store(false) // no cycle until the lease is confirmed again
		return cur
	case !ok:
		if cur.fence.Valid() {
			s.p.Logger.Warn("lost leadership", zap.Int64("term", cur.fence.Term))
		}
		s.leading.Store(false)
		return term{}
	}
	if f != cur.fence {
		s.p.Logger.Info("leading", zap.Int64("term", f.Term), zap.String("owner", f.Owner))
		cur = term{fence: f}
	}
	s.leading.Store(true)
	return cur
}

// cycle runs the job once under the term's fence and logs what it did, if
// anything. A cycle that finds its term over ends the leadership.
func (s *BackgroundService) cycle(ctx context.Context, cur term) term {
	start := s.p.Now()
	rep, err := s.p.Cycle(ports.WithFence(ctx, cur.fence))
	took := s.p.Now().Sub(start)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopping: the cycle was cancelled, its transaction rolled back.
	case errors.Is(err, leadership.ErrLost):
		// Batches committed before the term ended stay done.
		fields := []zap.Field{zap.Int64("term", cur.fence.Term), zap.Error(err)}
		if rep != nil {
			fields = append(fields, rep.Fields()...)
		}
		s.p.Logger.Warn("lost leadership", fields...)
		s.leading.Store(false)
		return term{}
	case err != nil:
		// Batches committed before the failure stay done; say how many.
		fields := []zap.Field{zap.Error(err), zap.Duration("took", took)}
		if rep != nil {
			fields = append(fields, rep.Fields()...)
		}
		s.p.Logger.Error("background job failed", fields...)
	case rep != nil && !rep.Idle():
		s.p.Logger.Info("background job cycle", append(rep.Fields(), zap.Duration("took", took))...)
	}
	return cur
}
