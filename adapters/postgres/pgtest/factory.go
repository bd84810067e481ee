package pgtest

import (
	"context"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
)

// QueuesOpts describe queues to stage as the statistics projection leaves
// them, without their tasks: a test of what reads the statistics says what
// it needs in one call instead of writing the projection's rows by hand.
type QueuesOpts struct {
	// Count is how many queues: <Prefix>000001, <Prefix>000002, ...
	Count  int
	Prefix string
	// Pending is each queue's count of PENDING tasks (at least 1: a queue
	// the statistics count nothing in is not listed).
	Pending int
	// Active gives queue n an enqueued bucket of n in the current minute
	// (the later, the busier), as if tasks were submitted to every one.
	Active bool
}

// Queues stages o's queues in the statistics tables of db (one statement
// per table, so 100,000 queues take about a second).
func Queues(t testing.TB, db *sqlx.DB, o QueuesOpts) {
	t.Helper()
	ctx := context.Background()
	_, err := db.ExecContext(ctx, `
		INSERT INTO queue_status_counts (queue, status, count)
		SELECT $2 || lpad(n::text, 6, '0'), 'PENDING', greatest($3, 1)
		FROM generate_series(1, $1) n`, o.Count, o.Prefix, o.Pending)
	require.NoError(t, err, "pgtest: stage queue counts")
	if o.Active {
		_, err = db.ExecContext(ctx, `
			INSERT INTO queue_rate_buckets (queue, minute, kind, count)
			SELECT $2 || lpad(n::text, 6, '0'), date_trunc('minute', now()), 'enqueued', n
			FROM generate_series(1, $1) n`, o.Count, o.Prefix)
		require.NoError(t, err, "pgtest: stage queue buckets")
	}
	_, err = db.ExecContext(ctx, `ANALYZE queue_status_counts, queue_rate_buckets`)
	require.NoError(t, err, "pgtest: analyze")
}
