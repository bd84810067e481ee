package application_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

var errPoison = errors.New("poisoned statement")

// poisonTx runs transactions whose task store fails, after its writes, the
// statement that serves a poisoned request: a report naming task poison, or
// a claim of worker poisonWorker. The transaction then rolls back with
// whatever the statement wrote for the other requests in it.
type poisonTx struct {
	inner        ports.TxRunner
	poison       uuid.UUID
	poisonWorker string
}

func (p *poisonTx) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	return p.inner.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		st.Tasks = poisonTasks{TaskStore: st.Tasks, p: p}
		return fn(ctx, st)
	})
}

type poisonTasks struct {
	ports.TaskStore
	p *poisonTx
}

func (s poisonTasks) UpdateEach(ctx context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out, err := s.TaskStore.UpdateEach(ctx, ids, fn)
	if err == nil && slices.Contains(ids, s.p.poison) {
		return nil, errPoison
	}
	return out, err
}

func (s poisonTasks) CompleteEach(ctx context.Context, items []ports.CompleteRef, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out, err := s.TaskStore.CompleteEach(ctx, items, fn)
	if err == nil && slices.ContainsFunc(items, func(it ports.CompleteRef) bool { return it.ID == s.p.poison }) {
		return nil, errPoison
	}
	return out, err
}

func (s poisonTasks) ClaimGroup(ctx context.Context, g ports.ClaimGroupParams) ([]ports.ClaimOutcome, error) {
	out, err := s.TaskStore.ClaimGroup(ctx, g)
	if err == nil && slices.ContainsFunc(g.Requests, func(r ports.ClaimRequest) bool { return r.WorkerID == s.p.poisonWorker }) {
		return nil, errPoison
	}
	return out, err
}

// eventsOf counts the outbox events of a type about a task.
func eventsOf(t *testing.T, s services, typ string, id uuid.UUID) int {
	t.Helper()
	var n int
	require.NoError(t, s.db.Get(&n, `
		SELECT count(*) FROM watermill_taskmaster_events m, jsonb_array_elements(m.payload::jsonb->'events') e
		WHERE e->>'type' = $1 AND e->>'task_id' = $2`, typ, id.String()))
	return n
}

// A request whose statement fails the shared transaction of a batch of
// reports fails alone: the others, rolled back with it, are served again
// and answered with their own outcomes, each transition saved once with
// one event; the poisoned request's task is left as it was.
func TestAReportThatFailsASharedTransactionFailsAlone(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	first := claimed(t, s, "first").Snapshot()
	bad := claimed(t, s, "bad").Snapshot()
	var good []task.Snapshot
	for _, w := range []string{"a", "b", "c"} {
		good = append(good, claimed(t, s, w).Snapshot())
	}
	g := newGatedTx(&poisonTx{inner: s.tx, poison: bad.ID})
	tasks := gatedTasksOver(g)
	complete := func(v task.Snapshot) chan error {
		errs := make(chan error, 1)
		go func() {
			_, err := tasks.Complete(ctx, ports.CompleteCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID})
			errs <- err
		}()
		return errs
	}
	firstErr := complete(first)
	<-g.paused // the first report's transaction is open: the others queue
	badErr := complete(bad)
	var goodErrs []chan error
	for _, v := range good {
		goodErrs = append(goodErrs, complete(v))
	}
	require.Eventually(t, func() bool { _, n := tasks.Queued(); return n == 1+len(good) }, 10*time.Second, time.Millisecond)
	close(g.release)

	require.NoError(t, <-firstErr)
	require.ErrorIs(t, <-badErr, errPoison)
	for i, errs := range goodErrs {
		require.NoError(t, <-errs, good[i].WorkerID)
	}
	require.Equal(t, int64(2+1+len(good)), g.runs.Load(), "the first, the shared one that failed, then each of its requests alone")
	require.Equal(t, "RUNNING", statusOf(t, s, bad.ID))
	require.Zero(t, eventsOf(t, s, "task.completed", bad.ID))
	for _, v := range append(good, first) {
		require.Equal(t, "DONE", statusOf(t, s, v.ID))
		require.Equal(t, 1, eventsOf(t, s, "task.completed", v.ID), "one transition, one event")
	}
}

