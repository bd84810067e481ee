package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/ports"
)

// QueueSettingsStore implements ports.QueueSettingsStore over
// queue_settings (migration 0013).
type QueueSettingsStore struct {
	st *txState
}

var _ ports.QueueSettingsStore = (*QueueSettingsStore)(nil)

// Update implements ports.QueueSettingsStore. It creates the queue's row
// (no settings) if it has none, locks it FOR UPDATE (claims of a limited
// queue wait for it, and it for them), lets fn decide, and writes the row
// back: a changed rate limit empties tokens and tokens_at (a full bucket).
func (s *QueueSettingsStore) Update(ctx context.Context, name string, fn ports.QueueSettingsFunc) (queue.Settings, time.Time, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return queue.Settings{}, time.Time{}, err
	}
	if _, err := s.st.tx.ExecContext(ctx, `
		INSERT INTO queue_settings (queue, updated_at) VALUES ($1, $2) ON CONFLICT (queue) DO NOTHING`,
		name, now); err != nil {
		return queue.Settings{}, time.Time{}, fmt.Errorf("create queue settings: %w", err)
	}
	var row queueSettingsRow
	if err := s.st.tx.GetContext(ctx, &row, `SELECT `+queueSettingsColumns+` FROM queue_settings WHERE queue = $1 FOR UPDATE`, name); err != nil {
		return queue.Settings{}, time.Time{}, fmt.Errorf("lock queue settings: %w", err)
	}
	before := row.settings()
	after, events, err := fn(before, now)
	if err != nil {
		return queue.Settings{}, time.Time{}, err
	}
	row.setSettings(after)
	row.UpdatedAt = now
	resetBucket := queue.RateLimitChanged(before, after)
	if _, err := s.st.tx.ExecContext(ctx, `
		UPDATE queue_settings SET paused = $2, max_running = $3, rate_per_second = $4, rate_burst = $5,
			max_running_per_group = $6, updated_at = $7,
			tokens = CASE WHEN $8 THEN NULL ELSE tokens END,
			tokens_at = CASE WHEN $8 THEN NULL ELSE tokens_at END,
			default_timeout_seconds = $9
		WHERE queue = $1`,
		name, row.Paused, row.MaxRunning, row.RatePerSecond, row.RateBurst, row.MaxRunningPerGroup, row.UpdatedAt,
		resetBucket, row.DefaultTimeout); err != nil {
		return queue.Settings{}, time.Time{}, fmt.Errorf("save queue settings: %w", err)
	}
	s.st.Record(events...)
	if queue.Loosens(before, after) {
		s.st.notifyAll(name)
	}
	return after, now, nil
}

// QueueSettingsScan holds the setting columns of a queue_settings row
// (NULL when the queue has no row) as readers outside this package (the
// queue statistics) scan them; Settings converts them like the claims and
// the store do.
type QueueSettingsScan struct {
	Paused             sql.NullBool    `db:"paused"`
	MaxRunning         sql.NullInt64   `db:"max_running"`
	RatePerSecond      sql.NullFloat64 `db:"rate_per_second"`
	RateBurst          sql.NullInt64   `db:"rate_burst"`
	MaxRunningPerGroup sql.NullInt64   `db:"max_running_per_group"`
	DefaultTimeout     sql.NullInt64   `db:"default_timeout_seconds"`
}

// Settings returns the scanned settings (the zero value for no row).
func (c QueueSettingsScan) Settings() queue.Settings {
	row := queueSettingsRow{Paused: c.Paused.Bool, MaxRunning: c.MaxRunning, RatePerSecond: c.RatePerSecond,
		RateBurst: c.RateBurst, MaxRunningPerGroup: c.MaxRunningPerGroup, DefaultTimeout: c.DefaultTimeout}
	return row.settings()
}
