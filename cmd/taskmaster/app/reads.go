package app

import (
	"context"
	"errors"

	"github.com/jmoiron/sqlx"
	"go.uber.org/fx"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/cron"
	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/ui"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// Reads are the services of the reads that may lag behind the primary
// (listings, queue statistics, the dashboard's pages), on the read replica
// when TASKMASTER_READ_DATABASE_URL is set. Without one, the API and the
// dashboard read through their main services and Source is nil.
type Reads struct {
	HTTP      httpadapter.Reads
	Dashboard *ui.Reads
	Source    ports.ReadSource
}

// readOptions wire the reads that may lag.
func readOptions() fx.Option {
	return fx.Options(
		fx.Provide(newReads),
		fx.Invoke(observeReads),
	)
}

// newReads opens the read pool on the replica (falling back to the primary)
// and builds the read use cases on it: read-only transactions, the same
// stores and readers.
func newReads(lc fx.Lifecycle, cfg Config, logger *zap.Logger) (Reads, error) {
	if cfg.ReadDatabaseURL == "" {
		return Reads{}, nil
	}
	p, err := postgres.OpenReadPool(postgres.ReadPoolConfig{
		ReplicaURL: cfg.ReadDatabaseURL, PrimaryURL: cfg.DatabaseURL, Pool: cfg.PoolConfig(),
		MaxLag: cfg.ReadMaxLag, Logger: logger.Named("reads"),
	})
	if err != nil {
		return Reads{}, err
	}
	lc.Append(fx.Hook{OnStart: p.Start, OnStop: func(ctx context.Context) error {
		return errors.Join(p.Stop(ctx), p.Close())
	}})
	return readServices(p.DB(), cfg, p), nil
}

// readServices are the read use cases on db.
func readServices(db *sqlx.DB, cfg Config, source ports.ReadSource) Reads {
	tx := postgres.NewReadOnlyTxRunner(db)
	stats := outbox.NewStatsReader(db)
	tasks := application.NewTaskService(tx, cfg.App)
	workers := application.NewWorkerService(tx, cfg.App)
	queues := application.NewQueueService(stats, tx)
	schedules := application.NewScheduleService(tx, cron.Parse)
	return Reads{
		HTTP: httpadapter.Reads{Tasks: tasks, Workers: workers, Queues: queues, Schedules: schedules},
		Dashboard: &ui.Reads{Tasks: tasks, Workers: workers, Queues: queues, Schedules: schedules,
			Dashboard: application.NewDashboardService(stats, postgres.NewDashboardReader(db))},
		Source: source,
	}
}

// observeReads exports where the reads go, with a read replica.
func observeReads(reg *metrics.Registry, r Reads) {
	if r.Source == nil {
		return
	}
	reg.ObserveReads(func() metrics.ReadFigures {
		st := r.Source.ReadStatus()
		return metrics.ReadFigures{OnReplica: st.OnReplica, Lag: st.Lag, LagKnown: st.LagKnown}
	})
}
