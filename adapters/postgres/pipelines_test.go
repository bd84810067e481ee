package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// pipeline is one test's database with the use cases over it.
type pipeline struct {
	t       *testing.T
	db      *sqlx.DB
	tx      *postgres.TxRunner
	tasks   *application.TaskService
	workers *application.WorkerService
	cfg     application.Config
	queue   string
}

func newPipeline(t *testing.T) *pipeline {
	t.Helper()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	cfg := application.Config{
		Backoff:  backoff.Policy{Base: time.Millisecond, Cap: time.Millisecond},
		Liveness: worker.LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second},
	}
	p := &pipeline{t: t, db: db, tx: tx, cfg: cfg, tasks: application.NewTaskService(tx, cfg),
		workers: application.NewWorkerService(tx, cfg), queue: "q-" + uuid.NewString()}
	for _, id := range []string{"w1", "w2"} {
		_, _, err := p.workers.Register(t.Context(), worker.RegisterParams{ID: id})
		require.NoError(t, err)
	}
	return p
}

// graph submits a batch: items[i] is {ref, depends_on...}.
func (p *pipeline) graph(items ...[]string) []*task.Task {
	p.t.Helper()
	ps := make([]task.SubmitParams, len(items))
	specs := make([]task.DependencySpec, len(items))
	for i, it := range items {
		ps[i] = task.SubmitParams{Queue: p.queue, MaxAttempts: ptr(1)}
		specs[i] = task.DependencySpec{Ref: it[0], DependsOn: task.Plain(it[1:]...)}
	}
	out, _, err := p.tasks.SubmitGraph(p.t.Context(), ps, specs)
	require.NoError(p.t, err)
	return out
}

// claimAll claims every claimable task of the queue for w1.
func (p *pipeline) claimAll() map[uuid.UUID]*task.Task {
	p.t.Helper()
	res, err := p.tasks.Claim(p.t.Context(), ports.ClaimCommand{WorkerID: "w1", Queue: p.queue, Limit: ptr(1000)})
	require.NoError(p.t, err)
	out := map[uuid.UUID]*task.Task{}
	for _, t := range res.Tasks {
		out[t.ID()] = t
	}
	return out
}

func (p *pipeline) complete(t *task.Task) {
	p.t.Helper()
	v := t.Snapshot()
	_, err := p.tasks.Complete(p.t.Context(), ports.CompleteCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID})
	require.NoError(p.t, err)
}

func (p *pipeline) fail(t *task.Task, msg string) {
	p.t.Helper()
	v := t.Snapshot()
	_, err := p.tasks.Fail(p.t.Context(), ports.FailCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID, Error: msg, Retryable: true})
	require.NoError(p.t, err)
}

func (p *pipeline) status(id uuid.UUID) (task.Status, task.DeadReason, int) {
	p.t.Helper()
	var row struct {
		Status     string  `db:"status"`
		DeadReason *string `db:"dead_reason"`
		Blockers   *int    `db:"blockers"`
	}
	require.NoError(p.t, p.db.GetContext(p.t.Context(), &row, `SELECT status, dead_reason, blockers FROM tasks WHERE id = $1`, id))
	reason, blockers := task.DeadReason(""), -1
	if row.DeadReason != nil {
		reason = task.DeadReason(*row.DeadReason)
	}
	if row.Blockers != nil {
		blockers = *row.Blockers
	}
	return task.Status(row.Status), reason, blockers
}

// events returns every outbox event about id, oldest first.
func (p *pipeline) events(id uuid.UUID) []event.Event {
	p.t.Helper()
	var out []event.Event
	for _, m := range (&storeFixture{t: p.t, db: p.db}).outbox() {
		for _, e := range m.Events {
			if e.TaskID == id.String() {
				out = append(out, e)
			}
		}
	}
	return out
}

type transition struct {
	typ      event.Type
	from, to string
	reason   string
}

