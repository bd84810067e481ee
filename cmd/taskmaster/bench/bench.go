// Package bench is `taskmaster bench`: it starts its own durable throwaway
// PostgreSQL and a `taskmaster serve` process (or targets --url), drives
// them with HTTP producers and workers, and reports throughput, latency,
// server CPU and memory, database size and projection lag.
package bench

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options select and size the scenarios.
type Options struct {
	Scenarios  []string
	Tasks      int // 0: each scenario's default
	Producers  int
	Workers    int
	BatchSize  int
	ClaimLimit int
	// BatchPreload makes the batch scenario submit every task before its
	// workers start, as River's bench does, and report the working phase
	// apart (Report.WorkTasksPerSec).
	BatchPreload bool
	BacklogTasks int
	Rate         int
	// SingleRate paces the single scenario's workers to this many tasks
	// per second (0: as fast as they go).
	SingleRate int
	// SingleReports is how the single scenario's workers report: "claim"
	// (each report rides the worker's next claim), "separate" (a complete
	// request per task), or "auto" (claim when the server takes reports on
	// claims, else separate: an A/B against an older binary).
	SingleReports string
	Duration      time.Duration
	URL           string
	DatabaseURL   string
	JSONPath      string
	PayloadBytes  int // memory scenario
	Claimers      int // memory scenario
	MemoryClaim   int // memory scenario: tasks per claim
	// MemoryPayload is the memory scenario's payload: "string" (one long
	// string) or "amplified" (an array of the small floats that grow the
	// most once stored, within the server's allowance: hostile input).
	MemoryPayload string
	// ServerBin, when set, is the binary whose `serve` is benchmarked.
	ServerBin string
	// Statements prints the top statements of pg_stat_statements per
	// scenario; WaitEvents samples pg_stat_activity's wait events.
	Statements int
	WaitEvents bool
	// IdleWorkers and IdleQueues size the idle scenario.
	IdleWorkers int
	IdleQueues  int
	// Waiters sizes the waiters scenario: producers waiting for a task
	// each (GET /tasks/v1/{id}?wait_ms).
	Waiters int
	// Auth starts the server with API keys on, and drives it with a key of
	// its own (produce, work and read; rate limits lifted so that they
	// measure nothing but their own cost). With URL, APIKey is sent.
	Auth    bool
	APIKey  string
	Streams int
	// PGSettings are server settings of the benchmark's own PostgreSQL
	// (--pg-set), over its defaults, to measure a setting's effect.
	PGSettings map[string]string
	// PGTCP connects the server (and the peers) to the benchmark's own
	// PostgreSQL over loopback TCP instead of its Unix socket.
	PGTCP bool
	// Pairs, with ServerBin, runs the scenarios against ServerBin (A) and
	// this binary (B), alternating, this many pairs, and prints the medians
	// (pairs.go).
	Pairs int
	// Peers are the paths of other queues' benchmarks to run on a
	// PostgreSQL with the same settings in the same sitting, by name
	// (peer.go): "river".
	Peers []string
	// Via are the ways the server reaches the benchmark's own PostgreSQL,
	// each measured in turn with a fresh database and server, in the same
	// run: ViaDirect, or ViaPgBouncer (Debian's PgBouncer in transaction
	// pooling in front of it, TASKMASTER_DB_TRANSACTION_POOLING on, the
	// notifier's LISTEN direct).
	Via []string
}

// The ways to the database Options.Via names.
const (
	ViaDirect    = "direct"
	ViaPgBouncer = "pgbouncer"
)

