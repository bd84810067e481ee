package outbox

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/ports"
)

var _ ports.SeriesReader = (*StatsReader)(nil)

// rateSeriesSQL reads the per-minute buckets of the queue statistics
// projection (queue_rate_buckets, written by writeQueueStats) since $1, for
// $2's queues (every queue when NULL), as one row per queue: the minutes
// (epoch seconds), kinds (0 enqueued, 1 claimed, 2 completed, 3
// dead-lettered; the buckets of other kinds are left out) and counts as
// parallel arrays. Grouping by queue alone
// lets PostgreSQL walk the primary key (queue, minute, kind) in order and
// stream the groups, with no sort and no hash table: an hour of 1,000 busy
// queues is 240,000 buckets.
const rateSeriesSQL = `
	SELECT queue,
		array_agg(extract(epoch FROM minute)::bigint) AS minutes,
		array_agg(CASE kind WHEN '` + rateEnqueued + `' THEN 0 WHEN '` + rateClaimed + `' THEN 1
			WHEN '` + rateCompleted + `' THEN 2 WHEN '` + rateDeadLettered + `' THEN 3 ELSE -1 END) AS kinds,
		array_agg(count) AS counts
	FROM queue_rate_buckets
	WHERE minute >= $1 AND ($2::text[] IS NULL OR queue = ANY($2::text[]))
		AND kind IN ('` + rateEnqueued + `', '` + rateClaimed + `', '` + rateCompleted + `', '` + rateDeadLettered + `')
	GROUP BY queue
	ORDER BY queue`

// RateSeries implements ports.SeriesReader: the current minute (on the
// database clock) is the last of the series.
func (r *StatsReader) RateSeries(ctx context.Context, queues []string, minutes int) (map[string]ports.RateSeries, time.Time, error) {
	out, now, err := r.rateSeries(ctx, queues, minutes)
	return out, now, postgres.TranslateError(err)
}

func (r *StatsReader) rateSeries(ctx context.Context, queues []string, minutes int) (map[string]ports.RateSeries, time.Time, error) {
	var now time.Time
	if err := r.db.GetContext(ctx, &now, `SELECT now()`); err != nil {
		return nil, time.Time{}, fmt.Errorf("rate series: %w", err)
	}
	last := minuteOf(now)
	first := last.Add(-time.Duration(minutes-1) * time.Minute)
	var filter any // NULL: every queue
	if queues != nil {
		filter = pq.StringArray(queues)
	}
	var rows []struct {
		Queue   string        `db:"queue"`
		Minutes pq.Int64Array `db:"minutes"`
		Kinds   pq.Int64Array `db:"kinds"`
		Counts  pq.Int64Array `db:"counts"`
	}
	if err := r.db.SelectContext(ctx, &rows, rateSeriesSQL, first, filter); err != nil {
		return nil, time.Time{}, fmt.Errorf("rate series: %w", err)
	}
	out := make(map[string]ports.RateSeries, len(rows))
	for _, row := range rows {
		s := ports.RateSeries{Enqueued: make([]int64, minutes), Claimed: make([]int64, minutes),
			Completed: make([]int64, minutes), DeadLettered: make([]int64, minutes)}
		byKind := [...][]int64{s.Enqueued, s.Claimed, s.Completed, s.DeadLettered}
		for i, m := range row.Minutes {
			at := int((m - first.Unix()) / 60)
			if at < 0 || at >= minutes || i >= len(row.Kinds) || i >= len(row.Counts) {
				continue
			}
			if k := row.Kinds[i]; k >= 0 && int(k) < len(byKind) {
				byKind[k][at] += row.Counts[i]
			}
		}
		out[row.Queue] = s
	}
	return out, now, nil
}

// ActiveQueues implements ports.SeriesReader. It walks the buckets of the
// last minutes (queue_rate_buckets_minute), so it costs what those minutes
// hold, not what the table holds: the queues active in them, at most four
// buckets a minute each.
func (r *StatsReader) ActiveQueues(ctx context.Context, minutes, limit int, f ports.QueueFilter) ([]string, error) {
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	var now time.Time
	if err := r.db.GetContext(ctx, &now, `SELECT now()`); err != nil {
		return nil, postgres.TranslateError(fmt.Errorf("active queues: %w", err))
	}
	conds := append([]string{
		"minute >= " + arg(minuteOf(now).Add(-time.Duration(minutes-1)*time.Minute)),
		"kind IN ('" + rateEnqueued + "', '" + rateClaimed + "', '" + rateCompleted + "', '" + rateDeadLettered + "')",
	}, queueNameConds(f, arg)...)
	query := "SELECT queue FROM queue_rate_buckets WHERE " + strings.Join(conds, " AND ") +
		" GROUP BY queue ORDER BY sum(count) DESC, queue LIMIT " + arg(limit)
	var names []string
	if err := r.db.SelectContext(ctx, &names, query, args...); err != nil {
		return nil, postgres.TranslateError(fmt.Errorf("active queues: %w", err))
	}
	return names, nil
}
