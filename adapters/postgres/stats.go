package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/ports"
)

// StatsReader implements ports.StatsReader over the tables the queue
// statistics projector (adapters/outbox, consumer group queue_stats) keeps:
// queue_status_counts, queue_totals and queue_rate_buckets. Only the active
// workers and the oldest pending task are read live, each with an index.
type StatsReader struct {
	db *sqlx.DB
}

var _ ports.StatsReader = (*StatsReader)(nil)

// NewStatsReader returns a StatsReader over db.
func NewStatsReader(db *sqlx.DB) *StatsReader { return &StatsReader{db: db} }

// RateWindows are the windows of QueueStats.Rates.
var RateWindows = []time.Duration{time.Minute, 5 * time.Minute, 15 * time.Minute}

// queueCountsSQL lists the queues that hold tasks, with their projected
// counts, their ACTIVE workers (those that registered the queue, or none) and
// the creation time of their oldest PENDING task. The latter walks the claim
// index (queue, priority DESC, seq) WHERE PENDING: one probe for the first
// row of each distinct priority (a loose index scan), since seq order is
// submission order within a priority.
const queueCountsSQL = `
WITH counts AS (
	SELECT queue,
		coalesce(sum(count) FILTER (WHERE status = 'PENDING'), 0) AS pending,
		coalesce(sum(count) FILTER (WHERE status = 'RUNNING'), 0) AS running,
		coalesce(sum(count) FILTER (WHERE status = 'DONE'), 0) AS done,
		coalesce(sum(count) FILTER (WHERE status = 'DEAD'), 0) AS dead,
		coalesce(sum(count) FILTER (WHERE status = 'BLOCKED'), 0) AS blocked
	FROM queue_status_counts
	GROUP BY queue
	HAVING bool_or(count <> 0)
)
SELECT c.queue, c.pending, c.running, c.done, c.dead, c.blocked,
	(SELECT count(*) FROM workers w
	 WHERE w.status = 'ACTIVE' AND (w.queues = '{}' OR c.queue = ANY (w.queues))) AS active_workers,
	extract(epoch FROM now() - o.oldest)::float8 AS oldest_pending_age
FROM counts c
LEFT JOIN LATERAL (
	WITH RECURSIVE prio AS (
		(SELECT t.priority FROM tasks t
		 WHERE t.status = 'PENDING' AND t.queue = c.queue
		 ORDER BY t.priority DESC LIMIT 1)
		UNION ALL
		SELECT (SELECT t.priority FROM tasks t
		        WHERE t.status = 'PENDING' AND t.queue = c.queue AND t.priority < p.priority
		        ORDER BY t.priority DESC LIMIT 1)
		FROM prio p WHERE p.priority IS NOT NULL
	)
	SELECT min((SELECT t.created_at FROM tasks t
	            WHERE t.status = 'PENDING' AND t.queue = c.queue AND t.priority = p.priority
	            ORDER BY t.seq LIMIT 1)) AS oldest
	FROM prio p WHERE p.priority IS NOT NULL
) o ON true
ORDER BY c.queue`

// Queues implements ports.StatsReader. It reads in one read-only snapshot.
// Connection failures come back marked with ports.ErrUnavailable.
func (r *StatsReader) Queues(ctx context.Context) ([]ports.QueueStats, error) {
	out, err := r.queues(ctx)
	return out, TranslateError(err)
}

func (r *StatsReader) queues(ctx context.Context) ([]ports.QueueStats, error) {
	tx, err := r.db.BeginTxx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead, ReadOnly: true})
	if err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	defer func() { _ = tx.Rollback() }()

	var counts []struct {
		Queue            string          `db:"queue"`
		Pending          int64           `db:"pending"`
		Running          int64           `db:"running"`
		Done             int64           `db:"done"`
		Dead             int64           `db:"dead"`
		Blocked          int64           `db:"blocked"`
		ActiveWorkers    int64           `db:"active_workers"`
		OldestPendingAge sql.NullFloat64 `db:"oldest_pending_age"`
	}
	if err := tx.SelectContext(ctx, &counts, queueCountsSQL); err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	var meta struct {
		Now       time.Time    `db:"now"`
		AppliedAt sql.NullTime `db:"applied_at"`
	}
	if err := tx.GetContext(ctx, &meta, `
		SELECT now() AS now, (SELECT applied_at FROM projector_positions WHERE consumer_group = 'queue_stats') AS applied_at`); err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	totals, err := readTotals(ctx, tx)
	if err != nil {
		return nil, err
	}
	rates, err := readRates(ctx, tx, meta.Now)
	if err != nil {
		return nil, err
	}
	out := make([]ports.QueueStats, len(counts))
	for i, c := range counts {
		out[i] = ports.QueueStats{
			Queue: c.Queue, Pending: c.Pending, Running: c.Running, Done: c.Done, Dead: c.Dead, Blocked: c.Blocked,
			ActiveWorkers: c.ActiveWorkers, Totals: totals[c.Queue], Rates: rates[c.Queue],
			StatsAsOf: timePtr(meta.AppliedAt),
		}
		if out[i].Rates == nil {
			out[i].Rates = rateWindows(nil, meta.Now)
		}
		if c.OldestPendingAge.Valid {
			age := time.Duration(max(c.OldestPendingAge.Float64, 0) * float64(time.Second))
			out[i].OldestPendingAge = &age
		}
	}
	return out, nil
}

