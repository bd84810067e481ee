package postgres

import (
	"context"
	"fmt"

	"github.com/jmoiron/sqlx"

	"github.com/taskmaster/taskmaster/ports"
)

// DashboardReader implements ports.DashboardReader over the pool (reads
// only, outside any use case's transaction).
type DashboardReader struct {
	db *sqlx.DB
}

var _ ports.DashboardReader = (*DashboardReader)(nil)

// NewDashboardReader returns a DashboardReader over db.
func NewDashboardReader(db *sqlx.DB) *DashboardReader { return &DashboardReader{db: db} }

// HeldCounts implements ports.DashboardReader with the partial index
// tasks_running_by_worker.
func (r *DashboardReader) HeldCounts(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Worker string `db:"worker_id"`
		N      int64  `db:"n"`
	}
	if err := r.db.SelectContext(ctx, &rows, `
		SELECT worker_id, count(*) AS n FROM tasks WHERE status = 'RUNNING' AND worker_id IS NOT NULL GROUP BY worker_id`); err != nil {
		return nil, TranslateError(fmt.Errorf("held tasks: %w", err))
	}
	out := make(map[string]int64, len(rows))
	for _, row := range rows {
		out[row.Worker] = row.N
	}
	return out, nil
}

// DeadCounts implements ports.DashboardReader with an index-only scan of
// tasks_dead (migrations/0015_dashboard.sql).
func (r *DashboardReader) DeadCounts(ctx context.Context, visible []string) ([]ports.DeadCount, error) {
	q := `SELECT queue, coalesce(dead_reason, '') AS reason, count(*) AS count FROM tasks WHERE status = 'DEAD'`
	var args []any
	if visible != nil {
		exact, prefixes := queuePatterns(visible)
		q += ` AND ` + fmt.Sprintf(visibleQueues, 1, 2)
		args = append(args, exact, prefixes)
	}
	q += ` GROUP BY queue, dead_reason ORDER BY queue, dead_reason`
	var out []ports.DeadCount
	if err := r.db.SelectContext(ctx, &out, q, args...); err != nil {
		return nil, TranslateError(fmt.Errorf("dead letters: %w", err))
	}
	return out, nil
}
