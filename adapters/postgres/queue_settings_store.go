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
// back: a changed rate limit empties tokens and tokens_at (a full bucket),
// a changed rate_limit_per_group deletes the groups' buckets (all full).
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
	if err := s.st.tx.GetContext(ctx, &row, `SELECT `+queueSettingsColumns+`, `+queueSealedColumns+`
		FROM queue_settings WHERE queue = $1 FOR UPDATE`, name); err != nil {
		return queue.Settings{}, time.Time{}, fmt.Errorf("lock queue settings: %w", err)
	}
	before := row.settings()
	after, events, err := fn(before.Clone(), now)
	if err != nil {
		return queue.Settings{}, time.Time{}, err
	}
	row.setSettings(after)
	row.UpdatedAt = now
	c := &row.settingColumns
	if _, err := s.st.tx.ExecContext(ctx, `
		UPDATE queue_settings SET paused = $2, max_running = $3, rate_per_second = $4, rate_burst = $5,
			max_running_per_group = $6, updated_at = $7,
			tokens = CASE WHEN $8 THEN NULL ELSE tokens END,
			tokens_at = CASE WHEN $8 THEN NULL ELSE tokens_at END,
			group_rate_per_second = $9, group_rate_burst = $10, limits = $11,
			push_url = $12, push_timeout_seconds = $13, push_max_in_flight = $14, push_header_names = $15,
			push_non_retryable_statuses = $16, push_secret_rotated_at = $17, push_previous_secret_expires_at = $18,
			push_secret = $19, push_previous_secret = $20, push_headers = $21, default_timeout_seconds = $22
		WHERE queue = $1`,
		name, row.Paused, c.MaxRunning, c.RatePerSecond, c.RateBurst, c.MaxRunningPerGroup, row.UpdatedAt,
		queue.RateLimitChanged(before, after), c.GroupRatePerSecond, c.GroupRateBurst, c.Limits,
		c.PushURL, c.PushTimeout, c.PushMaxInFlight, c.PushHeaderNames, c.PushNonRetryable, c.PushRotatedAt, c.PushPreviousUntil,
		row.PushSecret, row.PushPreviousSecret, row.PushHeaders, c.DefaultTimeout); err != nil {
		return queue.Settings{}, time.Time{}, fmt.Errorf("save queue settings: %w", err)
	}
	if queue.GroupRateLimitChanged(before, after) {
		if _, err := s.st.tx.ExecContext(ctx, `DELETE FROM queue_group_buckets WHERE queue = $1`, name); err != nil {
			return queue.Settings{}, time.Time{}, fmt.Errorf("reset group buckets: %w", err)
		}
	}
	s.st.Record(events...)
	if queue.Loosens(before, after) {
		s.st.notifyAll(name)
	}
	return after, now, nil
}

// QueueSettingsScan holds the setting columns of a queue_settings row
// (NULL when the queue has no row) as readers outside this package (the
// queue statistics) scan them, with QueueSettingsScanColumns; Settings
// converts them like the claims and the store do. The sealed secrets are
// not among them.
type QueueSettingsScan struct {
	Paused sql.NullBool `db:"paused"`
	settingColumns
}

// QueueSettingsScanColumns are the columns QueueSettingsScan scans, each
// prefixed with alias and a dot.
func QueueSettingsScanColumns(alias string) string { return prefixed(alias+".", queueSettingColumns) }

// Settings returns the scanned settings (the zero value for no row).
func (c QueueSettingsScan) Settings() queue.Settings { return c.settingColumns.settings(c.Paused.Bool) }