// readTotals reads queue_totals. Its kinds are the metric names the
// projector counts under (adapters/metrics.CounterKind).
func readTotals(ctx context.Context, tx *sqlx.Tx) (map[string]ports.QueueTotals, error) {
	var rows []struct {
		Queue  string `db:"queue"`
		Kind   string `db:"kind"`
		Reason string `db:"reason"`
		Count  int64  `db:"count"`
	}
	if err := tx.SelectContext(ctx, &rows, `SELECT queue, kind, reason, count FROM queue_totals`); err != nil {
		return nil, fmt.Errorf("queue totals: %w", err)
	}
	out := map[string]ports.QueueTotals{}
	for _, r := range rows {
		t := out[r.Queue]
		switch r.Kind {
		case "tasks_submitted":
			t.Submitted += r.Count
		case "tasks_claimed":
			t.Claimed += r.Count
		case "tasks_completed":
			t.Completed += r.Count
		case "tasks_failed":
			t.Failed += r.Count
		case "tasks_cleaned":
			t.Cleaned += r.Count
		case "tasks_dead_lettered":
			if t.DeadLettered == nil {
				t.DeadLettered = map[string]int64{}
			}
			t.DeadLettered[r.Reason] += r.Count
		case "tasks_requeued":
			if t.Requeued == nil {
				t.Requeued = map[string]int64{}
			}
			t.Requeued[r.Reason] += r.Count
		}
		out[r.Queue] = t
	}
	return out, nil
}

// rateBucket is one per-minute count.
type rateBucket struct {
	Queue  string    `db:"queue"`
	Minute time.Time `db:"minute"`
	Kind   string    `db:"kind"`
	Count  int64     `db:"count"`
}

// readRates reads the buckets of the longest window and computes each
// queue's rates at now.
func readRates(ctx context.Context, tx *sqlx.Tx, now time.Time) (map[string][]ports.QueueRate, error) {
	longest := RateWindows[len(RateWindows)-1]
	var rows []rateBucket
	if err := tx.SelectContext(ctx, &rows, `
		SELECT queue, minute, kind, count FROM queue_rate_buckets WHERE minute > $1`,
		now.Add(-longest-time.Minute)); err != nil {
		return nil, fmt.Errorf("queue rates: %w", err)
	}
	byQueue := map[string][]rateBucket{}
	for _, b := range rows {
		byQueue[b.Queue] = append(byQueue[b.Queue], b)
	}
	out := make(map[string][]ports.QueueRate, len(byQueue))
	for q, buckets := range byQueue {
		out[q] = rateWindows(buckets, now)
	}
	return out, nil
}

// rateWindows computes per-minute rates over each of RateWindows ending at
// now. A bucket counts in proportion to how much of its minute (up to now)
// lies in the window, so the rates move smoothly as minutes pass.
func rateWindows(buckets []rateBucket, now time.Time) []ports.QueueRate {
	out := make([]ports.QueueRate, len(RateWindows))
	for i, w := range RateWindows {
		start := now.Add(-w)
		r := ports.QueueRate{Window: w}
		for _, b := range buckets {
			end := b.Minute.Add(time.Minute)
			if end.After(now) {
				end = now
			}
			span := end.Sub(b.Minute)
			overlap := end.Sub(maxTime(b.Minute, start))
			var share float64
			switch {
			case overlap <= 0:
				continue
			case span <= 0 || overlap >= span:
				share = 1
			default:
				share = float64(overlap) / float64(span)
			}
			v := float64(b.Count) * share / w.Minutes()
			switch b.Kind {
			case "enqueued":
				r.Enqueued += v
			case "claimed":
				r.Claimed += v
			case "completed":
				r.Completed += v
			case "dead_lettered":
				r.DeadLettered += v
			}
		}
		out[i] = r
	}
	return out
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