// Report is one scenario's result. The JSON field names are a contract
// for tools that compare runs.
type Report struct {
	Scenario string `json:"scenario"`
	// Comparable says whether the run had the machine to itself (Machine);
	// NotComparable says why not.
	Comparable    bool     `json:"comparable"`
	NotComparable string   `json:"not_comparable_reason,omitempty"`
	Machine       *Machine `json:"machine,omitempty"`
	Auth          bool     `json:"auth"`
	// Via is how the server reached its database (Options.Via).
	Via                 string  `json:"via"`
	Tasks               int     `json:"tasks"`
	Producers           int     `json:"producers"`
	Workers             int     `json:"workers"`
	DurationSeconds     float64 `json:"duration_seconds"`
	SubmitTasksPerSec   float64 `json:"submit_tasks_per_sec"`
	EndToEndTasksPerSec float64 `json:"end_to_end_tasks_per_sec"`
	// WorkTasksPerSec is the batch scenario's working phase alone (claims
	// and reports of tasks all submitted before, Options.BatchPreload).
	WorkTasksPerSec   float64      `json:"work_tasks_per_sec,omitempty"`
	ClaimLatencyMS    Percentiles  `json:"claim_latency_ms"`
	CompleteLatencyMS *Percentiles `json:"complete_latency_ms,omitempty"`
	// SingleReports is how the single scenario's workers reported: "claim"
	// (with the next claim: claim latency includes the report) or
	// "separate".
	SingleReports         string       `json:"single_reports,omitempty"`
	EmptyClaimLatencyMS   *Percentiles `json:"empty_queue_claim_latency_ms,omitempty"`
	BacklogClaimLatencyMS *Percentiles `json:"backlog_claim_latency_ms,omitempty"`
	BacklogP99Ratio       float64      `json:"backlog_p99_ratio,omitempty"`
	SubmitToClaimMS       *Percentiles `json:"submit_to_claim_ms,omitempty"`
	ServerCPUSeconds      float64      `json:"server_cpu_seconds"`
	ServerPeakRSSBytes    int64        `json:"server_peak_rss_bytes"`
	DatabaseSizeBytes     int64        `json:"database_size_bytes"`
	// ProjectionLagMS are the percentiles of the projection lag sampled
	// every 100 ms during the scenario (the age of the oldest outbox message
	// a consumer group has not consumed yet); ProjectionLagMaxMS repeats
	// their max.
	ProjectionLagMS    Percentiles `json:"projection_lag_ms"`
	ProjectionLagMaxMS float64     `json:"projection_lag_max_ms"`
	ProjectionGroups   int         `json:"projection_consumer_groups"`
	// OutboxRows and OutboxBytes are the outbox's row count and size (with
	// index and TOAST) at the end of the scenario.
	OutboxRows  int64 `json:"outbox_rows"`
	OutboxBytes int64 `json:"outbox_bytes"`
	// Drains are the projection scenario's backlog drains.
	Drains []Drain `json:"drains,omitempty"`
	// Streams is the streams scenario's event stream figures.
	Streams *StreamFigures `json:"streams,omitempty"`
	// The memory scenario's: payload size, 503 overloaded answers, and the
	// server's RSS high-water mark during the scenario (VmHWM).
	PayloadBytes       int    `json:"payload_bytes,omitempty"`
	PayloadKind        string `json:"payload_kind,omitempty"`
	OverloadedAnswers  int64  `json:"overloaded_answers,omitempty"`
	ServerRSSHighWater int64  `json:"server_rss_high_water_bytes,omitempty"`

	// CPU is where the scenario's CPU went (server, PostgreSQL, load
	// generator, the rest of the machine), also per finished task.
	CPU *CPUBreakdown `json:"cpu,omitempty"`
	// SharedTransactions are the server's shared transactions by kind
	// (none from a server without their metrics).
	SharedTransactions []SharedTxFigures `json:"shared_transactions,omitempty"`
	// Finished is how many tasks the scenario finished (CPU.FinishedTasks).
	Finished int64 `json:"-"`
	// Idle holds the idle scenario's figures; Storage the database size per
	// million finished tasks.
	Idle    *IdleFigures    `json:"idle,omitempty"`
	Storage *StorageFigures `json:"storage,omitempty"`
	// Fairness holds the fairness scenario's claim costs.
	Fairness *FairnessFigures `json:"fairness,omitempty"`
	// Queues holds the queues scenario's figures.
	Queues *QueueFigures `json:"queues,omitempty"`
	// Waiters holds the waiters scenario's figures.
	Waiters *WaiterFigures `json:"waiters,omitempty"`
	// Fanout holds the fanout scenario's figures.
	Fanout *FanoutFigures `json:"fanout,omitempty"`
	// Push holds the push scenario's figures.
	Push *PushFigures `json:"push,omitempty"`
	// Peers put a batch run next to other queues' benchmarks run on a
	// PostgreSQL with the same settings in the same sitting (--peer).
	Peers []PeerRatio `json:"peers,omitempty"`
}

// Scenarios are the scenario names, in the order "all" runs them.
var Scenarios = []string{"batch", "single", "backlog", "latency", "memory", "projection", "streams"}

// Run is the `taskmaster bench` command.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	opts, err := parseOptions(args, stderr)
	if err != nil {
		return err
	}
	if opts.Pairs > 0 {
		rep, err := runPairs(ctx, opts, stdout, stderr)
		if err != nil {
			return err
		}
		return writeJSON(opts.JSONPath, rep, stderr)
	}
	var reports []Report
	for _, via := range opts.Via {
		one := opts
		one.Via = []string{via}
		rs, err := runVia(ctx, one, stdout, stderr)
		if err != nil {
			return err
		}
		reports = append(reports, rs...)
	}
	if len(opts.Via) > 1 {
		printComparison(stdout, reports)
	}
	if len(opts.Peers) > 0 {
		if err := runPeers(ctx, opts, reports, stdout, stderr); err != nil {
			return err
		}
	}
	var v any = reports
	if len(reports) == 1 {
		v = reports[0]
	}
	return writeJSON(opts.JSONPath, v, stderr)
}

// writeJSON writes the report v to path, when one is given.
func writeJSON(path string, v any, log io.Writer) error {
	if path == "" {
		return nil
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write report: %w", err)
	}
	fmt.Fprintf(log, "report written to %s\n", path)
	return nil
}

// runVia runs opts' scenarios in an environment of its own, reached the one
// way opts.Via names.
func runVia(ctx context.Context, opts Options, stdout, stderr io.Writer) ([]Report, error) {
	env, err := startEnvironment(ctx, opts, stderr)
	if err != nil {
		return nil, err
	}
	defer env.stop()
	var reports []Report
	for _, name := range opts.Scenarios {
		fmt.Fprintf(stderr, "\n== scenario %s (%s) ==\n", name, opts.Via[0])
		r, err := runScenario(ctx, env, name, opts, stderr)
		if err != nil {
			return nil, fmt.Errorf("scenario %s (%s): %w", name, opts.Via[0], err)
		}
		r.Via = opts.Via[0]
		reports = append(reports, r)
		printReport(stdout, r)
	}
	return reports, nil
}

