// Package pooler_test runs two `taskmaster serve` processes through
// PgBouncer in transaction pooling (Debian's pgbouncer, started by the
// test), with only the notifier's LISTEN on a direct connection
// (TASKMASTER_LISTEN_DATABASE_URL), and checks that the whole service
// works: migrations on an empty database, submits, long polls woken by
// notifications, claims and reports, leadership of every background job
// (the reapers act, the scheduler ticks), the outbox consumers (the
// statistics equal the truth) and event streams.
//
// TASKMASTER_TEST_PGBOUNCER=1 also runs every end-to-end test of package
// tests through such a PgBouncer (tests/testserver).
package pooler_test

import (
	"context"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/binary"
	"github.com/taskmaster/taskmaster/tests/workload"
)

const queue = "pooled"

// jobs are the background jobs, as named in leader_leases.
var jobs = app.LeaderJobs()

func TestServiceThroughPgBouncerTransactionPooling(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pg, databaseURL, db := workload.StartDatabase(t)
	const poolSize = 6
	bouncer, err := localpg.StartPgBouncer(ctx, localpg.BouncerConfig{Dir: filepath.Join(t.TempDir(), "pgbouncer"), ServerPort: pg.Port(), PoolSize: poolSize})
	require.NoError(t, err)
	t.Cleanup(bouncer.Stop)

	bin := binary.Build(t)
	var instances []*binary.Process
	var urls []string
	for range 2 {
		in := binary.Serve(t, bin, workload.ServeEnv(bouncer.URL("taskmaster"),
			"TASKMASTER_LISTEN_DATABASE_URL="+databaseURL,
			// No prepared statements: they belong to a server session, and
			// the next transaction may run on another.
			"TASKMASTER_DB_TRANSACTION_POOLING=on",
			"TASKMASTER_DB_MAX_CONNS=20", // more than the pooler's server connections
		)...)
		instances = append(instances, in)
		urls = append(urls, in.URL)
	}
	hc := &http.Client{Timeout: 40 * time.Second}
	l := workload.NewLedger()
	cfg := workload.DefaultConfig(queue)

	// Migrations went through the pooler, once.
	var applied int
	require.NoError(t, db.Get(&applied, `SELECT count(*) FROM schema_migrations`))
	pending, err := postgres.Pending(ctx, db)
	require.NoError(t, err)
	require.Empty(t, pending)
	require.Positive(t, applied)

	stream := workload.NewEventStream(hc, urls[0]+"/events/v1?queue="+queue+"&type=task.completed", l)
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		stream.Run(ctx)
	}()
	select {
	case <-stream.Connected():
	case <-time.After(workload.WaitFor):
		require.FailNow(t, "the event stream did not open")
	}

	// A long poll, woken by a task submitted through the other instance:
	// the notification went from a pooled transaction to the direct
	// listening session.
	wake := &workload.Waker{HC: hc, Instance: urls[0], Other: urls[1], L: l}
	wake.Register(t)
	woken := wake.LongPoll(ctx, 30*time.Second)
	workload.WaitUntil(t, "the long poll waiting", func() bool {
		code, body, err := workload.Get(hc, urls[0]+"/metrics")
		return err == nil && code == http.StatusOK && strings.Contains(string(body), "\ntaskmaster_claims_waiting 1\n")
	})
	submitted := wake.Submit(t)
	select {
	case got := <-woken:
		require.Equal(t, []string{submitted}, got, "%v", l.Unexpected())
	case <-time.After(workload.WaitFor):
		require.FailNow(t, "the long poll was not woken")
	}

	// The scheduler ticks (it leads through a lease, one transaction at a
	// time), and the producers and workers run.
	code, _, body, err := workload.PostJSON(ctx, hc, urls[1]+"/schedules/v1",
		map[string]any{"name": "beat", "cron": "@every 1s", "overlap": "allow", "task": map[string]any{"queue": "beats"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", body)
	run := workload.Start(ctx, hc, cfg, urls, l)
	t.Cleanup(run.Stop)

	ghostTask := wake.Ghost(t)
	workload.WaitUntil(t, "the lease reaper requeued the ghost's task", func() bool {
		var status string
		require.NoError(t, db.Get(&status, `SELECT status FROM tasks WHERE id = $1`, ghostTask))
		return status == "PENDING"
	})
	workload.WaitUntil(t, "the heartbeat reaper found the ghost STALE", func() bool {
		var status string
		require.NoError(t, db.Get(&status, `SELECT status FROM workers WHERE id = 'ghost'`))
		return status == "STALE"
	})
	workload.WaitUntil(t, "two ticks of the schedule", func() bool {
		return workload.CountStatus(t, db, "beats", "PENDING") >= 2
	})
	workload.WaitUntil(t, "every job led", func() bool {
		var led []string
		require.NoError(t, db.Select(&led, `SELECT job FROM leader_leases WHERE expires_at > now() ORDER BY job`))
		return slices.Equal(led, jobs)
	})

	workload.WaitUntil(t, "every submit acknowledged", func() bool { return l.AckedCount() == cfg.Tasks() })
	workload.WaitUntil(t, "every task done", func() bool { return workload.CountStatus(t, db, queue, "DONE") == cfg.Tasks() })
	run.Stop()
	workload.WaitUntil(t, "the event stream caught up", func() bool { return stream.Count() >= cfg.Tasks() })
	for _, in := range instances {
		workload.WaitUntil(t, "statistics equal the tasks table on "+in.URL, func() bool { return workload.StatsMatch(t, hc, db, in.URL, queue) })
	}
	cancel()
	bg.Wait()

	// The pooler served both instances' pools with its few server
	// connections; only the listening sessions are direct.
	var direct, pooled int
	require.NoError(t, db.Get(&direct, `SELECT count(*) FROM pg_stat_activity WHERE datname = 'taskmaster' AND application_name = $1`,
		postgres.NotifierApplicationName))
	require.Equal(t, len(instances), direct, "one listening session per instance")
	require.NoError(t, db.Get(&pooled, `SELECT count(*) FROM pg_stat_activity WHERE datname = 'taskmaster' AND application_name <> $1
		AND pid <> pg_backend_pid()`, postgres.NotifierApplicationName))
	require.LessOrEqual(t, pooled, poolSize, "server connections of the pooler, for two pools of 20")

	f := l.Figures()
	require.Empty(t, f.Unexpected, "answers other than success")
	require.Zero(t, f.Refused503)
	workload.Check(t, db, cfg, l).RequireNothingLost(t, cfg)
	var done []string
	require.NoError(t, db.Select(&done, `SELECT id::text FROM tasks WHERE queue = $1`, queue))
	stream.RequireEveryCompletionOnce(t, done)
}
