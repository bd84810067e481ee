package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"sync"
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
// older than their retention (and, once a minute, the groups' token buckets
// that have refilled).
//
// Several instances may run janitors: each delete statement takes a
// transaction-level advisory lock, so one deletes at a time and the others
// skip their turn.
type Janitor struct {
	lifecycle.Base
	db     *sql.DB
	cfg    Config
	logger *zap.Logger

	// mu guards marks: the outbox's last position at each run, on the
	// database clock, oldest first. The last mark older than the retention
	// bounds the delete's range, so that it walks only messages old enough
	// to go instead of every message the retention keeps.
	mu    sync.Mutex
	marks []positionMark
	// groupBucketsPruned is when the last run pruned the groups' full
	// token buckets (loop only).
	groupBucketsPruned time.Time
}

// groupBucketsPruneInterval is how often a janitor prunes the groups'
// token buckets that have refilled.
const groupBucketsPruneInterval = time.Minute

// pruneGroupBucketsSQL deletes the buckets of rate_limit_per_group
// (migration 0021) that are full at now: a missing row is a full bucket,
// so nothing changes for the claims. A claim that took from a bucket since
// is seen by the delete's recheck of the row.
const pruneGroupBucketsSQL = `
	DELETE FROM queue_group_buckets b USING queue_settings s
	WHERE s.queue = b.queue AND (s.group_rate_per_second IS NULL
		OR b.tokens + extract(epoch FROM now() - b.tokens_at) * s.group_rate_per_second >= s.group_rate_burst)`

// positionMark is the outbox's last position at a time.
type positionMark struct {
	at  time.Time
	pos Position
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

// janitorLockKey is the transaction-level advisory lock a janitor's delete
// statement takes ("tm_janit" in ASCII): one instance's janitor deletes at a
// time, and the others skip their turn.
const janitorLockKey int64 = 0x746d5f6a616e6974

// deleteConsumedSQL deletes up to $2 messages at or below the slowest
// consumer group's position (consumption is ordered by (transaction_id,
// offset)) and at or below the position ($3, $4) the outbox had reached when
// the retention began, whose created_at is older than $1 seconds, and raises
// the janitor's high-water mark to the greatest position deleted. The
// position bound keeps the index range to messages old enough to go: without
// it every run would read each message the retention keeps (100 ms a run for
// 200,000 of them). It deletes nothing if another janitor holds the lock
// ($5): rows are found by ctid without row locks, which would write every
// row twice.
const deleteConsumedSQL = `
WITH turn AS (
	SELECT pg_try_advisory_xact_lock($5) AS mine
), slowest AS (
	SELECT last_processed_transaction_id AS transaction_id, coalesce(offset_acked, 0) AS "offset"
	FROM watermill_offsets_taskmaster_events
	ORDER BY 1, 2
	LIMIT 1
), doomed AS (
	SELECT m.ctid
	FROM watermill_taskmaster_events m
	WHERE (SELECT mine FROM turn)
		AND (m.transaction_id, m."offset") <= (SELECT transaction_id, "offset" FROM slowest)
		AND (m.transaction_id, m."offset") <= ($3::xid8, $4::bigint)
		AND m.created_at < now() - make_interval(secs => $1)
	ORDER BY m.transaction_id, m."offset"
	LIMIT $2
), gone AS (
	DELETE FROM watermill_taskmaster_events m
	WHERE m.ctid = ANY (ARRAY(SELECT ctid FROM doomed))
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

// lastPositionSQL reads the database time and the outbox's last position
// (one step of a backward scan of the primary key).
const lastPositionSQL = `
SELECT now(), coalesce(l.transaction_id::text, '0'), coalesce(l."offset", 0)
FROM (SELECT) one
LEFT JOIN LATERAL (
	SELECT m.transaction_id, m."offset" FROM watermill_taskmaster_events m
	ORDER BY m.transaction_id DESC, m."offset" DESC LIMIT 1
) l ON true`

// noBound is the position bound before the janitor has a mark older than
// the retention: none.
var noBound = Position{TransactionID: math.MaxUint64, Offset: math.MaxInt64}

// bound records the outbox's last position now and returns the last
// position recorded at least the retention ago (noBound if none was).
func (j *Janitor) bound(ctx context.Context) (Position, error) {
	var (
		m  positionMark
		tx string
	)
	if err := j.db.QueryRowContext(ctx, lastPositionSQL).Scan(&m.at, &tx, &m.pos.Offset); err != nil {
		return Position{}, fmt.Errorf("read the outbox's last position: %w", err)
	}
	var err error
	if m.pos.TransactionID, err = strconv.ParseUint(tx, 10, 64); err != nil {
		return Position{}, fmt.Errorf("read the outbox's last position: %w", err)
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	j.marks = append(j.marks, m)
	cutoff := m.at.Add(-j.cfg.Retention)
	b, old := noBound, 0
	for i, mk := range j.marks {
		if mk.at.After(cutoff) {
			break
		}
		b, old = mk.pos, i
	}
	// Keep the last mark older than the retention and those after it.
	j.marks = append(j.marks[:0], j.marks[old:]...)
	return b, nil
}

// pruneBucketsSQL deletes rate buckets older than $1 seconds.
const pruneBucketsSQL = `DELETE FROM queue_rate_buckets WHERE minute < now() - make_interval(secs => $1)`

// RunOnce deletes consumed messages until a batch comes back short (or
// maxJanitorBatches ran), prunes old rate buckets, and returns how many
// messages it deleted.
func (j *Janitor) RunOnce(ctx context.Context) (int, error) {
	b, err := j.bound(ctx)
	if err != nil {
		return 0, err
	}
	total := 0
	for range maxJanitorBatches {
		var n int
		err := j.db.QueryRowContext(ctx, deleteConsumedSQL, j.cfg.Retention.Seconds(), j.cfg.JanitorBatchSize,
			strconv.FormatUint(b.TransactionID, 10), b.Offset, janitorLockKey).Scan(&n)
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

// PruneGroupBuckets deletes the groups' token buckets (rate_limit_per_group)
// that have refilled, and returns how many.
func (j *Janitor) PruneGroupBuckets(ctx context.Context) (int64, error) {
	res, err := j.db.ExecContext(ctx, pruneGroupBucketsSQL)
	if err != nil {
		return 0, fmt.Errorf("prune group buckets: %w", err)
	}
	return res.RowsAffected()
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
		if err == nil && time.Since(j.groupBucketsPruned) >= groupBucketsPruneInterval {
			j.groupBucketsPruned = time.Now()
			_, err = j.PruneGroupBuckets(ctx)
		}
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