// printComparison sets each scenario's figures through PgBouncer against
// the direct ones of the same run.
func printComparison(w io.Writer, reports []Report) {
	direct := map[string]Report{}
	for _, r := range reports {
		if r.Via == ViaDirect {
			direct[r.Scenario] = r
		}
	}
	fmt.Fprintf(w, "\nthrough PgBouncer (transaction pooling) against direct, same run:\n")
	for _, r := range reports {
		d, ok := direct[r.Scenario]
		if r.Via != ViaPgBouncer || !ok || d.EndToEndTasksPerSec == 0 {
			continue
		}
		fmt.Fprintf(w, "  %-10s end to end %8.0f vs %8.0f tasks/s (%.2fx); claim p50 %6.2f vs %6.2f ms, p99 %6.2f vs %6.2f ms\n",
			r.Scenario, r.EndToEndTasksPerSec, d.EndToEndTasksPerSec, r.EndToEndTasksPerSec/d.EndToEndTasksPerSec,
			r.ClaimLatencyMS.P50, d.ClaimLatencyMS.P50, r.ClaimLatencyMS.P99, d.ClaimLatencyMS.P99)
		if r.CPU != nil && d.CPU != nil {
			fmt.Fprintf(w, "  %-10s CPU per finished task: PostgreSQL %.0f vs %.0f µs, server %.0f vs %.0f µs (PgBouncer's own in other)\n", "",
				r.CPU.PostgresUSPerTask, d.CPU.PostgresUSPerTask, r.CPU.ServerUSPerTask, d.CPU.ServerUSPerTask)
		}
	}
}