func transitions(es []event.Event) []transition {
	out := make([]transition, len(es))
	for i, e := range es {
		out[i] = transition{e.Type, e.From, e.To, e.Reason}
	}
	return out
}

// The last parent's completion unblocks the child in its own transaction
// (one outbox message holds both), not before; a parent already DONE at
// submission counts as done.
func TestCompletingTheLastParentUnblocksTheChild(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	first := p.graph([]string{"a"})[0]
	p.complete(p.claimAll()[first.ID()])
	ts := p.graph([]string{"b"}, []string{"c"}, []string{"", "b", "c", first.ID().String()})
	child := ts[2]
	st, _, blockers := p.status(child.ID())
	require.Equal(t, task.StatusBlocked, st)
	require.Equal(t, 2, blockers, "the parent already DONE is not counted")

	held := p.claimAll()
	require.Len(t, held, 2, "a BLOCKED task is never claimed")
	p.complete(held[ts[0].ID()])
	st, _, blockers = p.status(child.ID())
	require.Equal(t, task.StatusBlocked, st)
	require.Equal(t, 1, blockers)

	p.complete(held[ts[1].ID()])
	st, _, blockers = p.status(child.ID())
	require.Equal(t, task.StatusPending, st)
	require.Equal(t, 0, blockers)
	require.Equal(t, []transition{
		{event.TaskSubmitted, "", "BLOCKED", ""},
		{event.TaskUnblocked, "BLOCKED", "PENDING", "dependencies_done"},
	}, transitions(p.events(child.ID())))

	msgs := (&storeFixture{t: t, db: p.db}).outbox()
	last := msgs[len(msgs)-1]
	require.Equal(t, []event.Type{event.TaskCompleted, event.TaskUnblocked}, eventTypes(last.Events),
		"the unblocking commits with the completion, after it")
	require.Len(t, p.claimAll(), 1)
}

// A parent that ends DEAD ends its dependants, and theirs, each with its
// own event, in its transaction; what is not downstream is left alone.
func TestADeadParentEndsItsDependantsRecursively(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	// a -> b -> d, a -> c -> d, e (independent) -> f, and d -> g.
	ts := p.graph([]string{"a"}, []string{"b", "a"}, []string{"c", "a"}, []string{"d", "b", "c"},
		[]string{"e"}, []string{"f", "e"}, []string{"g", "d"})
	a, e := ts[0], ts[4]
	held := p.claimAll()
	require.Len(t, held, 2)
	p.fail(held[a.ID()], "boom") // max_attempts 1: DEAD exhausted

	for _, i := range []int{1, 2, 3, 6} {
		st, reason, _ := p.status(ts[i].ID())
		require.Equal(t, task.StatusDead, st, "item %d", i)
		require.Equal(t, task.DeadDependencyFailed, reason, "item %d", i)
		require.Equal(t, []transition{
			{event.TaskSubmitted, "", "BLOCKED", ""},
			{event.TaskDeadLettered, "BLOCKED", "DEAD", "dependency_failed"},
		}, transitions(p.events(ts[i].ID())), "item %d", i)
	}
	st, _, _ := p.status(ts[5].ID())
	require.Equal(t, task.StatusBlocked, st, "f depends on e only")
	p.complete(held[e.ID()])
	st, _, _ = p.status(ts[5].ID())
	require.Equal(t, task.StatusPending, st)

	// One message: the failure, then the two rounds of the cascade.
	msgs := (&storeFixture{t: t, db: p.db}).outbox()
	var cascade []event.Event
	for _, m := range msgs {
		if len(m.Events) > 0 && m.Events[0].TaskID == a.ID().String() && m.Events[0].Type == event.TaskFailed {
			cascade = m.Events
		}
	}
	require.Len(t, cascade, 5, "a, b and c, d, g")

	// An operator's retry of the parent does not revive its dead dependants.
	_, err := p.tasks.Retry(t.Context(), a.ID())
	require.NoError(t, err)
	p.complete(p.claimAll()[a.ID()])
	st, reason, _ := p.status(ts[1].ID())
	require.Equal(t, task.StatusDead, st)
	require.Equal(t, task.DeadDependencyFailed, reason)
}

