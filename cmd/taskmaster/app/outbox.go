package app

import (
	"net/http"

	"github.com/jmoiron/sqlx"
	"go.uber.org/fx"
	"go.uber.org/zap"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// outboxOptions wire the outbox consumers (the Watermill router with the
// queue statistics and metrics projectors), the outbox janitor, the event
// feed of GET /events/v1, and the Prometheus registry served at GET /metrics
// and GET /actuator/prometheus.
func outboxOptions() fx.Option {
	return fx.Options(
		fx.Provide(
			newOutboxRouter,
			newOutboxJanitor,
			fx.Annotate(newEventFeed, fx.As(new(ports.EventFeed))),
			newMetricsRegistry,
			func(reg *metrics.Registry) httpadapter.ObserveFunc { return reg.ObserveHTTP },
			fx.Annotate(metricsRoutes, fx.ResultTags(`group:"routes,flatten"`)),
		),
		fx.Invoke(func(*outbox.Router, *outbox.Janitor) {}),
	)
}

func newOutboxRouter(lc fx.Lifecycle, db *sqlx.DB, cfg Config, logger *zap.Logger) (*outbox.Router, error) {
	r, err := outbox.NewRouter(db.DB, cfg.Outbox, logger.Named("outbox"),
		outbox.NewQueueStatsProjector(), outbox.NewMetricsProjector())
	if err != nil {
		return nil, err
	}
	// Start waits for the subscriptions with fx's start context; the router
	// itself runs on its own context until Stop.
	lc.Append(fx.Hook{OnStart: r.Start, OnStop: r.Stop})
	return r, nil
}

func newOutboxJanitor(lc fx.Lifecycle, db *sqlx.DB, cfg Config, logger *zap.Logger) (*outbox.Janitor, error) {
	j, err := outbox.NewJanitor(db.DB, cfg.Outbox, logger.Named("outbox-janitor"))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: j.Start, OnStop: j.Stop})
	return j, nil
}

func newEventFeed(db *sqlx.DB, cfg Config, logger *zap.Logger) *outbox.Feed {
	return outbox.NewFeed(db.DB, cfg.Outbox.PollInterval, logger.Named("events"))
}

func newMetricsRegistry(db *sqlx.DB, logger *zap.Logger) *metrics.Registry {
	return metrics.NewRegistry(metrics.Params{
		Source: outbox.NewMetricsSource(db),
		DB:     db.DB,
		Logger: logger,
	})
}

// metricsRoutes serves the registry at /metrics and, for scrape configs
// written for the seed's Java Taskmaster, at /actuator/prometheus.
func metricsRoutes(reg *metrics.Registry) []httpadapter.Route {
	h := reg.Handler()
	read := httpadapter.Requires(apikey.ScopeRead)
	return []httpadapter.Route{
		{Path: "/metrics", Methods: []string{http.MethodGet}, Handler: h, Access: read},
		{Path: "/actuator/prometheus", Methods: []string{http.MethodGet}, Handler: h, Access: read},
	}
}
