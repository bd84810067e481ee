package app

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// Names of the background jobs, in logs and as leadership lock names.
const (
	HeartbeatReaperName = "heartbeat-reaper"
	DeadlineReaperName  = "deadline-reaper"
	LeaseReaperName     = "lease-reaper"
	RetentionName       = "retention"
)

// Reapers are the background jobs `taskmaster serve` runs, each on the one
// instance that holds its leadership lock.
type Reapers struct {
	// Heartbeats applies the liveness thresholds and takes back dead
	// workers' tasks.
	Heartbeats *application.BackgroundService
	// Deadlines dead-letters PENDING tasks past their deadline.
	Deadlines *application.BackgroundService
	// Leases takes back RUNNING tasks whose lease ran out.
	Leases *application.BackgroundService
	// Retention deletes old finished tasks and dead workers; nil when
	// TASKMASTER_RETENTION_TTL is 0.
	Retention *application.BackgroundService
}

// All returns the services that run.
func (r *Reapers) All() []*application.BackgroundService {
	all := []*application.BackgroundService{r.Heartbeats, r.Deadlines, r.Leases}
	if r.Retention != nil {
		all = append(all, r.Retention)
	}
	return all
}

// reapersModule provides the background jobs and runs them with the app.
// Tests replace the application clock with fx.Decorate on
// application.NowFunc.
func reapersModule() fx.Option {
	return fx.Options(
		fx.Provide(
			newLocker,
			func() application.NowFunc { return time.Now },
			newReapers,
		),
		fx.Invoke(func(*Reapers) {}),
	)
}

// lockPoolSize is the size of the leadership locks' own pool: a held lock
// keeps its connection, one per job.
const lockPoolSize = 4

// newLocker returns the leadership Locker on a small pool of its own, so that
// held locks never take connections from the API's pool (with a tiny
// TASKMASTER_DB_MAX_CONNS they could otherwise starve it).
func newLocker(lc fx.Lifecycle, cfg Config) (ports.Locker, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, cfg.DatabaseURL, postgres.PoolConfig{
		MaxOpen: lockPoolSize, MaxIdle: lockPoolSize, MaxLifetime: cfg.Pool.MaxLifetime,
	})
	if err != nil {
		return nil, fmt.Errorf("leadership lock pool: %w", err)
	}
	lc.Append(fx.StopHook(db.Close)) // after the jobs have stopped and released their locks
	return postgres.NewAdvisoryLocker(db), nil
}

type reapersParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    Config
	Tx        ports.TxRunner
	Locker    ports.Locker
	Now       application.NowFunc
	Logger    *zap.Logger
}

func newReapers(p reapersParams) *Reapers {
	logger := p.Logger.Named("reaper")
	service := func(name string, interval time.Duration, cycle application.CycleFunc) *application.BackgroundService {
		s := application.NewBackgroundService(application.BackgroundParams{
			Name: name, Interval: interval, Cycle: cycle, Locker: p.Locker, Logger: logger, Now: p.Now,
		})
		p.Lifecycle.Append(fx.Hook{
			OnStart: s.Start,
			OnStop:  s.Stop,
		})
		return s
	}
	cfg := p.Config
	r := &Reapers{
		Heartbeats: service(HeartbeatReaperName, cfg.ReaperInterval, application.Cycle(
			application.NewHeartbeatReaper(p.Tx, cfg.App.Liveness, application.DefaultReaperBatchSize).Reap)),
		Deadlines: service(DeadlineReaperName, cfg.DeadlineReaperInterval, application.Cycle(
			application.NewDeadlineReaper(p.Tx, application.DefaultReaperBatchSize).Reap)),
		Leases: service(LeaseReaperName, cfg.LeaseReaperInterval, application.Cycle(
			application.NewLeaseReaper(p.Tx, application.DefaultReaperBatchSize).Reap)),
	}
	if cfg.RetentionTTL > 0 {
		r.Retention = service(RetentionName, cfg.RetentionInterval, application.Cycle(
			application.NewRetention(p.Tx, application.RetentionConfig{TTL: cfg.RetentionTTL, BatchSize: cfg.RetentionBatchSize}).Apply))
	} else {
		logger.Info("retention disabled (TASKMASTER_RETENTION_TTL=0): finished tasks and dead workers are kept")
	}
	return r
}