func parseOptions(args []string, stderr io.Writer) (Options, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	scenario := fs.String("scenario", "batch", strings.Join(Scenarios, ", ")+", or all (comma-separated list allowed)")
	o := Options{}
	fs.IntVar(&o.Tasks, "tasks", 0, "tasks per scenario (defaults: batch 200000, single 20000, backlog 1000000 backlog rows, latency rate x duration, projection 200000 single-event messages, streams 100000, push 20000 plus rate x duration paced)")
	fs.IntVar(&o.Streams, "streams", 500, "concurrent event streams in the streams scenario")
	fs.IntVar(&o.Producers, "producers", 4, "concurrent producers")
	fs.IntVar(&o.Workers, "workers", 8, "concurrent HTTP workers (single uses 16)")
	fs.IntVar(&o.BatchSize, "batch-size", 500, "tasks per submit batch")
	fs.IntVar(&o.ClaimLimit, "claim-limit", 100, "tasks per claim in the batch scenario")
	fs.BoolVar(&o.BatchPreload, "batch-preload", false, "batch scenario: submit every task before the workers start (as River's bench does) and report the working phase apart; with --peer the ratio is then working phase to working phase")
	fs.IntVar(&o.Rate, "rate", 200, "tasks per second in the latency scenario")
	fs.StringVar(&o.SingleReports, "single-reports", "auto", "how the single scenario reports: claim (with the next claim), separate (a complete request per task), auto (claim when the server takes it)")
	fs.IntVar(&o.SingleRate, "single-rate", 0, "pace the single scenario to this many tasks per second (0: as fast as possible), e.g. half its full-speed figure for latency below saturation")
	fs.DurationVar(&o.Duration, "duration", 20*time.Second, "length of the latency scenario and of the backlog measurement")
	fs.StringVar(&o.URL, "url", "", "target a running server instead of starting one")
	fs.StringVar(&o.DatabaseURL, "database-url", "", "with --url: the server's database, for lag and size figures")
	fs.StringVar(&o.JSONPath, "json", "", "write the JSON report to this file")
	fs.IntVar(&o.PayloadBytes, "payload-bytes", 1<<20, "payload size in the memory scenario")
	fs.IntVar(&o.Claimers, "claimers", 64, "concurrent claiming workers in the memory scenario")
	fs.IntVar(&o.MemoryClaim, "memory-claim-limit", 8, "tasks per claim in the memory scenario")
	fs.StringVar(&o.MemoryPayload, "memory-payload", "string", "the memory scenario's payloads: string, or amplified (numbers that grow the most once stored that the server accepts)")
	fs.IntVar(&o.BacklogTasks, "backlog", 0, "pending tasks of the backlog scenario's large queue (default 1000000, or --tasks)")
	fs.StringVar(&o.ServerBin, "server-bin", "", "benchmark this binary's `serve` instead of this one's (A/B comparisons)")
	fs.IntVar(&o.Statements, "statements", 0, "print the N statements that took the most time per scenario (loads pg_stat_statements)")
	fs.BoolVar(&o.WaitEvents, "wait-events", false, "sample the database sessions' wait events every 10 ms and print them per scenario")
	fs.IntVar(&o.IdleWorkers, "idle-workers", 1000, "long-polling workers in the idle scenario")
	fs.IntVar(&o.IdleQueues, "idle-queues", 10, "queues the idle scenario's workers wait on")
	fs.IntVar(&o.Waiters, "waiters", 1000, "producers waiting for a task each in the waiters scenario")
	fs.BoolVar(&o.Auth, "auth", false, "serve with API keys on (TASKMASTER_AUTH=on); the benchmark makes and sends its own key")
	fs.StringVar(&o.APIKey, "api-key", os.Getenv("TASKMASTER_API_KEY"), "with --url: the API key to send (needs produce, work and read)")
	fs.Func("pg-set", "with the benchmark's own PostgreSQL: set a server setting, name=value (repeatable), e.g. autovacuum_naptime=5s", func(v string) error {
		name, value, ok := strings.Cut(v, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return fmt.Errorf("want name=value, got %q", v)
		}
		if o.PGSettings == nil {
			o.PGSettings = map[string]string{}
		}
		o.PGSettings[strings.TrimSpace(name)] = value
		return nil
	})
	fs.BoolVar(&o.PGTCP, "pg-tcp", false, "connect to the benchmark's own PostgreSQL over loopback TCP instead of its Unix socket")
	fs.IntVar(&o.Pairs, "pairs", 0, "with --server-bin: run the scenarios against --server-bin (A) and this binary (B), alternating A B, B A, ..., this many pairs (at least 3 for a decision), and print the medians")
	fs.Func("peer", "run another queue's benchmark for as many jobs as the batch scenario's tasks, on the same PostgreSQL in the same sitting, and print the ratio: river=PATH (River's CLI, `river bench`; see docs/performance.md)", func(v string) error {
		_, path, err := parsePeer(v)
		if err != nil {
			return err
		}
		o.Peers = append(o.Peers, path)
		return nil
	})
	via := fs.String("via", ViaDirect, "how the server reaches the benchmark's own PostgreSQL: direct, pgbouncer (Debian's, transaction pooling), or both (direct,pgbouncer: each scenario both ways, same run, compared)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.URL != "" && len(o.PGSettings) > 0 {
		return o, errors.New("--pg-set applies to the benchmark's own PostgreSQL, not to --url")
	}
	if o.URL != "" && (o.Pairs > 0 || len(o.Peers) > 0) {
		return o, errors.New("--pairs and --peer run on the benchmark's own PostgreSQL, not on --url")
	}
	if o.Pairs < 0 || (o.Pairs > 0 && o.ServerBin == "") {
		return o, errors.New("--pairs N compares --server-bin (A) with this binary (B): give both, N at least 1")
	}
	for _, v := range strings.Split(*via, ",") {
		switch v = strings.TrimSpace(v); v {
		case ViaDirect, ViaPgBouncer:
			if !slices.Contains(o.Via, v) {
				o.Via = append(o.Via, v)
			}
		default:
			return o, fmt.Errorf("--via: unknown %q (want direct, pgbouncer or both)", v)
		}
	}
	if o.URL != "" && (len(o.Via) > 1 || o.Via[0] != ViaDirect) {
		return o, errors.New("--via applies to the benchmark's own PostgreSQL, not to --url")
	}
	if o.Pairs > 0 && len(o.Via) > 1 {
		return o, errors.New("--pairs runs one way to the database: give --via one of direct, pgbouncer")
	}
	for _, s := range strings.Split(*scenario, ",") {
		s = strings.TrimSpace(s)
		if s == "all" {
			o.Scenarios = append(o.Scenarios, Scenarios...)
			continue
		}
		known := false
		for _, k := range Scenarios {
			known = known || k == s
		}
		if !known {
			return o, fmt.Errorf("unknown scenario %q (want %s or all)", s, strings.Join(Scenarios, ", "))
		}
		o.Scenarios = append(o.Scenarios, s)
	}
	if len(o.Peers) > 0 && !slices.Contains(o.Scenarios, "batch") {
		return o, errors.New("--peer compares with the batch scenario: add batch to --scenario")
	}
	if o.PayloadBytes < 1 || o.Claimers < 1 || o.MemoryClaim < 1 || o.MemoryClaim > 1000 {
		return o, errors.New("payload-bytes and claimers must be positive, memory-claim-limit 1-1000")
	}
	if o.MemoryPayload != "string" && o.MemoryPayload != "amplified" {
		return o, fmt.Errorf("memory-payload must be string or amplified, not %q", o.MemoryPayload)
	}
	if o.Producers < 1 || o.Workers < 1 || o.BatchSize < 1 || o.BatchSize > 1000 || o.ClaimLimit < 1 || o.ClaimLimit > 1000 || o.Rate < 1 {
		return o, errors.New("producers, workers, rate must be positive; batch-size and claim-limit 1-1000")
	}
	return o, nil
}

