package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
)

// maxJanitorBatches bounds the delete statements of one janitor run, so a
// run after a long pause does not hold the janitor for long.
const maxJanitorBatches = 100

// Janitor keeps the outbox small: periodically it deletes, in batches, the
// messages that every consumer group (every row of
// watermill_offsets_taskmaster_events, including other services' groups) has
// consumed and that are older than the retention, and prunes rate buckets
// older than their retention.
//
// Several instances may run janitors at once: each batch locks the rows it
// deletes with SKIP LOCKED, so concurrent janitors split the work.
type Janitor struct {
	lifecycle.Base
	db     *sql.DB
	cfg    Config
	logger *zap.Logger
}

var _ lifecycle.Service = (*Janitor)(nil)

// NewJanitor returns a janitor over db.
func NewJanitor(db *sql.DB, cfg Config, logger *zap.Logger) (*Janitor, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Janitor{db: db, cfg: cfg, logger: logger}, nil
}

// deleteConsumedSQL deletes up to $2 messages at or below the slowest
// consumer group's position (consumption is ordered by (transaction_id,
// offset)) whose created_at is older than $1 seconds, and raises the janitor's
// high-water mark to the greatest position deleted. created_at is a
// timestamp without time zone in the session's zone, as is localtimestamp.
const deleteConsumedSQL = `
WITH slowest AS (
	SELECT last_processed_transaction_id AS transaction_id, coalesce(offset_acked, 0) AS "offset"
	FROM watermill_offsets_taskmaster_events
	ORDER BY 1, 2
	LIMIT 1
), doomed AS (
	SELECT m.transaction_id, m."offset"
	FROM watermill_taskmaster_events m
	WHERE (m.transaction_id, m."offset") <= (SELECT transaction_id, "offset" FROM slowest)
		AND m.created_at < localtimestamp - make_interval(secs => $1)
	ORDER BY m.transaction_id, m."offset"
	LIMIT $2
	FOR UPDATE SKIP LOCKED
), gone AS (
	DELETE FROM watermill_taskmaster_events m
	USING doomed d
	WHERE m.transaction_id = d.transaction_id AND m."offset" = d."offset"
	RETURNING m.transaction_id, m."offset"
), highest AS (
	SELECT transaction_id, "offset" FROM gone ORDER BY 1 DESC, 2 DESC LIMIT 1
), mark AS (
	UPDATE outbox_janitor_state s
	SET transaction_id = h.transaction_id, "offset" = h."offset"
	FROM highest h
	WHERE (s.transaction_id, s."offset") < (h.transaction_id, h."offset")
)
SELECT count(*) FROM gone`

// pruneBucketsSQL deletes rate buckets older than $1 seconds.
const pruneBucketsSQL = `DELETE FROM queue_rate_buckets WHERE minute < now() - make_interval(secs => $1)`

// RunOnce deletes consumed messages until a batch comes back short (or
// maxJanitorBatches ran), prunes old rate buckets, and returns how many
// messages it deleted.
func (j *Janitor) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for range maxJanitorBatches {
		var n int
		err := j.db.QueryRowContext(ctx, deleteConsumedSQL, j.cfg.Retention.Seconds(), j.cfg.JanitorBatchSize).Scan(&n)
		if err != nil {
			return total, fmt.Errorf("delete consumed outbox messages: %w", err)
		}
		total += n
		if n < j.cfg.JanitorBatchSize {
			break
		}
	}
	if _, err := j.db.ExecContext(ctx, pruneBucketsSQL, j.cfg.RateBucketRetention.Seconds()); err != nil {
		return total, fmt.Errorf("prune rate buckets: %w", err)
	}
	return total, nil
}

// Start runs the janitor every JanitorInterval until Stop.
func (j *Janitor) Start(ctx context.Context) error {
	return j.StartLoop(ctx, "outbox janitor", func(context.Context) (lifecycle.LoopFunc, error) {
		return j.loop, nil
	})
}

func (j *Janitor) loop(ctx context.Context) {
	ticker := time.NewTicker(j.cfg.JanitorInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		n, err := j.RunOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			j.logger.Warn("outbox janitor run failed", zap.Error(err))
		case n > 0:
			j.logger.Debug("outbox janitor deleted consumed messages", zap.Int("deleted", n))
		}
	}
}

// Stop stops the janitor and waits for a run in progress (its statements are
// cancelled). It is idempotent.
func (j *Janitor) Stop(ctx context.Context) error { return j.StopLoop(ctx) }
