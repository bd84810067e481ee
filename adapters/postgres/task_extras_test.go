package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// setQueueSettings saves a queue's settings in its own transaction.
func (f *storeFixture) setQueueSettings(name string, s queue.Settings) {
	f.t.Helper()
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.QueueSettings.Update(ctx, name, func(queue.Settings, time.Time) (queue.Settings, []event.Event, error) {
			return s, nil, nil
		})
		return err
	})
}

// Metadata, the trace, the task's own time limit and the awaited flag are
// stored by the single and the batch insert alike and read back as given.
func TestNewColumnsRoundTrip(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	tr := task.Trace{Parent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", State: "congo=t61rcWkgMzE"}
	p := task.SubmitParams{Queue: "q", Metadata: map[string]string{"tenant": "acme", "note": "é\"\\"}, Trace: tr,
		TimeoutSeconds: ptr(90), Awaited: true}
	one := f.submit(p)
	var many []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		many, _, err = st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			var ts []*task.Task
			var es []event.Event
			for _, sp := range []task.SubmitParams{p, {Queue: "q"}} {
				sp.ID = uuid.Must(uuid.NewV7())
				tk, e, err := task.Submit(sp, now)
				if err != nil {
					return nil, nil, err
				}
				ts, es = append(ts, tk), append(es, e)
			}
			return ts, es, nil
		})
		return err
	})
	for _, tk := range []*task.Task{one, many[0]} {
		for _, v := range []task.Snapshot{tk.Snapshot(), f.get(tk.ID())} {
			require.Equal(t, map[string]string{"tenant": "acme", "note": "é\"\\"}, v.Metadata)
			require.Equal(t, tr, v.Trace)
			require.Equal(t, 90, v.TimeoutSeconds)
			require.True(t, v.Awaited)
			require.Nil(t, v.TimeoutAt)
			require.Nil(t, v.Progress)
		}
	}
	plain := f.get(many[1].ID())
	require.Nil(t, plain.Metadata)
	require.Equal(t, task.Trace{}, plain.Trace)
	require.Zero(t, plain.TimeoutSeconds)
	require.False(t, plain.Awaited)
	var nulls int
	require.NoError(t, f.db.Get(&nulls, `SELECT count(*) FROM tasks WHERE id = $1 AND metadata IS NULL
		AND traceparent IS NULL AND tracestate IS NULL AND timeout_seconds IS NULL AND progress IS NULL`, many[1].ID()))
	require.Equal(t, 1, nulls, "a task without them stores NULLs")
}

// The claim statement sets each attempt's time limit as task.Task.Claim
// does (the task's own, else its queue's default at the claim, else none),
// whatever the claim's shape: one queue, several, a limited (planned) one.
func TestClaimStatementSetsTheTimeLimitAsTheDomain(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.setQueueSettings("with-default", queue.Settings{DefaultTimeoutSeconds: ptr(60)})
	f.setQueueSettings("limited", queue.Settings{MaxRunning: ptr(100), DefaultTimeoutSeconds: ptr(45)})
	defaults := map[string]int{"with-default": 60, "limited": 45, "plain": 0}
	for _, claimQueues := range [][]string{{"plain"}, {"with-default"}, {"plain", "with-default"}, {"limited"}} {
		var before []*task.Task
		for _, q := range claimQueues {
			for _, own := range []*int{nil, ptr(30)} {
				tk := f.submit(task.SubmitParams{Queue: q, TimeoutSeconds: own})
				before = append(before, tk)
			}
		}
		f.run(func(ctx context.Context, st ports.Stores) error {
			// Stale progress of an earlier attempt: the claim clears it.
			_, err := postgres.TxOf(st).ExecContext(ctx, `UPDATE tasks SET progress = '{"percent": 5}' WHERE id = $1`, before[0].ID())
			return err
		})
		for i, pre := range before {
			before[i] = task.Restore(f.get(pre.ID()))
		}
		require.NotNil(t, before[0].Snapshot().Progress)
		claimed := f.claim(ports.ClaimParams{Queues: claimQueues, Limit: 100, LeaseSeconds: 120})
		require.Len(t, claimed, len(before), claimQueues)
		got := map[uuid.UUID]*task.Task{}
		for _, c := range claimed {
			got[c.ID()] = c
		}
		for _, pre := range before {
			c := got[pre.ID()].Snapshot()
			_, err := pre.Claim(task.ClaimParams{WorkerID: "w1", LeaseID: c.LeaseID, LeaseSeconds: 120,
				DefaultTimeoutSeconds: defaults[pre.Queue()]}, *c.ClaimedAt)
			require.NoError(t, err)
			require.Equal(t, pre.Snapshot(), c, "queues %v, own limit %d", claimQueues, pre.Snapshot().TimeoutSeconds)
			require.Nil(t, c.Progress)
			require.Equal(t, c, f.get(c.ID), "as stored")
		}
	}
}

