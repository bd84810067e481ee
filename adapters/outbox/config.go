package outbox

import (
	"errors"
	"fmt"
	"time"
)

// Config configures the outbox consumers, the janitor and the event streams.
type Config struct {
	// PollInterval is how long a caught-up subscriber (or the event streams' reader)
	// waits before looking for new messages again. It bounds the delivery
	// latency of an idle system.
	PollInterval time.Duration
	// AckDeadline bounds the handling of one batch; past it, watermill-sql
	// gives up on the batch and delivers it again.
	AckDeadline time.Duration
	// ResendInterval is the pause before a batch whose handling failed is
	// handled again (in the same subscriber transaction).
	ResendInterval time.Duration
	// BatchSize is how many outbox messages the projections read and apply
	// in one transaction at most (one statement per batch).
	BatchSize int
	// BatchBytes bounds a batch's payload: a batch takes messages while the
	// stored (possibly compressed) payload before them is under BatchBytes
	// (so at least one).
	BatchBytes int
	// PoisonAttempts is how many times a message that fails alone, with an
	// error its data can cause, is tried before it is set aside.
	PoisonAttempts int
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
	// MaxStreams is how many event streams an instance serves at once.
	MaxStreams int
	// StreamReadLimit and StreamReadBytes bound one read of the outbox for
	// the event streams: messages, and stored payload beyond two messages.
	StreamReadLimit int
	StreamReadBytes int
	// StreamHistory is how many of its last pages the streams' reader keeps,
	// so that a stream resuming within them is served from memory.
	StreamHistory int
	// StreamBuffer is how many pages a stream may hold that its client has
	// not taken yet; a stream that would need more is dropped.
	StreamBuffer int
	// StreamCatchUpReaders is how many streams may read the outbox at once
	// to catch up from an older cursor.
	StreamCatchUpReaders int
	// CloseTimeout bounds the wait for in-flight messages on stop.
	CloseTimeout time.Duration
}

// MaxBatchSize bounds BatchSize.
const MaxBatchSize = 10000

// DefaultConfig returns the defaults: 100 ms polls, a 10 s ack deadline,
// batches of up to 2,000 messages and 1 MiB stored, 3 attempts before a message is
// set aside, a janitor every second that keeps consumed messages for a
// minute, rate buckets for an hour, and up to 2,000 event streams, each
// allowed 32 pending pages.
func DefaultConfig() Config {
	return Config{
		PollInterval:         100 * time.Millisecond,
		AckDeadline:          10 * time.Second,
		ResendInterval:       100 * time.Millisecond,
		BatchSize:            2000,
		BatchBytes:           1 << 20,
		PoisonAttempts:       3,
		JanitorInterval:      time.Second,
		JanitorBatchSize:     5000,
		Retention:            time.Minute,
		RateBucketRetention:  time.Hour,
		MaxStreams:           2000,
		StreamReadLimit:      100,
		StreamReadBytes:      128 << 10,
		StreamHistory:        16,
		StreamBuffer:         32,
		StreamCatchUpReaders: 4,
		CloseTimeout:         10 * time.Second,
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
	if c.BatchBytes < 1 {
		errs = append(errs, errors.New("batch bytes must be positive"))
	}
	if c.PoisonAttempts < 1 {
		errs = append(errs, errors.New("poison attempts must be at least 1"))
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
	if c.MaxStreams < 1 {
		errs = append(errs, errors.New("max streams must be at least 1"))
	}
	if c.StreamReadLimit < 1 || c.StreamReadBytes < 1 || c.StreamHistory < 1 || c.StreamBuffer < 1 || c.StreamCatchUpReaders < 1 {
		errs = append(errs, errors.New("stream read limit, read bytes, history, buffer and catch-up readers must be positive"))
	}
	if c.CloseTimeout <= 0 {
		errs = append(errs, errors.New("close timeout must be positive"))
	}
	return errors.Join(errs...)
}
