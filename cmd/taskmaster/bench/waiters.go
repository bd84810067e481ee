package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"
)

func init() { register("waiters", runWaiters) }

// WaiterFigures are the waiters scenario's: what --waiters producers
// waiting for their tasks (GET /tasks/v1/{id}?wait_ms=60000) cost while
// nothing happens, and how soon each is answered once its task completes.
type WaiterFigures struct {
	Waiters int `json:"waiters"`
	WaitMS  int `json:"wait_ms"`
	// Quiet is the server with no producer waiting, Waiting with all of
	// them; both over WindowSeconds.
	Quiet         IdleWindow `json:"quiet"`
	Waiting       IdleWindow `json:"waiting"`
	WindowSeconds float64    `json:"window_seconds"`
	// WakeTasks of the tasks were then completed one at a time; the wake
	// latency is from the completion's answer at the worker to the waiting
	// producer's answer.
	WakeTasks     int         `json:"wake_tasks"`
	WakeLatencyMS Percentiles `json:"wake_latency_ms"`
	// TransactionsPerTask are the database's committed transactions per
	// task during the wake phase (its claim, its completion, the waiter's
	// read of the finished task).
	TransactionsPerTask float64 `json:"transactions_per_task"`
	// WakeupsPerTask are the waiters the server woke per task
	// (taskmaster_task_waiter_wakeups_total; -1 without that metric).
	WakeupsPerTask float64 `json:"wakeups_per_task"`
}

// runWaiters submits --waiters tasks to a queue no worker serves, opens
// one waiting GET per task, measures a window with nothing else running
// (it starts 11 s after the server reports every producer waiting, as the
// idle scenario's, and lies within the first wait of 60 s), then claims
// and completes tasks one at a time and measures how soon each task's
// producer is answered. The waiters run no safety check during the window
// only if the server's TASKMASTER_AWAIT_SAFETY_INTERVAL_MS (10 s by
// default) is longer: the window shows that cost too when it is not.
func runWaiters(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	const waitMS = 60000
	n := max(1, opts.Waiters)
	window := min(opts.Duration, 15*time.Second)
	a := newAPI(env.api.base, n+8)
	prefix := fmt.Sprintf("waiters-%d", time.Now().UnixNano())
	queue := prefix + "-q"

	fmt.Fprintf(log, "[waiters] quiet window (no producer waiting) for %s\n", window)
	quiet := measureWindow(ctx, env, window)

	fmt.Fprintf(log, "[waiters] submitting %d tasks\n", n)
	ids := make([]string, 0, n)
	for len(ids) < n {
		batch := make([]submitItem, min(1000, n-len(ids)))
		for i := range batch {
			batch[i] = submitItem{Queue: queue}
		}
		var out struct {
			Tasks []claimedTask `json:"tasks"`
		}
		if _, err := a.post(ctx, "/tasks/v1/batch", map[string]any{"tasks": batch}, &out); err != nil {
			return Report{}, err
		}
		for _, t := range out.Tasks {
			ids = append(ids, t.ID)
		}
	}

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	answered := make([]chan time.Time, n)
	var (
		wg   sync.WaitGroup
		errs = make(chan error, n)
		open atomic.Int64
	)
	for i, id := range ids {
		answered[i] = make(chan time.Time, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			first := true
			for wctx.Err() == nil {
				if first {
					open.Add(1)
					first = false
				}
				body, err := a.getStatus(wctx, "/tasks/v1/"+id+"?wait_ms="+fmt.Sprint(waitMS))
				if err != nil {
					if wctx.Err() == nil {
						errs <- err
					}
					return
				}
				at := time.Now()
				var t struct {
					Status string `json:"status"`
				}
				if err := json.Unmarshal(body, &t); err != nil {
					errs <- err
					return
				}
				if t.Status == "DONE" || t.Status == "DEAD" {
					answered[i] <- at
					return
				}
			}
		}()
	}
	for open.Load() < int64(n) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	awaitMetric(ctx, a, "taskmaster_task_waiters", n)
	fmt.Fprintf(log, "[waiters] waiting window (%d producers waiting) for %s\n", n, window)
	waiting := measureWindow(ctx, env, window)

	wake := min(100, n)
	fmt.Fprintf(log, "[waiters] completing %d tasks one at a time\n", wake)
	worker := prefix + "-w"
	if err := a.register(ctx, worker, queue); err != nil {
		return Report{}, err
	}
	lat := &recorder{}
	c0, w0 := readDBCounters(ctx, env), waiterWakeups(ctx, a)
	index := make(map[string]int, n)
	for i, id := range ids {
		index[id] = i
	}
	for range wake {
		tasks, err := a.claim(ctx, worker, queue, 1, 0)
		if err != nil {
			return Report{}, err
		}
		if len(tasks) != 1 {
			return Report{}, fmt.Errorf("claimed %d tasks, wanted 1", len(tasks))
		}
		if err := a.complete(ctx, worker, tasks[0]); err != nil {
			return Report{}, err
		}
		done := time.Now()
		select {
		case at := <-answered[index[tasks[0].ID]]:
			lat.add(at.Sub(done))
		case <-time.After(30 * time.Second):
			return Report{}, fmt.Errorf("the producer waiting for task %s was not answered", tasks[0].ID)
		}
	}
	time.Sleep(time.Second) // counters settle
	if env.db != nil {
		_, _ = env.db.ExecContext(ctx, `SELECT pg_stat_clear_snapshot()`)
	}
	c1, w1 := readDBCounters(ctx, env), waiterWakeups(ctx, a)
	cancel()
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Report{}, err
	}
	fig := &WaiterFigures{
		Waiters: n, WaitMS: waitMS, Quiet: quiet, Waiting: waiting, WindowSeconds: window.Seconds(),
		WakeTasks: wake, WakeLatencyMS: lat.percentiles(),
		TransactionsPerTask: round1(float64(c1.Commits-c0.Commits) / float64(wake)),
		WakeupsPerTask:      -1,
	}
	if w0 >= 0 && w1 >= 0 {
		fig.WakeupsPerTask = round1((w1 - w0) / float64(wake))
	}
	return Report{
		Tasks: n, Producers: n, Workers: 1, Finished: int64(wake),
		DurationSeconds: round3(2*window.Seconds() + 11),
		Waiters:         fig,
	}, nil
}

