package reapers_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
)

// leaders returns, per job name, the instances that lead it.
func leaders(instances []*instance) map[string][]int {
	out := map[string][]int{}
	for i, in := range instances {
		if in == nil {
			continue
		}
		for _, s := range in.reapers.All() {
			if s.Leading() {
				out[s.Name()] = append(out[s.Name()], i)
			}
		}
	}
	return out
}

// waitSingleLeaders waits until each job has exactly one leader and returns
// them.
func waitSingleLeaders(t *testing.T, instances []*instance, jobs ...string) map[string]int {
	t.Helper()
	var got map[string][]int
	eventually(t, func() bool {
		got = leaders(instances)
		for _, job := range jobs {
			if len(got[job]) != 1 {
				return false
			}
		}
		return true
	}, "one leader per job")
	out := map[string]int{}
	for _, job := range jobs {
		out[job] = got[job][0]
	}
	return out
}

// everyoneLeads is an Elector that makes every instance the leader of every
// job, with a zero (fencing nothing) fence: split brain, on purpose.
type everyoneLeads struct{}

func (everyoneLeads) Lead(context.Context, string) (ports.Fence, bool, error) {
	return ports.Fence{}, true, nil
}

func (everyoneLeads) Release(context.Context, ports.Fence) error { return nil }

func (everyoneLeads) TTL() time.Duration { return time.Minute }

// Three instances on one database: each reaper transition happens exactly
// once. With leader election one instance runs each job; without it (every
// instance runs every job at once, unfenced) the row locks still make each
// transition happen once: leadership saves work, it is not all that makes
// reaping correct.
func TestThreeInstancesReapEachTransitionOnce(t *testing.T) {
	t.Parallel()
	t.Run("one leader per job", func(t *testing.T) {
		t.Parallel()
		instances := reapWithThreeInstances(t)
		jobs := []string{app.HeartbeatReaperName, app.DeadlineReaperName, app.LeaseReaperName, app.RetentionName}
		t.Logf("leaders: %v", waitSingleLeaders(t, instances, jobs...))
		checkReapedOnce(t, instances)
	})
	t.Run("every instance runs every job", func(t *testing.T) {
		t.Parallel()
		instances := reapWithThreeInstances(t, fx.Decorate(func(ports.Elector) ports.Elector { return everyoneLeads{} }))
		eventually(t, func() bool { return len(leaders(instances)[app.HeartbeatReaperName]) == 3 }, "all lead")
		checkReapedOnce(t, instances)
	})
}

func reapWithThreeInstances(t *testing.T, extra ...fx.Option) []*instance {
	t.Helper()
	url := pgtest.NewDatabase(t)
	withRetention := func(cfg *app.Config) {
		cfg.RetentionTTL = time.Hour
		cfg.RetentionBatchSize = 5
	}
	instances := make([]*instance, 3)
	for i := range instances {
		instances[i] = start(t, url, withRetention, extra...)
	}
	return instances
}

