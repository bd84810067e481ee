package app

import (
	"net/http"
	"strings"

	"github.com/jmoiron/sqlx"
	"go.uber.org/fx"
	"go.uber.org/zap"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/ui"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// dashboardOptions wire the operations dashboard under /ui/: its sessions
// (logins with an API key), its read use cases and its handler, mounted as
// a public route of the API (the dashboard checks its sessions itself).
func dashboardOptions() fx.Option {
	return fx.Options(
		fx.Provide(
			func(tx ports.TxRunner, keys ports.KeyService) ports.SessionService {
				return application.NewSessionService(tx, keys, application.SessionConfig{})
			},
			func(db *sqlx.DB) ports.DashboardService {
				return application.NewDashboardService(outbox.NewStatsReader(db), postgres.NewDashboardReader(db))
			},
			fx.Annotate(dashboardRoutes, fx.ResultTags(`group:"routes,flatten"`)),
		),
	)
}

type dashboardParams struct {
	fx.In
	Config      httpadapter.ServerConfig
	Tasks       ports.TaskService
	Workers     ports.WorkerService
	Queues      ports.QueueService
	Schedules   ports.ScheduleService
	Sessions    ports.SessionService
	Dashboard   ports.DashboardService
	Bulk        ports.BulkService
	Workflows   ports.WorkflowService
	Limits      *httpadapter.Limits
	NamedLimits ports.LimitService
	Logger      *zap.Logger
	Reads       Reads
}

func dashboardRoutes(p dashboardParams) ([]httpadapter.Route, error) {
	h, err := ui.New(ui.Config{Auth: p.Config.AuthEnabled(), Secure: p.Config.TLS.Enabled()}, ui.Deps{
		Tasks: p.Tasks, Workers: p.Workers, Queues: p.Queues, Schedules: p.Schedules,
		Sessions: p.Sessions, Dashboard: p.Dashboard, Bulk: p.Bulk, Workflows: p.Workflows, Limits: p.Limits, NamedLimits: p.NamedLimits,
		Logger: p.Logger.Named("ui"), Reads: p.Reads.Dashboard, ReadSource: p.Reads.Source,
	})
	if err != nil {
		return nil, err
	}
	// "/ui" (no slash), as people type it, goes to the overview.
	toOverview := http.RedirectHandler(ui.Prefix, http.StatusMovedPermanently)
	return []httpadapter.Route{
		{Path: ui.Prefix, Prefix: true, Methods: []string{http.MethodGet, http.MethodPost}, Handler: h, Access: httpadapter.PublicAccess()},
		{Path: strings.TrimSuffix(ui.Prefix, "/"), Methods: []string{http.MethodGet}, Handler: toOverview, Access: httpadapter.PublicAccess()},
	}, nil
}
