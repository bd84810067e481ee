package application

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
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
	// Name names the job in logs, and its leadership lock.
	Name string
	// Interval is the time between cycles, and between attempts to take
	// the lead while another instance holds it.
	Interval time.Duration
	// Cycle is the job.
	Cycle CycleFunc
	// Locker elects the one instance that runs the job.
	Locker ports.Locker
	// Logger receives one INFO line per cycle that did something.
	Logger *zap.Logger
	// Now is the application clock (time.Now when nil).
	Now NowFunc
}

// BackgroundService runs a job every interval on the one instance that
// holds the job's leadership lock. Every instance tries to take the lock at
// each tick, so when the leader stops or dies (its lock is then released)
// another takes over within one interval. Leadership keeps the job from
// running on every instance at once; it is not what makes it correct: the
// job's transactions lock the rows they change and re-check the domain rule
// under that lock, so a transition happens once even if two instances ever
// overlap.
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

// Leading reports whether this instance holds the job's lock (as of its
// last tick).
func (s *BackgroundService) Leading() bool { return s.leading.Load() }

// Start starts the service's goroutine, which runs a first tick at once. ctx
// only bounds Start itself: the service runs until Stop.
func (s *BackgroundService) Start(ctx context.Context) error {
	return s.StartLoop(ctx, s.p.Name, func(context.Context) (lifecycle.LoopFunc, error) {
		if s.p.Interval <= 0 {
			return nil, errors.New("interval must be positive")
		}
		return s.run, nil
	})
}

// Stop cancels the cycle in progress (its transaction rolls back), releases
// the lock and returns once the goroutine has ended (or ctx ends). Calling it
// again, or before Start, does nothing; the service can be started again
// afterwards.
func (s *BackgroundService) Stop(ctx context.Context) error { return s.StopLoop(ctx) }

func (s *BackgroundService) run(ctx context.Context) {
	var lock ports.Lock
	defer func() {
		s.leading.Store(false)
		if lock != nil {
			if err := lock.Release(context.Background()); err != nil {
				s.p.Logger.Warn("release leadership", zap.Error(err))
			}
		}
	}()
	ticker := time.NewTicker(s.p.Interval)
	defer ticker.Stop()
	for {
		lock = s.lead(ctx, lock)
		if lock != nil {
			s.cycle(ctx)
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

// lead returns the lock when this instance holds it after this tick: it
// checks the lock it held, or tries to take it.
func (s *BackgroundService) lead(ctx context.Context, lock ports.Lock) ports.Lock {
	if lock != nil {
		err := lock.Check(ctx)
		if err == nil {
			return lock
		}
		if ctx.Err() != nil {
			return lock // stopping; run releases it
		}
		s.p.Logger.Warn("lost leadership", zap.Error(err))
		_ = lock.Release(ctx) // the session is gone, and the lock with it
		s.leading.Store(false)
	}
	lock, err := s.p.Locker.TryLock(ctx, s.p.Name)
	if err != nil {
		if ctx.Err() == nil {
			s.p.Logger.Warn("take leadership", zap.Error(err))
		}
		return nil
	}
	if lock != nil {
		s.leading.Store(true)
		s.p.Logger.Info("leading")
	}
	return lock
}

// cycle runs the job once and logs what it did, if anything.
func (s *BackgroundService) cycle(ctx context.Context) {
	start := s.p.Now()
	rep, err := s.p.Cycle(ctx)
	took := s.p.Now().Sub(start)
	switch {
	case err != nil && ctx.Err() != nil:
		// Stopping: the cycle was cancelled, its transaction rolled back.
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
}
