package outbox

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
)

// setOffset moves a consumer group to pos, as if it had consumed up to it.
func setOffset(t *testing.T, e *env, group string, pos Position) {
	t.Helper()
	_, err := e.db.Exec(`
		INSERT INTO watermill_offsets_taskmaster_events (consumer_group, offset_acked, last_processed_transaction_id)
		VALUES ($1, $2, $3::text::xid8)
		ON CONFLICT (consumer_group) DO UPDATE
		SET offset_acked = excluded.offset_acked, last_processed_transaction_id = excluded.last_processed_transaction_id`,
		group, pos.Offset, pos.TransactionID)
	require.NoError(t, err)
}

// builtInGroupsAt moves the built-in consumer group to pos.
func builtInGroupsAt(t *testing.T, e *env, pos Position) {
	t.Helper()
	setOffset(t, e, ProjectionsGroup, pos)
}

func submitN(t *testing.T, e *env, ctx context.Context, n int) {
	t.Helper()
	for range n {
		_, _, err := e.tasks.Submit(ctx, task.SubmitParams{Queue: "q"})
		require.NoError(t, err)
	}
}

func positions(msgs []storedMessage) []Position {
	out := make([]Position, len(msgs))
	for i, m := range msgs {
		out[i] = m.pos
	}
	return out
}

func TestJanitorDeletesOnlyWhatEveryGroupConsumed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	submitN(t, e, ctx, 10)
	all := positions(outboxMessages(t, e.db))
	require.Len(t, all, 10)
	cfg := DefaultConfig()
	cfg.Retention = 0
	cfg.JanitorBatchSize = 3 // several batches
	j, err := NewJanitor(e.db.DB, cfg, nil)
	require.NoError(t, err)

	// The built-in group exists from the migration and has consumed nothing.
	n, err := j.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n)

	// The projections are at 7, external groups at 4 and 5: the slowest decides.
	setOffset(t, e, ProjectionsGroup, all[6])
	setOffset(t, e, "audit", all[3])
	setOffset(t, e, "billing", all[4])
	n, err = j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 4, n)
	require.Equal(t, all[4:], positions(outboxMessages(t, e.db)))
	var mark Position
	require.NoError(t, e.db.QueryRow(`SELECT transaction_id::text, "offset" FROM outbox_janitor_state`).Scan(&mark.TransactionID, &mark.Offset))
	require.Equal(t, all[3], mark, "the high-water mark is the last deleted position")

	// Everyone at the end: everything goes, in batches of 3.
	for _, g := range []string{ProjectionsGroup, "audit", "billing"} {
		setOffset(t, e, g, all[9])
	}
	n, err = j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Empty(t, outboxMessages(t, e.db))

	// Deleting a group's offsets row releases what only it was holding.
	_, err = e.db.Exec(`DELETE FROM watermill_offsets_taskmaster_events WHERE consumer_group = 'audit'`)
	require.NoError(t, err)
	submitN(t, e, ctx, 2)
	more := positions(outboxMessages(t, e.db))
	builtInGroupsAt(t, e, more[1])
	n, err = j.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "billing has not consumed them")
	_, err = e.db.Exec(`DELETE FROM watermill_offsets_taskmaster_events WHERE consumer_group = 'billing'`)
	require.NoError(t, err)
	n, err = j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

func TestJanitorKeepsConsumedMessagesForTheRetention(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	submitN(t, e, ctx, 3)
	all := positions(outboxMessages(t, e.db))
	builtInGroupsAt(t, e, all[2])
	// The first message is old, the others recent.
	_, err := e.db.Exec(`UPDATE watermill_taskmaster_events SET created_at = created_at - interval '2 hours'
		WHERE (transaction_id, "offset") = ($1::text::xid8, $2)`, all[0].TransactionID, all[0].Offset)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Retention = time.Hour
	j, err := NewJanitor(e.db.DB, cfg, nil)
	require.NoError(t, err)
	n, err := j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, all[1:], positions(outboxMessages(t, e.db)))
}

func TestJanitorPrunesOldRateBuckets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	_, err := e.db.Exec(`INSERT INTO queue_rate_buckets (queue, minute, kind, count) VALUES
		('q', date_trunc('minute', now()) - interval '3 hours', 'enqueued', 1),
		('q', date_trunc('minute', now()), 'enqueued', 1)`)
	require.NoError(t, err)
	j, err := NewJanitor(e.db.DB, DefaultConfig(), nil)
	require.NoError(t, err)
	_, err = j.RunOnce(ctx)
	require.NoError(t, err)
	var n int
	require.NoError(t, e.db.Get(&n, `SELECT count(*) FROM queue_rate_buckets`))
	require.Equal(t, 1, n)
}

