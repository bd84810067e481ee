// Package outboxtest helps tests compare the outbox's projections with the
// truth: the tasks and workers tables and the events in the outbox.
package outboxtest

import (
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
)

// Counts runs query, which must return (text, bigint) rows, into a map.
func Counts(t testing.TB, db *sqlx.DB, query string, args ...any) map[string]int64 {
	t.Helper()
	rows, err := db.Query(query, args...)
	require.NoError(t, err)
	defer rows.Close()
	out := map[string]int64{}
	for rows.Next() {
		var k string
		var n int64
		require.NoError(t, rows.Scan(&k, &n))
		out[k] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// TruthCounts is SELECT queue, status, count(*) FROM tasks GROUP BY 1, 2,
// keyed "queue/STATUS".
func TruthCounts(t testing.TB, db *sqlx.DB) map[string]int64 {
	t.Helper()
	return Counts(t, db, `SELECT queue || '/' || status, count(*) FROM tasks GROUP BY queue, status`)
}

// ProjectedCounts are the non-zero rows of queue_status_counts, keyed
// "queue/STATUS".
func ProjectedCounts(t testing.TB, db *sqlx.DB) map[string]int64 {
	t.Helper()
	return Counts(t, db, `SELECT queue || '/' || status, count FROM queue_status_counts WHERE count <> 0`)
}

// Events reads every event in the outbox, in delivery order.
func Events(t testing.TB, db *sqlx.DB) []event.Event {
	t.Helper()
	var payloads [][]byte
	require.NoError(t, db.Select(&payloads, `SELECT payload FROM watermill_taskmaster_events ORDER BY transaction_id, "offset"`))
	var out []event.Event
	for _, p := range payloads {
		events, err := envelope.Decode(p)
		require.NoError(t, err)
		out = append(out, events...)
	}
	return out
}

// WaitCaughtUp polls until each consumer group has consumed the last outbox
// message.
func WaitCaughtUp(t testing.TB, db *sqlx.DB, groups ...string) {
	t.Helper()
	for _, g := range groups {
		require.Eventually(t, func() bool {
			var behind bool
			require.NoError(t, db.Get(&behind, `
				SELECT EXISTS (
					SELECT 1 FROM watermill_taskmaster_events m, watermill_offsets_taskmaster_events o
					WHERE o.consumer_group = $1
						AND (m.transaction_id, m."offset") > (o.last_processed_transaction_id, o.offset_acked))`, g))
			return !behind
		}, 60*time.Second, 10*time.Millisecond, "consumer group %s did not catch up", g)
	}
}
