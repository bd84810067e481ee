package outbox

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the outbox consumers, the janitor and the event feed.
type Config struct {
	// PollInterval is how long a caught-up subscriber (or event feed reader)
	// waits before looking for new messages again. It bounds the delivery
	// latency of an idle system.
	PollInterval time.Duration
	// AckDeadline bounds the handling of one message; past it, watermill-sql
	// gives up on the message and delivers it again.
	AckDeadline time.Duration
	// ResendInterval is the pause before a message whose handling failed is
	// handled again (in the same subscriber transaction).
	ResendInterval time.Duration
	// BatchSize is how many messages one subscriber transaction reads and
	// applies at most. Smaller batches mean shorter transactions. It is at
	// most MaxBatchSize: each message is applied in its own savepoint, and a
	// transaction with more than 64 subtransactions overflows PostgreSQL's
	// per-backend subtransaction cache, after which every snapshot of every
	// session must consult pg_subtrans (SubtransSLRU contention that slowed
	// claims several-fold in the batch benchmark).
	BatchSize int
	// JanitorInterval is the janitor's period.
	JanitorInterval time.Duration
	// JanitorBatchSize is how many outbox rows one janitor statement deletes.
	JanitorBatchSize int
	// Retention keeps consumed messages at least this long, so that event
	// stream clients (GET /events/v1) can resume within it without loss. 0
	// deletes messages as soon as every consumer group has consumed them.
	Retention time.Duration
	// RateBucketRetention is how long per-minute rate buckets are kept.
	RateBucketRetention time.Duration
	// CloseTimeout bounds the wait for in-flight messages on stop.
	CloseTimeout time.Duration
}

// MaxBatchSize keeps a subscriber transaction's savepoints within
// PostgreSQL's 64 cached subtransactions (PGPROC_MAX_CACHED_SUBXIDS).
const MaxBatchSize = 60

// DefaultConfig returns the defaults: 100 ms polls, a 10 s ack deadline,
// batches of 50, a janitor every second that keeps consumed messages for a
// minute, and rate buckets for an hour.
func DefaultConfig() Config {
	return Config{
		PollInterval:        100 * time.Millisecond,
		AckDeadline:         10 * time.Second,
		ResendInterval:      100 * time.Millisecond,
		BatchSize:           50,
		JanitorInterval:     time.Second,
		JanitorBatchSize:    5000,
		Retention:           time.Minute,
		RateBucketRetention: time.Hour,
		CloseTimeout:        10 * time.Second,
	}
}

// Validate reports whether the config can be used.
func (c Config) Validate() error {
	var errs []error
	if c.PollInterval <= 0 {
		errs = append(errs, errors.New("poll interval must be positive"))
	}
	if c.AckDeadline <= 0 {
		errs = append(errs, errors.New("ack deadline must be positive"))
	}
	if c.ResendInterval <= 0 {
		errs = append(errs, errors.New("resend interval must be positive"))
	}
	if c.BatchSize < 1 || c.BatchSize > MaxBatchSize {
		errs = append(errs, fmt.Errorf("batch size must be between 1 and %d", MaxBatchSize))
	}
	if c.JanitorInterval <= 0 {
		errs = append(errs, errors.New("janitor interval must be positive"))
	}
	if c.JanitorBatchSize < 1 {
		errs = append(errs, errors.New("janitor batch size must be at least 1"))
	}
	if c.Retention < 0 {
		errs = append(errs, errors.New("retention must not be negative"))
	}
	if c.RateBucketRetention < 15*time.Minute {
		errs = append(errs, errors.New("rate bucket retention must be at least 15 minutes (the longest rate window)"))
	}
	if c.CloseTimeout <= 0 {
		errs = append(errs, errors.New("close timeout must be positive"))
	}
	return errors.Join(errs...)
}