// getStatus is a GET whose answer must be 200.
func (a *api) getStatus(ctx context.Context, path string) ([]byte, error) {
	body, err := a.get(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, body)
	}
	return body, nil
}

// awaitMetric returns 11 s after the server's gauge name reaches n (the
// first requests' database counters arrive by then), or after 60 s; a
// server without the gauge gets 2 s.
func awaitMetric(ctx context.Context, a *api, name string, n int) {
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		body, err := a.get(ctx, "/metrics")
		if err != nil {
			break
		}
		v, found := metricSample(body, name)
		if !found {
			time.Sleep(2 * time.Second)
			return
		}
		if v >= float64(n) {
			time.Sleep(11 * time.Second)
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waiterWakeups is the server's taskmaster_task_waiter_wakeups_total, or
// -1 when it has none.
func waiterWakeups(ctx context.Context, a *api) float64 {
	body, err := a.get(ctx, "/metrics")
	if err != nil {
		return -1
	}
	if v, ok := metricSample(body, "taskmaster_task_waiter_wakeups_total"); ok {
		return v
	}
	return -1
}

func printWaiters(w io.Writer, f *WaiterFigures) {
	if f == nil {
		return
	}
	row := func(name string, x IdleWindow) {
		fmt.Fprintf(w, "  %-17s server %5.1f %% of a core, postgres %5.1f %%, WAL %8.0f B/s, %6.1f commits/s, %6.1f tuple writes/s\n",
			name+":", x.ServerCorePct, x.PostgresCorePct, x.WALBytesPerSec, x.CommitsPerSec, x.TupleWritesPerSec)
	}
	fmt.Fprintf(w, "  waiters: %d producers each waiting for its task (wait_ms %d), windows of %.0f s\n", f.Waiters, f.WaitMS, f.WindowSeconds)
	row("none waiting", f.Quiet)
	row("all waiting", f.Waiting)
	fmt.Fprintf(w, "  wake:             %d tasks completed one at a time: completion to producer's answer p50 %.2f ms p99 %.2f ms; %.1f committed transactions per task\n",
		f.WakeTasks, f.WakeLatencyMS.P50, f.WakeLatencyMS.P99, f.TransactionsPerTask)
	if f.WakeupsPerTask >= 0 {
		fmt.Fprintf(w, "                    %.1f waiters woken per task\n", f.WakeupsPerTask)
	}
}
