package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
)

// The queue statistics projection (QueueStatsProjection) maintains:
//
//   - queue_status_counts: tasks per queue and status; each task event
//     subtracts one from its From status and adds one to its To status (a
//     submission has no From, a cleaned task no To);
//   - queue_totals: cumulative counts per queue of submitted, claimed,
//     completed, failed, dead-lettered (by reason), requeued (by reason) and
//     cleaned tasks, under the metric counter kinds (metrics.CounterKind);
//   - queue_rate_buckets: per-minute counts of enqueued, claimed, completed
//     and dead-lettered tasks, by the minute of the event's database time
//     (the janitor prunes old minutes), and per minute the number and the
//     sum (seconds) of the queue waits (rateQueueWait) and of the execution
//     times (rateExecution) the events carry;
//   - worker_status_counts: workers per status, from worker events.
//
// StatsReader, below, reads them back for GET /queues/v1.

type statusKey struct{ queue, status string }

// Duration kinds of queue_rate_buckets (migration 0016): count is how many
// events carried the duration in the minute, seconds their sum.
const (
	// rateQueueWait sums claimed_at - created_at of task.claimed.
	rateQueueWait = "queue_wait"
	// rateExecution sums finished - claimed_at of the events that end a
	// running attempt.
	rateExecution = "execution"
)

// durationRateKinds are the histograms whose observations the buckets sum.
var durationRateKinds = map[metrics.HistogramKind]string{
	metrics.TaskQueueWait:         rateQueueWait,
	metrics.TaskExecutionDuration: rateExecution,
}

type rateKey struct {
	queue  string
	minute time.Time
	kind   string
}

// writeQueueStats adds to st the statement parts that apply sum to the queue
// statistics, each writing only if guard returns a row.
func writeQueueStats(sum *summary, st *statement, guard string) {
	var (
		statuses deltas[statusKey, int64]
		totals   deltas[counterKey, int64]
		rates    deltas[rateKey, int64]
		seconds  deltas[rateKey, float64]
		workers  deltas[string, int64]
	)
	sum.each(func(e event.Event, n int64) {
		switch {
		case isTaskEvent(e):
			if e.From != "" {
				statuses.add(statusKey{e.Queue, e.From}, -n)
			}
			if e.To != "" {
				statuses.add(statusKey{e.Queue, e.To}, n)
			}
			for _, c := range countersOf(e) {
				totals.add(c, n)
			}
			for _, kind := range rateKindsOf(e) {
				rates.add(rateKey{e.Queue, minuteOf(e.OccurredAt), kind}, n)
			}
		case isWorkerEvent(e):
			if e.From != "" {
				workers.add(e.From, -n)
			}
			if e.To != "" {
				workers.add(e.To, n)
			}
		}
	})
	sum.eachDuration(func(e event.Event, kind metrics.HistogramKind, agg *durationAgg) {
		k, ok := durationRateKinds[kind]
		if !ok || !observes(e) {
			return
		}
		key := rateKey{e.Queue, minuteOf(e.OccurredAt), k}
		rates.add(key, agg.n)
		seconds.add(key, agg.sum)
	})
	{
		var queues, names []string
		var counts []int64
		n := statuses.each(func(k statusKey, v int64) {
			queues, names, counts = append(queues, k.queue), append(names, k.status), append(counts, v)
		})
		st.insert(`INSERT INTO queue_status_counts AS t (queue, status, count)`,
			`ON CONFLICT (queue, status) DO UPDATE SET count = t.count + excluded.count`,
			guard, n, texts(queues), texts(names), bigints(counts))
	}
	{
		var queues, kinds, reasons []string
		var counts []int64
		n := totals.each(func(k counterKey, v int64) {
			queues, kinds, reasons = append(queues, k.queue), append(kinds, string(k.kind)), append(reasons, k.reason)
			counts = append(counts, v)
		})
		st.insert(`INSERT INTO queue_totals AS t (queue, kind, reason, count)`,
			`ON CONFLICT (queue, kind, reason) DO UPDATE SET count = t.count + excluded.count`,
			guard, n, texts(queues), texts(kinds), texts(reasons), bigints(counts))
	}
	{
		var queues, kinds []string
		var minutes []time.Time
		var counts []int64
		var secs []float64
		n := rates.each(func(k rateKey, v int64) {
			queues, minutes, kinds = append(queues, k.queue), append(minutes, k.minute), append(kinds, k.kind)
			counts, secs = append(counts, v), append(secs, seconds.sum[k])
		})
		st.insert(`INSERT INTO queue_rate_buckets AS t (queue, minute, kind, count, seconds)`,
			`ON CONFLICT (queue, minute, kind) DO UPDATE SET count = t.count + excluded.count, seconds = t.seconds + excluded.seconds`,
			guard, n, texts(queues), timestamps(minutes), texts(kinds), bigints(counts), float8s(secs))
	}
	{
		var names []string
		var counts []int64
		n := workers.each(func(k string, v int64) { names, counts = append(names, k), append(counts, v) })
		st.insert(`INSERT INTO worker_status_counts AS t (status, count)`,
			`ON CONFLICT (status) DO UPDATE SET count = t.count + excluded.count`,
			guard, n, texts(names), bigints(counts))
	}
}

// StatsReader implements ports.StatsReader over the tables of the queue
// statistics projection: queue_status_counts, queue_totals and
// queue_rate_buckets. Only the active workers and the oldest pending task are
// read live, each with an index.
type StatsReader struct {
	db *sqlx.DB
}

var _ ports.StatsReader = (*StatsReader)(nil)

// NewStatsReader returns a StatsReader over db.
func NewStatsReader(db *sqlx.DB) *StatsReader { return &StatsReader{db: db} }

