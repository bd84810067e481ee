package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// batchAt is a batch of messages at positions, each holding events.
func batchAt(t *testing.T, events []event.Event, positions ...Position) *Batch {
	t.Helper()
	payload, err := json.Marshal(envelope.Payload{Events: events})
	require.NoError(t, err)
	b := newBatch()
	for _, p := range positions {
		b.add(p, payload, events, nil)
	}
	return b
}

func TestApplySkipsMessagesAtOrBeforeEachProjectionsPosition(t *testing.T) {
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
	p := NewProjector(DefaultConfig(), nil)
	apply := func(positions ...Position) {
		tx, err := db.BeginTx(ctx, nil)
		require.NoError(t, err)
		require.NoError(t, p.Apply(ctx, tx, batchAt(t, events, positions...)))
		require.NoError(t, tx.Commit())
	}
	submitted := func() (stats, metrics int64) {
		require.NoError(t, db.QueryRow(`SELECT
			(SELECT coalesce(sum(count), 0) FROM queue_totals WHERE kind = 'tasks_submitted'),
			(SELECT coalesce(sum(value), 0) FROM metric_counters WHERE kind = 'tasks_submitted')`).Scan(&stats, &metrics))
		return stats, metrics
	}
	m := func(tx uint64, offset int64) Position { return Position{TransactionID: tx, Offset: offset} }

	apply(m(10, 5))
	apply(m(10, 5))            // the same batch again
	apply(m(9, 100), m(10, 4)) // older ones
	s, mt := submitted()
	require.Equal(t, []int64{1, 1}, []int64{s, mt}, "applied once")
	apply(m(10, 5), m(11, 1)) // a redelivered batch that grew: only the new message
	s, mt = submitted()
	require.Equal(t, []int64{2, 2}, []int64{s, mt})

	require.Equal(t, map[string]int64{"q/DEAD": 2}, projectedCounts(t, db))
	totals := queryCounts(t, db, `SELECT kind || '/' || reason, count FROM queue_totals WHERE queue = 'q'`)
	require.Equal(t, map[string]int64{
		"tasks_submitted/": 2, "tasks_claimed/": 2, "tasks_failed/": 2, "tasks_dead_lettered/exhausted": 2,
	}, totals)
	buckets := queryCounts(t, db, `SELECT kind || '@' || to_char(minute AT TIME ZONE 'UTC', 'HH24:MI'), count FROM queue_rate_buckets`)
	require.Equal(t, map[string]int64{"enqueued@03:04": 2, "claimed@03:04": 2, "dead_lettered@03:04": 2,
		"queue_wait@03:04": 2, "execution@03:04": 2}, buckets)
	seconds := queryFloats(t, db, `SELECT kind, seconds FROM queue_rate_buckets WHERE kind IN ('queue_wait', 'execution')`)
	require.Equal(t, map[string]float64{"queue_wait": 4, "execution": 2e6}, seconds, "the buckets sum the durations the histograms observe")
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
	sums := queryFloats(t, db, `SELECT kind, sum FROM metric_histogram_sums`)
	require.Equal(t, map[string]float64{"task_queue_wait": 4, "task_execution_duration": 2e6}, sums)

	// The projections' positions may differ (the two consumer groups before
	// migration 0006 did): each applies what is after its own.
	_, err := db.Exec(`UPDATE projector_positions SET transaction_id = '12', "offset" = 0 WHERE projection = $1`, QueueStatsProjection)
	require.NoError(t, err)
	apply(m(11, 9), m(12, 1))
	s, mt = submitted()
	require.Equal(t, []int64{3, 4}, []int64{s, mt}, "queue_stats applied 12/1 only, metrics both")
	var positions []string
	require.NoError(t, db.Select(&positions, `SELECT projection || '@' || transaction_id::text || '/' || "offset" FROM projector_positions ORDER BY 1`))
	require.Equal(t, []string{"metrics@12/1", "queue_stats@12/1"}, positions)
}

func queryFloats(t *testing.T, db interface {
	Query(string, ...any) (*sql.Rows, error)
}, query string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	rows, err := db.Query(query)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var k string
		var v float64
		require.NoError(t, rows.Scan(&k, &v))
		out[k] = v
	}
	require.NoError(t, rows.Err())
	return out
}

// projectionState renders every projected table and the positions, to
// compare the state before two attempts.
const projectionState = `
SELECT (SELECT coalesce(string_agg(queue || '/' || status || '=' || count, ',' ORDER BY queue, status), '') FROM queue_status_counts)
	|| ';' || (SELECT coalesce(sum(count), 0) FROM queue_totals)
	|| ';' || (SELECT coalesce(sum(count), 0) || '/' || coalesce(sum(seconds), 0) FROM queue_rate_buckets)
	|| ';' || (SELECT coalesce(sum(count), 0) FROM worker_status_counts)
	|| ';' || (SELECT coalesce(sum(value), 0) FROM metric_counters)
	|| ';' || (SELECT coalesce(sum(count), 0) FROM metric_histogram_buckets)
	|| ';' || (SELECT coalesce(sum(sum), 0) FROM metric_histogram_sums)
	|| ';' || (SELECT count(*) FROM outbox_poison)
	|| ';' || (SELECT string_agg(projection || '@' || transaction_id::text || '/' || "offset", ',' ORDER BY projection) FROM projector_positions)`

