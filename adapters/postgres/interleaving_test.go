package postgres_test

import (
	"context"
	"net/url"
	"strconv"
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
	submitted, _, err := tasks.Submit(ctx, task.SubmitParams{Queue: queue, MaxAttempts: 2})
	require.NoError(t, err)
	id := submitted.ID()
	claimed, err := tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "gone", Queue: queue, Limit: 1})
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
	reclaimed, err := tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "alive", Queue: queue, Limit: 1})
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
