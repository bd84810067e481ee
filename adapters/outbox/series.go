package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/ports"
)

var _ ports.SeriesReader = (*StatsReader)(nil)

// rateSeriesSQL aggregates the per-minute buckets of the queue statistics
// projection (queue_rate_buckets, written by writeQueueStats) since $1 into
// one row per queue and kind, for $2's queues (every queue when NULL). It
// walks the primary key (queue, minute, kind) per queue, or the minute
// index for every queue.
const rateSeriesSQL = `
	SELECT queue, kind, array_agg(extract(epoch FROM minute)::bigint) AS minutes, array_agg(count) AS counts
	FROM queue_rate_buckets
	WHERE minute >= $1 AND ($2::text[] IS NULL OR queue = ANY($2::text[]))
	GROUP BY queue, kind`

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
		Kind    string        `db:"kind"`
		Minutes pq.Int64Array `db:"minutes"`
		Counts  pq.Int64Array `db:"counts"`
	}
	if err := r.db.SelectContext(ctx, &rows, rateSeriesSQL, first, filter); err != nil {
		return nil, time.Time{}, fmt.Errorf("rate series: %w", err)
	}
	out := map[string]ports.RateSeries{}
	for _, row := range rows {
		s, ok := out[row.Queue]
		if !ok {
			s = ports.RateSeries{Enqueued: make([]int64, minutes), Claimed: make([]int64, minutes),
				Completed: make([]int64, minutes), DeadLettered: make([]int64, minutes)}
			out[row.Queue] = s
		}
		var into []int64
		switch row.Kind {
		case rateEnqueued:
			into = s.Enqueued
		case rateClaimed:
			into = s.Claimed
		case rateCompleted:
			into = s.Completed
		case rateDeadLettered:
			into = s.DeadLettered
		default:
			continue
		}
		for i, m := range row.Minutes {
			if at := int((m - first.Unix()) / 60); at >= 0 && at < minutes && i < len(row.Counts) {
				into[at] += row.Counts[i]
			}
		}
	}
	return out, now, nil
}