// RateWindows are the windows of QueueStats.Rates.
var RateWindows = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// readTotals reads the rows of queue_totals of these queues. Its kinds are
// the metric counter kinds the projection counts under (metrics.CounterKind).
func readTotals(ctx context.Context, tx *sqlx.Tx, queues []string) (map[string]ports.QueueTotals, error) {
	var rows []struct {
		Queue  string `db:"queue"`
		Kind   string `db:"kind"`
		Reason string `db:"reason"`
		Count  int64  `db:"count"`
	}
	if err := tx.SelectContext(ctx, &rows, `SELECT queue, kind, reason, count FROM queue_totals WHERE queue = ANY($1::text[])`,
		pq.StringArray(queues)); err != nil {
		return nil, fmt.Errorf("queue totals: %w", err)
	}
	out := map[string]ports.QueueTotals{}
	for _, r := range rows {
		t := out[r.Queue]
		switch metrics.CounterKind(r.Kind) {
		case metrics.TasksSubmitted:
			t.Submitted += r.Count
		case metrics.TasksClaimed:
			t.Claimed += r.Count
		case metrics.TasksCompleted:
			t.Completed += r.Count
		case metrics.TasksFailed:
			t.Failed += r.Count
		case metrics.TasksCleaned:
			t.Cleaned += r.Count
		case metrics.TasksDeadLettered:
			if t.DeadLettered == nil {
				t.DeadLettered = map[string]int64{}
			}
			t.DeadLettered[r.Reason] += r.Count
		case metrics.TasksRequeued:
			if t.Requeued == nil {
				t.Requeued = map[string]int64{}
			}
			t.Requeued[r.Reason] += r.Count
		}
		out[r.Queue] = t
	}
	return out, nil
}

// rateBucket is one per-minute count (and, for the duration kinds, sum).
type rateBucket struct {
	Queue   string    `db:"queue"`
	Minute  time.Time `db:"minute"`
	Kind    string    `db:"kind"`
	Count   int64     `db:"count"`
	Seconds float64   `db:"seconds"`
}

// readBuckets reads the buckets of these queues over the longest window
// (RateWindows, QueueAverageWindows) ending at now, by queue.
func readBuckets(ctx context.Context, tx *sqlx.Tx, queues []string, now time.Time) (map[string][]rateBucket, error) {
	longest := max(RateWindows[len(RateWindows)-1], QueueAverageWindows[len(QueueAverageWindows)-1])
	var rows []rateBucket
	if err := tx.SelectContext(ctx, &rows, `
		SELECT queue, minute, kind, count, seconds FROM queue_rate_buckets
		WHERE queue = ANY($1::text[]) AND minute > $2`,
		pq.StringArray(queues), now.Add(-longest-time.Minute)); err != nil {
		return nil, fmt.Errorf("queue rates: %w", err)
	}
	byQueue := map[string][]rateBucket{}
	for _, b := range rows {
		byQueue[b.Queue] = append(byQueue[b.Queue], b)
	}
	return byQueue, nil
}

// QueueAverageWindows are the windows of QueueDetail.Averages.
var QueueAverageWindows = []time.Duration{5 * time.Minute, 15 * time.Minute}

// averageWindows computes the average queue wait and execution time over
// each of QueueAverageWindows ending at now, weighing each bucket as
// rateWindows does.
func averageWindows(buckets []rateBucket, now time.Time) []ports.QueueAverage {
	out := make([]ports.QueueAverage, len(QueueAverageWindows))
	for i, w := range QueueAverageWindows {
		var waitN, waitSum, execN, execSum float64
		for _, b := range buckets {
			share := bucketShare(b, now, w)
			switch b.Kind {
			case rateQueueWait:
				waitN, waitSum = waitN+share*float64(b.Count), waitSum+share*b.Seconds
			case rateExecution:
				execN, execSum = execN+share*float64(b.Count), execSum+share*b.Seconds
			}
		}
		out[i] = ports.QueueAverage{Window: w, QueueWaitSeconds: ratio(waitSum, waitN), ExecutionSeconds: ratio(execSum, execN)}
	}
	return out
}

func ratio(sum, n float64) *float64 {
	if n <= 0 {
		return nil
	}
	v := sum / n
	return &v
}

// rateWindows computes per-minute rates over each of RateWindows ending at
// now. A bucket counts in proportion to how much of its minute (up to now)
// lies in the window, so the rates move smoothly as minutes pass.
func rateWindows(buckets []rateBucket, now time.Time) []ports.QueueRate {
	out := make([]ports.QueueRate, len(RateWindows))
	for i, w := range RateWindows {
		r := ports.QueueRate{Window: w}
		for _, b := range buckets {
			share := bucketShare(b, now, w)
			if share == 0 {
				continue
			}
			v := float64(b.Count) * share / w.Minutes()
			switch b.Kind {
			case rateEnqueued:
				r.Enqueued += v
			case rateClaimed:
				r.Claimed += v
			case rateCompleted:
				r.Completed += v
			case rateDeadLettered:
				r.DeadLettered += v
			}
		}
		out[i] = r
	}
	return out
}

// bucketShare is how much of bucket b counts in the window w ending at now:
// the part of its minute (up to now) that lies in the window.
func bucketShare(b rateBucket, now time.Time, w time.Duration) float64 {
	start := now.Add(-w)
	end := b.Minute.Add(time.Minute)
	if end.After(now) {
		end = now
	}
	span := end.Sub(b.Minute)
	overlap := end.Sub(maxTime(b.Minute, start))
	switch {
	case overlap <= 0:
		return 0
	case span <= 0 || overlap >= span:
		return 1
	default:
		return float64(overlap) / float64(span)
	}
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}
