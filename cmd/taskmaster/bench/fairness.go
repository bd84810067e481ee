package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"time"
)

func init() { register("fairness", runFairness) }

// fairnessGroups is how many groups the grouped queues spread their tasks
// over.
const fairnessGroups = 10000

// FairnessFigures compare the claim cost of a queue of plain tasks with a
// queue whose tasks spread over 10,000 groups (claims take turns across
// them) and with such a queue under every limit at once (max_running, a
// rate limit, max_running_per_group: claims planned under the queue's
// lock). Each queue is preloaded with the same number of tasks, then
// drained for the same time by the same workers.
type FairnessFigures struct {
	Groups       int             `json:"groups"`
	Preloaded    int             `json:"preloaded_per_queue"`
	Plain        FairnessQueue   `json:"plain"`
	Grouped      FairnessQueue   `json:"grouped"`
	Limited      FairnessQueue   `json:"grouped_and_limited"`
	GroupedRatio float64         `json:"grouped_p99_ratio"`
	LimitedRatio float64         `json:"limited_p99_ratio"`
	Settings     json.RawMessage `json:"limited_settings"`
}

// FairnessQueue is one queue's drain.
type FairnessQueue struct {
	ClaimLatencyMS Percentiles `json:"claim_latency_ms"`
	TasksPerSec    float64     `json:"tasks_per_sec"`
}

func runFairness(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	if env.db == nil {
		return Report{}, errors.New("the fairness scenario sets queue limits in the database: it needs --database-url or the throwaway database")
	}
	n := opts.Tasks
	if n == 0 {
		n = 100000
	}
	const workers, limit = 4, 10
	stamp := time.Now().UnixNano()
	f := &FairnessFigures{Groups: fairnessGroups, Preloaded: n}
	settings := map[string]any{"max_running": 1000, "rate_per_second": 1e6, "rate_burst": 1000000, "max_running_per_group": 100}
	f.Settings, _ = json.Marshal(settings)
	var finished int64
	run := func(name string, grouped, limited bool, out *FairnessQueue) error {
		queue := fmt.Sprintf("fair-%s-%d", name, stamp)
		if limited {
			if _, err := env.db.ExecContext(ctx, `INSERT INTO queue_settings (queue, max_running, rate_per_second, rate_burst, max_running_per_group, updated_at)
				VALUES ($1, $2, $3, $4, $5, now())`, queue, settings["max_running"], settings["rate_per_second"], settings["rate_burst"], settings["max_running_per_group"]); err != nil {
				return fmt.Errorf("queue settings: %w", err)
			}
		}
		fmt.Fprintf(log, "[fairness] %s: loading %d tasks\n", queue, n)
		if err := produceGroups(ctx, env.api, queue, n, opts.Producers, grouped); err != nil {
			return err
		}
		_, _ = env.db.ExecContext(ctx, `ANALYZE tasks`)
		claims := &recorder{}
		var completed atomic.Int64
		mctx, cancel := context.WithTimeout(ctx, opts.Duration)
		defer cancel()
		fmt.Fprintf(log, "[fairness] %s: draining for %s\n", queue, opts.Duration)
		start := time.Now()
		if err := drain(mctx, env.api, queue, int64(n), workers, limit, reportBatches, nil, claims, nil, &completed); err != nil && mctx.Err() == nil {
			return err
		}
		out.ClaimLatencyMS = claims.percentiles()
		out.TasksPerSec = round1(float64(completed.Load()) / time.Since(start).Seconds())
		finished += completed.Load()
		return nil
	}
	if err := run("plain", false, false, &f.Plain); err != nil {
		return Report{}, err
	}
	if err := run("groups", true, false, &f.Grouped); err != nil {
		return Report{}, err
	}
	if err := run("limited", true, true, &f.Limited); err != nil {
		return Report{}, err
	}
	if p := f.Plain.ClaimLatencyMS.P99; p > 0 {
		f.GroupedRatio = round3(f.Grouped.ClaimLatencyMS.P99 / p)
		f.LimitedRatio = round3(f.Limited.ClaimLatencyMS.P99 / p)
	}
	return Report{Tasks: 3 * n, Producers: opts.Producers, Workers: workers, Finished: finished,
		ClaimLatencyMS: f.Grouped.ClaimLatencyMS, Fairness: f}, nil
}

// produceGroups submits n tasks to queue in batches of 1,000, spread
// round-robin over fairnessGroups groups when grouped.
func produceGroups(ctx context.Context, a *api, queue string, n, producers int, grouped bool) error {
	var submitted atomic.Int64
	return produceItems(ctx, a, n, producers, 1000, func(i int) submitItem {
		it := submitItem{Queue: queue}
		if grouped {
			it.GroupKey = fmt.Sprintf("tenant-%d", i%fairnessGroups)
		}
		return it
	}, &submitted)
}

func printFairness(w io.Writer, f *FairnessFigures) {
	if f == nil {
		return
	}
	row := func(name string, q FairnessQueue) {
		fmt.Fprintf(w, "  %-22s claim p50 %6.2f ms  p99 %6.2f ms  max %6.2f ms  %8.1f tasks/s\n",
			name, q.ClaimLatencyMS.P50, q.ClaimLatencyMS.P99, q.ClaimLatencyMS.Max, q.TasksPerSec)
	}
	fmt.Fprintf(w, "  fairness: %d tasks per queue, %d groups; limits %s\n", f.Preloaded, f.Groups, f.Settings)
	row("plain", f.Plain)
	row("10,000 groups", f.Grouped)
	row("groups + all limits", f.Limited)
	fmt.Fprintf(w, "  p99 ratio to plain:     groups %.2fx, groups + limits %.2fx (target: groups within 2x)\n", f.GroupedRatio, f.LimitedRatio)
}
