package app

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jmoiron/sqlx"
	"go.uber.org/fx"
	"go.uber.org/zap"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// outboxOptions wire the outbox consumers (the Watermill router of the
// queue statistics and metrics projections), the outbox janitor, the event
// streams of GET /events/v1, and the Prometheus registry served at GET
// /metrics and GET /actuator/prometheus.
func outboxOptions() fx.Option {
	return fx.Options(
		fx.Provide(
			newOutboxRouter,
			newOutboxJanitor,
			newEventStreams,
			func(s *outbox.Streams) ports.EventStreams { return s },
			newMetricsRegistry,
			func(reg *metrics.Registry) httpadapter.ObserveFunc { return reg.ObserveHTTP },
			fx.Annotate(metricsRoutes, fx.ResultTags(`group:"routes,flatten"`)),
		),
		fx.Invoke(func(*outbox.Router, *outbox.Janitor) {}),
	)
}

func newOutboxRouter(lc fx.Lifecycle, db *sqlx.DB, cfg Config, logger *zap.Logger) (*outbox.Router, error) {
	r, err := outbox.NewRouter(db.DB, cfg.Outbox, logger.Named("outbox"))
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

// newEventStreams runs the one outbox reader of the instance's event
// streams. It starts before the HTTP server (which depends on it) and stops
// after it.
func newEventStreams(lc fx.Lifecycle, db *sqlx.DB, cfg Config, logger *zap.Logger) (*outbox.Streams, error) {
	s, err := outbox.NewStreams(outbox.NewFeed(db.DB, cfg.Outbox.StreamReadBytes, logger.Named("events")), cfg.Outbox, logger.Named("events"))
	if err != nil {
		return nil, err
	}
	lc.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
	return s, nil
}

func newMetricsRegistry(db *sqlx.DB, streams *outbox.Streams, cfg Config, logger *zap.Logger) *metrics.Registry {
	return metrics.NewRegistry(metrics.Params{
		Source:         outbox.NewMetricsSource(db),
		DB:             db.DB,
		Logger:         logger,
		Streams:        streams.Stats,
		MaxQueueSeries: cfg.MetricsMaxQueues,
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

// ErrUsage marks a command-line mistake of the commands of this package;
// the binary exits with code 2.
var ErrUsage = errors.New("usage error")

const outboxUsage = `usage: taskmaster outbox poison list [--json]
       taskmaster outbox poison replay ID | --all
       taskmaster outbox poison discard ID
Works on the database (TASKMASTER_DATABASE_URL or --database-url), with or without a running service.`

// OutboxCommand is `taskmaster outbox poison ...`: it lists the outbox
// messages the projections set aside, replays them once the cause is fixed
// (each applied once, however many replays run), or discards one no fix can
// make applicable.
func OutboxCommand(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) error {
	usage := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s\n%s", ErrUsage, fmt.Sprintf(format, a...), outboxUsage)
	}
	if len(args) < 2 || args[0] != "poison" {
		return usage("expected: outbox poison list|replay|discard")
	}
	verb := args[1]
	fs := flag.NewFlagSet("outbox poison "+verb, flag.ContinueOnError)
	fs.SetOutput(stderr)
	dbURL := fs.String("database-url", getenv("TASKMASTER_DATABASE_URL"), "PostgreSQL URL (env TASKMASTER_DATABASE_URL)")
	asJSON := fs.Bool("json", false, "list as JSON")
	all := fs.Bool("all", false, "replay every set-aside message")
	if err := fs.Parse(args[2:]); err != nil {
		return usage("%v", err)
	}
	if *dbURL == "" {
		return usage("set TASKMASTER_DATABASE_URL or --database-url")
	}
	var id int64
	switch {
	case verb == "list" && fs.NArg() == 0:
	case verb == "replay" && *all && fs.NArg() == 0:
	case (verb == "replay" || verb == "discard") && !*all && fs.NArg() == 1:
		var err error
		if id, err = strconv.ParseInt(fs.Arg(0), 10, 64); err != nil {
			return usage("%q is not a set-aside message id", fs.Arg(0))
		}
	default:
		return usage("unexpected arguments")
	}
	// A one-shot command: no prepared statements (it could go through a
	// transaction pooler, which cannot keep them).
	db, err := postgres.Open(ctx, *dbURL, postgres.PoolConfig{MaxOpen: 2, MaxIdle: 2, Conn: postgres.DefaultConnConfig(), StatementCacheSize: -1})
	if err != nil {
		return err
	}
	defer db.Close()
	poison := outbox.NewPoison(db.DB)
	switch {
	case verb == "list":
		msgs, err := poison.List(ctx)
		if err != nil {
			return err
		}
		return printPoison(stdout, msgs, *asJSON)
	case verb == "replay" && *all:
		n, err := poison.ReplayAll(ctx)
		fmt.Fprintf(stdout, "replayed %d set-aside messages\n", n)
		return err
	case verb == "replay":
		if err := poison.Replay(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "replayed set-aside message %d\n", id)
		return nil
	default:
		if err := poison.Discard(ctx, id); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "discarded set-aside message %d\n", id)
		return nil
	}
}

// poisonJSON is one set-aside message in `outbox poison list --json`.
type poisonJSON struct {
	ID            int64     `json:"id"`
	Projection    string    `json:"projection"`
	TransactionID uint64    `json:"transaction_id"`
	Offset        int64     `json:"offset"`
	Events        int       `json:"events"`
	Attempts      int       `json:"attempts"`
	SetAsideAt    time.Time `json:"set_aside_at"`
	Error         string    `json:"error"`
}

func printPoison(w io.Writer, msgs []outbox.PoisonMessage, asJSON bool) error {
	if asJSON {
		out := make([]poisonJSON, len(msgs))
		for i, m := range msgs {
			out[i] = poisonJSON{ID: m.ID, Projection: m.Projection, TransactionID: m.Position.TransactionID,
				Offset: m.Position.Offset, Events: m.Events, Attempts: m.Attempts, SetAsideAt: m.SetAsideAt.UTC(), Error: m.Error}
		}
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPROJECTION\tPOSITION\tEVENTS\tATTEMPTS\tSET ASIDE\tERROR")
	for _, m := range msgs {
		events := strconv.Itoa(m.Events)
		if m.Events < 0 {
			events = "undecodable"
		}
		fmt.Fprintf(tw, "%d\t%s\t%d/%d\t%s\t%d\t%s\t%s\n", m.ID, m.Projection, m.Position.TransactionID, m.Position.Offset,
			events, m.Attempts, m.SetAsideAt.UTC().Format(time.RFC3339), m.Error)
	}
	return tw.Flush()
}
