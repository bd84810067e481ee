package postgres

import (
	"database/sql"
	"slices"
	"time"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/queue"
)

// queueSettingColumns are the setting columns of queue_settings
// (migrations 0013, 0019, 0021), without the queue's name, the buckets and
// the sealed secrets: what a queue's settings are made of.
const queueSettingColumns = `paused, max_running, rate_per_second, rate_burst, max_running_per_group,
	default_timeout_seconds, group_rate_per_second, group_rate_burst, limits,
	push_url, push_timeout_seconds, push_max_in_flight, push_header_names, push_non_retryable_statuses,
	push_secret_rotated_at, push_previous_secret_expires_at`

// queueSettingsColumns are the columns of queue_settings that claims read
// (everything but the sealed secrets), in the order of queueSettingsRow.
const queueSettingsColumns = `queue, ` + queueSettingColumns + `, tokens, tokens_at, updated_at`

// queueSealedColumns are the sealed secrets of a push queue: read only to
// change its settings and by the dispatchers.
const queueSealedColumns = `push_secret, push_previous_secret, push_headers`

// queueSettingsRow is one row of queue_settings.
type queueSettingsRow struct {
	Queue  string `db:"queue"`
	Paused bool   `db:"paused"`
	settingColumns
	Tokens    sql.NullFloat64 `db:"tokens"`
	TokensAt  sql.NullTime    `db:"tokens_at"`
	UpdatedAt time.Time       `db:"updated_at"`
	sealedColumns
}

// settingColumns are queueSettingColumns but paused (a NULL in an outer
// join, a bool in the table).
type settingColumns struct {
	MaxRunning         sql.NullInt64   `db:"max_running"`
	RatePerSecond      sql.NullFloat64 `db:"rate_per_second"`
	RateBurst          sql.NullInt64   `db:"rate_burst"`
	MaxRunningPerGroup sql.NullInt64   `db:"max_running_per_group"`
	// DefaultTimeout is default_timeout_seconds (migration 0019).
	DefaultTimeout     sql.NullInt64   `db:"default_timeout_seconds"`
	GroupRatePerSecond sql.NullFloat64 `db:"group_rate_per_second"`
	GroupRateBurst     sql.NullInt64   `db:"group_rate_burst"`
	Limits             pq.StringArray  `db:"limits"`
	PushURL            sql.NullString  `db:"push_url"`
	PushTimeout        sql.NullInt64   `db:"push_timeout_seconds"`
	PushMaxInFlight    sql.NullInt64   `db:"push_max_in_flight"`
	PushHeaderNames    pq.StringArray  `db:"push_header_names"`
	PushNonRetryable   pq.Int64Array   `db:"push_non_retryable_statuses"`
	PushRotatedAt      sql.NullTime    `db:"push_secret_rotated_at"`
	PushPreviousUntil  sql.NullTime    `db:"push_previous_secret_expires_at"`
}

// sealedColumns are queueSealedColumns.
type sealedColumns struct {
	PushSecret         sql.NullString `db:"push_secret"`
	PushPreviousSecret sql.NullString `db:"push_previous_secret"`
	PushHeaders        sql.NullString `db:"push_headers"`
}

// settings returns the row's settings (with the sealed secrets, when they
// were read).
func (r *queueSettingsRow) settings() queue.Settings {
	s := r.settingColumns.settings(r.Paused)
	if s.Push != nil {
		s.Push.Sealed = queue.PushSealed{Secret: r.PushSecret.String, PreviousSecret: r.PushPreviousSecret.String,
			Headers: r.PushHeaders.String}
	}
	return s
}

