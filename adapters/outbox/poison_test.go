package outbox

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// recordEvents appends one outbox message with events, in a transaction of
// its own, as a use case would.
func recordEvents(t *testing.T, e *env, events ...event.Event) {
	t.Helper()
	require.NoError(t, e.tx.Run(ctxT(t), func(ctx context.Context, st ports.Stores) error {
		st.Outbox.Record(events...)
		return nil
	}))
}

// Messages whose projection keeps failing on their data are set aside, one
// row per projection they fail in, after PoisonAttempts attempts alone (an
// undecodable one at once); the rest of their batch and everything after it
// is applied; the set-aside messages are logged and counted; a replay after
// a fix applies a message once, however many replays race; a replay that
// still fails leaves the message set aside.
func TestPoisonMessagesAreSetAsideAndReplayedOnce(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	// A fault the operator can fix: queue_totals refuses the queue "fragile"
	// (only the queue statistics projection writes queue_totals).
	_, err := e.db.Exec(`ALTER TABLE queue_totals ADD CONSTRAINT refuse_fragile CHECK (queue <> 'fragile')`)
	require.NoError(t, err)

	submitN(t, e, ctx, 3)
	// No fix helps these: a payload that is not an events envelope, and a
	// queue name with a NUL byte (PostgreSQL text cannot hold one: 22021).
	_, err = e.db.Exec(`INSERT INTO watermill_taskmaster_events (uuid, payload, metadata, transaction_id)
		VALUES (gen_random_uuid()::text, '{"events": 5}', '{}', pg_current_xact_id())`)
	require.NoError(t, err)
	at := time.Now()
	recordEvents(t, e, event.Event{Version: 1, Type: event.TaskSubmitted, Queue: "nul\x00queue", To: "PENDING", OccurredAt: at})
	_, _, err = e.tasks.Submit(ctx, task.SubmitParams{Queue: "fragile"})
	require.NoError(t, err)
	submitN(t, e, ctx, 3)

	cfg := fastConfig()
	cfg.BatchSize = 4 // the bad messages sit in the middle of batches
	core, logs := observer.New(zap.ErrorLevel)
	r, err := NewRouter(e.db.DB, cfg, zap.New(core))
	require.NoError(t, err)
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	waitCaughtUp(t, e.db)

	// The projection went on: every good message is applied.
	truth := truthCounts(t, e.db)
	require.Equal(t, map[string]int64{"q/PENDING": 6, "fragile/PENDING": 1}, truth)
	require.Equal(t, map[string]int64{"q/PENDING": 6}, projectedCounts(t, e.db), "fragile waits to be replayed")
	require.Equal(t, map[string]int64{"tasks_submitted/q/": 6, "tasks_submitted/fragile/": 1},
		queryCounts(t, e.db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`),
		"the metrics projection applied fragile: only the queue statistics failed")

	list, err := NewPoison(e.db.DB).List(ctx)
	require.NoError(t, err)
	type aside struct {
		projection string
		events     int
		attempts   int
	}
	var got []aside
	var fragileID, nulID int64
	for _, m := range list {
		got = append(got, aside{m.Projection, m.Events, m.Attempts})
		require.NotEmpty(t, m.Error)
		require.WithinDuration(t, time.Now(), m.SetAsideAt, time.Minute)
		switch {
		case m.Projection == QueueStatsProjection && strings.Contains(m.Error, "refuse_fragile"):
			fragileID = m.ID
		case m.Projection == QueueStatsProjection && strings.Contains(m.Error, "0x00"):
			nulID = m.ID
		}
	}
	require.Equal(t, []aside{
		{MetricsProjection, -1, 1}, {QueueStatsProjection, -1, 1}, // undecodable: at once, for both
		{MetricsProjection, 1, 3}, {QueueStatsProjection, 1, 3}, // the NUL byte: both fail
		{QueueStatsProjection, 1, 3}, // fragile: the queue statistics only
	}, got, "%+v", list)
	require.NotZero(t, fragileID)
	require.NotZero(t, nulID)
	require.Equal(t, 5, logs.FilterMessageSnippet("outbox message set aside").Len(), "logged, once per row")

	// Counted in the metrics.
	snap, err := NewMetricsSource(e.db).Snapshot(ctx, metrics.NewQueueSeries(0))
	require.NoError(t, err)
	poison := map[string]float64{}
	for _, p := range snap.Poison {
		poison[p.Projection] = p.Count
	}
	require.Equal(t, map[string]float64{QueueStatsProjection: 3, MetricsProjection: 2}, poison)

	// The fix, then racing replays: one applies it.
	_, err = e.db.Exec(`ALTER TABLE queue_totals DROP CONSTRAINT refuse_fragile`)
	require.NoError(t, err)
	var wg sync.WaitGroup
	results := make([]error, 5)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = NewPoison(e.db.DB).Replay(ctx, fragileID)
		}()
	}
	wg.Wait()
	replayed := 0
	for _, err := range results {
		if err == nil {
			replayed++
			continue
		}
		require.ErrorIs(t, err, ErrPoisonNotFound)
	}
	require.Equal(t, 1, replayed)
	require.Equal(t, truth, projectedCounts(t, e.db), "fragile is applied")
	require.Equal(t, map[string]int64{"fragile/tasks_submitted": 1, "q/tasks_submitted": 6},
		queryCounts(t, e.db, `SELECT queue || '/' || kind, count FROM queue_totals`))
	require.Equal(t, map[string]int64{"tasks_submitted/q/": 6, "tasks_submitted/fragile/": 1},
		queryCounts(t, e.db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`),
		"the replay touched only the projection that had set it aside")
	require.ErrorIs(t, NewPoison(e.db.DB).Replay(ctx, fragileID), ErrPoisonNotFound)

	// A replay that fails again leaves the message set aside, one attempt more.
	require.Error(t, NewPoison(e.db.DB).Replay(ctx, nulID))
	n, err := NewPoison(e.db.DB).ReplayAll(ctx)
	require.Error(t, err)
	require.Zero(t, n)
	list, err = NewPoison(e.db.DB).List(ctx)
	require.NoError(t, err)
	require.Len(t, list, 4)
	for _, m := range list {
		if m.ID == nulID {
			require.Equal(t, cfg.PoisonAttempts+2, m.Attempts)
		}
	}
	// And one that cannot be fixed can be discarded.
	require.NoError(t, NewPoison(e.db.DB).Discard(ctx, nulID))
	require.ErrorIs(t, NewPoison(e.db.DB).Discard(ctx, nulID), ErrPoisonNotFound)

	// The projection keeps going after all this.
	submitN(t, e, ctx, 2)
	waitCaughtUp(t, e.db)
	require.Equal(t, truthCounts(t, e.db), projectedCounts(t, e.db))
}
