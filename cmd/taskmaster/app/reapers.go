package app

import (
	"math/rand/v2"
	"slices"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// Names of the background jobs, in logs and as the jobs of their leadership
// leases (leader_leases.job).
const (
	HeartbeatReaperName = "heartbeat-reaper"
	DeadlineReaperName  = "deadline-reaper"
	LeaseReaperName     = "lease-reaper"
	TimeoutReaperName   = "timeout-reaper"
	RetentionName       = "retention"
)

// LeaderJobs names every background job that one instance at a time leads
// (its row in leader_leases), sorted: what a test or an operator checks is
// led after a failover.
func LeaderJobs() []string {
	jobs := []string{HeartbeatReaperName, DeadlineReaperName, LeaseReaperName, TimeoutReaperName, RetentionName,
		SchedulerName, PurgeJobsName}
	slices.Sort(jobs)
	return jobs
}

// Reapers are the background jobs `taskmaster serve` runs, each on the one
// instance that holds its leadership lease.
type Reapers struct {
	// Heartbeats applies the liveness thresholds and takes back dead
	// workers' tasks.
	Heartbeats *application.BackgroundService
	// Deadlines dead-letters PENDING tasks past their deadline.
	Deadlines *application.BackgroundService
	// Leases takes back RUNNING tasks whose lease ran out.
	Leases *application.BackgroundService
	// Timeouts ends RUNNING attempts that used up their time limit.
	Timeouts *application.BackgroundService
	// Retention deletes old finished tasks and dead workers; nil when
	// TASKMASTER_RETENTION_TTL is 0.
	Retention *application.BackgroundService
}

// All returns the services that run.
func (r *Reapers) All() []*application.BackgroundService {
	all := []*application.BackgroundService{r.Heartbeats, r.Deadlines, r.Leases, r.Timeouts}
	if r.Retention != nil {
		all = append(all, r.Retention)
	}
	return all
}

// reapersModule provides the background jobs and runs them with the app.
// Tests replace the application clock with fx.Decorate on
// application.NowFunc, and the elector on ports.Elector.
func reapersModule() fx.Option {
	return fx.Options(
		fx.Provide(
			func() InstanceID { return InstanceID(postgres.NewInstanceID()) },
			newElector,
			func() application.NowFunc { return time.Now },
			newReapers,
		),
		fx.Invoke(func(*Reapers) {}),
	)
}

// newElector returns the leadership elector of this instance, on the main
// pool: leadership holds no connection between its short transactions.
func newElector(db *sqlx.DB, cfg Config, id InstanceID, logger *zap.Logger) ports.Elector {
	e := postgres.NewElector(db, string(id), cfg.LeaderLeaseTTL)
	logger.Info("instance", zap.String("instance_id", e.Owner()))
	return e
}

type reapersParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    Config
	Tx        ports.TxRunner
	Elector   ports.Elector
	Now       application.NowFunc
	Logger    *zap.Logger
}

func newReapers(p reapersParams) *Reapers {
	logger := p.Logger.Named("reaper")
	service := func(name string, interval time.Duration, cycle application.CycleFunc) *application.BackgroundService {
		s := application.NewBackgroundService(application.BackgroundParams{
			Name: name, Interval: interval, Cycle: cycle, Elector: p.Elector, Logger: logger, Now: p.Now,
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
		Timeouts: service(TimeoutReaperName, cfg.TimeoutReaperInterval, application.Cycle(
			application.NewTimeoutReaper(p.Tx, cfg.App.Backoff, rand.Float64, application.DefaultReaperBatchSize).Reap)),
	}
	if cfg.RetentionTTL > 0 {
		r.Retention = service(RetentionName, cfg.RetentionInterval, application.Cycle(
			application.NewRetention(p.Tx, application.RetentionConfig{TTL: cfg.RetentionTTL, BatchSize: cfg.RetentionBatchSize}).Apply))
	} else {
		logger.Info("retention disabled (TASKMASTER_RETENTION_TTL=0): finished tasks and dead workers are kept")
	}
	return r
}
