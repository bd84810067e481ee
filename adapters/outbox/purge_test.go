package outbox

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
)

// A purged task leaves the count of the status it was purged from, and
// counts as nothing else: not dead-lettered, not requeued, not cleaned.
func TestPurgedTasksLeaveTheirStatusCounts(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := ctxT(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	events := []event.Event{
		{Type: event.TaskSubmitted, Queue: "q", To: "PENDING", OccurredAt: at},
		{Type: event.TaskSubmitted, Queue: "q", To: "PENDING", OccurredAt: at},
		{Type: event.TaskSubmitted, Queue: "q", To: "PENDING", OccurredAt: at},
		{Type: event.TaskDeadLettered, Queue: "q", From: "PENDING", To: "DEAD", Reason: "cancelled", OccurredAt: at},
	}
	purges := []event.Event{
		{Type: event.TaskPurged, Queue: "q", From: "PENDING", OccurredAt: at},
		{Type: event.TaskPurged, Queue: "q", From: "DEAD", Reason: "cancelled", OccurredAt: at},
	}
	p := NewProjector(DefaultConfig(), nil)
	counts := func() map[string]int64 {
		return queryCounts(t, db, `SELECT queue || '/' || status, count FROM queue_status_counts`)
	}
	for i, es := range [][]event.Event{events, purges} {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, p.Apply(ctx, tx, batchAt(t, es, Position{TransactionID: uint64(i + 1), Offset: 1})))
		require.NoError(t, tx.Commit())
		if i == 0 {
			require.Equal(t, map[string]int64{"q/PENDING": 2, "q/DEAD": 1}, counts())
		}
	}
	require.Equal(t, map[string]int64{"q/PENDING": 1, "q/DEAD": 0}, counts())
	require.Equal(t, map[string]int64{"tasks_submitted/": 3, "tasks_dead_lettered/cancelled": 1},
		queryCounts(t, db, `SELECT kind || '/' || reason, count FROM queue_totals`))
	require.Equal(t, map[string]int64{"tasks_submitted/q/": 3, "tasks_dead_lettered/q/cancelled": 1},
		queryCounts(t, db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`))
}
