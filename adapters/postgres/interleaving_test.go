package postgres_test

import (
	"context"
	"fmt"
	"net/url"
	"strconv"
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

// These tests interleave two transactions at the exact point where a race
// between them would lose, deterministically, on the real database.

// pauseKey is the advisory lock a paused statement waits for.
const pauseKey = 4242

// pauseInStatement makes every statement whose text contains marker, run by
// the returned pool, wait (between reading its snapshot and locking the rows it
// returns) for as long as the test holds the pause: it installs a now() that
// shadows pg_catalog.now() on that pool's search path. The query computes
// now() in the row it hands to the row-locking step, so the wait falls
// exactly between the snapshot the statement judged by and the lock it takes.
// hold takes the pause (its connection is closed when the test ends); release
// ends it. waiting reports whether a statement waits on it.
func pauseInStatement(t *testing.T, databaseURL, marker string) (paused *sqlx.DB, hold, release func(), waiting func() bool) {
	t.Helper()
	ctx := t.Context()
	admin, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = admin.Close() })
	_, err = admin.ExecContext(ctx, `
		CREATE SCHEMA pause;
		CREATE FUNCTION pause.now() RETURNS timestamptz LANGUAGE plpgsql VOLATILE AS $$
		BEGIN
			IF strpos(current_query(), '`+marker+`') > 0 THEN
				PERFORM pg_advisory_xact_lock_shared(`+strconv.Itoa(pauseKey)+`);
			END IF;
			RETURN pg_catalog.now();
		END $$`)
	require.NoError(t, err)

	u, err := url.Parse(databaseURL)
	require.NoError(t, err)
	q := u.Query()
	q.Set("search_path", "pause,pg_catalog,public")
	u.RawQuery = q.Encode()
	paused, err = sqlx.Open("postgres", u.String())
	require.NoError(t, err)
	t.Cleanup(func() { _ = paused.Close() })

	conn, err := admin.Connx(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	hold = func() {
		_, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, pauseKey)
		require.NoError(t, err)
	}
	release = func() {
		_, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, pauseKey)
		require.NoError(t, err)
	}
	waiting = func() bool {
		var n int
		require.NoError(t, admin.GetContext(ctx, &n, `
			SELECT count(*) FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND objid = $1
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`, pauseKey))
		return n > 0
	}
	return paused, hold, release, waiting
}

// waitUntil polls cond until it holds, failing the test after a deadline.
func waitUntil(t *testing.T, cond func() bool, what string) {
	t.Helper()
	require.Eventually(t, cond, 30*time.Second, 5*time.Millisecond, what)
}