// The timeout reaper's query selects exactly the attempts TimedOut
// accepts, earliest limit first, and TimeOut's decision is saved: the
// attempt ends timed_out with the timeout's error.
func TestTimedOutTasksAreSelectedAndSavedAsTheDomainSays(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	var ids []uuid.UUID
	for _, own := range []*int{nil, ptr(30), ptr(60)} {
		ids = append(ids, f.submit(task.SubmitParams{Queue: "q", TimeoutSeconds: own, MaxAttempts: ptr(1)}).ID())
	}
	f.claim(ports.ClaimParams{Queues: []string{"q"}})
	// The first limit (30 s) is up, the second (60 s) not.
	f.exec(`UPDATE tasks SET claimed_at = claimed_at - interval '40 seconds', timeout_at = timeout_at - interval '40 seconds' WHERE queue = 'q'`)
	var changed []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		changed, err = st.Reaper.UpdateTimedOutTasks(ctx, 10, func(tk *task.Task, now time.Time) ([]event.Event, error) {
			require.True(t, tk.TimedOut(now))
			e, err := tk.TimeOut(backoff.Policy{Base: time.Second, Cap: time.Minute}, nil, now)
			return []event.Event{e}, err
		})
		return err
	})
	require.Equal(t, []uuid.UUID{ids[1]}, taskIDs(changed))
	v := f.get(ids[1])
	require.Equal(t, task.StatusDead, v.Status)
	require.Equal(t, task.DeadExhausted, v.DeadReason)
	require.Equal(t, "execution timeout after 30s", v.LastError)
	var attempts []task.Attempt
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		attempts, err = st.Tasks.Attempts(ctx, ids[1])
		return err
	})
	require.Len(t, attempts, 1)
	require.Equal(t, task.OutcomeTimedOut, attempts[0].Outcome)
	require.Equal(t, "execution timeout after 30s", attempts[0].Error)
	require.Equal(t, task.StatusRunning, f.get(ids[0]).Status)
	require.Equal(t, task.StatusRunning, f.get(ids[2]).Status)
	require.Nil(t, f.get(ids[1]).TimeoutAt, "timeout_at means nothing once the task left RUNNING")
}

// The reaper's query walks the partial index of running limits.
func TestTimedOutTasksQueryUsesItsIndex(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.exec(`INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at, worker_id, lease_id, timeout_at)
		SELECT gen_random_uuid(), 'q', 'RUNNING', 3, now(), now(), now(), 'w', gen_random_uuid(),
			CASE WHEN i % 10 = 0 THEN now() + interval '1 hour' END
		FROM generate_series(1, 20000) AS i`)
	f.exec(`ANALYZE tasks`)
	plan := explain(t, f, postgres.TimedOutTasksSQL, 100)
	require.Contains(t, plan, "tasks_running_timeout", plan)
}

// explain returns the plan of query with args, as text.
func explain(t *testing.T, f *storeFixture, query string, args ...any) string {
	t.Helper()
	var lines []string
	require.NoError(t, f.db.Select(&lines, `EXPLAIN `+query, args...))
	out := ""
	for _, l := range lines {
		out += l + "\n"
	}
	return out
}

