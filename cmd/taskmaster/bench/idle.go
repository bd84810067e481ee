package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register("idle", runIdle) }

// IdleFigures are the idle scenario's: what --idle-workers workers
// long-polling empty queues cost, and how fast and how narrowly a task
// submitted then wakes them.
type IdleFigures struct {
	Workers int `json:"workers"`
	Queues  int `json:"queues"`
	WaitMS  int `json:"wait_ms"`
	// Quiet is the server with no claim waiting, Waiting with every worker's
	// long poll open; both over WindowSeconds.
	Quiet         IdleWindow `json:"quiet"`
	Waiting       IdleWindow `json:"waiting"`
	WindowSeconds float64    `json:"window_seconds"`
	// WakeTasks tasks were then submitted one at a time, each to one queue;
	// SubmitToClaimMS is from the submit request's start to the claim
	// answer's arrival at the worker.
	WakeTasks       int         `json:"wake_tasks"`
	SubmitToClaimMS Percentiles `json:"submit_to_claim_ms"`
	// TransactionsPerTask and ClaimStatementsPerTask are the database's
	// committed transactions and claim statements during the wake phase per
	// task (pg_stat_database and, with --statements, pg_stat_statements): a
	// task that woke every waiter of its queue would cost one claim per
	// waiter.
	TransactionsPerTask float64 `json:"transactions_per_task"`
	// WaitersPerQueue is how many workers waited on each queue.
	WaitersPerQueue int `json:"waiters_per_queue"`
	// WakeupsPerTask are the waiting claims the server woke per task
	// (taskmaster_claim_wakeups_total; -1 when the server has no such
	// metric).
	WakeupsPerTask float64 `json:"wakeups_per_task"`
}

// IdleWindow is what a window cost, per second.
type IdleWindow struct {
	ServerCorePct   float64 `json:"server_core_pct"`
	PostgresCorePct float64 `json:"postgres_core_pct"`
	WALBytesPerSec  float64 `json:"wal_bytes_per_sec"`
	CommitsPerSec   float64 `json:"commits_per_sec"`
	// TupleWritesPerSec are rows inserted, updated and deleted;
	// WritesPerSecByTable the same by table (those written to).
	TupleWritesPerSec   float64            `json:"tuple_writes_per_sec"`
	WritesPerSecByTable map[string]float64 `json:"writes_per_sec_by_table,omitempty"`
}

// tableWrites reads the rows inserted, updated and deleted so far by table.
func tableWrites(ctx context.Context, env *environment) map[string]int64 {
	if env.db == nil {
		return nil
	}
	var rows []struct {
		Table  string `db:"relname"`
		Writes int64  `db:"writes"`
	}
	_ = env.db.SelectContext(ctx, &rows, `SELECT relname, n_tup_ins + n_tup_upd + n_tup_del AS writes FROM pg_stat_user_tables`)
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Table] = r.Writes
	}
	return out
}

// dbCounters are cumulative database counters.
type dbCounters struct {
	WAL     int64 `db:"wal"`
	Commits int64 `db:"commits"`
	Writes  int64 `db:"writes"`
}

func readDBCounters(ctx context.Context, env *environment) dbCounters {
	var c dbCounters
	if env.db == nil {
		return c
	}
	_ = env.db.GetContext(ctx, &c, `
		SELECT (pg_current_wal_lsn() - '0/0')::bigint AS wal, xact_commit AS commits,
			tup_inserted + tup_updated + tup_deleted AS writes
		FROM pg_stat_database WHERE datname = current_database()`)
	return c
}

