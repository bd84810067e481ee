package postgres_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

func TestTaskStoreCreateStoresEveryField(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	deadline := runAt.Add(time.Hour)

	created := f.submit(task.SubmitParams{
		Queue: "emails", Payload: json.RawMessage(`{"to": "a@b.c"}`), Priority: 7, MaxAttempts: ptr(5),
		Tags: []string{"gpu", "eu"}, Deadline: &deadline, RunAt: &runAt, IdempotencyKey: "k1",
	})

	got := f.get(created.ID())
	require.Equal(t, created.Snapshot().ID, got.ID)
	require.Equal(t, "emails", got.Queue)
	require.Equal(t, task.StatusPending, got.Status)
	require.Equal(t, 7, got.Priority)
	require.JSONEq(t, `{"to": "a@b.c"}`, string(got.Payload))
	require.Equal(t, []string{"gpu", "eu"}, got.Tags)
	require.Zero(t, got.Attempts)
	require.Equal(t, 5, got.MaxAttempts)
	require.True(t, got.RunAt.Equal(runAt))
	require.True(t, got.Deadline.Equal(deadline))
	require.Equal(t, "k1", got.IdempotencyKey)
	require.True(t, got.CreatedAt.Equal(got.UpdatedAt))
	require.Nil(t, got.ClaimedAt)
	require.Nil(t, got.FinishedAt)
	require.Empty(t, got.WorkerID)
	require.Equal(t, uuid.Nil, got.LeaseID)

	var dbNow time.Time
	require.NoError(t, f.db.Get(&dbNow, `SELECT now()`))
	require.False(t, got.CreatedAt.After(dbNow), "created_at comes from the database clock")
}

func TestTaskStoreCreateWithKnownIdempotencyKeyReturnsTheExistingTask(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	first := f.submit(task.SubmitParams{Queue: "q", IdempotencyKey: "k", Payload: json.RawMessage(`1`)})

	again, created := f.create(task.SubmitParams{Queue: "q", IdempotencyKey: "k", Payload: json.RawMessage(`2`)})
	require.False(t, created)
	require.Equal(t, first.ID(), again.ID())
	require.JSONEq(t, `1`, string(again.Snapshot().Payload), "the existing task is returned unchanged")

	other, created := f.create(task.SubmitParams{Queue: "other", IdempotencyKey: "k"})
	require.True(t, created, "keys are per queue")
	require.NotEqual(t, first.ID(), other.ID())

	var n int
	require.NoError(t, f.db.Get(&n, `SELECT count(*) FROM tasks`))
	require.Equal(t, 2, n)
	require.Len(t, f.outbox(), 2, "the duplicate records no event")
}

func TestTaskStoreUpdateSavesTheDecidedState(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	created := f.submit(task.SubmitParams{Queue: "q"})
	claimed := f.claim(ports.ClaimParams{WorkerID: "w1"})
	require.Len(t, claimed, 1)
	lease := claimed[0].Snapshot().LeaseID
	policy := backoff.Policy{Base: time.Second, Cap: time.Minute}

	var updated *task.Task
	var decidedAt time.Time
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		updated, err = st.Tasks.Update(ctx, created.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
			decidedAt = now
			e, err := t.Fail(task.FailParams{WorkerID: "w1", LeaseID: lease, Error: "disk full", Retryable: true}, policy, now)
			return []event.Event{e}, err
		})
		return err
	})

	got := f.get(created.ID())
	require.Equal(t, updated.Snapshot(), got, "Update returns what it saved")
	require.Equal(t, task.StatusPending, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "disk full", got.LastError)
	require.WithinDuration(t, decidedAt.Add(2*time.Second), got.RunAt, 0, "run_at = now + delay(1)")
	require.True(t, got.UpdatedAt.Equal(decidedAt))

	var row struct {
		WorkerID *string `db:"worker_id"`
		LeaseID  *string `db:"lease_id"`
	}
	require.NoError(t, f.db.Get(&row, `SELECT worker_id, lease_id FROM tasks WHERE id = $1`, created.ID()))
	require.Nil(t, row.WorkerID, "a requeued task has no holder")
	require.Nil(t, row.LeaseID)

	msgs := f.outbox()
	require.Equal(t, []event.Type{event.TaskFailed}, eventTypes(msgs[len(msgs)-1].Events))
}

