package outbox

import (
	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/domain/event"
)

// The metrics projection (MetricsProjection) maintains the cumulative
// counters (metric_counters) and the duration histograms
// (metric_histogram_buckets, metric_histogram_sums) that GET /metrics
// reports; see package metrics for their meaning. MetricsSource reads them
// back at scrape time.

type histogramBucketKey struct {
	kind  metrics.HistogramKind
	queue string
	le    float64
}

type histogramKey struct {
	kind  metrics.HistogramKind
	queue string
}

// writeMetrics adds to st the statement parts that apply sum to the
// metrics, each writing only if guard returns a row.
func writeMetrics(sum *summary, st *statement, guard string) {
	var (
		counters deltas[counterKey, int64]
		buckets  deltas[histogramBucketKey, int64]
		sums     deltas[histogramKey, float64]
	)
	sum.each(func(e event.Event, n int64) {
		for _, c := range countersOf(e) {
			counters.add(c, n)
		}
	})
	sum.eachDuration(func(e event.Event, kind metrics.HistogramKind, agg *durationAgg) {
		if !observes(e) {
			return
		}
		for i, n := range agg.buckets {
			if n != 0 {
				buckets.add(histogramBucketKey{kind, e.Queue, bucketBound(i)}, n)
			}
		}
		sums.add(histogramKey{kind, e.Queue}, agg.sum)
	})
	{
		var kinds, queues, reasons []string
		var values []int64
		n := counters.each(func(k counterKey, v int64) {
			kinds, queues, reasons = append(kinds, string(k.kind)), append(queues, k.queue), append(reasons, k.reason)
			values = append(values, v)
		})
		st.insert(`INSERT INTO metric_counters AS t (kind, queue, reason, value)`,
			`ON CONFLICT (kind, queue, reason) DO UPDATE SET value = t.value + excluded.value`,
			guard, n, texts(kinds), texts(queues), texts(reasons), bigints(values))
	}
	{
		var kinds, queues []string
		var bounds []float64
		var counts []int64
		n := buckets.each(func(k histogramBucketKey, v int64) {
			kinds, queues, bounds = append(kinds, string(k.kind)), append(queues, k.queue), append(bounds, k.le)
			counts = append(counts, v)
		})
		st.insert(`INSERT INTO metric_histogram_buckets AS t (kind, queue, upper_bound, count)`,
			`ON CONFLICT (kind, queue, upper_bound) DO UPDATE SET count = t.count + excluded.count`,
			guard, n, texts(kinds), texts(queues), float8s(bounds), bigints(counts))
	}
	{
		var kinds, queues []string
		var values []float64
		n := sums.each(func(k histogramKey, v float64) {
			kinds, queues, values = append(kinds, string(k.kind)), append(queues, k.queue), append(values, v)
		})
		st.insert(`INSERT INTO metric_histogram_sums AS t (kind, queue, sum)`,
			`ON CONFLICT (kind, queue) DO UPDATE SET sum = t.sum + excluded.sum`,
			guard, n, texts(kinds), texts(queues), float8s(values))
	}
}