// The groups' token buckets that have refilled are deleted (a missing
// bucket is a full one); the others, and those of a queue whose
// rate_limit_per_group is gone, are kept and deleted.
func TestJanitorPrunesFullGroupBuckets(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, err := e.db.Exec(`
		INSERT INTO queue_settings (queue, updated_at, group_rate_per_second, group_rate_burst) VALUES ('rated', now(), 1, 10);
		INSERT INTO queue_settings (queue, updated_at) VALUES ('unrated', now());
		INSERT INTO queue_group_buckets VALUES
			('rated', 'full', 9, now() - interval '2 seconds'),
			('rated', 'filling', 2, now() - interval '1 second'),
			('unrated', 'g', 0, now())`)
	require.NoError(t, err)
	j, err := NewJanitor(e.db.DB, DefaultConfig(), nil)
	require.NoError(t, err)
	n, err := j.PruneGroupBuckets(ctxT(t))
	require.NoError(t, err)
	require.EqualValues(t, 2, n)
	var left []string
	require.NoError(t, e.db.Select(&left, `SELECT queue || '/' || group_key FROM queue_group_buckets`))
	require.Equal(t, []string{"rated/filling"}, left)
}

func TestJanitorServiceRunsPeriodicallyAndStops(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	submitN(t, e, ctx, 2)
	all := positions(outboxMessages(t, e.db))
	builtInGroupsAt(t, e, all[1])
	cfg := DefaultConfig()
	cfg.Retention = 0
	cfg.JanitorInterval = 10 * time.Millisecond
	j, err := NewJanitor(e.db.DB, cfg, nil)
	require.NoError(t, err)
	require.NoError(t, j.Start(ctx))
	require.Eventually(t, func() bool { return len(outboxMessages(t, e.db)) == 0 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, j.Stop(ctx))
	require.NoError(t, j.Stop(ctx), "Stop is idempotent")
}

// Once the janitor has a mark older than the retention, it deletes only up
// to the position the outbox had then: messages after it are not even read,
// whatever their created_at says (here forged old).
func TestJanitorDeletesUpToThePositionOfTheRetentionsStart(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	submitN(t, e, ctx, 5)
	all := positions(outboxMessages(t, e.db))
	builtInGroupsAt(t, e, all[4])
	_, err := e.db.Exec(`UPDATE watermill_taskmaster_events SET created_at = created_at - interval '2 hours'`)
	require.NoError(t, err)
	cfg := DefaultConfig()
	cfg.Retention = time.Hour
	j, err := NewJanitor(e.db.DB, cfg, nil)
	require.NoError(t, err)
	var dbNow time.Time
	require.NoError(t, e.db.Get(&dbNow, `SELECT now()`))
	j.marks = []positionMark{{at: dbNow.Add(-3 * time.Hour), pos: all[0]}, {at: dbNow.Add(-90 * time.Minute), pos: all[2]}}
	n, err := j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
	require.Equal(t, all[3:], positions(outboxMessages(t, e.db)))
	require.Len(t, j.marks, 2, "the last mark older than the retention and the new one")
	require.Equal(t, all[2], j.marks[0].pos)
	require.Equal(t, all[4], j.marks[1].pos)
}

// One janitor deletes at a time (a transaction-level advisory lock): while
// another holds the turn, a run deletes nothing; then it does.
func TestJanitorsTakeTurns(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	submitN(t, e, ctx, 3)
	all := positions(outboxMessages(t, e.db))
	builtInGroupsAt(t, e, all[2])
	cfg := DefaultConfig()
	cfg.Retention = 0
	j, err := NewJanitor(e.db.DB, cfg, nil)
	require.NoError(t, err)
	other, err := e.db.BeginTx(ctx, nil)
	require.NoError(t, err)
	_, err = other.Exec(`SELECT pg_advisory_xact_lock($1)`, janitorLockKey)
	require.NoError(t, err)
	n, err := j.RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "another janitor's turn")
	require.NoError(t, other.Rollback())
	n, err = j.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, n)
}