// An attempt that fails, even with a failed SQL statement that aborts the
// subscriber's transaction, is rolled back to its savepoint: the attempt
// that follows (the batch delivered again after an error no data can cause,
// or the first half of the batch after a data error) finds the tables and
// the positions as they were before the failed one, and in the end every
// message is applied once.
func TestFailedAttemptLeavesNoWrites(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, failure string
	}{
		{"a failure no data can cause: the batch comes again", `DO $$ BEGIN RAISE EXCEPTION 'boom'; END $$`},
		{"a data error: the batch is split", `SELECT 1 / 0`},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			ctx := ctxT(t)
			workload(t, e, ctx)
			msgs := outboxMessages(t, e.db)
			target := msgs[len(msgs)/2].pos // some message in the middle of a batch

			r, err := NewRouter(e.db.DB, fastConfig(), zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
			require.NoError(t, err)
			var (
				mu          sync.Mutex
				failedAt    string // the state before the failed attempt, until the next attempt
				comparisons int
				failures    int
			)
			contains := func(msgs []Message) bool {
				for _, m := range msgs {
					if m.Position == target {
						return true
					}
				}
				return false
			}
			var before string
			r.projector.hooks.before = func(ctx context.Context, tx *sql.Tx, msgs []Message) error {
				if err := tx.QueryRowContext(ctx, projectionState).Scan(&before); err != nil {
					return err
				}
				mu.Lock()
				defer mu.Unlock()
				if failedAt != "" {
					require.Equal(t, failedAt, before, "the failed attempt left no writes")
					failedAt = ""
					comparisons++
				}
				return nil
			}
			r.projector.hooks.after = func(ctx context.Context, tx *sql.Tx, msgs []Message) error {
				mu.Lock()
				defer mu.Unlock()
				if !contains(msgs) || failures > 0 {
					return nil
				}
				failures++
				failedAt = before
				_, err := tx.ExecContext(ctx, c.failure) // aborts the transaction
				require.Error(t, err)
				return err
			}
			require.NoError(t, r.Start(ctx))
			t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
			waitCaughtUp(t, e.db)

			mu.Lock()
			require.Equal(t, 1, failures)
			require.Equal(t, 1, comparisons, "an attempt followed the failed one")
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
			var poisoned int
			require.NoError(t, e.db.Get(&poisoned, `SELECT count(*) FROM outbox_poison`))
			require.Zero(t, poisoned, "a message that applies on a later attempt is not set aside")
		})
	}
}

// A batch holds at most BatchSize messages and, beyond its first message,
// at most BatchBytes of payload.
func TestBatchesAreBoundedByMessagesAndBytes(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		bytes     int
		wantSizes func(t *testing.T, sizes []int)
	}{
		{"by messages", 1 << 20, func(t *testing.T, sizes []int) {
			require.Equal(t, 7, slicesMax(sizes), "%v", sizes)
		}},
		{"by bytes", 1, func(t *testing.T, sizes []int) {
			require.Equal(t, 1, slicesMax(sizes), "%v", sizes)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t)
			ctx := ctxT(t)
			submitN(t, e, ctx, 20)
			cfg := fastConfig()
			cfg.BatchBytes = c.bytes
			r, err := NewRouter(e.db.DB, cfg, nil)
			require.NoError(t, err)
			var (
				mu    sync.Mutex
				sizes []int
			)
			r.projector.hooks.before = func(_ context.Context, _ *sql.Tx, msgs []Message) error {
				mu.Lock()
				defer mu.Unlock()
				sizes = append(sizes, len(msgs))
				return nil
			}
			require.NoError(t, r.Start(ctx))
			t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
			waitCaughtUp(t, e.db)
			mu.Lock()
			defer mu.Unlock()
			total := 0
			for _, n := range sizes {
				total += n
			}
			require.Equal(t, 20, total, "every message once: %v", sizes)
			c.wantSizes(t, sizes)
		})
	}
}

func slicesMax(v []int) int {
	m := 0
	for _, n := range v {
		m = max(m, n)
	}
	return m
}

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

// watermill-sql commits a batch's transaction when the batch's ack deadline
// passes, whether or not its handler is done, and delivers the batch again.
// Here the first attempt's statement has run (tables and positions written,
// in its savepoint) when the handler overstays the deadline: the commit
// keeps those writes without the group's offset, and the redelivered batch
// must apply nothing twice.
func TestBatchCommittedAtItsAckDeadlineIsNotAppliedTwice(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := ctxT(t)
	workload(t, e, ctx)
	cfg := fastConfig()
	cfg.BatchSize = 1000 // the whole workload in one batch
	cfg.AckDeadline = 300 * time.Millisecond
	r, err := NewRouter(e.db.DB, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel+1)))
	require.NoError(t, err)
	var once sync.Once
	overstayed := make(chan struct{})
	r.projector.hooks.after = func(ctx context.Context, _ *sql.Tx, _ []Message) error {
		stay := false
		once.Do(func() { stay = true })
		if stay {
			<-ctx.Done() // the ack deadline: watermill-sql commits meanwhile
			time.Sleep(200 * time.Millisecond)
			close(overstayed)
		}
		return nil
	}
	require.NoError(t, r.Start(ctx))
	t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
	select {
	case <-overstayed:
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never overstayed")
	}
	waitCaughtUp(t, e.db)
	require.Equal(t, truthCounts(t, e.db), projectedCounts(t, e.db))
	requireTotalsMatchOutbox(t, e)
}