// measureWindow measures the server, PostgreSQL and the database's writes
// over d. PostgreSQL publishes a backend's counters up to a second late, so
// the window starts and ends after letting them settle.
func measureWindow(ctx context.Context, env *environment, d time.Duration) IdleWindow {
	settle := func() {
		if env.db != nil {
			_, _ = env.db.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`)
		}
	}
	settle()
	c0, cpu0, t0 := readDBCounters(ctx, env), readCPU(env), tableWrites(ctx, env)
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
	settle()
	c1, cpu1, t1 := readDBCounters(ctx, env), readCPU(env), tableWrites(ctx, env)
	secs := cpu1.at.Sub(cpu0.at).Seconds()
	var byTable map[string]float64
	for name, n := range t1 {
		if n > t0[name] {
			if byTable == nil {
				byTable = map[string]float64{}
			}
			byTable[name] = round1(float64(n-t0[name]) / secs)
		}
	}
	return IdleWindow{
		WritesPerSecByTable: byTable,
		ServerCorePct:       round1((cpu1.server - cpu0.server) * 100 / secs),
		PostgresCorePct:     round1((cpu1.postgres - cpu0.postgres) * 100 / secs),
		WALBytesPerSec:      round1(float64(c1.WAL-c0.WAL) / secs),
		CommitsPerSec:       round1(float64(c1.Commits-c0.Commits) / secs),
		TupleWritesPerSec:   round1(float64(c1.Writes-c0.Writes) / secs),
	}
}

// runIdle measures a window of the server with no worker, then registers
// --idle-workers workers spread over --idle-queues queues and measures a
// window with every worker long-polling (wait_ms 30 s; the window,
// --duration up to 15 s, starts 11 s after every claim waits and lies
// within the first wait, so nothing but the waits runs: the workers send no
// heartbeats, whose cost is one worker-row update each). The 11 s let the
// first attempts' row counts arrive: an idle PostgreSQL backend publishes
// its counters up to 10 s late (WAL bytes are counted at once). Then it
// submits tasks one at a time to one queue each and measures how soon a
// worker gets each, and how many transactions each task cost.
func runIdle(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	const waitMS = 30000
	workers, queues := opts.IdleWorkers, max(1, opts.IdleQueues)
	window := min(opts.Duration, 15*time.Second)
	a := newAPI(env.api.base, workers+8)
	prefix := fmt.Sprintf("idle-%d", time.Now().UnixNano())
	queue := func(i int) string { return fmt.Sprintf("%s-q%d", prefix, i%queues) }

	fmt.Fprintf(log, "[idle] quiet window (no worker, no claim open) for %s\n", window)
	quiet := measureWindow(ctx, env, window)
	fmt.Fprintf(log, "[idle] registering %d workers on %d queues\n", workers, queues)
	ids := make([]string, workers)
	for i := range workers {
		ids[i] = fmt.Sprintf("%s-w%d", prefix, i)
		if err := a.register(ctx, ids[i], queue(i)); err != nil {
			return Report{}, err
		}
	}

	type stamped struct {
		T int64 `json:"t"`
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		open, claimed atomic.Int64
		lat           = &recorder{}
		wg            sync.WaitGroup
		errs          = make(chan error, workers)
	)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for wctx.Err() == nil {
				var out struct {
					Tasks []struct {
						claimedTask
						Payload stamped `json:"payload"`
					} `json:"tasks"`
				}
				if first {
					open.Add(1)
					first = false
				}
				_, err := a.post(wctx, "/tasks/v1/claim", map[string]any{"worker_id": ids[i], "queue": queue(i), "limit": 1, "wait_ms": waitMS}, &out)
				if err != nil {
					if wctx.Err() == nil {
						errs <- err
					}
					return
				}
				now := time.Now()
				done := make([]claimedTask, len(out.Tasks))
				for j, t := range out.Tasks {
					lat.add(now.Sub(time.Unix(0, t.Payload.T)))
					done[j] = t.claimedTask
				}
				if len(done) > 0 {
					claimed.Add(int64(len(done)))
					if err := a.completeBatch(wctx, ids[i], done); err != nil && wctx.Err() == nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	for open.Load() < int64(workers) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	awaitWaiting(ctx, a, workers)
	fmt.Fprintf(log, "[idle] waiting window (%d long polls open) for %s\n", workers, window)
	waiting := measureWindow(ctx, env, window)

	const wakeTasks = 100
	fmt.Fprintf(log, "[idle] submitting %d tasks one at a time\n", wakeTasks)
	c0, w0 := readDBCounters(ctx, env), wakeups(ctx, a)
	for i := range wakeTasks {
		p, _ := json.Marshal(stamped{T: time.Now().UnixNano()})
		if err := a.submit(ctx, submitItem{Queue: queue(i), Payload: p}); err != nil {
			cancel()
			wg.Wait()
			return Report{}, err
		}
		deadline := time.Now().Add(5 * time.Second)
		for claimed.Load() < int64(i+1) && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond) // its completion commits
	}
	time.Sleep(time.Second) // counters settle
	if env.db != nil {
		_, _ = env.db.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`)
	}
	c1, w1 := readDBCounters(ctx, env), wakeups(ctx, a)
	cancel()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Report{}, err
	}
	if claimed.Load() < wakeTasks {
		return Report{}, fmt.Errorf("only %d of %d tasks were claimed", claimed.Load(), wakeTasks)
	}
	fig := &IdleFigures{
		Workers: workers, Queues: queues, WaitMS: waitMS, WindowSeconds: window.Seconds(),
		Quiet: quiet, Waiting: waiting, WakeTasks: wakeTasks, SubmitToClaimMS: lat.percentiles(),
		TransactionsPerTask: round1(float64(c1.Commits-c0.Commits) / wakeTasks),
		WakeupsPerTask:      -1,
		WaitersPerQueue:     (workers + queues - 1) / queues,
	}
	if w0 >= 0 && w1 >= 0 {
		fig.WakeupsPerTask = round1((w1 - w0) / wakeTasks)
	}
	return Report{
		Tasks: wakeTasks, Workers: workers, Finished: wakeTasks,
		DurationSeconds: round3(2*window.Seconds() + 11),
		ClaimLatencyMS:  lat.percentiles(),
		SubmitToClaimMS: &fig.SubmitToClaimMS,
		Idle:            fig,
	}, nil
}

