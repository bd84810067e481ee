package postgres

import (
	"database/sql"
	"time"

	"github.com/taskmaster/taskmaster/domain/queue"
)

// queueSettingsColumns are the columns of queue_settings (migration 0013),
// in the order of queueSettingsRow.
const queueSettingsColumns = `queue, paused, max_running, rate_per_second, rate_burst,
	max_running_per_group, tokens, tokens_at, updated_at, default_timeout_seconds`

// queueSettingsRow is one row of queue_settings.
type queueSettingsRow struct {
	Queue              string          `db:"queue"`
	Paused             bool            `db:"paused"`
	MaxRunning         sql.NullInt64   `db:"max_running"`
	RatePerSecond      sql.NullFloat64 `db:"rate_per_second"`
	RateBurst          sql.NullInt64   `db:"rate_burst"`
	MaxRunningPerGroup sql.NullInt64   `db:"max_running_per_group"`
	Tokens             sql.NullFloat64 `db:"tokens"`
	TokensAt           sql.NullTime    `db:"tokens_at"`
	UpdatedAt          time.Time       `db:"updated_at"`
	// DefaultTimeout is default_timeout_seconds (migration 0019).
	DefaultTimeout sql.NullInt64 `db:"default_timeout_seconds"`
}

// settings returns the row's settings.
func (r *queueSettingsRow) settings() queue.Settings {
	s := queue.Settings{Paused: r.Paused}
	if r.MaxRunning.Valid {
		s.MaxRunning = intPtr(r.MaxRunning.Int64)
	}
	if r.RatePerSecond.Valid && r.RateBurst.Valid {
		s.RateLimit = &queue.RateLimit{PerSecond: r.RatePerSecond.Float64, Burst: int(r.RateBurst.Int64)}
	}
	if r.MaxRunningPerGroup.Valid {
		s.MaxRunningPerGroup = intPtr(r.MaxRunningPerGroup.Int64)
	}
	if r.DefaultTimeout.Valid {
		s.DefaultTimeoutSeconds = intPtr(r.DefaultTimeout.Int64)
	}
	return s
}

// bucket returns the row's rate-limit bucket (zero: full, when never taken
// from or when the rate limit was set anew).
func (r *queueSettingsRow) bucket() queue.Bucket {
	if !r.Tokens.Valid || !r.TokensAt.Valid {
		return queue.Bucket{}
	}
	return queue.Bucket{Tokens: r.Tokens.Float64, At: r.TokensAt.Time}
}

// setSettings writes s into the row's setting columns (not the bucket).
func (r *queueSettingsRow) setSettings(s queue.Settings) {
	r.Paused = s.Paused
	r.MaxRunning = nullIntPtr(s.MaxRunning)
	r.MaxRunningPerGroup = nullIntPtr(s.MaxRunningPerGroup)
	r.DefaultTimeout = nullIntPtr(s.DefaultTimeoutSeconds)
	r.RatePerSecond, r.RateBurst = sql.NullFloat64{}, sql.NullInt64{}
	if s.RateLimit != nil {
		r.RatePerSecond = sql.NullFloat64{Float64: s.RateLimit.PerSecond, Valid: true}
		r.RateBurst = sql.NullInt64{Int64: int64(s.RateLimit.Burst), Valid: true}
	}
}

func intPtr(v int64) *int {
	i := int(v)
	return &i
}

func nullIntPtr(v *int) sql.NullInt64 {
	if v == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(*v), Valid: true}
}