// Cancelling a BLOCKED task ends it and its dependants; a BLOCKED task past
// its deadline ends (deadline) with its dependants too.
func TestCancelAndDeadlineEndBlockedTasksAndTheirDependants(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	ts := p.graph([]string{"a"}, []string{"b", "a"}, []string{"c", "b"})
	_, err := p.tasks.Cancel(t.Context(), ts[1].ID())
	require.NoError(t, err)
	st, reason, _ := p.status(ts[1].ID())
	require.Equal(t, []any{task.StatusDead, task.DeadCancelled}, []any{st, reason})
	st, reason, _ = p.status(ts[2].ID())
	require.Equal(t, []any{task.StatusDead, task.DeadDependencyFailed}, []any{st, reason})

	// The deadline of a BLOCKED task.
	ps := []task.SubmitParams{{Queue: p.queue}, {Queue: p.queue, Deadline: ptr(time.Now().Add(time.Hour))}, {Queue: p.queue}}
	specs := []task.DependencySpec{{Ref: "x"}, {Ref: "y", DependsOn: task.Plain("x")}, {DependsOn: task.Plain("y")}}
	more, _, err := p.tasks.SubmitGraph(t.Context(), ps, specs)
	require.NoError(t, err)
	_, err = p.db.ExecContext(t.Context(), `UPDATE tasks SET deadline = now() - interval '1 second' WHERE id = $1`, more[1].ID())
	require.NoError(t, err)
	rep, err := application.NewDeadlineReaper(p.tx, 0).Reap(t.Context())
	require.NoError(t, err)
	require.Equal(t, 1, rep.Expired)
	st, reason, _ = p.status(more[1].ID())
	require.Equal(t, []any{task.StatusDead, task.DeadDeadline}, []any{st, reason})
	st, reason, _ = p.status(more[2].ID())
	require.Equal(t, []any{task.StatusDead, task.DeadDependencyFailed}, []any{st, reason})
	st, _, _ = p.status(more[0].ID())
	require.Equal(t, task.StatusPending, st, "the parent is not touched")
}

// Batch completions that each complete several parents of the same
// children, all at once and in every order: none deadlocks, each child is
// unblocked exactly once.
func TestConcurrentBatchCompletionsOfOneChildsParents(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	const parents, batches = 200, 8
	items := make([][]string, 0, parents+2)
	refs := make([]string, parents)
	for i := range refs {
		refs[i] = fmt.Sprintf("p%d", i)
		items = append(items, []string{refs[i]})
	}
	items = append(items, append([]string{"c1"}, refs...), append([]string{"c2"}, refs[parents/2:]...))
	ts := p.graph(items...)
	held := p.claimAll()
	require.Len(t, held, parents)
	order := make([]*task.Task, 0, parents)
	for _, t := range held {
		order = append(order, t)
	}
	rand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })

	var wg sync.WaitGroup
	errs := make(chan error, batches)
	per := parents / batches
	for b := range batches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var its []ports.CompleteItem
			for _, t := range order[b*per : (b+1)*per] {
				v := t.Snapshot()
				its = append(its, ports.CompleteItem{TaskID: v.ID, LeaseID: &v.LeaseID})
			}
			res, err := p.tasks.CompleteBatch(context.WithoutCancel(t.Context()), "w1", its)
			if err == nil {
				for _, r := range res {
					err = errors.Join(err, r.Err)
				}
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	for _, child := range ts[parents:] {
		st, _, blockers := p.status(child.ID())
		require.Equal(t, task.StatusPending, st)
		require.Equal(t, 0, blockers)
		unblocked := 0
		for _, e := range p.events(child.ID()) {
			if e.Type == event.TaskUnblocked {
				unblocked++
			}
		}
		require.Equal(t, 1, unblocked)
	}
}

