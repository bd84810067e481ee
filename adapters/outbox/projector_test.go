package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

func TestApplySkipsMessagesAtOrBeforeTheProjectorsPosition(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ctx := ctxT(t)
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	events := []event.Event{
		{Type: event.TaskSubmitted, Queue: "q", To: "PENDING", OccurredAt: at},
		{Type: event.TaskClaimed, Queue: "q", From: "PENDING", To: "RUNNING", OccurredAt: at, QueueWaitSeconds: event.Seconds(2 * time.Second)},
		{Type: event.TaskFailed, Queue: "q", From: "RUNNING", To: "DEAD", Reason: "exhausted", OccurredAt: at,
			ExecutionSeconds: event.Seconds(1e6 * time.Second), EndToEndSeconds: event.Seconds(0)},
	}
	apply := func(p *Projector, pos Position) bool {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		applied, err := p.Apply(ctx, tx, pos, events)
		require.NoError(t, err)
		require.NoError(t, tx.Commit())
		return applied
	}
	for _, p := range []*Projector{NewQueueStatsProjector(), NewMetricsProjector()} {
		require.True(t, apply(p, Position{10, 5}))
		require.False(t, apply(p, Position{10, 5}), "the same message again")
		require.False(t, apply(p, Position{10, 4}))
		require.False(t, apply(p, Position{9, 100}))
		require.True(t, apply(p, Position{11, 1}))
	}

	require.Equal(t, map[string]int64{"q/DEAD": 2}, projectedCounts(t, db))
	totals := queryCounts(t, db, `SELECT kind || '/' || reason, count FROM queue_totals WHERE queue = 'q'`)
	require.Equal(t, map[string]int64{
		"tasks_submitted/": 2, "tasks_claimed/": 2, "tasks_failed/": 2, "tasks_dead_lettered/exhausted": 2,
	}, totals)
	buckets := queryCounts(t, db, `SELECT kind || '@' || to_char(minute AT TIME ZONE 'UTC', 'HH24:MI'), count FROM queue_rate_buckets`)
	require.Equal(t, map[string]int64{"enqueued@03:04": 2, "claimed@03:04": 2, "dead_lettered@03:04": 2}, buckets)
	counters := queryCounts(t, db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`)
	require.Equal(t, map[string]int64{
		"tasks_submitted/q/": 2, "tasks_claimed/q/": 2, "tasks_failed/q/": 2, "tasks_dead_lettered/q/exhausted": 2,
	}, counters)
	var hist []struct {
		Kind  string  `db:"kind"`
		Le    float64 `db:"upper_bound"`
		Count int64   `db:"count"`
	}
	require.NoError(t, db.Select(&hist, `SELECT kind, upper_bound, count FROM metric_histogram_buckets ORDER BY kind`))
	require.Len(t, hist, 3)
	require.Equal(t, "task_end_to_end_duration", hist[0].Kind)
	require.Equal(t, 0.005, hist[0].Le)
	require.Equal(t, "task_execution_duration", hist[1].Kind)
	require.True(t, math.IsInf(hist[1].Le, 1), "a million seconds is beyond the last bound")
	require.Equal(t, "task_queue_wait", hist[2].Kind)
	require.Equal(t, 2.5, hist[2].Le)
	for _, h := range hist {
		require.EqualValues(t, 2, h.Count)
	}
	sums := map[string]float64{}
	rows, err := db.Query(`SELECT kind, sum FROM metric_histogram_sums`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		var s float64
		require.NoError(t, rows.Scan(&k, &s))
		sums[k] = s
	}
	require.NoError(t, rows.Close())
	require.Equal(t, map[string]float64{"task_queue_wait": 4, "task_execution_duration": 2e6}, sums)
}

// A projector attempt that fails, even with a failed SQL statement that
// aborts the subscriber's transaction, is rolled back to its savepoint: the
// redelivered message finds the tables (and the position) as they were
// before the failed attempt, and in the end every message is applied once.
func TestFailedAttemptLeavesNoWritesAndTheMessageIsRedelivered(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	workload(t, e, ctx)
	msgs := outboxMessages(t, e.db)
	target := msgs[len(msgs)/2].pos // some message in the middle of a batch

	r, err := NewRouter(e.db.DB, fastConfig(), zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)), NewQueueStatsProjector(), NewMetricsProjector())
	require.NoError(t, err)
	var mu sync.Mutex
	states := map[string][]string{} // group/position -> state seen before each attempt
	r.hooks.before = func(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
		pos, err := PositionOf(msg)
		require.NoError(t, err)
		var state string
		if err := tx.QueryRowContext(ctx, `
			SELECT (SELECT coalesce(string_agg(queue || '/' || status || '=' || count, ',' ORDER BY queue, status), '') FROM queue_status_counts)
				|| ';' || (SELECT coalesce(sum(count), 0) FROM queue_totals)
				|| ';' || (SELECT coalesce(sum(value), 0) FROM metric_counters)
				|| ';' || (SELECT coalesce(sum(count), 0) FROM metric_histogram_buckets)
				|| ';' || (SELECT string_agg(consumer_group || '@' || transaction_id::text || '/' || "offset", ',' ORDER BY consumer_group) FROM projector_positions)`,
		).Scan(&state); err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		key := handlerGroup(msg) + fmt.Sprint(pos)
		states[key] = append(states[key], state)
		return nil
	}
	r.hooks.after = func(ctx context.Context, tx *sql.Tx, msg *message.Message) error {
		pos, err := PositionOf(msg)
		require.NoError(t, err)
		mu.Lock()
		attempt := len(states[handlerGroup(msg)+fmt.Sprint(pos)])
		mu.Unlock()
		if pos == target && attempt == 1 {
			_, err := tx.ExecContext(ctx, `SELECT 1 / 0`) // aborts the transaction
			require.Error(t, err)
			return err
		}
		return nil
	}
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	waitCaughtUp(t, e.db, QueueStatsGroup)
	waitCaughtUp(t, e.db, MetricsGroup)

	mu.Lock()
	for _, group := range []string{QueueStatsGroup, MetricsGroup} {
		seen := states[group+fmt.Sprint(target)]
		require.Len(t, seen, 2, "%s: the failed message is delivered again", group)
		require.Equal(t, seen[0], seen[1], "%s: the failed attempt left no writes", group)
	}
	mu.Unlock()
	require.Equal(t, truthCounts(t, e.db), projectedCounts(t, e.db))
	requireTotalsMatchOutbox(t, e)
	require.Equal(t, map[string]int64{
		"tasks_submitted/": 12, "tasks_claimed/": 8, "tasks_completed/": 2, "tasks_failed/": 4,
		"tasks_requeued/failed": 2, "tasks_requeued/retried": 2,
		"tasks_dead_lettered/non_retryable": 2, "tasks_dead_lettered/cancelled": 1,
		"workers_registered/": 1,
	}, queryCounts(t, e.db, `SELECT kind || '/' || reason, sum(value)::bigint FROM metric_counters GROUP BY kind, reason`))
	require.Equal(t, map[string]int64{"ACTIVE": 1}, queryCounts(t, e.db, `SELECT status, count FROM worker_status_counts WHERE count <> 0`))
}

// handlerGroup is the consumer group (handler name) a message is handled by.
func handlerGroup(msg *message.Message) string { return message.HandlerNameFromCtx(msg.Context()) }

// workload runs a small fixed mix of every task transition the service has,
// across two queues.
func workload(t *testing.T, e *env, ctx context.Context) {
	t.Helper()
	_, _, err := e.workers.Register(ctx, worker.RegisterParams{ID: "w"})
	require.NoError(t, err)
	for i := range 12 {
		q := []string{"alpha", "beta"}[i%2]
		_, _, err := e.tasks.Submit(ctx, task.SubmitParams{Queue: q, MaxAttempts: ptr(2)})
		require.NoError(t, err)
	}
	claimed, err := claimedTasks(e.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", Limit: ptr(8)}))
	require.NoError(t, err)
	require.Len(t, claimed, 8)
	for i, tk := range claimed {
		lease := tk.Snapshot().LeaseID
		switch i % 4 {
		case 0:
			_, err = e.tasks.Complete(ctx, ports.CompleteCommand{TaskID: tk.ID(), WorkerID: "w", LeaseID: &lease})
		case 1:
			_, err = e.tasks.Fail(ctx, ports.FailCommand{TaskID: tk.ID(), WorkerID: "w", LeaseID: &lease, Error: "transient", Retryable: true})
		case 2:
			_, err = e.tasks.Fail(ctx, ports.FailCommand{TaskID: tk.ID(), WorkerID: "w", LeaseID: &lease, Error: "fatal"})
			if err == nil {
				_, err = e.tasks.Retry(ctx, tk.ID())
			}
		}
		require.NoError(t, err)
	}
	page, err := e.tasks.List(ctx, ports.ListQuery{Status: task.StatusPending, Limit: ptr(1)})
	pending := page.Tasks
	require.NoError(t, err)
	require.Len(t, pending, 1)
	_, err = e.tasks.Cancel(ctx, pending[0].ID())
	require.NoError(t, err)
}

// requireTotalsMatchOutbox checks that the queue totals and metric counters
// equal the counts of the outbox's events.
func requireTotalsMatchOutbox(t *testing.T, e *env) {
	t.Helper()
	want := map[string]int64{}
	for _, m := range outboxMessages(t, e.db) {
		for _, ev := range m.events {
			for _, c := range countersOf(ev) {
				want[fmt.Sprintf("%s/%s/%s", c.kind, c.queue, c.reason)]++
			}
		}
	}
	require.Equal(t, want, queryCounts(t, e.db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`))
	wantTasks := map[string]int64{}
	for k, v := range want {
		if strings.HasPrefix(k, "tasks_") {
			wantTasks[k] = v
		}
	}
	require.Equal(t, wantTasks, queryCounts(t, e.db, `SELECT kind || '/' || queue || '/' || reason, count FROM queue_totals`))
}