// Progress is written only by the statement of its own, read back with
// its event time, and announced once per second (UpdateProgress).
func TestUpdateProgressWritesOnlyProgress(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	id := f.submit(task.SubmitParams{Queue: "q"}).ID()
	c := f.claim(ports.ClaimParams{Queues: []string{"q"}})[0].Snapshot()
	report := func(pct float64) ports.TaskResult {
		var out []ports.TaskResult
		f.run(func(ctx context.Context, st ports.Stores) error {
			var err error
			out, err = st.Tasks.UpdateProgress(ctx, []uuid.UUID{id}, func(_ int, tk *task.Task, now time.Time) ([]event.Event, error) {
				e, ok, err := tk.ReportProgress(task.ProgressParams{WorkerID: c.WorkerID, LeaseID: c.LeaseID, Percent: pct,
					Message: "step", Details: json.RawMessage(`{"n": 1}`)}, now)
				if !ok {
					return nil, err
				}
				return []event.Event{e}, err
			})
			return err
		})
		return out[0]
	}
	before := f.get(id)
	r := report(10)
	require.NoError(t, r.Err)
	after := f.get(id)
	require.Equal(t, 10.0, after.Progress.Percent)
	require.Equal(t, "step", after.Progress.Message)
	require.JSONEq(t, `{"n": 1}`, string(after.Progress.Details))
	require.False(t, after.Progress.EventAt.IsZero())
	require.Equal(t, before.UpdatedAt, after.UpdatedAt, "not a transition")
	require.Equal(t, before.LeaseExpiresAt, after.LeaseExpiresAt)
	require.NoError(t, report(20).Err)
	msgs := f.outbox()
	var progress []event.Event
	for _, m := range msgs {
		for _, e := range m.Events {
			if e.Type == event.TaskProgress {
				progress = append(progress, e)
			}
		}
	}
	require.Len(t, progress, 1, "the second report came within the second")
	require.Equal(t, 20.0, f.get(id).Progress.Percent, "but it is stored")
	var results []ports.TaskResult
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		results, err = st.Tasks.UpdateProgress(ctx, []uuid.UUID{uuid.Must(uuid.NewV7())}, func(int, *task.Task, time.Time) ([]event.Event, error) {
			return nil, fmt.Errorf("not called")
		})
		return err
	})
	require.ErrorIs(t, results[0].Err, task.ErrNotFound)
}

