package app

import (
	"time"

	"go.uber.org/fx"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// PurgeJobsName names the background service that runs large queue purges,
// in logs and as the job of its leadership lease (leader_leases.job).
const PurgeJobsName = "purge-jobs"

// PurgeJobsInterval is how often the purge-jobs service looks for running
// jobs (a job's batches then run back to back).
const PurgeJobsInterval = time.Second

// PurgeJobs is the background service that runs the batches of large
// queue purges, on the one instance that holds its leadership lease.
type PurgeJobs struct {
	// Service is the led job.
	Service *application.BackgroundService
}

// bulkModule provides the bulk actions and purges, and the runs' use cases
// (a run's cancel is a bulk action), and runs the purge jobs with the app. Tests tune them with fx.Decorate on
// application.BulkConfig.
func bulkModule() fx.Option {
	return fx.Options(
		fx.Provide(
			application.DefaultBulkConfig,
			application.NewBulkService,
			func(s *application.BulkService) ports.BulkService { return s },
			func(tx ports.TxRunner, bulk *application.BulkService, cfg application.Config) ports.WorkflowService {
				return application.NewWorkflowService(tx, bulk, cfg)
			},
			newPurgeJobs,
		),
		fx.Invoke(func(*PurgeJobs) {}),
	)
}

func newPurgeJobs(p reapersParams, bulk *application.BulkService) *PurgeJobs {
	s := application.NewBackgroundService(application.BackgroundParams{
		Name: PurgeJobsName, Interval: PurgeJobsInterval, Elector: p.Elector,
		Logger: p.Logger.Named("purge"), Now: p.Now, Cycle: application.Cycle(bulk.RunPurgeJobs),
	})
	p.Lifecycle.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
	return &PurgeJobs{Service: s}
}
