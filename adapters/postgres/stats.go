package postgres

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/ports"
)

// StatsReader implements ports.StatsReader.
type StatsReader struct {
	db *sqlx.DB
}

var _ ports.StatsReader = (*StatsReader)(nil)

// NewStatsReader returns a StatsReader over db.
func NewStatsReader(db *sqlx.DB) *StatsReader { return &StatsReader{db: db} }

// Queues implements ports.StatsReader: counts by status per queue, and the
// ACTIVE workers serving each queue (those that registered it, or none).
func (r *StatsReader) Queues(ctx context.Context) ([]ports.QueueStats, error) {
	var rows []struct {
		Queue         string `db:"queue"`
		Pending       int64  `db:"pending"`
		Running       int64  `db:"running"`
		Done          int64  `db:"done"`
		Dead          int64  `db:"dead"`
		ActiveWorkers int64  `db:"active_workers"`
	}
	err := r.db.SelectContext(ctx, &rows, `
		WITH counts AS (
			SELECT queue,
				count(*) FILTER (WHERE status = 'PENDING') AS pending,
				count(*) FILTER (WHERE status = 'RUNNING') AS running,
				count(*) FILTER (WHERE status = 'DONE') AS done,
				count(*) FILTER (WHERE status = 'DEAD') AS dead
			FROM tasks GROUP BY queue
		)
		SELECT c.queue, c.pending, c.running, c.done, c.dead,
			(SELECT count(*) FROM workers w
			 WHERE w.status = 'ACTIVE' AND (w.queues = '{}' OR c.queue = ANY (w.queues))) AS active_workers
		FROM counts c ORDER BY c.queue`)
	if err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	out := make([]ports.QueueStats, len(rows))
	for i, r := range rows {
		out[i] = ports.QueueStats{Queue: r.Queue, Pending: r.Pending, Running: r.Running, Done: r.Done, Dead: r.Dead, ActiveWorkers: r.ActiveWorkers}
	}
	return out, nil
}
