package outbox

import (
	"time"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/domain/event"
)

// NewQueueStatsProjector returns the queue statistics projector (consumer
// group queue_stats). It maintains:
//
//   - queue_status_counts: tasks per queue and status; each task event
//     subtracts one from its From status and adds one to its To status (a
//     submission has no From, a cleaned task no To);
//   - queue_totals: cumulative counts per queue of submitted, claimed,
//     completed, failed, dead-lettered (by reason), requeued (by reason) and
//     cleaned tasks;
//   - queue_rate_buckets: per-minute counts of enqueued, claimed, completed
//     and dead-lettered tasks, by the minute of the event's database time;
//   - worker_status_counts: workers per status, from worker events.
func NewQueueStatsProjector() *Projector {
	return &Projector{group: QueueStatsGroup, project: projectQueueStats}
}

func projectQueueStats(events []event.Event) []upsert {
	type statusKey struct{ queue, status string }
	type bucketKey struct {
		queue  string
		minute time.Time
		kind   string
	}
	var (
		statuses deltas[statusKey, int64]
		totals   deltas[counterKey, int64]
		buckets  deltas[bucketKey, int64]
		workers  deltas[string, int64]
	)
	for _, e := range events {
		switch {
		case isTaskEvent(e):
			if e.From != "" {
				statuses.add(statusKey{e.Queue, e.From}, -1)
			}
			if e.To != "" {
				statuses.add(statusKey{e.Queue, e.To}, 1)
			}
			for _, c := range countersOf(e) {
				totals.add(c, 1)
			}
			for _, kind := range rateKindsOf(e) {
				buckets.add(bucketKey{e.Queue, minuteOf(e.OccurredAt), kind}, 1)
			}
		case isWorkerEvent(e):
			if e.From != "" {
				workers.add(e.From, -1)
			}
			if e.To != "" {
				workers.add(e.To, 1)
			}
		}
	}
	text, bigint := "text", "bigint"
	return []upsert{
		{
			table: "queue_status_counts",
			keys:  []column{{"queue", text}, {"status", text}},
			value: column{"count", bigint},
			rows:  statuses.rows(func(k statusKey) []any { return []any{k.queue, k.status} }),
		},
		{
			table: "queue_totals",
			keys:  []column{{"queue", text}, {"kind", text}, {"reason", text}},
			value: column{"count", bigint},
			rows:  totals.rows(func(k counterKey) []any { return []any{k.queue, string(k.kind), k.reason} }),
		},
		{
			table: "queue_rate_buckets",
			keys:  []column{{"queue", text}, {"minute", "timestamptz"}, {"kind", text}},
			value: column{"count", bigint},
			rows:  buckets.rows(func(k bucketKey) []any { return []any{k.queue, k.minute, k.kind} }),
		},
		{
			table: "worker_status_counts",
			keys:  []column{{"status", text}},
			value: column{"count", bigint},
			rows:  workers.rows(func(k string) []any { return []any{k} }),
		},
	}
}

// NewMetricsProjector returns the metrics projector (consumer group
// metrics). It maintains the cumulative counters (metric_counters) and the
// duration histograms (metric_histogram_buckets, metric_histogram_sums) that
// GET /metrics reports; see package metrics for their meaning.
func NewMetricsProjector() *Projector {
	return &Projector{group: MetricsGroup, project: projectMetrics}
}

func projectMetrics(events []event.Event) []upsert {
	type bucketKey struct {
		kind  metrics.HistogramKind
		queue string
		le    float64
	}
	type sumKey struct {
		kind  metrics.HistogramKind
		queue string
	}
	var (
		counters deltas[counterKey, int64]
		buckets  deltas[bucketKey, int64]
		sums     deltas[sumKey, float64]
	)
	for _, e := range events {
		for _, c := range countersOf(e) {
			counters.add(c, 1)
		}
		for _, o := range observationsOf(e) {
			buckets.add(bucketKey{o.kind, o.queue, bucketOf(o.seconds)}, 1)
			sums.add(sumKey{o.kind, o.queue}, o.seconds)
		}
	}
	text := "text"
	return []upsert{
		{
			table: "metric_counters",
			keys:  []column{{"kind", text}, {"queue", text}, {"reason", text}},
			value: column{"value", "bigint"},
			rows:  counters.rows(func(k counterKey) []any { return []any{string(k.kind), k.queue, k.reason} }),
		},
		{
			table: "metric_histogram_buckets",
			keys:  []column{{"kind", text}, {"queue", text}, {"upper_bound", "double precision"}},
			value: column{"count", "bigint"},
			rows:  buckets.rows(func(k bucketKey) []any { return []any{string(k.kind), k.queue, k.le} }),
		},
		{
			table: "metric_histogram_sums",
			keys:  []column{{"kind", text}, {"queue", text}},
			value: column{"sum", "double precision"},
			rows:  sums.rows(func(k sumKey) []any { return []any{string(k.kind), k.queue} }),
		},
	}
}