func runScenario(ctx context.Context, env *environment, name string, opts Options, log io.Writer) (Report, error) {
	machine := watchBefore(env, quietSample)
	mon := newMonitor(env)
	start := mon.current()
	probes := startProbes(ctx, env, opts)
	var (
		r   Report
		err error
	)
	switch name {
	case "batch":
		r, err = runBatch(ctx, env, opts, mon, log)
	case "single":
		r, err = runSingle(ctx, env, opts, mon, log)
	case "backlog":
		r, err = runBacklog(ctx, env, opts, mon, log)
	case "latency":
		r, err = runLatency(ctx, env, opts, mon, log)
	case "memory":
		r, err = runMemory(ctx, env, opts, mon, log)
	case "projection":
		r, err = runProjection(ctx, env, opts, mon, log)
	case "streams":
		r, err = runStreams(ctx, env, opts, mon, log)
	default:
		r, err = extraScenarios[name](ctx, env, opts, mon, log)
	}
	probes.finish(ctx, &r, log)
	end, peak, lag, groups := mon.finish()
	if err != nil {
		return r, err
	}
	r.Scenario = name
	r.Auth = opts.Auth || opts.APIKey != ""
	r.ServerCPUSeconds = round3(end.cpuSeconds - start.cpuSeconds)
	r.ServerPeakRSSBytes = peak
	r.ProjectionLagMS = lag
	r.ProjectionLagMaxMS = lag.Max
	r.ProjectionGroups = groups
	r.DatabaseSizeBytes = dbSize(ctx, env.db)
	r.OutboxRows, r.OutboxBytes = outboxSize(ctx, env.db)
	judge(&r, machine)
	return r, nil
}

// progress prints a line a second until stop is closed.
func progress(log io.Writer, name string, mon *monitor, stop <-chan struct{}, line func() string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s := mon.current()
			fmt.Fprintf(log, "[%s] %s | server rss %d MiB | projection lag %d ms\n",
				name, line(), s.rssBytes>>20, s.lag.Milliseconds())
		}
	}
}

// produce submits n tasks to queue in batches from opts.Producers
// goroutines and returns when all are accepted.
func produce(ctx context.Context, a *api, queue string, n, producers, batch int, submitted *atomic.Int64) error {
	return producePayload(ctx, a, queue, n, producers, batch, json.RawMessage(`{"bench":true}`), submitted)
}

// producePayload is produce with every task carrying payload.
func producePayload(ctx context.Context, a *api, queue string, n, producers, batch int, payload json.RawMessage, submitted *atomic.Int64) error {
	return produceItems(ctx, a, n, producers, batch, func(int) submitItem { return submitItem{Queue: queue, Payload: payload} }, submitted)
}