// Likewise for claims: a claim whose statement fails the shared
// transaction fails alone; the others get tasks of their own, none handed
// out twice, each claim saved with one event, and none is answered before
// the transaction that holds its claim committed.
func TestAClaimThatFailsASharedTransactionFailsAloneAndNoneIsAnsweredBeforeCommit(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	for range 8 {
		_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: "q"})
		require.NoError(t, err)
	}
	names := []string{"first", "poison", "w1", "w2", "w3"}
	for _, id := range names {
		_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: id, Queues: []string{"q"}})
		require.NoError(t, err)
	}
	g := newGatedTx(&poisonTx{inner: s.tx, poisonWorker: "poison"})
	tasks := gatedTasksOver(g)
	type answer struct {
		name  string
		tasks []*task.Task
		err   error
	}
	answers := make(chan answer, len(names))
	claim := func(name string) {
		go func() {
			r, err := tasks.Claim(ctx, ports.ClaimCommand{WorkerID: name, Limit: ptr(2), RequestID: ptr("req-" + name)})
			answers <- answer{name, r.Tasks, err}
		}()
	}
	claim("first")
	<-g.paused
	for _, n := range names[1:] {
		claim(n)
	}
	require.Eventually(t, func() bool { n, _ := tasks.Queued(); return n == len(names)-1 }, 10*time.Second, time.Millisecond)
	select {
	case a := <-answers:
		t.Fatalf("%s answered before its transaction committed", a.name)
	default:
	}
	var running int
	require.NoError(t, s.db.Get(&running, `SELECT count(*) FROM tasks WHERE status = 'RUNNING'`))
	require.Zero(t, running, "nothing committed yet")
	close(g.release)

	seen := map[uuid.UUID]bool{}
	for range names {
		a := <-answers
		if a.name == "poison" {
			require.ErrorIs(t, a.err, errPoison)
			continue
		}
		require.NoError(t, a.err, a.name)
		require.Len(t, a.tasks, 2, a.name)
		for _, tk := range a.tasks {
			v := tk.Snapshot()
			require.False(t, seen[v.ID], "a task handed out twice")
			seen[v.ID] = true
			require.Equal(t, a.name, v.WorkerID)
			require.Equal(t, "RUNNING", statusOf(t, s, v.ID))
			require.Equal(t, 1, eventsOf(t, s, "task.claimed", v.ID), "one claim, one event")
		}
	}
	var held []string
	require.NoError(t, s.db.Select(&held, `SELECT DISTINCT worker_id FROM tasks WHERE status = 'RUNNING' ORDER BY 1`))
	require.Equal(t, []string{"first", "w1", "w2", "w3"}, held, "the poisoned claim holds nothing")

	// A repeat of a claim served in the shared transaction gets the same
	// tasks back.
	again, err := claimedTasks(tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w2", Limit: ptr(2), RequestID: ptr("req-w2")}))
	require.NoError(t, err)
	require.Len(t, again, 2)
	for _, tk := range again {
		require.True(t, seen[tk.ID()])
	}
}