// The dead-worker sweep judges a task orphaned from its snapshot (RUNNING
// under a DEAD worker), and locks it a moment later. If in that moment the
// lease reaper requeues the task and a live worker claims it, the lock lands
// on the live worker's version of the row: the sweep must leave it alone.
// Here the sweep is paused between its snapshot and its lock while the lease
// reaper and the claim commit.
func TestDeadWorkerSweepLeavesATaskALiveWorkerClaimedMeanwhile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	databaseURL := pgtest.NewDatabase(t)
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	tx := postgres.NewTxRunner(db)
	liveness := worker.LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second}
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: liveness}
	tasks := application.NewTaskService(tx, cfg)
	workers := application.NewWorkerService(tx, cfg)

	// T runs under "gone" on its first of two attempts; "gone" has been
	// declared DEAD and T's lease has run out. "alive" waits for work.
	for _, id := range []string{"gone", "alive"} {
		_, _, err := workers.Register(ctx, worker.RegisterParams{ID: id})
		require.NoError(t, err)
	}
	queue := "q-" + uuid.NewString()
	submitted, _, err := tasks.Submit(ctx, task.SubmitParams{Queue: queue, MaxAttempts: ptr(2)})
	require.NoError(t, err)
	id := submitted.ID()
	claimed, err := claimedTasks(tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "gone", Queue: queue, Limit: ptr(1)}))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = db.ExecContext(ctx, `UPDATE workers SET status = 'DEAD', last_heartbeat_at = now() - interval '1 hour' WHERE id = 'gone'`)
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE tasks SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, id)
	require.NoError(t, err)

	// A: the heartbeat reaper, paused inside its sweep of orphaned tasks.
	paused, hold, release, waiting := pauseInStatement(t, databaseURL, "NOT EXISTS (SELECT 1 FROM workers w")
	hold()
	sweep := application.NewHeartbeatReaper(postgres.NewTxRunner(paused), liveness, 0)
	type result struct {
		rep application.HeartbeatReport
		err error
	}
	swept := make(chan result, 1)
	go func() {
		rep, err := sweep.Reap(context.WithoutCancel(ctx))
		swept <- result{rep, err}
	}()
	waitUntil(t, waiting, "the sweep judged T orphaned and waits before locking it")

	// B: the lease reaper requeues T and "alive" claims it, both committed.
	leases, err := application.NewLeaseReaper(tx, 0).Reap(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, leases.Requeued)
	reclaimed, err := claimedTasks(tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "alive", Queue: queue, Limit: ptr(1)}))
	require.NoError(t, err)
	require.Len(t, reclaimed, 1)
	held := reclaimed[0].Snapshot()
	require.Equal(t, 2, held.Attempts, "the last attempt runs under alive")

	// A goes on: it locks T as alive holds it.
	release()
	var r result
	select {
	case r = <-swept:
	case <-time.After(30 * time.Second):
		t.Fatal("the sweep did not finish")
	}
	require.NoError(t, r.err)
	require.Zero(t, r.rep.Requeued+r.rep.DeadLettered, "the sweep took nothing")

	var now struct {
		Status   string    `db:"status"`
		WorkerID string    `db:"worker_id"`
		LeaseID  uuid.UUID `db:"lease_id"`
	}
	require.NoError(t, db.GetContext(ctx, &now, `SELECT status, coalesce(worker_id, '') AS worker_id, coalesce(lease_id, '00000000-0000-0000-0000-000000000000') AS lease_id FROM tasks WHERE id = $1`, id))
	require.Equal(t, "RUNNING", now.Status, "alive still holds T")
	require.Equal(t, "alive", now.WorkerID)
	require.Equal(t, held.LeaseID, now.LeaseID)
	var taken int
	require.NoError(t, db.GetContext(ctx, &taken, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'task_id' = $1 AND e->>'type' IN ($2, $3)`,
		id.String(), string(event.TaskDeadLettered), string(event.TaskRequeued)))
	require.Equal(t, 1, taken, "only the lease reaper's requeue: no worker_dead transition")
}

// pausedTx runs its first transaction up to the moment before COMMIT, then
// waits for release (after signalling paused); later ones run through.
type pausedTx struct {
	inner   ports.TxRunner
	once    sync.Once
	paused  chan struct{}
	release chan struct{}
}

func pauseBeforeCommit(inner ports.TxRunner) *pausedTx {
	return &pausedTx{inner: inner, paused: make(chan struct{}), release: make(chan struct{})}
}

func (p *pausedTx) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	return p.inner.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if err := fn(ctx, st); err != nil {
			return err
		}
		p.once.Do(func() {
			close(p.paused)
			<-p.release
		})
		return nil
	})
}

// lockWaits counts the sessions of this database that wait for a lock.
func lockWaits(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.GetContext(t.Context(), &n, `
		SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event_type = 'Lock'`))
	return n
}

// The heartbeat reaper declares a silent worker DEAD and takes back its
// tasks in one transaction. A claim of that worker that runs while the
// reaper's transaction is open must not commit tasks under it once the
// reaper has committed: it sees the worker DEAD and claims nothing (409).
func TestClaimOfAWorkerBeingDeclaredDeadClaimsNothing(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	liveness := worker.LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second}
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: liveness}
	tasks := application.NewTaskService(tx, cfg)
	workers := application.NewWorkerService(tx, cfg)

	_, _, err := workers.Register(ctx, worker.RegisterParams{ID: "silent"})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '1 hour' WHERE id = 'silent'`)
	require.NoError(t, err)
	queue := "q-" + uuid.NewString()
	submitted, _, err := tasks.Submit(ctx, task.SubmitParams{Queue: queue})
	require.NoError(t, err)

	// R: the reaper has declared "silent" DEAD and is about to commit.
	r := pauseBeforeCommit(tx)
	reaped := make(chan error, 1)
	go func() {
		rep, err := application.NewHeartbeatReaper(r, liveness, 0).Reap(context.WithoutCancel(ctx))
		if err == nil && rep.Dead != 1 {
			err = fmt.Errorf("the reaper declared %d workers dead, want 1", rep.Dead)
		}
		reaped <- err
	}()
	select {
	case <-r.paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the reaper did not reach its commit")
	}

	// C: "silent" claims. It must wait for R rather than decide by what R
	// has not committed yet.
	type result struct {
		tasks []*task.Task
		err   error
	}
	claimed := make(chan result, 1)
	go func() {
		ts, err := claimedTasks(tasks.Claim(context.WithoutCancel(ctx), ports.ClaimCommand{WorkerID: "silent", Queue: queue, Limit: ptr(1)}))
		claimed <- result{ts, err}
	}()
	waitUntil(t, func() bool { return lockWaits(t, db) > 0 }, "the claim waits for the reaper")

	close(r.release)
	require.NoError(t, <-reaped)
	var c result
	select {
	case c = <-claimed:
	case <-time.After(30 * time.Second):
		t.Fatal("the claim did not finish")
	}
	require.ErrorIs(t, c.err, worker.ErrDead, "a worker declared DEAD claims nothing (got %d tasks)", len(c.tasks))

	var status string
	require.NoError(t, db.GetContext(ctx, &status, `SELECT status FROM tasks WHERE id = $1`, submitted.ID()))
	require.Equal(t, "PENDING", status)
	var claims int
	require.NoError(t, db.GetContext(ctx, &claims, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = $1`, string(event.TaskClaimed)))
	require.Zero(t, claims)
}

// The other order: a claim in flight (its transaction open) keeps the reaper
// from declaring its worker DEAD; the claim commits under a live worker.
func TestReaperLeavesAWorkerWhoseClaimIsInFlight(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	liveness := worker.LivenessConfig{StaleAfter: 30 * time.Second, DeadAfter: 120 * time.Second}
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: liveness}
	workers := application.NewWorkerService(tx, cfg)
	_, _, err := workers.Register(ctx, worker.RegisterParams{ID: "silent"})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '1 hour' WHERE id = 'silent'`)
	require.NoError(t, err)
	queue := "q-" + uuid.NewString()
	_, _, err = application.NewTaskService(tx, cfg).Submit(ctx, task.SubmitParams{Queue: queue})
	require.NoError(t, err)

	c := pauseBeforeCommit(tx)
	claims := application.NewTaskService(c, cfg)
	type result struct {
		tasks []*task.Task
		err   error
	}
	claimed := make(chan result, 1)
	go func() {
		ts, err := claimedTasks(claims.Claim(context.WithoutCancel(ctx), ports.ClaimCommand{WorkerID: "silent", Queue: queue, Limit: ptr(1)}))
		claimed <- result{ts, err}
	}()
	select {
	case <-c.paused:
	case <-time.After(30 * time.Second):
		t.Fatal("the claim did not reach its commit")
	}

	rep, err := application.NewHeartbeatReaper(tx, liveness, 0).Reap(ctx)
	require.NoError(t, err)
	require.True(t, rep.Idle(), "the reaper leaves a worker whose claim is in flight: %+v", rep)

	close(c.release)
	r := <-claimed
	require.NoError(t, r.err)
	require.Len(t, r.tasks, 1)
	var status string
	require.NoError(t, db.GetContext(ctx, &status, `SELECT status FROM workers WHERE id = 'silent'`))
	require.Equal(t, "ACTIVE", status, "the claim revived it")
}

// Many claims of one worker at once, its heartbeats, and reaper cycles
// meanwhile: no deadlock, and every task is claimed exactly once.
func TestConcurrentClaimsAndHeartbeatsOfOneWorkerDoNotDeadlock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := pgtest.NewDB(t)
	tx := postgres.NewTxRunner(db)
	// Stale after 1 ms: every reaper cycle finds the worker silent, and so
	// every cycle meets the claims' and heartbeats' locks.
	liveness := worker.LivenessConfig{StaleAfter: time.Millisecond, DeadAfter: time.Hour}
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: liveness}
	tasks := application.NewTaskService(tx, cfg)
	workers := application.NewWorkerService(tx, cfg)
	_, _, err := workers.Register(ctx, worker.RegisterParams{ID: "busy"})
	require.NoError(t, err)
	const n = 200
	queue := "q-" + uuid.NewString()
	batch := make([]task.SubmitParams, n)
	for i := range batch {
		batch[i] = task.SubmitParams{Queue: queue}
	}
	_, _, err = tasks.SubmitBatch(ctx, batch)
	require.NoError(t, err)

	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		got     = map[uuid.UUID]int{}
		errs    []error
		stop    = make(chan struct{})
		stopped sync.Once
	)
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		errs = append(errs, err)
		stopped.Do(func() { close(stop) })
	}
	claimers := 6
	var idle sync.WaitGroup
	idle.Add(claimers)
	for range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer idle.Done()
			for {
				ts, err := claimedTasks(tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "busy", Queue: queue, Limit: ptr(3)}))
				if err != nil {
					fail(err)
					return
				}
				if len(ts) == 0 {
					return
				}
				mu.Lock()
				for _, tk := range ts {
					got[tk.ID()]++
				}
				mu.Unlock()
			}
		}()
	}
	background := func(fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := fn(); err != nil {
					fail(err)
					return
				}
			}
		}()
	}
	background(func() error {
		_, err := workers.Heartbeat(ctx, ports.HeartbeatCommand{WorkerID: "busy"})
		return err
	})
	reaper := application.NewHeartbeatReaper(tx, liveness, 0)
	background(func() error { _, err := reaper.Reap(ctx); return err })
	idle.Wait()
	stopped.Do(func() { close(stop) })
	wg.Wait()

	require.Empty(t, errs)
	require.Len(t, got, n)
	for id, times := range got {
		require.Equal(t, 1, times, "task %s claimed once", id)
	}
	var deadlocks int64
	require.NoError(t, db.GetContext(ctx, &deadlocks, `SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()`))
	require.Zero(t, deadlocks)
}