// produceItems submits the n tasks item(0..n-1) in batches from producers
// goroutines and returns when all are accepted.
func produceItems(ctx context.Context, a *api, n, producers, batch int, item func(i int) submitItem, submitted *atomic.Int64) error {
	var next atomic.Int64
	errs := make(chan error, producers)
	var wg sync.WaitGroup
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items := make([]submitItem, 0, batch)
			for {
				from := int(next.Add(int64(batch))) - batch
				if from >= n || ctx.Err() != nil {
					return
				}
				size := min(batch, n-from)
				items = items[:0]
				for i := from; i < from+size; i++ {
					items = append(items, item(i))
				}
				if err := a.submitBatch(ctx, items); err != nil {
					errs <- err
					return
				}
				submitted.Add(int64(size))
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// reporting is how drain's workers report the tasks they claimed.
type reporting int

const (
	reportBatches reporting = iota // one batch complete per claim
	reportEach                     // one complete request per task
	reportOnClaim                  // with the worker's next claim
)

// drain runs workers that claim up to limit tasks and complete them until
// n completions were counted or stop closes, reporting as how says. Claim
// latencies go to claims (with reportOnClaim, each claim's report too).
func drain(ctx context.Context, a *api, queue string, n int64, workers, limit int, how reporting, pace <-chan struct{},
	claims, completes *recorder, completed *atomic.Int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("bench-%s-%d", queue, i)
			if err := a.register(ctx, id, queue); err != nil {
				errs <- err
				return
			}
			var held []claimedTask // reportOnClaim: claimed, to report
			for completed.Load() < n && ctx.Err() == nil {
				if pace != nil { // one claim per tick (see paceAt)
					select {
					case <-ctx.Done():
						return
					case <-pace:
					}
				}
				t0 := time.Now()
				if how == reportOnClaim {
					// A claim that carries reports does not wait: they
					// count once it answers. An empty one waits.
					wait := 1000
					if len(held) > 0 {
						wait = 0
					}
					tasks, err := a.claimReporting(ctx, id, queue, limit, wait, held)
					if err != nil {
						if ctx.Err() == nil {
							errs <- err
						}
						return
					}
					if len(tasks) > 0 || len(held) > 0 {
						claims.add(time.Since(t0))
					}
					reported := len(held)
					held = tasks
					if completed.Add(int64(reported)) >= n {
						cancel()
					}
					continue
				}
				tasks, err := a.claim(ctx, id, queue, limit, 1000)
				if err != nil {
					if ctx.Err() == nil {
						errs <- err
					}
					return
				}
				if len(tasks) == 0 {
					continue
				}
				claims.add(time.Since(t0))
				t1 := time.Now()
				if how == reportEach {
					for _, t := range tasks {
						if err := a.complete(ctx, id, t); err != nil {
							errs <- err
							return
						}
					}
				} else if err := a.completeBatch(ctx, id, tasks); err != nil {
					errs <- err
					return
				}
				if completes != nil {
					completes.add(time.Since(t1))
				}
				if completed.Add(int64(len(tasks))) >= n {
					cancel() // wake the others out of their long polls
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// produceAndDrain runs the batch workload on queue: producers submit n
// tasks in batches while workers claim opts.ClaimLimit at a time and
// complete them in batches, or, with preload, before the workers start. It
// returns when all are completed, and when the last submit was accepted.
func produceAndDrain(ctx context.Context, env *environment, opts Options, queue string, n int, preload bool,
	claims *recorder, submitted, completed *atomic.Int64) (time.Time, error) {
	var submitDone time.Time
	var perr error
	var pwg sync.WaitGroup
	pwg.Add(1)
	go func() {
		defer pwg.Done()
		perr = produce(ctx, env.api, queue, n, opts.Producers, opts.BatchSize, submitted)
		submitDone = time.Now()
	}()
	if preload {
		pwg.Wait()
		if perr != nil {
			return submitDone, perr
		}
	}
	werr := drain(ctx, env.api, queue, int64(n), opts.Workers, opts.ClaimLimit, reportBatches, nil, claims, nil, completed)
	pwg.Wait()
	return submitDone, errors.Join(perr, werr)
}

// defaultBatchTasks is the batch scenario's tasks unless --tasks says.
const defaultBatchTasks = 200000

func runBatch(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	n := opts.Tasks
	if n == 0 {
		n = defaultBatchTasks
	}
	queue := fmt.Sprintf("batch-%d", time.Now().UnixNano())
	var submitted, completed atomic.Int64
	claims := &recorder{}
	stop := make(chan struct{})
	start := time.Now()
	go progress(log, "batch", mon, stop, func() string {
		el := time.Since(start).Seconds()
		return fmt.Sprintf("submitted %d/%d completed %d/%d (%.0f tasks/s)", submitted.Load(), n, completed.Load(), n, float64(completed.Load())/el)
	})
	defer close(stop)
	submitDone, err := produceAndDrain(ctx, env, opts, queue, n, opts.BatchPreload, claims, &submitted, &completed)
	if err != nil {
		return Report{}, err
	}
	end := time.Now()
	r := Report{
		Tasks: n, Producers: opts.Producers, Workers: opts.Workers, Finished: int64(n),
		DurationSeconds:     round3(end.Sub(start).Seconds()),
		SubmitTasksPerSec:   round1(float64(n) / submitDone.Sub(start).Seconds()),
		EndToEndTasksPerSec: round1(float64(n) / end.Sub(start).Seconds()),
		ClaimLatencyMS:      claims.percentiles(),
	}
	if opts.BatchPreload {
		r.WorkTasksPerSec = round1(float64(n) / end.Sub(submitDone).Seconds())
	}
	return r, nil
}

func runSingle(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	n := opts.Tasks
	if n == 0 {
		n = 20000
	}
	const workers = 16
	onClaim, err := singleReportsOnClaim(ctx, env.api, opts.SingleReports)
	if err != nil {
		return Report{}, err
	}
	fmt.Fprintf(log, "[single] reports on claims: %v\n", onClaim)
	queue := fmt.Sprintf("single-%d", time.Now().UnixNano())
	var submitted, completed atomic.Int64
	t0 := time.Now()
	if err := produce(ctx, env.api, queue, n, opts.Producers, 1000, &submitted); err != nil {
		return Report{}, err
	}
	submitRate := float64(n) / time.Since(t0).Seconds()
	claims, completes := &recorder{}, &recorder{}
	stop := make(chan struct{})
	start := time.Now()
	go progress(log, "single", mon, stop, func() string {
		return fmt.Sprintf("completed %d/%d (%.0f tasks/s)", completed.Load(), n, float64(completed.Load())/time.Since(start).Seconds())
	})
	defer close(stop)
	var pace <-chan struct{}
	if opts.SingleRate > 0 {
		fmt.Fprintf(log, "[single] paced at %d tasks/s\n", opts.SingleRate)
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		pace = paceAt(pctx, opts.SingleRate)
	}
	how := reportEach
	if onClaim {
		how = reportOnClaim
	}
	if err := drain(ctx, env.api, queue, int64(n), workers, 1, how, pace, claims, completes, &completed); err != nil {
		return Report{}, err
	}
	el := time.Since(start)
	r := Report{
		Tasks: n, Producers: opts.Producers, Workers: workers, Finished: int64(n),
		DurationSeconds:     round3(el.Seconds()),
		SubmitTasksPerSec:   round1(submitRate),
		EndToEndTasksPerSec: round1(float64(n) / el.Seconds()),
		ClaimLatencyMS:      claims.percentiles(),
		SingleReports:       "separate",
	}
	if onClaim {
		r.SingleReports = "claim"
	} else {
		cp := completes.percentiles()
		r.CompleteLatencyMS = &cp
	}
	return r, nil
}

// runBacklog measures claim-1 latency on a near-empty queue, then again on
// the head of a queue holding the backlog, for opts.Duration each.
func runBacklog(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	backlog := opts.BacklogTasks
	if backlog == 0 {
		backlog = opts.Tasks
	}
	if backlog == 0 {
		backlog = 1000000
	}
	const workers = 4
	measure := func(queue string, preload int) (Percentiles, int64, error) {
		var submitted, completed atomic.Int64
		if err := produce(ctx, env.api, queue, preload, opts.Producers, 1000, &submitted); err != nil {
			return Percentiles{}, 0, err
		}
		claims := &recorder{}
		mctx, cancel := context.WithTimeout(ctx, opts.Duration)
		defer cancel()
		stop := make(chan struct{})
		start := time.Now()
		go progress(log, "backlog", mon, stop, func() string {
			return fmt.Sprintf("%s: claimed+completed %d (%.0f/s)", queue, completed.Load(), float64(completed.Load())/time.Since(start).Seconds())
		})
		err := drain(mctx, env.api, queue, int64(preload), workers, 1, reportEach, nil, claims, nil, &completed)
		close(stop)
		if err != nil && mctx.Err() == nil {
			return Percentiles{}, 0, err
		}
		return claims.percentiles(), completed.Load(), nil
	}
	fmt.Fprintf(log, "[backlog] measuring claims on a near-empty queue for %s\n", opts.Duration)
	// Enough tasks that the empty-queue phase never runs dry.
	empty, _, err := measure(fmt.Sprintf("empty-%d", time.Now().UnixNano()), 20000)
	if err != nil {
		return Report{}, err
	}
	fmt.Fprintf(log, "[backlog] loading %d pending tasks\n", backlog)
	t0 := time.Now()
	full, done, err := measure(fmt.Sprintf("backlog-%d", time.Now().UnixNano()), backlog)
	if err != nil {
		return Report{}, err
	}
	ratio := 0.0
	if empty.P99 > 0 {
		ratio = round3(full.P99 / empty.P99)
	}
	return Report{
		Tasks: backlog, Producers: opts.Producers, Workers: workers, Finished: done,
		DurationSeconds:       round3(time.Since(t0).Seconds()),
		EndToEndTasksPerSec:   round1(float64(done) / opts.Duration.Seconds()),
		ClaimLatencyMS:        full,
		EmptyClaimLatencyMS:   &empty,
		BacklogClaimLatencyMS: &full,
		BacklogP99Ratio:       ratio,
	}, nil
}

// runLatency submits single tasks at a steady rate while long-polling
// workers claim them; it measures submit-to-claim latency.
func runLatency(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	queue := fmt.Sprintf("latency-%d", time.Now().UnixNano())
	n := opts.Tasks
	if n == 0 {
		n = int(float64(opts.Rate) * opts.Duration.Seconds())
	}
	const workers = 4
	type stamped struct {
		T int64 `json:"t"`
	}
	var completed, submitted atomic.Int64
	lat, claims := &recorder{}, &recorder{}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, workers+1)
	var wg sync.WaitGroup
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("latency-%d", i)
			if err := env.api.register(wctx, id, queue); err != nil {
				errs <- err
				return
			}
			for wctx.Err() == nil {
				t0 := time.Now()
				var out struct {
					Tasks []struct {
						claimedTask
						Payload stamped `json:"payload"`
					} `json:"tasks"`
				}
				_, err := env.api.post(wctx, "/tasks/v1/claim", map[string]any{"worker_id": id, "queue": queue, "limit": 10, "wait_ms": 5000}, &out)
				if err != nil {
					if wctx.Err() == nil {
						errs <- err
					}
					return
				}
				now := time.Now()
				if len(out.Tasks) == 0 {
					continue
				}
				claims.add(now.Sub(t0))
				done := make([]claimedTask, len(out.Tasks))
				for j, t := range out.Tasks {
					lat.add(now.Sub(time.Unix(0, t.Payload.T)))
					done[j] = t.claimedTask
				}
				if err := env.api.completeBatch(wctx, id, done); err != nil {
					if wctx.Err() == nil {
						errs <- err
					}
					return
				}
				completed.Add(int64(len(done)))
			}
		}()
	}
	stop := make(chan struct{})
	start := time.Now()
	go progress(log, "latency", mon, stop, func() string {
		return fmt.Sprintf("submitted %d/%d completed %d", submitted.Load(), n, completed.Load())
	})
	interval := time.Second / time.Duration(opts.Rate)
	tick := time.NewTicker(interval)
	var sendWG sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		<-tick.C
		sendWG.Add(1)
		go func() {
			defer sendWG.Done()
			p, _ := json.Marshal(stamped{T: time.Now().UnixNano()})
			if err := env.api.submit(wctx, submitItem{Queue: queue, Payload: p}); err != nil {
				errs <- err
				return
			}
			submitted.Add(1)
		}()
	}
	tick.Stop()
	sendWG.Wait()
	submitEnd := time.Now()
	deadline := time.Now().Add(30 * time.Second)
	for completed.Load() < int64(n) && time.Now().Before(deadline) && len(errs) == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	cancel()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Report{}, err
	}
	if completed.Load() < int64(n) {
		return Report{}, fmt.Errorf("only %d of %d tasks completed", completed.Load(), n)
	}
	sc := lat.percentiles()
	return Report{
		Tasks: n, Producers: 1, Workers: workers, Finished: int64(n),
		DurationSeconds:     round3(time.Since(start).Seconds()),
		SubmitTasksPerSec:   round1(float64(n) / submitEnd.Sub(start).Seconds()),
		EndToEndTasksPerSec: round1(float64(n) / time.Since(start).Seconds()),
		ClaimLatencyMS:      claims.percentiles(),
		SubmitToClaimMS:     &sc,
	}, nil
}