// awaitWaiting returns 11 s after the server reports n claims waiting
// (taskmaster_claims_waiting: their first attempts done), or after 60 s; a
// server without that metric (an older binary) gets 2 s, as before it.
func awaitWaiting(ctx context.Context, a *api, n int) {
	awaitMetric(ctx, a, "taskmaster_claims_waiting", n)
}

// wakeups is the server's taskmaster_claim_wakeups_total over every
// reason, or -1 when it has none.
func wakeups(ctx context.Context, a *api) float64 {
	body, err := a.get(ctx, "/metrics")
	if err != nil {
		return -1
	}
	total, found := 0.0, false
	for _, reason := range []string{"notified", "due", "everyone", "passed"} {
		if v, ok := metricSample(body, `taskmaster_claim_wakeups_total{reason="`+reason+`"}`); ok {
			total, found = total+v, true
		}
	}
	if !found {
		return -1
	}
	return total
}

// metricSample finds the sample name (as printed) in a Prometheus text page.
func metricSample(page []byte, name string) (float64, bool) {
	for _, line := range strings.Split(string(page), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			return f, err == nil
		}
	}
	return 0, false
}

func printIdle(w io.Writer, f *IdleFigures) {
	if f == nil {
		return
	}
	row := func(name string, x IdleWindow) {
		fmt.Fprintf(w, "  %-17s server %5.1f %% of a core, postgres %5.1f %%, WAL %8.0f B/s, %6.1f commits/s, %6.1f tuple writes/s\n",
			name+":", x.ServerCorePct, x.PostgresCorePct, x.WALBytesPerSec, x.CommitsPerSec, x.TupleWritesPerSec)
		if len(x.WritesPerSecByTable) > 0 {
			names := make([]string, 0, len(x.WritesPerSecByTable))
			for t := range x.WritesPerSecByTable {
				names = append(names, t)
			}
			sort.Strings(names)
			parts := make([]string, len(names))
			for i, t := range names {
				parts[i] = fmt.Sprintf("%s %.1f", t, x.WritesPerSecByTable[t])
			}
			fmt.Fprintf(w, "  %-17s writes/s by table: %s\n", "", strings.Join(parts, ", "))
		}
	}
	fmt.Fprintf(w, "  idle: %d workers on %d queues (%d per queue), long polls of %d ms, windows of %.0f s\n",
		f.Workers, f.Queues, f.WaitersPerQueue, f.WaitMS, f.WindowSeconds)
	row("no claim open", f.Quiet)
	row("all waiting", f.Waiting)
	fmt.Fprintf(w, "  wake:             %d tasks one at a time: submit to claim p50 %.2f ms p99 %.2f ms; %.1f committed transactions per task\n",
		f.WakeTasks, f.SubmitToClaimMS.P50, f.SubmitToClaimMS.P99, f.TransactionsPerTask)
	if f.WakeupsPerTask >= 0 {
		fmt.Fprintf(w, "                    %.1f waiting claims woken per task (of %d waiting on its queue)\n", f.WakeupsPerTask, f.WaitersPerQueue)
	}
}
