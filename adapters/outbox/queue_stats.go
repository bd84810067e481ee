package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/adapters/postgres"
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
//     (the janitor prunes old minutes);
//   - worker_status_counts: workers per status, from worker events.
//
// StatsReader, below, reads them back for GET /queues/v1.

type statusKey struct{ queue, status string }

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
		n := rates.each(func(k rateKey, v int64) {
			queues, minutes, kinds = append(queues, k.queue), append(minutes, k.minute), append(kinds, k.kind)
			counts = append(counts, v)
		})
		st.insert(`INSERT INTO queue_rate_buckets AS t (queue, minute, kind, count)`,
			`ON CONFLICT (queue, minute, kind) DO UPDATE SET count = t.count + excluded.count`,
			guard, n, texts(queues), timestamps(minutes), texts(kinds), bigints(counts))
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

// queueCountsSQL lists the queues that hold tasks, with their projected
// counts, their ACTIVE workers (those that registered the queue, or none) and
// the creation time of their oldest PENDING task. The latter walks the claim
// index (queue, priority DESC, grank, seq) WHERE PENDING: one probe for the first
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
	            ORDER BY t.grank, t.seq LIMIT 1)) AS oldest
	FROM prio p WHERE p.priority IS NOT NULL
) o ON true
ORDER BY c.queue`

// Queues implements ports.StatsReader. It reads in one read-only snapshot.
// Connection failures come back marked with ports.ErrUnavailable.
func (r *StatsReader) Queues(ctx context.Context) ([]ports.QueueStats, error) {
	out, err := r.queues(ctx)
	return out, postgres.TranslateError(err)
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
		SELECT now() AS now, (SELECT applied_at FROM projector_positions WHERE projection = $1) AS applied_at`,
		QueueStatsProjection); err != nil {
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

// readTotals reads queue_totals. Its kinds are the metric counter kinds the
// projection counts under (metrics.CounterKind).
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
