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
	"github.com/taskmaster/taskmaster/adapters/telemetry"
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
			newProgressFlusher,
			newTelemetry,
			newTaskService,
			func(s *application.TaskService) ports.TaskService { return s },
			newWorkerService,
			func(s *application.WorkerService) ports.WorkerService { return s },
			newScheduleService,
			newHTTPServer,
		),
		outboxOptions(),
		readOptions(),
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
	db, err := postgres.Open(ctx, cfg.DatabaseURL, cfg.PoolConfig())
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
	n := postgres.NewNotifier(cfg.ListenURL(), cfg.Pool.Conn, logger.Named("notifier"))
	lc.Append(fx.Hook{OnStart: n.Start, OnStop: n.Stop})
	return n
}

func newTaskService(tx ports.TxRunner, cfg application.Config, n ports.TaskNotifier, f *application.ProgressFlusher, reg *metrics.Registry) *application.TaskService {
	return application.NewTaskService(tx, cfg, application.WithNotifier(n), application.WithProgressFlusher(f),
		application.WithBatchObserver(reg))
}

func newWorkerService(tx ports.TxRunner, cfg application.Config, f *application.ProgressFlusher) *application.WorkerService {
	return application.NewWorkerService(tx, cfg, application.WithHeartbeatProgress(f))
}

// newTelemetry starts exporting the server's spans when the OpenTelemetry
// environment asks for it (nil otherwise); the spans still held are
// exported when the app stops, after the HTTP server (fx stops in reverse
// order of construction).
func newTelemetry(lc fx.Lifecycle, cfg Config, logger *zap.Logger) (*telemetry.Provider, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := telemetry.New(ctx, cfg.Telemetry)
	if err != nil || p == nil {
		return nil, err
	}
	logger.Info("tracing on: exporting spans over OTLP", zap.String("protocol", cfg.Telemetry.Protocol))
	lc.Append(fx.StopHook(p.Shutdown))
	return p, nil
}

// newProgressFlusher announces the coalesced progress reports of this
// instance, from start to stop.
func newProgressFlusher(lc fx.Lifecycle, tx ports.TxRunner, logger *zap.Logger) *application.ProgressFlusher {
	f := application.NewProgressFlusher(tx, logger)
	lc.Append(fx.Hook{OnStart: f.Start, OnStop: f.Stop})
	return f
}

type httpParams struct {
	fx.In
	Lifecycle   fx.Lifecycle
	Config      httpadapter.ServerConfig
	Tasks       ports.TaskService
	Workers     ports.WorkerService
	Queues      ports.QueueService
	Health      ports.HealthChecker
	Logger      *zap.Logger
	Routes      []httpadapter.Route     `group:"routes"`
	Observe     httpadapter.ObserveFunc `optional:"true"`
	Notifier    *postgres.Notifier
	Events      ports.EventStreams `optional:"true"`
	Keys        ports.KeyService
	Schedules   ports.ScheduleService
	Bulk        ports.BulkService
	Workflows   ports.WorkflowService
	Telemetry   *telemetry.Provider
	Limits      *httpadapter.Limits
	NamedLimits ports.LimitService
	Reads       Reads
}

func newHTTPServer(p httpParams) *httpadapter.Server {
	deps := httpadapter.Deps{
		Tasks: p.Tasks, Workers: p.Workers, Queues: p.Queues, Health: p.Health,
		Logger: p.Logger, Observe: p.Observe, Routes: p.Routes, Events: p.Events, Keys: p.Keys, Schedules: p.Schedules,
		Bulk: p.Bulk, Workflows: p.Workflows, Limits: p.Limits, NamedLimits: p.NamedLimits, Reads: p.Reads.HTTP,
		// A stopping server answers waiting long-poll claims at once.
		OnShutdown: []func(){p.Notifier.CloseWaits},
	}
	if p.Telemetry != nil {
		deps.Tracer = p.Telemetry.Tracer()
	}
	srv := httpadapter.NewServer(p.Config, deps)
	p.Lifecycle.Append(fx.Hook{OnStart: srv.Start, OnStop: srv.Stop})
	return srv
}

// observeInFlight exports the HTTP server's admission counts as metrics.
func observeInFlight(reg *metrics.Registry, srv *httpadapter.Server) {
	reg.ObserveInFlight(func() metrics.InFlightFigures {
		n := srv.InFlight()
		return metrics.InFlightFigures{Requests: n.Requests, Claims: n.Claims, Waits: n.Waits, BodyBytes: n.BodyBytes}
	})
}

// observeWaits exports the waiting claims and their wake-ups as metrics.
func observeWaits(reg *metrics.Registry, n *postgres.Notifier) {
	reg.ObserveWaits(func() metrics.WaitFigures {
		s := n.Stats()
		return metrics.WaitFigures{
			Waiting: s.Waiting, Notified: s.Notified, Due: s.Due, Everyone: s.Everyone, Passed: s.Passed,
			DuePending: s.DuePending, DueDropped: s.DueDropped, Awaiting: s.Awaiting, Finished: s.Finished,
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