// Retention judges a finished task deletable by its snapshot (no unfinished
// dependant) and locks it a moment later. If in that moment a batch submit
// links a dependant to it (whatever its status, here DONE) and commits,
// retention must keep it: the dependant's worker will read its result, and
// deleting it would take the edge with it. Here retention is paused between
// its snapshot and its lock while the batch commits.
func TestRetentionKeepsAParentLinkedWhileItJudged(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	databaseURL := pgtest.NewDatabase(t)
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	tx := postgres.NewTxRunner(db)
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig()}
	tasks := application.NewTaskService(tx, cfg)
	workers := application.NewWorkerService(tx, cfg)

	// P is DONE, finished two hours ago, with no dependant yet.
	_, _, err = workers.Register(ctx, worker.RegisterParams{ID: "w"})
	require.NoError(t, err)
	queue := "q-" + uuid.NewString()
	submitted, _, err := tasks.Submit(ctx, task.SubmitParams{Queue: queue})
	require.NoError(t, err)
	parent := submitted.ID()
	claimed, err := claimedTasks(tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", Queue: queue, Limit: ptr(1)}))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	_, err = tasks.Complete(ctx, ports.CompleteCommand{TaskID: parent, WorkerID: "w", LeaseID: ptr(claimed[0].Snapshot().LeaseID),
		Result: []byte(`"input"`)})
	require.NoError(t, err)
	_, err = db.ExecContext(ctx, `UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE id = $1`, parent)
	require.NoError(t, err)

	// A: retention, paused after judging P deletable, before locking it.
	paused, hold, release, waiting := pauseInStatement(t, databaseURL, "t.finished_at <= now()")
	hold()
	retention := application.NewRetention(postgres.NewTxRunner(paused), application.RetentionConfig{TTL: time.Hour})
	type result struct {
		rep application.RetentionReport
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := retention.Apply(context.WithoutCancel(ctx))
		done <- result{rep, err}
	}()
	waitUntil(t, waiting, "retention judged P and waits before locking it")

	// B: a batch links a dependant to P and commits.
	children, _, err := tasks.SubmitGraph(ctx, []task.SubmitParams{{Queue: queue}},
		[]task.DependencySpec{{DependsOn: task.Plain(parent.String())}})
	require.NoError(t, err)
	child := children[0]
	require.Equal(t, task.StatusPending, child.Status(), "its only parent is DONE")

	// A goes on.
	release()
	var r result
	select {
	case r = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("retention did not finish")
	}
	require.NoError(t, r.err)
	require.Zero(t, r.rep.Tasks, "P is kept: a PENDING task depends on it")
	detail, err := tasks.Describe(ctx, child.ID())
	require.NoError(t, err)
	require.Equal(t, []uuid.UUID{parent}, detail.DependsOn, "the dependant still depends on P")
	ps, err := tasks.Parents(ctx, child.ID(), ports.ParentsQuery{})
	require.NoError(t, err)
	require.Len(t, ps.Parents, 1)
	require.JSONEq(t, `"input"`, string(ps.Parents[0].Snapshot().Result))

	// Retention's next cycle keeps P too (the flag and the edge are seen).
	rep, err := application.NewRetention(tx, application.RetentionConfig{TTL: time.Hour}).Apply(ctx)
	require.NoError(t, err)
	require.Zero(t, rep.Tasks)
}