func TestTaskStoreUpdateUnknownTaskIsNotFound(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, uuid.New(), func(*task.Task, time.Time) ([]event.Event, error) {
			require.FailNow(t, "fn must not run for a missing task")
			return nil, nil
		})
		return err
	})
	require.ErrorIs(t, err, task.ErrNotFound)
}

func TestTaskStoreUpdateErrorSavesNothing(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	created := f.submit(task.SubmitParams{Queue: "q"})
	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, created.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Retry(now) // a PENDING task cannot be retried
			return []event.Event{e}, err
		})
		return err
	})
	var transition *task.TransitionError
	require.ErrorAs(t, err, &transition)
	require.Equal(t, task.StatusPending, transition.From)
	require.Equal(t, created.Snapshot(), f.get(created.ID()))
	require.Len(t, f.outbox(), 1, "only the submission's event")
}

// Update holds the row lock from load to commit: a second Update of the same
// task waits for it (visibly, as a lock wait in PostgreSQL) and then decides
// on the committed state.
func TestTaskStoreUpdateHoldsTheRowLockUntilCommit(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	created := f.submit(task.SubmitParams{Queue: "q"})
	claimed := f.claim(ports.ClaimParams{WorkerID: "w1"})
	require.Len(t, claimed, 1)
	lease := claimed[0].Snapshot().LeaseID
	complete := task.CompleteParams{WorkerID: "w1", LeaseID: lease}
	update := func(decide func(t *task.Task)) error {
		return f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
			_, err := st.Tasks.Update(ctx, created.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
				decide(t)
				e, err := t.Complete(complete, now)
				return []event.Event{e}, err
			})
			return err
		})
	}

	inFirst, release := make(chan struct{}), make(chan struct{})
	var releaseOnce sync.Once
	t.Cleanup(func() { releaseOnce.Do(func() { close(release) }) })
	firstDone := make(chan error, 1)
	go func() {
		firstDone <- update(func(*task.Task) {
			close(inFirst)
			<-release
		})
	}()
	<-inFirst

	secondSaw := make(chan task.Status, 1)
	secondDone := make(chan error, 1)
	go func() { secondDone <- update(func(t *task.Task) { secondSaw <- t.Status() }) }()

	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case status := <-secondSaw:
			require.FailNow(t, "the second Update loaded the task while the first held it", "it saw %s", status)
		default:
		}
		var waiting int
		require.NoError(t, f.db.Get(&waiting, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`))
		if waiting == 1 {
			break
		}
		require.False(t, time.Now().After(deadline), "the second Update never waited for the lock")
		time.Sleep(5 * time.Millisecond)
	}

	releaseOnce.Do(func() { close(release) })
	require.NoError(t, <-firstDone)
	require.Equal(t, task.StatusDone, <-secondSaw, "the waiter decides on the committed state")
	var transition *task.TransitionError
	require.ErrorAs(t, <-secondDone, &transition)
}

// Twenty holders race to complete the same task: Update locks the row, so
// exactly one sees it RUNNING and the others see it DONE.
func TestTaskStoreUpdateLocksConcurrentCompletionsExactlyOneWins(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	created := f.submit(task.SubmitParams{Queue: "q"})
	claimed := f.claim(ports.ClaimParams{WorkerID: "w1"})
	require.Len(t, claimed, 1)
	lease := claimed[0].Snapshot().LeaseID

	const racers = 20
	start := make(chan struct{})
	errs := make(chan error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs <- f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
				_, err := st.Tasks.Update(ctx, created.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
					e, err := t.Complete(task.CompleteParams{WorkerID: "w1", LeaseID: lease, Result: json.RawMessage(`{"by":` + string(rune('0'+i%10)) + `}`)}, now)
					return []event.Event{e}, err
				})
				return err
			})
		}()
	}
	close(start)
	wg.Wait()
	close(errs)

	wins := 0
	for err := range errs {
		if err == nil {
			wins++
			continue
		}
		var transition *task.TransitionError
		require.True(t, errors.As(err, &transition), "a loser sees the winner's result: %v", err)
		require.Equal(t, task.StatusDone, transition.From)
	}
	require.Equal(t, 1, wins)
	require.Equal(t, task.StatusDone, f.get(created.ID()).Status)

	completed := 0
	for _, m := range f.outbox() {
		for _, e := range m.Events {
			if e.Type == event.TaskCompleted {
				completed++
			}
		}
	}
	require.Equal(t, 1, completed)
}

func TestTaskStoreClaimAssignsRunningWithFreshLeases(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for range 3 {
		f.submit(task.SubmitParams{Queue: "q"})
	}
	claimed := f.claim(ports.ClaimParams{WorkerID: "w7", Limit: 3})
	require.Len(t, claimed, 3)

	leases := map[uuid.UUID]bool{}
	for _, c := range claimed {
		got := f.get(c.ID())
		require.Equal(t, c.Snapshot(), got, "Claim returns the saved rows")
		require.Equal(t, task.StatusRunning, got.Status)
		require.Equal(t, 1, got.Attempts)
		require.Equal(t, "w7", got.WorkerID)
		require.NotEqual(t, uuid.Nil, got.LeaseID)
		require.NotNil(t, got.ClaimedAt)
		require.True(t, got.UpdatedAt.Equal(*got.ClaimedAt))
		leases[got.LeaseID] = true
	}
	require.Len(t, leases, 3, "every claim gets its own lease")

	msgs := f.outbox()
	last := msgs[len(msgs)-1].Events
	require.Equal(t, []event.Type{event.TaskClaimed, event.TaskClaimed, event.TaskClaimed}, eventTypes(last),
		"one message holds the claim's events")
	for i, e := range last {
		require.Equal(t, claimed[i].ID().String(), e.TaskID)
		require.Equal(t, "w7", e.WorkerID)
		require.Equal(t, 1, e.Attempt)
	}

	require.Empty(t, f.claim(ports.ClaimParams{}), "RUNNING tasks are not claimable")
}

func TestTaskStoreClaimOrdersByPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	low1 := f.submit(task.SubmitParams{Queue: "q", Priority: 0})
	high1 := f.submit(task.SubmitParams{Queue: "q", Priority: 5})
	low2 := f.submit(task.SubmitParams{Queue: "q", Priority: 0})
	neg := f.submit(task.SubmitParams{Queue: "q", Priority: -3})
	high2 := f.submit(task.SubmitParams{Queue: "q", Priority: 5})
	want := []uuid.UUID{high1.ID(), high2.ID(), low1.ID(), low2.ID(), neg.ID()}

	var got []uuid.UUID
	for range want {
		one := f.claim(ports.ClaimParams{Limit: 1})
		require.Len(t, one, 1)
		got = append(got, one[0].ID())
	}
	require.Equal(t, want, got, "one at a time: priority DESC, then submission order")
}

func TestTaskStoreClaimReturnsABatchInClaimOrder(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	a := f.submit(task.SubmitParams{Queue: "a", Priority: 1})
	b := f.submit(task.SubmitParams{Queue: "b", Priority: 9})
	c := f.submit(task.SubmitParams{Queue: "a", Priority: 9})
	d := f.submit(task.SubmitParams{Queue: "b", Priority: 1})

	got := f.claim(ports.ClaimParams{Queues: []string{"a", "b"}, Limit: 3})
	require.Equal(t, []uuid.UUID{b.ID(), c.ID(), a.ID()}, taskIDs(got), "across queues too")
	require.Equal(t, []uuid.UUID{d.ID()}, taskIDs(f.claim(ports.ClaimParams{})))
}

func TestTaskStoreClaimSkipsTasksNotYetDue(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	later := time.Now().Add(time.Hour)
	f.submit(task.SubmitParams{Queue: "q", RunAt: &later, Priority: 10})
	due := f.submit(task.SubmitParams{Queue: "q"})
	past := time.Now().Add(-time.Hour)
	overdue := f.submit(task.SubmitParams{Queue: "q", RunAt: &past})

	require.ElementsMatch(t, []uuid.UUID{due.ID(), overdue.ID()}, taskIDs(f.claim(ports.ClaimParams{})))
	require.Empty(t, f.claim(ports.ClaimParams{}))
}

func TestTaskStoreClaimSkipsTasksPastTheirDeadline(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	expired := f.submit(task.SubmitParams{Queue: "q", Priority: 10})
	f.exec(`UPDATE tasks SET deadline = now() - interval '1 second' WHERE id = $1`, expired.ID())
	future := time.Now().Add(time.Hour)
	alive := f.submit(task.SubmitParams{Queue: "q", Deadline: &future})

	require.Equal(t, []uuid.UUID{alive.ID()}, taskIDs(f.claim(ports.ClaimParams{})))
	require.Equal(t, task.StatusPending, f.get(expired.ID()).Status, "expiry is the deadline reaper's job")
}

func TestTaskStoreClaimRequiresTaskTagsToBeASubsetOfTheWorkers(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	untagged := f.submit(task.SubmitParams{Queue: "q"})
	gpu := f.submit(task.SubmitParams{Queue: "q", Tags: []string{"gpu"}})
	gpuLinux := f.submit(task.SubmitParams{Queue: "q", Tags: []string{"gpu", "linux"}})
	arm := f.submit(task.SubmitParams{Queue: "q", Tags: []string{"arm"}})

	require.Equal(t, []uuid.UUID{untagged.ID()}, taskIDs(f.claim(ports.ClaimParams{WorkerTags: nil})),
		"a worker without tags gets only untagged tasks")
	require.Equal(t, []uuid.UUID{gpu.ID()}, taskIDs(f.claim(ports.ClaimParams{WorkerTags: []string{"gpu"}})),
		"a task needs every one of its tags")
	require.Equal(t, []uuid.UUID{gpuLinux.ID()}, taskIDs(f.claim(ports.ClaimParams{WorkerTags: []string{"x86", "linux", "gpu"}})),
		"the worker may have more tags than the task")
	require.Empty(t, f.claim(ports.ClaimParams{WorkerTags: []string{"gpu", "linux"}}))
	require.Equal(t, task.StatusPending, f.get(arm.ID()).Status)
}

func TestTaskStoreClaimFiltersQueues(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	byQueue := map[string][]uuid.UUID{}
	for _, q := range []string{"a", "b", "c", "a", "b", "c"} {
		byQueue[q] = append(byQueue[q], f.submit(task.SubmitParams{Queue: q}).ID())
	}

	require.Equal(t, byQueue["a"], taskIDs(f.claim(ports.ClaimParams{Queues: []string{"a"}})), "one queue")
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"a", "nothing-here"}}))
	require.Equal(t, []uuid.UUID{byQueue["b"][0], byQueue["c"][0]},
		taskIDs(f.claim(ports.ClaimParams{Queues: []string{"b", "c"}, Limit: 2})), "several queues, FIFO across them")

	f.submit(task.SubmitParams{Queue: "d"})
	rest := f.claim(ports.ClaimParams{Queues: nil})
	require.Len(t, rest, 3, "no queues means every queue")
	queues := map[string]bool{}
	for _, r := range rest {
		queues[r.Queue()] = true
	}
	require.Equal(t, map[string]bool{"b": true, "c": true, "d": true}, queues)
}

func TestTaskStoreClaimHonoursTheLimit(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for i := range 10 {
		f.submit(task.SubmitParams{Queue: []string{"a", "b"}[i%2]})
	}
	require.Len(t, f.claim(ports.ClaimParams{Limit: 3}), 3, "any queue")
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"a", "b"}, Limit: 4}), 4, "listed queues")
	require.Len(t, f.claim(ports.ClaimParams{Limit: 100}), 3)
	var running int
	require.NoError(t, f.db.Get(&running, `SELECT count(*) FROM tasks WHERE status = 'RUNNING'`))
	require.Equal(t, 10, running)
}

// ClaimedUnder's SQL and task.Task.ClaimedUnder agree: the store returns
// exactly the tasks the domain rule picks, among tasks claimed under several
// workers and request ids, some of which left RUNNING (their request id goes
// with the lease) or were claimed again without one.
func TestTaskStoreClaimedUnderMatchesTheDomainRule(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, q := range []string{"a", "b", "c", "d", "e"} {
		for range 2 {
			f.submit(task.SubmitParams{Queue: q, Payload: json.RawMessage(`{"q":"` + q + `"}`)})
		}
	}
	f.claim(ports.ClaimParams{WorkerID: "w1", Queues: []string{"a"}, RequestID: "r1"})
	f.claim(ports.ClaimParams{WorkerID: "w1", Queues: []string{"b"}, RequestID: "r2"})
	f.claim(ports.ClaimParams{WorkerID: "w2", Queues: []string{"c"}, RequestID: "r1"})
	f.claim(ports.ClaimParams{WorkerID: "w1", Queues: []string{"d"}})
	left := f.claim(ports.ClaimParams{WorkerID: "w1", Queues: []string{"e"}, RequestID: "r1"})
	require.Len(t, left, 2)
	// One completes (DONE), one is taken back (PENDING): neither is held.
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.UpdateEach(ctx, taskIDs(left), func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
			if i == 0 {
				e, err := t.Complete(task.CompleteParams{WorkerID: "w1", LeaseID: t.Snapshot().LeaseID}, now)
				return []event.Event{e}, err
			}
			v := t.Snapshot()
			e, err := t.ReleaseFromDeadWorker(task.Holder{WorkerID: v.WorkerID, LeaseID: v.LeaseID}, now)
			return []event.Event{e}, err
		})
		return err
	})
	for _, id := range taskIDs(left) {
		require.Empty(t, f.get(id).ClaimRequestID, "the request id goes with the lease")
	}

	var all []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		all, _, err = st.Bulk.Search(ctx, ports.BulkBatchParams{Limit: 100}, 0)
		return err
	})
	require.Len(t, all, 10)
	for _, worker := range []string{"w1", "w2", "w3"} {
		for _, rid := range []string{"r1", "r2", "r3"} {
			var want []uuid.UUID
			for _, tk := range all {
				if tk.ClaimedUnder(worker, rid) {
					want = append(want, tk.ID())
				}
			}
			var got []*task.Task
			f.run(func(ctx context.Context, st ports.Stores) error {
				var err error
				got, err = st.Tasks.ClaimedUnder(ctx, worker, rid)
				return err
			})
			require.ElementsMatch(t, want, taskIDs(got), "%s %s", worker, rid)
		}
	}
	// ClaimedUnderEach answers every pair at once, a pair repeated or
	// without a request id included.
	var (
		refs []ports.ClaimRef
		want [][]uuid.UUID
	)
	for _, worker := range []string{"w1", "w2", "w3", "w1"} {
		for _, rid := range []string{"r1", "r2", "", "r3"} {
			refs = append(refs, ports.ClaimRef{WorkerID: worker, RequestID: rid})
			var ids []uuid.UUID
			for _, tk := range all {
				if rid != "" && tk.ClaimedUnder(worker, rid) {
					ids = append(ids, tk.ID())
				}
			}
			want = append(want, ids)
		}
	}
	var each [][]*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		each, err = st.Tasks.ClaimedUnderEach(ctx, refs)
		return err
	})
	require.Len(t, each, len(refs))
	for i, r := range refs {
		require.NotNil(t, each[i])
		require.ElementsMatch(t, want[i], taskIDs(each[i]), "%s %s", r.WorkerID, r.RequestID)
	}

	var got []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		got, err = st.Tasks.ClaimedUnder(ctx, "w1", "r1")
		return err
	})
	require.Len(t, got, 2, "the claim of queue a")
	require.Equal(t, "r1", got[0].Snapshot().ClaimRequestID)
	require.NotEmpty(t, got[0].Snapshot().Payload, "with every column")
}

// payload_bytes and result_bytes, which the response cap sums, are the
// lengths of the texts PostgreSQL renders, on every path that writes them.
func TestTaskStoreKeepsTheRenderedSizesOfPayloadsAndResults(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	values := []string{`{"b":1,"a":[1,2,3],"b":"\u00e9\n<&>"}`, `1e3`, `"\ud83d\ude00"`, `[ 1 , {"x" : null} ]`}
	single := f.submit(task.SubmitParams{Queue: "sizes", Payload: json.RawMessage(values[0])})
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			var ts []*task.Task
			var es []event.Event
			for _, v := range values[1:] {
				tk, e, err := task.Submit(task.SubmitParams{ID: uuid.Must(uuid.NewV7()), Queue: "sizes", Payload: json.RawMessage(v)}, now)
				if err != nil {
					return nil, nil, err
				}
				ts, es = append(ts, tk), append(es, e)
			}
			return ts, es, nil
		})
		return err
	})
	claimed := f.claim(ports.ClaimParams{Queues: []string{"sizes"}})
	require.Len(t, claimed, len(values))
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, single.ID(), func(tk *task.Task, now time.Time) ([]event.Event, error) {
			e, err := tk.Complete(task.CompleteParams{WorkerID: "w1", LeaseID: tk.Snapshot().LeaseID, Result: json.RawMessage(values[3])}, now)
			return []event.Event{e}, err
		})
		return err
	})
	var rest []uuid.UUID
	for _, tk := range claimed {
		if tk.ID() != single.ID() {
			rest = append(rest, tk.ID())
		}
	}
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.UpdateEach(ctx, rest, func(i int, tk *task.Task, now time.Time) ([]event.Event, error) {
			e, err := tk.Complete(task.CompleteParams{WorkerID: "w1", LeaseID: tk.Snapshot().LeaseID, Result: json.RawMessage(values[i])}, now)
			return []event.Event{e}, err
		})
		return err
	})
	var rows []struct {
		PayloadBytes, PayloadText, ResultBytes, ResultText int64
	}
	require.NoError(t, f.db.Select(&rows, `
		SELECT payload_bytes AS payloadbytes, octet_length(payload::text) AS payloadtext,
			result_bytes AS resultbytes, octet_length(result::text) AS resulttext
		FROM tasks WHERE queue = 'sizes'`))
	require.Len(t, rows, len(values))
	for _, r := range rows {
		require.Equal(t, r.PayloadText, r.PayloadBytes)
		require.Equal(t, r.ResultText, r.ResultBytes)
	}
}

// UpdateEach saves every column a holder's report changes: after each kind
// of report, the task read back is the task the domain decided (reports
// of single requests go through UpdateEach too, in shared transactions).
func TestTaskStoreUpdateEachSavesWhatTheDomainDecided(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	reports := []func(t *task.Task, now time.Time) ([]event.Event, error){
		func(t *task.Task, now time.Time) ([]event.Event, error) {
			v := t.Snapshot()
			e, err := t.Complete(task.CompleteParams{WorkerID: v.WorkerID, LeaseID: v.LeaseID, Result: json.RawMessage(`{"ok":true}`)}, now)
			return []event.Event{e}, err
		},
		func(t *task.Task, now time.Time) ([]event.Event, error) {
			v := t.Snapshot()
			e, err := t.Fail(task.FailParams{WorkerID: v.WorkerID, LeaseID: v.LeaseID, Error: "boom", Retryable: true}, backoff.DefaultPolicy(), now)
			return []event.Event{e}, err
		},
		func(t *task.Task, now time.Time) ([]event.Event, error) {
			v := t.Snapshot()
			e, err := t.Snooze(task.SnoozeParams{WorkerID: v.WorkerID, LeaseID: v.LeaseID, DelaySeconds: 5}, now)
			return []event.Event{e}, err
		},
		func(t *task.Task, now time.Time) ([]event.Event, error) {
			v := t.Snapshot()
			e, err := t.Release(task.ReleaseParams{WorkerID: v.WorkerID, LeaseID: v.LeaseID}, now)
			return []event.Event{e}, err
		},
	}
	var ids []uuid.UUID
	for i := range reports {
		f.submit(task.SubmitParams{Queue: fmt.Sprintf("q%d", i), Payload: json.RawMessage(`{}`)})
		got := f.claim(ports.ClaimParams{WorkerID: "w", Queues: []string{fmt.Sprintf("q%d", i)}})
		require.Len(t, got, 1)
		ids = append(ids, got[0].ID())
	}
	var decided []ports.TaskResult
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		decided, err = st.Tasks.UpdateEach(ctx, ids, func(i int, t *task.Task, now time.Time) ([]event.Event, error) {
			for j, id := range ids {
				if id == t.ID() {
					return reports[j](t, now)
				}
			}
			return nil, task.ErrNotFound
		})
		return err
	})
	for _, r := range decided {
		require.NoError(t, r.Err)
		want := r.Task.Snapshot()
		got := f.get(r.ID)
		want.Payload, got.Payload = nil, nil
		if want.Result != nil {
			require.JSONEq(t, string(want.Result), string(got.Result))
		}
		want.Result, got.Result = nil, nil
		require.Equal(t, want, got)
		// The ended attempt is stored with its outcome (each outcome the
		// database's check accepts).
		ended, ok := r.Task.EndedAttempt()
		require.True(t, ok)
		var stored []task.Attempt
		f.run(func(ctx context.Context, st ports.Stores) error {
			var err error
			stored, err = st.Tasks.Attempts(ctx, r.ID)
			return err
		})
		require.Len(t, stored, 1)
		require.Equal(t, ended.Outcome, stored[0].Outcome)
		require.Equal(t, ended.Number, stored[0].Number)
	}
}