// Every way an attempt ends is kept, with its outcome, in the transaction
// of the transition that ends it; a transition that rolls back keeps none.
func TestAttemptsAreKeptOnEveryPathThatEndsOne(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	ctx := t.Context()
	submit := func(n int) []uuid.UUID {
		ps := make([]task.SubmitParams, n)
		for i := range ps {
			ps[i] = task.SubmitParams{Queue: p.queue, MaxAttempts: ptr(5)}
		}
		ts, _, err := p.tasks.SubmitBatch(ctx, ps)
		require.NoError(t, err)
		ids := make([]uuid.UUID, n)
		for i, t := range ts {
			ids[i] = t.ID()
		}
		return ids
	}
	ids := submit(8)
	held := p.claimAll()
	lease := func(i int) *uuid.UUID { l := held[ids[i]].Snapshot().LeaseID; return &l }

	// 0: complete; 1: fail; 2, 3: batch complete and fail.
	p.complete(held[ids[0]])
	p.fail(held[ids[1]], "timeout")
	_, err := p.tasks.CompleteBatch(ctx, "w1", []ports.CompleteItem{{TaskID: ids[2], LeaseID: lease(2)}})
	require.NoError(t, err)
	_, err = p.tasks.FailBatch(ctx, "w1", []ports.FailItem{{TaskID: ids[3], LeaseID: lease(3), Error: "oom", Retryable: true}})
	require.NoError(t, err)
	// 4: cancel requested, then failed by the holder.
	_, err = p.tasks.Cancel(ctx, ids[4])
	require.NoError(t, err)
	p.fail(held[ids[4]], "stopped")
	// 5: its lease runs out.
	_, err = p.db.ExecContext(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, ids[5])
	require.NoError(t, err)
	_, err = application.NewLeaseReaper(p.tx, 0).Reap(ctx)
	require.NoError(t, err)
	// 6: a heartbeat listing only task 7 orphans it (claimed long enough ago).
	_, err = p.db.ExecContext(ctx, `UPDATE tasks SET claimed_at = now() - interval '1 hour' WHERE id = ANY($1)`, []string{ids[6].String(), ids[7].String()})
	require.NoError(t, err)
	_, err = p.workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "w1", ListsTasks: true,
		Tasks: []task.LeaseRef{{ID: ids[7], LeaseID: *lease(7)}}})
	require.NoError(t, err)
	// 7: its worker is declared dead.
	_, err = p.db.ExecContext(ctx, `UPDATE workers SET last_heartbeat_at = now() - interval '1 hour' WHERE id = 'w1'`)
	require.NoError(t, err)
	_, err = application.NewHeartbeatReaper(p.tx, p.cfg.Liveness, 0).Reap(ctx)
	require.NoError(t, err)

	want := []task.Outcome{task.OutcomeCompleted, task.OutcomeFailed, task.OutcomeCompleted, task.OutcomeFailed,
		task.OutcomeCancelled, task.OutcomeLeaseExpired, task.OutcomeOrphaned, task.OutcomeWorkerDead}
	errorsWanted := map[int]string{1: "timeout", 3: "oom", 4: "stopped"}
	for i, id := range ids {
		as, err := p.tasks.Attempts(ctx, id)
		require.NoError(t, err)
		require.Len(t, as, 1, "task %d", i)
		a := as[0]
		require.Equal(t, want[i], a.Outcome, "task %d", i)
		require.Equal(t, 1, a.Number)
		require.Equal(t, "w1", a.WorkerID)
		if i < 6 { // 6 and 7 were staged as claimed an hour ago
			require.Equal(t, held[id].Snapshot().ClaimedAt.UTC(), a.ClaimedAt.UTC(), "task %d", i)
		}
		require.False(t, a.FinishedAt.Before(a.ClaimedAt))
		require.Equal(t, errorsWanted[i], a.Error, "task %d", i)
	}

	// A report rolled back with its transaction leaves no attempt.
	_, _, err = p.workers.Register(ctx, worker.RegisterParams{ID: "w1"})
	require.NoError(t, err)
	more := submit(1)
	claimed := p.claimAll()[more[0]].Snapshot()
	boom := errors.New("boom")
	err = p.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if _, err := st.Tasks.Update(ctx, claimed.ID, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Complete(task.CompleteParams{WorkerID: claimed.WorkerID, LeaseID: claimed.LeaseID}, now)
			return []event.Event{e}, err
		}); err != nil {
			return err
		}
		return boom
	})
	require.ErrorIs(t, err, boom)
	as, err := p.tasks.Attempts(ctx, claimed.ID)
	require.NoError(t, err)
	require.Len(t, as, 1, "only the running attempt, from the task row")
	require.Nil(t, as[0].FinishedAt)
	require.Empty(t, as[0].Outcome)
}

