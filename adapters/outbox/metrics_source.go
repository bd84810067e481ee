package outbox

import (
	"context"
	"database/sql"
	"fmt"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/metrics"
)

// MetricsSource reads the metrics projection, the statistics gauges, the
// consumer groups' lag and the set-aside messages, for the Prometheus
// collector.
type MetricsSource struct {
	db *sqlx.DB
}

var _ metrics.Source = (*MetricsSource)(nil)

// NewMetricsSource returns a source over db.
func NewMetricsSource(db *sqlx.DB) *MetricsSource { return &MetricsSource{db: db} }

// workerStatuses are reported even when no worker is in them.
var workerStatuses = []string{"ACTIVE", "STALE", "DEAD"}

// lagSQL gives, per consumer group, the age of the first message after its
// position (created_at is a timestamptz, migration 0006), or 0. Messages of
// transactions still running are not visible, so they do not count; those
// that committed but wait behind an older running transaction do.
const lagSQL = `
SELECT o.consumer_group,
	coalesce(extract(epoch FROM clock_timestamp() - (
		SELECT m.created_at FROM watermill_taskmaster_events m
		WHERE (m.transaction_id, m."offset") > (o.last_processed_transaction_id, coalesce(o.offset_acked, 0))
		ORDER BY m.transaction_id, m."offset"
		LIMIT 1)), 0)::float8 AS lag
FROM watermill_offsets_taskmaster_events o
ORDER BY o.consumer_group`

// queueActivitySQL lists every queue the metrics know (the queues of the
// task counts, and of the counters: a schedule's queue may have counters
// before its first task; the histograms' queues have task counts), with its
// enqueued, claimed and completed tasks of the last 15 minutes and its
// PENDING and RUNNING tasks (metrics.QueueActivity).
const queueActivitySQL = `
WITH c AS (
	SELECT queue, coalesce(sum(count) FILTER (WHERE status IN ('PENDING', 'RUNNING')), 0) AS backlog
	FROM queue_status_counts GROUP BY queue
	UNION ALL
	SELECT DISTINCT m.queue, 0 FROM metric_counters m
	WHERE m.queue NOT IN ('', '*') AND NOT EXISTS (SELECT 1 FROM queue_status_counts s WHERE s.queue = m.queue)
), r AS (
	SELECT queue, sum(count) AS recent FROM queue_rate_buckets
	WHERE minute > now() - interval '15 minutes' AND kind IN ('enqueued', 'claimed', 'completed')
	GROUP BY queue
)
SELECT c.queue, coalesce(r.recent, 0) AS recent, c.backlog
FROM c LEFT JOIN r ON r.queue = c.queue`

// seriesQueue is the queue label of a row of table alias t: its queue when
// it has series of its own (the names in $1, joined as o) or is not a
// queue ("" or "*"), else metrics.OtherQueue.
const seriesQueue = `CASE WHEN o.queue IS NOT NULL OR t.queue IN ('', '*') THEN t.queue ELSE '` + metrics.OtherQueue + `' END`

// ownJoin joins table alias t to the queues with series of their own ($1).
const ownJoin = ` LEFT JOIN unnest($1::text[]) AS o(queue) ON o.queue = t.queue`