// MarkAwaited sets the flag of an unfinished task once, and leaves a
// finished one alone; the finishing save of an awaited task announces its
// end with its commit, and the notifier wakes the producers waiting for
// it, not those waiting for a task nobody marked (whose end is announced to
// no one: a task nobody waits for pays nothing).
func TestAwaitedTasksAnnounceTheirEnd(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	db := open(t, url, postgres.DefaultConnConfig())
	f := &storeFixture{t: t, db: db, tx: postgres.NewTxRunner(db)}
	n := postgres.NewNotifier(url, postgres.DefaultConnConfig(), zap.NewNop())
	require.NoError(t, n.Start(t.Context()))
	t.Cleanup(func() { _ = n.Stop(t.Context()) })

	awaited := f.submit(task.SubmitParams{Queue: "q"}).ID()
	plain := f.submit(task.SubmitParams{Queue: "q"}).ID()
	waitAwaited, waitPlain := n.WaitFinished(awaited), n.WaitFinished(plain)
	defer waitAwaited.Close()
	defer waitPlain.Close()
	require.Equal(t, int64(2), n.Stats().Awaiting)
	f.run(func(ctx context.Context, st ports.Stores) error {
		tk, err := st.Tasks.MarkAwaited(ctx, awaited)
		require.True(t, tk.Awaited())
		return err
	})
	require.True(t, f.get(awaited).Awaited)
	require.False(t, f.get(plain).Awaited)
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.MarkAwaited(ctx, uuid.Must(uuid.NewV7()))
		require.ErrorIs(t, err, task.ErrNotFound)
		return nil
	})

	for _, id := range []uuid.UUID{plain, awaited} {
		f.run(func(ctx context.Context, st ports.Stores) error {
			_, err := st.Tasks.Update(ctx, id, func(tk *task.Task, now time.Time) ([]event.Event, error) {
				e, err := tk.Cancel(now)
				return []event.Event{e}, err
			})
			return err
		})
	}
	select {
	case <-waitAwaited.C():
	case <-time.After(10 * time.Second):
		t.Fatal("the awaited task's end was not announced")
	}
	select {
	case <-waitPlain.C():
		t.Fatal("the end of a task nobody marked was announced")
	case <-time.After(300 * time.Millisecond):
	}
	require.Equal(t, int64(1), n.Stats().Finished)

	// A finished task is not marked (there is nothing left to announce).
	f.run(func(ctx context.Context, st ports.Stores) error {
		tk, err := st.Tasks.MarkAwaited(ctx, plain)
		require.Equal(t, task.StatusDead, tk.Status())
		require.False(t, tk.Awaited())
		return err
	})
	var statuses map[uuid.UUID]task.Status
	missing := uuid.Must(uuid.NewV7())
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		statuses, err = st.Tasks.Statuses(ctx, []uuid.UUID{awaited, plain, missing})
		return err
	})
	require.Equal(t, map[uuid.UUID]task.Status{awaited: task.StatusDead, plain: task.StatusDead}, statuses)

	// Stopping answers the producers still waiting.
	n.CloseWaits()
	_, open := <-waitPlain.C()
	require.False(t, open)
	require.Zero(t, n.Stats().Awaiting)
}

func TestFinishedPayloadsStayUnderTheLimit(t *testing.T) {
	t.Parallel()
	ids := make([]uuid.UUID, 450)
	for i := range ids {
		ids[i] = uuid.New()
	}
	payloads := postgres.FinishedPayloads(ids)
	require.Len(t, payloads, 3)
	var back []uuid.UUID
	for _, p := range payloads {
		require.Less(t, len(p), 8000)
		back = append(back, postgres.ParseFinished(p)...)
	}
	require.Equal(t, ids, back)
	require.Empty(t, postgres.ParseFinished("nope,"))
}

// Listing by metadata walks tasks_metadata among 100,000 tasks (most of
// them with metadata, of 10,000 tenants; some without), and finds exactly
// the tasks whose metadata holds every pair asked. (With 1,000 tenants, an
// ANALYZE sample whose histogram held the pair asked now and then made the
// planner expect ~800 matches and walk the primary key backwards instead,
// failing this test about one run in five.)
func TestMetadataFilterUsesItsIndex(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.exec(`INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at, metadata)
		SELECT gen_random_uuid(), 'q' || (i % 7), 'PENDING', 3, now(), now(), now(),
			CASE WHEN i % 10 <> 0 THEN jsonb_build_object('tenant', 't' || (i % 10000), 'shard', (i % 3)::text) END
		FROM generate_series(1, 100000) AS i`)
	f.exec(`ANALYZE tasks`)
	filter := task.Filter{Metadata: map[string]string{"tenant": "t7", "shard": "1"}}
	q, args := postgres.SearchSQL(ports.BulkBatchParams{Filter: filter, Limit: 100}, 8<<20)
	plan := explain(t, f, q, args...)
	require.Contains(t, plan, "tasks_metadata", plan)

	var want int
	require.NoError(t, f.db.Get(&want, `SELECT count(*) FROM tasks WHERE metadata->>'tenant' = 't7' AND metadata->>'shard' = '1'`))
	require.Positive(t, want)
	var got []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		got, _, err = st.Bulk.Search(ctx, ports.BulkBatchParams{Filter: filter, Limit: 1000}, 0)
		return err
	})
	require.Len(t, got, want)
	for _, tk := range got {
		require.True(t, filter.Matches(tk))
	}
}
