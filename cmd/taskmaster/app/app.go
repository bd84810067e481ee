// Package app wires Taskmaster together with fx: configuration, storage,
// use cases, the HTTP server and background services. It is the only
// package that knows every other one.
package app

import (
	"context"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/fx"
	"go.uber.org/fx/fxevent"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// New returns the fx application of `taskmaster serve`. extra options are
// appended (tests use fx.Populate to reach components).
func New(cfg Config, logger *zap.Logger, extra ...fx.Option) *fx.App {
	opts := []fx.Option{
		fx.Supply(cfg, cfg.App, cfg.HTTP, logger),
		fx.WithLogger(func() fxevent.Logger {
			return &fxevent.ZapLogger{Logger: logger.Named("fx").WithOptions(zap.IncreaseLevel(zapcore.WarnLevel))}
		}),
		fx.Provide(
			newDatabase,
			fx.Annotate(postgres.NewTxRunner, fx.As(new(ports.TxRunner))),
			fx.Annotate(outbox.NewStatsReader, fx.As(new(ports.StatsReader))),
			fx.Annotate(postgres.NewHealth, fx.As(new(ports.HealthChecker))),
			newNotifier,
			func(n *postgres.Notifier) ports.TaskNotifier { return n },
			newTaskService,
			func(s *application.TaskService) ports.TaskService { return s },
			application.NewWorkerService,
			func(s *application.WorkerService) ports.WorkerService { return s },
			newScheduleService,
			newHTTPServer,
		),
		outboxOptions(),
		securityOptions(),
		dashboardOptions(),
		fx.Invoke(func(*httpadapter.Server) {}),
		fx.Invoke(observeInFlight),
		fx.Invoke(observeWaits),
		fx.Invoke(newPprofServer),
		reapersModule(),
		schedulerModule(),
		bulkModule(),
		pushModule(),
		fx.StartTimeout(60 * time.Second),
		fx.StopTimeout(60 * time.Second),
	}
	return fx.New(append(opts, extra...)...)
}

// newDatabase opens the pool and applies pending migrations (under an
// advisory lock, so concurrent instances apply each exactly once).
func newDatabase(lc fx.Lifecycle, cfg Config, logger *zap.Logger) (*sqlx.DB, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.Pool)
	if err != nil {
		return nil, err
	}
	if err := postgres.Migrate(ctx, db); err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("migrate: %w", err)
	}
	logger.Info("database ready", zap.Int("max_conns", cfg.Pool.MaxOpen))
	lc.Append(fx.StopHook(db.Close))
	return db, nil
}

// newNotifier listens for task wake-ups on one dedicated connection.
func newNotifier(lc fx.Lifecycle, cfg Config, logger *zap.Logger) *postgres.Notifier {
	n := postgres.NewNotifier(cfg.DatabaseURL, cfg.Pool.Conn, logger.Named("notifier"))
	lc.Append(fx.Hook{OnStart: n.Start, OnStop: n.Stop})
	return n
}

func newTaskService(tx ports.TxRunner, cfg application.Config, n ports.TaskNotifier) *application.TaskService {
	return application.NewTaskService(tx, cfg, application.WithNotifier(n))
}

type httpParams struct {
	fx.In
	Lifecycle fx.Lifecycle
	Config    httpadapter.ServerConfig
	Tasks     ports.TaskService
	Workers   ports.WorkerService
	Queues    ports.QueueService
	Health    ports.HealthChecker
	Logger    *zap.Logger
	Routes    []httpadapter.Route     `group:"routes"`
	Observe   httpadapter.ObserveFunc `optional:"true"`
	Notifier  *postgres.Notifier
	Events    ports.EventStreams `optional:"true"`
	Keys      ports.KeyService
	Schedules ports.ScheduleService
	Bulk      ports.BulkService
	Limits    ports.LimitService
}

func newHTTPServer(p httpParams) *httpadapter.Server {
	srv := httpadapter.NewServer(p.Config, httpadapter.Deps{
		Tasks: p.Tasks, Workers: p.Workers, Queues: p.Queues, Health: p.Health,
		Logger: p.Logger, Observe: p.Observe, Routes: p.Routes, Events: p.Events, Keys: p.Keys, Schedules: p.Schedules,
		Bulk: p.Bulk, Limits: p.Limits,
		// A stopping server answers waiting long-poll claims at once.
		OnShutdown: []func(){p.Notifier.CloseWaits},
	})
	p.Lifecycle.Append(fx.Hook{OnStart: srv.Start, OnStop: srv.Stop})
	return srv
}

// observeInFlight exports the HTTP server's admission counts as metrics.
func observeInFlight(reg *metrics.Registry, srv *httpadapter.Server) {
	reg.ObserveInFlight(func() (int64, int64, int64) {
		n := srv.InFlight()
		return n.Requests, n.Claims, n.BodyBytes
	})
}

// observeWaits exports the waiting claims and their wake-ups as metrics.
func observeWaits(reg *metrics.Registry, n *postgres.Notifier) {
	reg.ObserveWaits(func() metrics.WaitFigures {
		s := n.Stats()
		return metrics.WaitFigures{
			Waiting: s.Waiting, Notified: s.Notified, Due: s.Due, Everyone: s.Everyone, Passed: s.Passed,
			DuePending: s.DuePending, DueDropped: s.DueDropped,
		}
	})
}

// NewLogger builds the zap logger the config asks for.
func NewLogger(level, format string) (*zap.Logger, error) {
	var zcfg zap.Config
	if format == "console" {
		zcfg = zap.NewDevelopmentConfig()
		zcfg.DisableStacktrace = true
	} else {
		zcfg = zap.NewProductionConfig()
		zcfg.DisableStacktrace = true
		zcfg.EncoderConfig.TimeKey = "time"
		zcfg.EncoderConfig.EncodeTime = zapcore.ISO8601TimeEncoder
	}
	lvl, err := zapcore.ParseLevel(level)
	if err != nil {
		return nil, err
	}
	zcfg.Level = zap.NewAtomicLevelAt(lvl)
	return zcfg.Build()
}
