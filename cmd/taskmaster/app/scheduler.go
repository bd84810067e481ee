package app

import (
	_ "time/tzdata" // schedules' time zones, whatever the host has installed

	"go.uber.org/fx"

	"github.com/taskmaster/taskmaster/adapters/cron"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// SchedulerName names the scheduler in logs and as the job of its
// leadership lease (leader_leases.job).
const SchedulerName = "scheduler"

// Scheduler is the background job that runs the due ticks of the recurring
// schedules, on the one instance that holds its leadership lease.
type Scheduler struct {
	// Service is the led job.
	Service *application.BackgroundService
}

// schedulerModule provides the schedule use cases' job and runs it with the
// app.
func schedulerModule() fx.Option {
	return fx.Options(
		fx.Provide(newScheduler),
		fx.Invoke(func(*Scheduler) {}),
	)
}

func newScheduleService(tx ports.TxRunner) ports.ScheduleService {
	return application.NewScheduleService(tx, cron.Parse)
}

func newScheduler(p reapersParams) *Scheduler {
	s := application.NewBackgroundService(application.BackgroundParams{
		Name: SchedulerName, Interval: p.Config.SchedulerInterval, Elector: p.Elector,
		Logger: p.Logger.Named("scheduler"), Now: p.Now,
		Cycle: application.Cycle(application.NewScheduler(p.Tx, cron.Parse, application.DefaultSchedulerBatchSize).Run),
	})
	p.Lifecycle.Append(fx.Hook{OnStart: s.Start, OnStop: s.Stop})
	return &Scheduler{Service: s}
}
