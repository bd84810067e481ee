package ports

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

// SessionCreateParams describe a new dashboard session.
type SessionCreateParams struct {
	// Hash is the digest of the session token (apikey.SessionHash).
	Hash []byte
	// KeyID is the API key the session acts as.
	KeyID uuid.UUID
	// CSRF is the session's anti-forgery token.
	CSRF string
	// TTL is the session's lifetime from the database's now.
	TTL time.Duration
}

// SessionStore persists dashboard sessions (their token digests, never the
// tokens).
type SessionStore interface {
	// Create inserts a session.
	Create(ctx context.Context, p SessionCreateParams) (*apikey.Session, error)
	// ByHash loads the session whose token has this digest with its key,
	// and the database time of the read (apikey.ErrSessionUnknown when
	// none).
	ByHash(ctx context.Context, hash []byte) (s *apikey.Session, k *apikey.Key, now time.Time, err error)
	// Delete removes the session with this digest (no error when absent).
	Delete(ctx context.Context, hash []byte) error
	// DeleteExpired removes up to limit sessions that expired.
	DeleteExpired(ctx context.Context, limit int) (int, error)
}

// SessionService logs browsers in and out of the dashboard.
type SessionService interface {
	// Login authenticates an API key and opens a session acting as it. It
	// returns the session token, which exists only in this answer.
	Login(ctx context.Context, apiKey string) (token string, s *apikey.Session, k *apikey.Key, err error)
	// Authenticate returns the session token's session and key, provided
	// both still work (apikey.ErrSessionUnknown, apikey.ErrSessionExpired,
	// or the key's own error otherwise).
	Authenticate(ctx context.Context, token string) (*apikey.Session, *apikey.Key, error)
	// Logout ends the session (at once on this instance, within the
	// lookup cache's lifetime on every other one).
	Logout(ctx context.Context, token string) error
	// Known reports, without a lookup, whether token named a session the
	// last time this instance looked it up (while it remembers).
	Known(token string) bool
}

// RateSeries are a queue's per-minute counts over the last hour, oldest
// minute first (the current, partial minute last).
type RateSeries struct {
	Enqueued, Claimed, Completed, DeadLettered []int64
}

// SeriesReader reads the per-minute buckets of the queue statistics.
type SeriesReader interface {
	// RateSeries returns, for each of queues (every queue with buckets
	// when nil), its counts per minute over the last minutes minutes
	// ending with the current one, and the database time they end at.
	RateSeries(ctx context.Context, queues []string, minutes int) (map[string]RateSeries, time.Time, error)
	// ActiveQueues returns up to limit queues with buckets in the last
	// minutes minutes, the busiest (most events counted) first, then by
	// name; f's Pattern and Visible filter them as QueueFilter's do.
	ActiveQueues(ctx context.Context, minutes, limit int, f QueueFilter) ([]string, error)
}

// DeadCount counts the DEAD tasks of one queue with one dead reason.
type DeadCount struct {
	Queue  string
	Reason string
	Count  int64
}

// DashboardReader reads what the dashboard shows beside the queue
// statistics, each with an index.
type DashboardReader interface {
	// HeldCounts returns how many tasks each worker holds (RUNNING).
	HeldCounts(ctx context.Context) (map[string]int64, error)
	// DeadCounts counts the DEAD tasks by queue and dead reason, by queue
	// then reason; visible as BulkBatchParams.Visible.
	DeadCounts(ctx context.Context, visible []string) ([]DeadCount, error)
}

// DashboardService reads what the dashboard shows beside the queue
// statistics, restricted to the queues the principal may see.
type DashboardService interface {
	// RateSeries returns the named queues' per-minute series over the last
	// hour (at most MaxSeriesQueues of them).
	RateSeries(ctx context.Context, queues []string) (map[string]RateSeries, error)
	// ActiveQueues returns up to limit queues the principal may see,
	// matching pattern (a glob, "" for any), the busiest of the last
	// minutes first.
	ActiveQueues(ctx context.Context, pattern string, limit int) ([]string, error)
	// HeldCounts returns how many tasks each worker holds.
	HeldCounts(ctx context.Context) (map[string]int64, error)
	// DeadCounts counts the DEAD tasks by queue and reason.
	DeadCounts(ctx context.Context) ([]DeadCount, error)
}