func printReport(w io.Writer, r Report) {
	auth := "off"
	if r.Auth {
		auth = "on"
	}
	via := ""
	if r.Via != "" && r.Via != ViaDirect {
		via = ", via " + r.Via
	}
	fmt.Fprintf(w, "\nscenario %s: %d tasks, %d producers, %d workers, %.1f s, auth %s%s\n", r.Scenario, r.Tasks, r.Producers, r.Workers, r.DurationSeconds, auth, via)
	printComparability(w, r)
	if r.SubmitTasksPerSec > 0 {
		fmt.Fprintf(w, "  submit:           %10.0f tasks/s\n", r.SubmitTasksPerSec)
	}
	fmt.Fprintf(w, "  end to end:       %10.0f tasks/s\n", r.EndToEndTasksPerSec)
	if r.WorkTasksPerSec > 0 {
		fmt.Fprintf(w, "  working phase:    %10.0f tasks/s (every task submitted before the workers started)\n", r.WorkTasksPerSec)
	}
	pr := func(name string, p *Percentiles) {
		if p != nil && p.N > 0 {
			fmt.Fprintf(w, "  %-17s p50 %7.2f ms  p95 %7.2f ms  p99 %7.2f ms  (n=%d)\n", name+":", p.P50, p.P95, p.P99, p.N)
		}
	}
	pr("claim latency", &r.ClaimLatencyMS)
	pr("complete latency", r.CompleteLatencyMS)
	if r.SingleReports != "" {
		fmt.Fprintf(w, "  reports:          %s\n", r.SingleReports)
	}
	pr("empty-queue claim", r.EmptyClaimLatencyMS)
	pr("backlog claim", r.BacklogClaimLatencyMS)
	if r.BacklogP99Ratio > 0 {
		fmt.Fprintf(w, "  backlog p99 / empty p99: %.2fx\n", r.BacklogP99Ratio)
	}
	printExtras(w, r)
	pr("submit to claim", r.SubmitToClaimMS)
	for _, d := range r.Drains {
		fmt.Fprintf(w, "  drain %-13s %d messages, %d events in %.2f s: %.0f messages/s, %.0f events/s\n",
			d.Backlog+":", d.Messages, d.Events, d.Seconds, d.MessagesPerSec, d.EventsPerSec)
	}
	if s := r.Streams; s != nil {
		fmt.Fprintf(w, "  streams:          %d open, %d events delivered, %d dropped, %d refused\n", s.Opened, s.Delivered, s.Dropped, s.Refused)
		pr("delivery lag", &s.DeliveryLagMS)
	}
	fmt.Fprintf(w, "  projection lag:   p50 %7.0f ms  p99 %7.0f ms  max %7.0f ms  (%d consumer groups, %d samples)\n",
		r.ProjectionLagMS.P50, r.ProjectionLagMS.P99, r.ProjectionLagMS.Max, r.ProjectionGroups, r.ProjectionLagMS.N)
	fmt.Fprintf(w, "  outbox at end:    %d rows, %.1f MiB\n", r.OutboxRows, float64(r.OutboxBytes)/(1<<20))
	fmt.Fprintf(w, "  server CPU %.1f s, peak RSS %.1f MiB, database %.1f MiB\n",
		r.ServerCPUSeconds, float64(r.ServerPeakRSSBytes)/(1<<20), float64(r.DatabaseSizeBytes)/(1<<20))
	if r.ServerRSSHighWater > 0 {
		fmt.Fprintf(w, "  payloads %d bytes (%s): server RSS high-water mark %.1f MiB, %d answers 503 overloaded\n",
			r.PayloadBytes, r.PayloadKind, float64(r.ServerRSSHighWater)/(1<<20), r.OverloadedAnswers)
	}
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
func round3(f float64) float64 { return float64(int64(f*1000+0.5)) / 1000 }

// singleReportsOnClaim reports whether the single scenario's reports ride
// the next claim: mode "claim", "separate", or "auto" (when the server
// takes reports on claims: a claim of an unknown worker carrying none is a
// 404 there, and a 400 for a server that knows no such field).
func singleReportsOnClaim(ctx context.Context, a *api, mode string) (bool, error) {
	switch mode {
	case "claim":
		return true, nil
	case "separate":
		return false, nil
	case "auto", "":
	default:
		return false, fmt.Errorf("--single-reports: %q is not claim, separate or auto", mode)
	}
	worker := fmt.Sprintf("bench-probe-%d", time.Now().UnixNano())
	code, _ := a.post(ctx, "/tasks/v1/claim", map[string]any{"worker_id": worker, "complete": []any{}}, nil)
	switch code {
	case http.StatusNotFound:
		return true, nil
	case http.StatusBadRequest:
		return false, nil
	}
	return false, fmt.Errorf("probing for reports on claims: answered %d", code)
}
