package bench

import (
	"context"
	"fmt"
	"io"
)

// scenarioFunc runs one scenario.
type scenarioFunc func(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error)

// extraScenarios are the scenarios that live in files of their own and
// register themselves (in init, appending their name to Scenarios).
var extraScenarios = map[string]scenarioFunc{}

// register adds a scenario kept in a file of its own.
func register(name string, run scenarioFunc) {
	Scenarios = append(Scenarios, name)
	extraScenarios[name] = run
}

// probes measure a scenario from outside: CPU of every part, the database
// size, the server's shared transactions, and the database-side profile
// the options ask for.
type probes struct {
	env     *environment
	cpu     cpuReading
	dbBytes int64
	tasks   int64
	profile *dbProfile
	shared  sharedTxScrape
}

func startProbes(ctx context.Context, env *environment, opts Options) *probes {
	p := &probes{env: env, dbBytes: dbSize(ctx, env.db), tasks: finishedRows(ctx, env)}
	p.profile = startDBProfile(ctx, env, opts)
	p.shared = scrapeSharedTx(ctx, env.api)
	p.cpu = readCPU(env)
	return p
}

// finish fills r's CPU breakdown and storage figures and prints the
// database profile.
func (p *probes) finish(ctx context.Context, r *Report, log io.Writer) {
	r.CPU = p.cpu.breakdown(readCPU(p.env), r.Finished)
	r.SharedTransactions = sharedTxFigures(p.shared, scrapeSharedTx(ctx, p.env.api))
	p.profile.finish(ctx, log, r.Finished)
	if r.Finished > 0 {
		r.Storage = storageFigures(ctx, p.env, p.dbBytes, p.tasks, r.Finished)
	}
}

// StorageFigures are the database's size per million finished tasks: the
// tasks table as it stands (rows, indexes, TOAST) divided by its finished
// rows, and the whole database's growth during the scenario divided by the
// tasks it finished (which also counts the outbox rows not yet deleted and
// the projections).
type StorageFigures struct {
	TasksTableBytes               int64   `json:"tasks_table_bytes"`
	FinishedRows                  int64   `json:"finished_rows"`
	TasksTableBytesPerMillion     float64 `json:"tasks_table_bytes_per_million_finished"`
	DatabaseGrowthBytes           int64   `json:"database_growth_bytes"`
	DatabaseGrowthBytesPerMillion float64 `json:"database_growth_bytes_per_million_finished"`
}

func storageFigures(ctx context.Context, env *environment, dbBefore, rowsBefore, finished int64) *StorageFigures {
	if env.db == nil {
		return nil
	}
	s := &StorageFigures{FinishedRows: finishedRows(ctx, env)}
	_ = env.db.GetContext(ctx, &s.TasksTableBytes, `SELECT pg_total_relation_size('tasks')`)
	s.DatabaseGrowthBytes = dbSize(ctx, env.db) - dbBefore
	if s.FinishedRows > 0 {
		s.TasksTableBytesPerMillion = round1(float64(s.TasksTableBytes) * 1e6 / float64(s.FinishedRows))
	}
	s.DatabaseGrowthBytesPerMillion = round1(float64(s.DatabaseGrowthBytes) * 1e6 / float64(finished))
	return s
}

// finishedRows counts the DONE and DEAD tasks.
func finishedRows(ctx context.Context, env *environment) int64 {
	if env.db == nil {
		return 0
	}
	var n int64
	_ = env.db.GetContext(ctx, &n, `SELECT count(*) FROM tasks WHERE status IN ('DONE', 'DEAD')`)
	return n
}

// printExtras prints the figures of this file's and the extra scenarios'.
func printExtras(w io.Writer, r Report) {
	printIdle(w, r.Idle)
	printWaiters(w, r.Waiters)
	printFanout(w, r.Fanout)
	printFairness(w, r.Fairness)
	printQueueFigures(w, r.Queues)
	printPush(w, r.Push)
	if s := r.Storage; s != nil {
		fmt.Fprintf(w, "  storage:          tasks table %.1f MiB for %d finished rows = %.0f MiB per million; database grew %.1f MiB = %.0f MiB per million finished\n",
			float64(s.TasksTableBytes)/(1<<20), s.FinishedRows, s.TasksTableBytesPerMillion/(1<<20),
			float64(s.DatabaseGrowthBytes)/(1<<20), s.DatabaseGrowthBytesPerMillion/(1<<20))
	}
	printSharedTx(w, r.SharedTransactions)
	printCPU(w, r.CPU)
}