// Retention deletes a task's attempts and dependencies with it, and keeps a
// finished task while an unfinished task depends on it.
func TestRetentionDeletesAttemptsAndDependenciesAndKeepsNeededParents(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	ctx := t.Context()
	ts := p.graph([]string{"a"}, []string{"b"}, []string{"c", "a", "b"})
	held := p.claimAll()
	p.complete(held[ts[0].ID()])
	count := func(query string, args ...any) int {
		var n int
		require.NoError(t, p.db.GetContext(ctx, &n, query, args...))
		return n
	}
	_, err := p.db.ExecContext(ctx, `UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE status = 'DONE'`)
	require.NoError(t, err)
	retention := application.NewRetention(p.tx, application.RetentionConfig{TTL: time.Hour})
	rep, err := retention.Apply(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, rep.Tasks, "a is kept: c, unfinished, depends on it")

	p.complete(held[ts[1].ID()])
	p.complete(p.claimAll()[ts[2].ID()])
	_, err = p.db.ExecContext(ctx, `UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE status = 'DONE'`)
	require.NoError(t, err)
	require.Equal(t, 3, count(`SELECT count(*) FROM task_attempts`))
	require.Equal(t, 2, count(`SELECT count(*) FROM task_dependencies`))
	rep, err = retention.Apply(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, rep.Tasks)
	require.Equal(t, 0, count(`SELECT count(*) FROM task_attempts`))
	require.Equal(t, 0, count(`SELECT count(*) FROM task_dependencies`))
}

// An idempotency key that a concurrent transaction takes after the batch
// looked for it makes the batch's transaction run again, which then finds
// the key's task and depends on it as it is.
func TestGraphRacingAnIdempotencyKeyRunsAgain(t *testing.T) {
	t.Parallel()
	p := newPipeline(t)
	ctx := t.Context()
	other, err := p.db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = other.Rollback() }()
	taken := uuid.Must(uuid.NewV7())
	_, err = other.ExecContext(ctx, `INSERT INTO tasks (id, queue, status, max_attempts, run_at, idempotency_key, created_at, updated_at)
		VALUES ($1, $2, 'DONE', 1, now(), 'k', now(), now())`, taken, p.queue)
	require.NoError(t, err)

	type result struct {
		ts      []*task.Task
		created []bool
		err     error
	}
	done := make(chan result, 1)
	go func() {
		ps := []task.SubmitParams{{Queue: p.queue, IdempotencyKey: "k"}, {Queue: p.queue}}
		specs := []task.DependencySpec{{Ref: "k"}, {DependsOn: task.Plain("k")}}
		ts, created, err := p.tasks.SubmitGraph(context.WithoutCancel(ctx), ps, specs)
		done <- result{ts, created, err}
	}()
	// The batch waits on the key's unique index entry, then finds it taken
	// (the only lock wait in this test's database).
	require.Eventually(t, func() bool {
		var waiting int
		require.NoError(t, p.db.GetContext(ctx, &waiting, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`))
		return waiting > 0
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, other.Commit())
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, []bool{false, true}, r.created)
	require.Equal(t, taken, r.ts[0].ID())
	require.Equal(t, task.StatusPending, r.ts[1].Status(), "its parent is DONE")
}