func (c *settingColumns) settings(paused bool) queue.Settings {
	s := queue.Settings{Paused: paused}
	if c.MaxRunning.Valid {
		s.MaxRunning = intPtr(c.MaxRunning.Int64)
	}
	s.RateLimit = rateLimit(c.RatePerSecond, c.RateBurst)
	if c.MaxRunningPerGroup.Valid {
		s.MaxRunningPerGroup = intPtr(c.MaxRunningPerGroup.Int64)
	}
	if c.DefaultTimeout.Valid {
		s.DefaultTimeoutSeconds = intPtr(c.DefaultTimeout.Int64)
	}
	s.RateLimitPerGroup = rateLimit(c.GroupRatePerSecond, c.GroupRateBurst)
	if len(c.Limits) > 0 {
		s.Limits = slices.Clone([]string(c.Limits))
	}
	if c.PushURL.Valid {
		p := &queue.Push{URL: c.PushURL.String, TimeoutSeconds: int(c.PushTimeout.Int64), MaxInFlight: int(c.PushMaxInFlight.Int64),
			HeaderNames: slices.Clone([]string(c.PushHeaderNames)), NonRetryableStatuses: make([]int, len(c.PushNonRetryable)),
			SecretRotatedAt: c.PushRotatedAt.Time, PreviousSecretExpiresAt: timePtr(c.PushPreviousUntil)}
		if p.HeaderNames == nil {
			p.HeaderNames = []string{}
		}
		for i, code := range c.PushNonRetryable {
			p.NonRetryableStatuses[i] = int(code)
		}
		s.Push = p
	}
	return s
}

func rateLimit(perSecond sql.NullFloat64, burst sql.NullInt64) *queue.RateLimit {
	if !perSecond.Valid || !burst.Valid {
		return nil
	}
	return &queue.RateLimit{PerSecond: perSecond.Float64, Burst: int(burst.Int64)}
}

// bucket returns the row's rate-limit bucket (zero: full, when never taken
// from or when the rate limit was set anew).
func (r *queueSettingsRow) bucket() queue.Bucket {
	return bucketOf(r.Tokens, r.TokensAt)
}

func bucketOf(tokens sql.NullFloat64, at sql.NullTime) queue.Bucket {
	if !tokens.Valid || !at.Valid {
		return queue.Bucket{}
	}
	return queue.Bucket{Tokens: tokens.Float64, At: at.Time}
}

// setSettings writes s into the row's setting and sealed columns (not the
// bucket).
func (r *queueSettingsRow) setSettings(s queue.Settings) {
	r.Paused = s.Paused
	c := settingColumns{MaxRunning: nullIntPtr(s.MaxRunning), MaxRunningPerGroup: nullIntPtr(s.MaxRunningPerGroup),
		DefaultTimeout: nullIntPtr(s.DefaultTimeoutSeconds), Limits: pq.StringArray(s.Limits)}
	c.RatePerSecond, c.RateBurst = nullRate(s.RateLimit)
	c.GroupRatePerSecond, c.GroupRateBurst = nullRate(s.RateLimitPerGroup)
	if c.Limits == nil {
		c.Limits = pq.StringArray{}
	}
	r.sealedColumns = sealedColumns{}
	if p := s.Push; p != nil {
		c.PushURL = sql.NullString{String: p.URL, Valid: true}
		c.PushTimeout = sql.NullInt64{Int64: int64(p.TimeoutSeconds), Valid: true}
		c.PushMaxInFlight = sql.NullInt64{Int64: int64(p.MaxInFlight), Valid: true}
		c.PushHeaderNames = append(pq.StringArray{}, p.HeaderNames...)
		c.PushNonRetryable = make(pq.Int64Array, len(p.NonRetryableStatuses))
		for i, code := range p.NonRetryableStatuses {
			c.PushNonRetryable[i] = int64(code)
		}
		c.PushRotatedAt = sql.NullTime{Time: p.SecretRotatedAt, Valid: true}
		if p.PreviousSecretExpiresAt != nil {
			c.PushPreviousUntil = sql.NullTime{Time: *p.PreviousSecretExpiresAt, Valid: true}
		}
		// A push queue's secret column is never NULL (the CHECK pairs it
		// with push_url).
		r.sealedColumns = sealedColumns{PushSecret: sql.NullString{String: p.Sealed.Secret, Valid: true},
			PushPreviousSecret: nullString(p.Sealed.PreviousSecret), PushHeaders: nullString(p.Sealed.Headers)}
	}
	r.settingColumns = c
}

func nullRate(r *queue.RateLimit) (sql.NullFloat64, sql.NullInt64) {
	if r == nil {
		return sql.NullFloat64{}, sql.NullInt64{}
	}
	return sql.NullFloat64{Float64: r.PerSecond, Valid: true}, sql.NullInt64{Int64: int64(r.Burst), Valid: true}
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