// In a shared transaction, each request is checked against its own
// principal: a key that reports or claims as another key's worker gets 403
// and changes nothing (its report rolls back alone, its claim refreshes no
// worker), while the requests it shares the transaction with succeed.
func TestSharedTransactionsCheckEachRequestsPrincipal(t *testing.T) {
	t.Parallel()
	s := setup(t)
	work := []apikey.Scope{apikey.ScopeWork}
	a := as(t, s, apikey.CreateParams{Scopes: work})
	b := as(t, s, apikey.CreateParams{Scopes: work})
	var held []task.Snapshot
	for _, w := range []string{"wa", "wa2", "wb"} {
		key := a
		if w == "wb" {
			key = b
		}
		_, _, err := s.workers.Register(key, worker.RegisterParams{ID: w, Queues: []string{"q"}})
		require.NoError(t, err)
		_, _, err = s.tasks.Submit(t.Context(), task.SubmitParams{Queue: "q"})
		require.NoError(t, err)
		got, err := claimedTasks(s.tasks.Claim(key, ports.ClaimCommand{WorkerID: w}))
		require.NoError(t, err)
		require.Len(t, got, 1)
		held = append(held, got[0].Snapshot())
	}
	for range 3 {
		_, _, err := s.tasks.Submit(t.Context(), task.SubmitParams{Queue: "q"})
		require.NoError(t, err)
	}
	// A sign of life would refresh wa's heartbeat now.
	var beatBefore time.Time
	require.NoError(t, s.db.Get(&beatBefore, `UPDATE workers SET last_heartbeat_at = now() - $1::interval
		WHERE id = 'wa' RETURNING last_heartbeat_at`, fmt.Sprintf("%d milliseconds", 2*worker.RefreshInterval.Milliseconds())))

	g := newHeldTx(s.tx, 2)
	tasks := gatedTasksOver(g)
	type answer struct {
		name string
		err  error
	}
	answers := make(chan answer, 8)
	send := func(name string, do func() error) { go func() { answers <- answer{name, do()} }() }
	wb := held[2]
	send("first", func() error {
		_, err := tasks.Complete(b, ports.CompleteCommand{TaskID: wb.ID, WorkerID: "wb", LeaseID: &wb.LeaseID})
		return err
	})
	send("first claim", func() error {
		_, err := tasks.Claim(b, ports.ClaimCommand{WorkerID: "wb"})
		return err
	})
	<-g.paused // the first report's and the first claim's transactions are
	<-g.paused // open: the requests below queue for the next ones
	wa, wa2 := held[0], held[1]
	send("foreign complete", func() error {
		_, err := tasks.Complete(b, ports.CompleteCommand{TaskID: wa.ID, WorkerID: "wa", LeaseID: &wa.LeaseID})
		return err
	})
	send("own complete", func() error {
		_, err := tasks.Complete(a, ports.CompleteCommand{TaskID: wa2.ID, WorkerID: "wa2", LeaseID: &wa2.LeaseID})
		return err
	})
	send("foreign claim", func() error {
		_, err := tasks.Claim(b, ports.ClaimCommand{WorkerID: "wa", Limit: ptr(2)})
		return err
	})
	send("own claim", func() error {
		got, err := claimedTasks(tasks.Claim(a, ports.ClaimCommand{WorkerID: "wa2", Limit: ptr(2)}))
		if err == nil && len(got) != 2 {
			return errors.New("the own claim got no tasks")
		}
		return err
	})
	require.Eventually(t, func() bool { c, r := tasks.Queued(); return c == 2 && r == 2 }, 10*time.Second, time.Millisecond)
	close(g.release)
	got := map[string]error{}
	for range 6 {
		a := <-answers
		got[a.name] = a.err
	}
	require.NoError(t, got["first"])
	require.NoError(t, got["first claim"])
	// The two first transactions, one for the claims, one for the reports
	// that rolled back (the foreign report had completed a task), then each
	// report alone.
	require.Equal(t, int64(6), g.runs.Load())
	require.NoError(t, got["own complete"])
	require.NoError(t, got["own claim"])
	forbidden(t, got["foreign complete"])
	forbidden(t, got["foreign claim"])
	require.Equal(t, "RUNNING", statusOf(t, s, wa.ID), "the foreign report rolled back")
	require.Zero(t, eventsOf(t, s, "task.completed", wa.ID))
	require.Equal(t, "DONE", statusOf(t, s, wa2.ID))
	require.Equal(t, 1, eventsOf(t, s, "task.completed", wa2.ID))
	var beatAfter time.Time
	require.NoError(t, s.db.Get(&beatAfter, `SELECT last_heartbeat_at FROM workers WHERE id = 'wa'`))
	require.Equal(t, beatBefore, beatAfter, "the foreign requests refreshed a worker that is not theirs")
}