func checkReapedOnce(t *testing.T, instances []*instance) {
	t.Helper()
	db := instances[0].DB
	// 10 silent workers hold 10 tasks each, a live worker holds 10 tasks
	// whose lease ran out, 20 tasks finished long ago, all written at once so
	// that no reaper sees half of it; then 30 tasks with a deadline arrive
	// through the three APIs.
	queue := "q-" + uuid.NewString()
	var held []string
	require.NoError(t, db.Select(&held, `
		WITH w AS (
			INSERT INTO workers (id, status, registered_at, last_heartbeat_at)
			SELECT 'w' || i, 'ACTIVE', now(), now() FROM generate_series(0, 9) i
			RETURNING id
		)
		INSERT INTO tasks (id, queue, status, attempts, max_attempts, worker_id, lease_id,
			run_at, created_at, claimed_at, updated_at)
		SELECT gen_random_uuid(), $1, 'RUNNING', 1, 3, w.id, gen_random_uuid(), now(), now(), now(), now()
		FROM w, generate_series(1, 10)
		RETURNING id::text`, queue))
	var leased []string
	require.NoError(t, db.Select(&leased, `
		WITH w AS (
			INSERT INTO workers (id, status, registered_at, last_heartbeat_at)
			VALUES ('alive', 'ACTIVE', now(), now() + interval '1 hour')
			RETURNING id
		)
		INSERT INTO tasks (id, queue, status, attempts, max_attempts, worker_id, lease_id,
			run_at, created_at, claimed_at, updated_at, lease_seconds, lease_expires_at)
		SELECT gen_random_uuid(), $1, 'RUNNING', 1, 3, w.id, gen_random_uuid(), now(), now(), now(), now(), 1, now()
		FROM w, generate_series(1, 10)
		RETURNING id::text`, queue))
	held = append(held, leased...)
	var finished []string
	require.NoError(t, db.Select(&finished, `
		INSERT INTO tasks (id, queue, status, attempts, max_attempts, run_at, created_at, claimed_at, finished_at, updated_at)
		SELECT gen_random_uuid(), 'finished-' || $1, 'DONE', 1, 3, now(), now() - interval '3 hours',
			now() - interval '3 hours', now() - interval '2 hours', now() - interval '2 hours'
		FROM generate_series(1, 20)
		RETURNING id::text`, queue))
	var overdue []string
	for i := range 30 {
		overdue = append(overdue, instances[i%3].submit(t, map[string]any{"queue": "deadlines-" + queue, "deadline": dueSoon()}).ID)
	}

	eventually(t, func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = 'PENDING' AND worker_id IS NULL`, pq.StringArray(held)))
		return n == len(held)
	}, "every held task is requeued")
	eventually(t, func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks WHERE id = ANY($1) AND status = 'DEAD'`, pq.StringArray(overdue)))
		return n == len(overdue)
	}, "every overdue task is dead-lettered")
	eventually(t, func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks WHERE id = ANY($1)`, pq.StringArray(finished)))
		return n == 0
	}, "every old finished task is deleted")

	// Exactly once: one event per transition in the outbox.
	count := func(typ event.Type) map[string]int {
		out := map[string]int{}
		for _, e := range outbox(t, db, typ) {
			if e.TaskID != "" {
				out[e.TaskID]++
			} else {
				out[e.WorkerID]++
			}
		}
		return out
	}
	requeued := count(event.TaskRequeued)
	require.Len(t, requeued, len(held))
	for _, id := range held {
		require.Equal(t, 1, requeued[id], "task %s requeued once", id)
	}
	for _, e := range outbox(t, db, event.TaskRequeued) {
		want := "worker_dead"
		if e.WorkerID == "alive" {
			want = "lease_expired"
		}
		require.Equal(t, want, e.Reason, "task %s", e.TaskID)
	}
	died := count(event.WorkerDied)
	for w := range 10 {
		require.Equal(t, 1, died[fmt.Sprintf("w%d", w)], "worker w%d died once", w)
	}
	for id, n := range died {
		require.Equal(t, 1, n, "worker %s died once", id)
	}
	for id, n := range count(event.WorkerStale) {
		require.Equal(t, 1, n, "worker %s went stale once", id)
	}
	deadLettered := count(event.TaskDeadLettered)
	require.Len(t, deadLettered, len(overdue))
	for _, id := range overdue {
		require.Equal(t, 1, deadLettered[id], "task %s expired once", id)
	}
	cleaned := count(event.TaskCleaned)
	require.Len(t, cleaned, len(finished))
	for _, id := range finished {
		require.Equal(t, 1, cleaned[id], "task %s deleted once", id)
	}

	// No attempt was counted twice: the next claim is everyone's second.
	instances[1].register(t, "second")
	again := instances[2].claim(t, "second", queue, len(held))
	require.Len(t, again, len(held))
	for _, tk := range again {
		require.Equal(t, 2, tk.Attempts)
	}
}

func TestAnotherInstanceTakesOverWhenTheLeaderStops(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	const slow = 200 * time.Millisecond
	instances := make([]*instance, 3)
	for i := range instances {
		instances[i] = start(t, url, func(cfg *app.Config) { cfg.ReaperInterval = slow })
	}
	leader := waitSingleLeaders(t, instances, app.HeartbeatReaperName)[app.HeartbeatReaperName]

	stopped := time.Now()
	instances[leader].Stop()
	instances[leader] = nil
	next := waitSingleLeaders(t, instances, app.HeartbeatReaperName)[app.HeartbeatReaperName]
	took := time.Since(stopped)
	t.Logf("instance %d took over from %d after %s (interval %s)", next, leader, took, slow)
	require.NotEqual(t, leader, next)

	// The new leader reaps.
	in := instances[next]
	in.register(t, "orphan-maker")
	queue := "q-" + uuid.NewString()
	tk := in.submit(t, map[string]any{"queue": queue})
	require.Len(t, in.claim(t, "orphan-maker", queue, 1), 1)
	in.waitWorker(t, "orphan-maker", "DEAD")
	in.waitTask(t, tk.ID, "PENDING")
	require.Len(t, about(outbox(t, in.DB, event.TaskRequeued), tk.ID), 1)
}

// Nothing depends on a database session: killing every session changes no
// leadership. A lease whose owner stopped renewing it (here a vanished
// instance, "ghost", whose lease runs out) is taken over in the next term,
// and the new leader works.
func TestAnotherInstanceTakesOverAnExpiredLease(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	instances := make([]*instance, 2)
	for i := range instances {
		instances[i] = start(t, url, func(cfg *app.Config) { cfg.LeaderLeaseTTL = time.Hour })
	}
	old := waitSingleLeaders(t, instances, app.DeadlineReaperName)[app.DeadlineReaperName]
	db := instances[0].DB
	var term int64
	require.NoError(t, db.Get(&term, `SELECT term FROM leader_leases WHERE job = $1`, app.DeadlineReaperName))

	var killed int
	require.NoError(t, db.Get(&killed, `
		SELECT count(*) FROM (
			SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()
		) k`))
	require.Positive(t, killed)
	require.Equal(t, map[string]int{app.DeadlineReaperName: old}, waitSingleLeaders(t, instances, app.DeadlineReaperName),
		"sessions come and go; the lease stays with its owner")

	_, err := db.Exec(`UPDATE leader_leases SET owner = 'ghost', expires_at = now() WHERE job = $1`, app.DeadlineReaperName)
	require.NoError(t, err)
	eventually(t, func() bool {
		var l struct {
			Owner string `db:"owner"`
			Term  int64  `db:"term"`
		}
		require.NoError(t, db.Get(&l, `SELECT owner, term FROM leader_leases WHERE job = $1`, app.DeadlineReaperName))
		return l.Owner != "ghost" && l.Term == term+1
	}, "an instance takes the ghost's lease over in the next term")
	waitSingleLeaders(t, instances, app.DeadlineReaperName)
	tk := instances[1].submit(t, map[string]any{"queue": "q", "deadline": dueSoon()})
	instances[0].waitTask(t, tk.ID, "DEAD")
}

// The application clock is used only for timing and logs: an instance whose
// clock runs ten minutes ahead makes the decisions the database clock
// dictates. Were it to use its own clock, every worker, deadline and
// finished task below would look ten minutes older to it.
func TestApplicationClockOffsetDoesNotChangeDecisions(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	const skew = 10 * time.Minute
	ahead := fx.Decorate(func(now application.NowFunc) application.NowFunc {
		return func() time.Time { return now().Add(skew) }
	})
	settings := func(cfg *app.Config) {
		cfg.App.Liveness.StaleAfter = 5 * time.Second
		cfg.App.Liveness.DeadAfter = 10 * time.Second
		cfg.RetentionTTL = 5 * time.Minute // shorter than the skew
	}
	skewed := start(t, url, settings, ahead)
	waitSingleLeaders(t, []*instance{skewed}, app.HeartbeatReaperName, app.DeadlineReaperName, app.LeaseReaperName, app.RetentionName)
	normal := start(t, url, settings)
	require.Empty(t, leaders([]*instance{normal}), "the skewed instance leads every job")

	// Workers aged on the database clock: "fresh" just registered, "canary"
	// silent past the stale threshold, "dying" just short of the dead one.
	for _, id := range []string{"fresh", "canary", "dying"} {
		normal.register(t, id)
	}
	_, err := normal.DB.Exec(`UPDATE workers SET last_heartbeat_at = now() - CASE id
		WHEN 'canary' THEN interval '6 seconds' ELSE interval '9 seconds' END
		WHERE id IN ('canary', 'dying')`)
	require.NoError(t, err)
	queue := "q-" + uuid.NewString()
	overdue := normal.submit(t, map[string]any{"queue": queue, "deadline": dueSoon()})
	young := normal.submit(t, map[string]any{"queue": "done-" + queue})
	old := normal.submit(t, map[string]any{"queue": "done-" + queue})
	finished := normal.claim(t, "fresh", "done-"+queue, 2)
	require.Len(t, finished, 2)
	leased := normal.submit(t, map[string]any{"queue": "leased-" + queue})
	var claimed struct{ Tasks []httpadapter.TaskJSON }
	normal.expect(t, http.MethodPost, "/tasks/v1/claim",
		map[string]any{"worker_id": "fresh", "queue": "leased-" + queue, "lease_seconds": 60}, http.StatusOK, &claimed)
	require.Len(t, claimed.Tasks, 1)
	for _, tk := range finished {
		normal.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/complete", map[string]any{"worker_id": "fresh", "lease_id": *tk.LeaseID}, http.StatusOK, nil)
	}
	_, err = normal.DB.Exec(`UPDATE tasks SET finished_at = now() - interval '6 minutes' WHERE id = $1`, old.ID)
	require.NoError(t, err)

	// The canary going STALE shows the skewed reaper ran after "fresh"
	// registered; "fresh" stays ACTIVE.
	normal.waitWorker(t, "canary", "STALE")
	require.Equal(t, "ACTIVE", normal.worker(t, "fresh").Status)
	dying := normal.waitWorker(t, "dying", "DEAD")
	died := about(outbox(t, normal.DB, event.WorkerDied), "dying")
	require.Len(t, died, 1)
	require.GreaterOrEqual(t, died[0].OccurredAt.Sub(dying.LastHeartbeatAt), 10*time.Second,
		"declared dead once silent for the dead threshold of database time")

	expired := normal.waitTask(t, overdue.ID, "DEAD")
	require.False(t, expired.FinishedAt.Before(*expired.Deadline), "expired at its deadline, not ten minutes early")

	eventually(t, func() bool {
		code, _ := normal.call(t, http.MethodGet, "/tasks/v1/"+old.ID, nil)
		return code == http.StatusNotFound
	}, "retention deletes the task finished six minutes ago")
	require.Equal(t, "DONE", normal.task(t, young.ID).Status, "the task finished just now is kept")
	require.Equal(t, "ACTIVE", normal.worker(t, "fresh").Status)
	require.Empty(t, about(outbox(t, normal.DB, event.WorkerStale, event.WorkerDied), "fresh"))
	require.Equal(t, "RUNNING", normal.task(t, leased.ID).Status, "a lease with a minute of database time left is not ten minutes expired")
}