// Snapshot implements metrics.Source, reading everything in one read-only
// snapshot. The per-queue figures of the queues without series of their own
// are summed in the database, so a scrape's answer is bounded by the series
// cap however many queues there are.
func (s *MetricsSource) Snapshot(ctx context.Context, series *metrics.QueueSeries) (*metrics.Snapshot, error) {
	tx, err := s.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("metrics snapshot: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	snap := &metrics.Snapshot{}
	// The aggregates below read every queue's rows, and their costs cross
	// the JIT thresholds with many queues: no JIT, so that a scrape costs
	// the same every time (with 100,000 queues compiling saved nothing).
	if _, err := tx.ExecContext(ctx, `SET LOCAL jit = off`); err != nil {
		return nil, fmt.Errorf("metrics snapshot: %w", err)
	}

	var seen []metrics.QueueActivity
	if !series.Full() {
		var rows []struct {
			Queue   string `db:"queue"`
			Recent  int64  `db:"recent"`
			Backlog int64  `db:"backlog"`
		}
		if err := tx.SelectContext(ctx, &rows, queueActivitySQL); err != nil {
			return nil, fmt.Errorf("metrics snapshot: queues: %w", err)
		}
		for _, r := range rows {
			seen = append(seen, metrics.QueueActivity{Queue: r.Queue, Recent: r.Recent, Backlog: r.Backlog})
		}
	}
	own := pq.StringArray(series.Assign(seen))

	var counters []struct {
		Kind   string `db:"kind"`
		Queue  string `db:"queue"`
		Reason string `db:"reason"`
		Value  int64  `db:"value"`
	}
	if err := tx.SelectContext(ctx, &counters, `
		SELECT t.kind, `+seriesQueue+` AS queue, t.reason, sum(t.value)::bigint AS value
		FROM metric_counters t`+ownJoin+`
		GROUP BY 1, 2, 3`, own); err != nil {
		return nil, fmt.Errorf("metrics snapshot: counters: %w", err)
	}
	for _, c := range counters {
		snap.Counters = append(snap.Counters, metrics.Counter{
			Kind: metrics.CounterKind(c.Kind), Queue: c.Queue, Reason: c.Reason, Value: float64(c.Value),
		})
	}

	var buckets []struct {
		Kind       string  `db:"kind"`
		Queue      string  `db:"queue"`
		UpperBound float64 `db:"upper_bound"`
		Count      int64   `db:"count"`
		Sum        float64 `db:"sum"`
	}
	if err := tx.SelectContext(ctx, &buckets, `
		WITH b AS (
			SELECT t.kind, `+seriesQueue+` AS queue, t.upper_bound, sum(t.count)::bigint AS count
			FROM metric_histogram_buckets t`+ownJoin+`
			GROUP BY 1, 2, 3
		), s AS (
			SELECT t.kind, `+seriesQueue+` AS queue, sum(t.sum) AS sum
			FROM metric_histogram_sums t`+ownJoin+`
			GROUP BY 1, 2
		)
		SELECT b.kind, b.queue, b.upper_bound, b.count, coalesce(s.sum, 0) AS sum
		FROM b LEFT JOIN s ON s.kind = b.kind AND s.queue = b.queue
		ORDER BY b.kind, b.queue, b.upper_bound`, own); err != nil {
		return nil, fmt.Errorf("metrics snapshot: histograms: %w", err)
	}
	for _, b := range buckets {
		n := len(snap.Histograms)
		if n == 0 || snap.Histograms[n-1].Kind != metrics.HistogramKind(b.Kind) || snap.Histograms[n-1].Queue != b.Queue {
			snap.Histograms = append(snap.Histograms, metrics.Histogram{Kind: metrics.HistogramKind(b.Kind), Queue: b.Queue, Sum: b.Sum})
			n++
		}
		h := &snap.Histograms[n-1]
		h.Buckets = append(h.Buckets, metrics.Bucket{UpperBound: b.UpperBound, Count: uint64(max(b.Count, 0))})
	}

	var tasks []struct {
		Queue  string `db:"queue"`
		Status string `db:"status"`
		Count  int64  `db:"count"`
	}
	if err := tx.SelectContext(ctx, &tasks, `
		WITH c AS (
			SELECT `+seriesQueue+` AS queue, t.status, sum(t.count)::bigint AS count
			FROM queue_status_counts t`+ownJoin+`
			GROUP BY 1, 2
		)
		SELECT q.queue, s.status, coalesce(c.count, 0) AS count
		FROM (SELECT DISTINCT queue FROM c) q
		CROSS JOIN unnest(ARRAY['PENDING', 'RUNNING', 'DONE', 'DEAD', 'BLOCKED']) AS s(status)
		LEFT JOIN c ON c.queue = q.queue AND c.status = s.status
		ORDER BY 1, 2`, own); err != nil {
		return nil, fmt.Errorf("metrics snapshot: tasks: %w", err)
	}
	for _, t := range tasks {
		snap.Tasks = append(snap.Tasks, metrics.TaskCount{Queue: t.Queue, Status: t.Status, Count: float64(t.Count)})
	}

	workers := map[string]int64{}
	rows, err := tx.QueryContext(ctx, `SELECT status, count FROM worker_status_counts`)
	if err != nil {
		return nil, fmt.Errorf("metrics snapshot: workers: %w", err)
	}
	for rows.Next() {
		var status string
		var n int64
		if err := rows.Scan(&status, &n); err != nil {
			rows.Close()
			return nil, fmt.Errorf("metrics snapshot: workers: %w", err)
		}
		workers[status] = n
	}
	if err := rows.Close(); err != nil {
		return nil, fmt.Errorf("metrics snapshot: workers: %w", err)
	}
	for _, st := range workerStatuses {
		snap.Workers = append(snap.Workers, metrics.WorkerCount{Status: st, Count: float64(workers[st])})
	}

	var lags []struct {
		Group string  `db:"consumer_group"`
		Lag   float64 `db:"lag"`
	}
	if err := tx.SelectContext(ctx, &lags, lagSQL); err != nil {
		return nil, fmt.Errorf("metrics snapshot: outbox lag: %w", err)
	}
	for _, l := range lags {
		snap.Lags = append(snap.Lags, metrics.ConsumerLag{ConsumerGroup: l.Group, OldestUnconsumedSeconds: max(l.Lag, 0)})
	}

	var poison []struct {
		Projection string `db:"projection"`
		Count      int64  `db:"count"`
	}
	if err := tx.SelectContext(ctx, &poison, `
		SELECT p.projection, count(o.id) AS count
		FROM projector_positions p LEFT JOIN outbox_poison o ON o.projection = p.projection
		GROUP BY p.projection ORDER BY p.projection`); err != nil {
		return nil, fmt.Errorf("metrics snapshot: set-aside messages: %w", err)
	}
	for _, p := range poison {
		snap.Poison = append(snap.Poison, metrics.PoisonCount{Projection: p.Projection, Count: float64(p.Count)})
	}
	return snap, nil
}
