// Package outage_test restarts PostgreSQL (a fast shutdown, then a start on
// the same data directory and port) while producers and workers talk to two
// `taskmaster serve` processes, and checks what the service promises about
// a database outage: the servers stay up and reconnect by themselves;
// /readyz is 503 during the outage and 200 after; every request during the
// outage gets a 503 problem with Retry-After within a bounded time, never a
// hang or a 500; background jobs, projectors, the notifier and event streams
// resume; every submit answered 2xx ends DONE exactly once; and the queue
// statistics equal the truth recomputed from the tasks table.
//
// It runs its own PostgreSQL server (package localpg): the test harness's
// shared server must not be restarted under other tests.
package outage_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/tests/binary"
	"github.com/taskmaster/taskmaster/tests/workload"
)

const (
	queue = "outage"
	// outageAtLeast is how long the database stays down, at the least: the
	// probes run in it, and producers and workers feel it.
	outageAtLeast = 2 * time.Second
	// pace is the pace of the test's own waits in the outage.
	pace = 50 * time.Millisecond
)

func TestDatabaseRestartUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cfg := workload.DefaultConfig(queue)
	tasks := cfg.Tasks()

	pg, databaseURL, db := workload.StartDatabase(t)

	bin := binary.Build(t)
	var instances []*binary.Process
	var urls []string
	for range 2 {
		in := binary.Serve(t, bin,
			"TASKMASTER_DATABASE_URL="+databaseURL,
			"TASKMASTER_DB_MAX_CONNS=8",
			"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS=1.5",
			"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=60",
			"TASKMASTER_REAPER_INTERVAL_MS=200",
			"TASKMASTER_LEASE_REAPER_INTERVAL_MS=100",
			// Long polls wake only on notifications (or their own
			// deadline): the notifier must come back after the restart.
			"TASKMASTER_CLAIM_POLL_INTERVAL_MS=60000",
			"TASKMASTER_OUTBOX_RETENTION=1h", // keep every event for the checks
			"TASKMASTER_RETENTION_TTL=0",
		)
		instances = append(instances, in)
		urls = append(urls, in.URL)
	}
	hc := &http.Client{Timeout: 40 * time.Second}
	l := workload.NewLedger()

	// An event stream that resumes with Last-Event-ID whenever it ends.
	stream := workload.NewEventStream(hc, instances[0].URL+"/events/v1?queue="+queue+"&type=task.completed", l)
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

	// The owner of a long poll after the restart, registered long before it.
	wake := &workload.Waker{HC: hc, Instance: instances[0].URL, Other: instances[1].URL, L: l}
	wake.Register(t)

	run := workload.Start(ctx, hc, cfg, urls, l)
	t.Cleanup(run.Stop)

	// The outage, in the middle of the run.
	workload.WaitUntil(t, "a third of the tasks submitted and some done", func() bool {
		return l.AckedCount() >= tasks/3 && workload.CountStatus(t, db, queue, "DONE") >= 20
	})
	stoppedAt := l.MarkDown()
	require.NoError(t, pg.Stop(), "fast shutdown")
	l.MarkGone()
	t.Logf("database stopped (fast shutdown) in %v with %d of %d submits acknowledged", time.Since(stoppedAt).Round(time.Millisecond), l.AckedCount(), tasks)

	for _, in := range instances {
		workload.WaitUntil(t, "/readyz 503", func() bool {
			code, _, _ := workload.Get(hc, in.URL+"/readyz")
			return code == http.StatusServiceUnavailable
		})
	}
	t.Logf("/readyz said 503 on every instance %v after the stop began", time.Since(stoppedAt).Round(time.Millisecond))
	for _, in := range instances {
		workload.ProbeUnavailable(t, hc, in.URL, queue, l)
	}
	for time.Since(stoppedAt) < outageAtLeast {
		time.Sleep(pace) // the outage's length, not a synchronisation
	}

	restartAt := time.Now()
	pg, err := pg.StartAgain(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	started := l.MarkUp()
	t.Logf("database down for %v; start took %v", started.Sub(stoppedAt).Round(time.Millisecond), started.Sub(restartAt).Round(time.Millisecond))
	for _, in := range instances {
		workload.WaitUntil(t, "/readyz 200", func() bool {
			code, _, _ := workload.Get(hc, in.URL+"/readyz")
			return code == http.StatusOK
		})
	}
	t.Logf("/readyz said 200 on every instance %v after the database accepted connections", time.Since(started).Round(time.Millisecond))

	// The notifier: each instance listens again, and a long poll wakes on a
	// task submitted through the other instance (claims poll only every
	// minute here).
	workload.WaitUntil(t, "every instance listening again", func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
			postgres.NotifierApplicationName))
		return n == len(instances)
	})
	var touched time.Time
	require.NoError(t, db.Get(&touched, `SELECT last_heartbeat_at FROM workers WHERE id = 'waker'`))
	wakeStart := time.Now()
	wakeAnswer := wake.LongPoll(ctx, 20*time.Second)
	// The claim's first transaction refreshes the worker's sign of life
	// (registered seconds ago): after it, the claim subscribes and waits.
	workload.WaitUntil(t, "the long poll's first attempt", func() bool {
		var at time.Time
		require.NoError(t, db.Get(&at, `SELECT last_heartbeat_at FROM workers WHERE id = 'waker'`))
		return at.After(touched)
	})
	submitted := wake.Submit(t)
	select {
	case got := <-wakeAnswer:
		require.Equal(t, []string{submitted}, got, "the long poll got the task submitted after it began; %v", l.Unexpected())
	case <-time.After(workload.WaitFor):
		require.FailNow(t, "the long poll was not woken")
	}
	require.Less(t, time.Since(wakeStart), 15*time.Second, "woken by the notification, not by its 20 s deadline")

	// Background jobs: the lease reaper takes back a task whose lease runs
	// out after the restart, and the heartbeat reaper finds its silent
	// holder STALE.
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

	workload.WaitUntil(t, "every submit acknowledged", func() bool { return l.AckedCount() == tasks })
	workload.WaitUntil(t, "every task done", func() bool { return workload.CountStatus(t, db, queue, "DONE") == tasks })
	t.Logf("all %d tasks done %v after the restart", tasks, time.Since(started).Round(time.Millisecond))
	run.Stop()
	workload.WaitUntil(t, "the event stream caught up", func() bool { return stream.Count() >= tasks })

	// The statistics equal the truth, on every instance.
	for _, in := range instances {
		workload.WaitUntil(t, "statistics equal the tasks table on "+in.URL, func() bool { return workload.StatsMatch(t, hc, db, in.URL, queue) })
	}
	t.Logf("statistics equal the tasks table %v after the restart", time.Since(started).Round(time.Millisecond))

	cancel() // ends the event stream
	bg.Wait()

	f := l.Figures()
	require.Empty(t, f.Unexpected, "answers that are neither success nor a 503 problem with Retry-After")
	require.Positive(t, f.Refused503, "the clients felt the outage")
	require.Less(t, f.Slowest503, workload.AnswerWithin, "no request hung on the dead database")
	require.Zero(t, f.RefusedAfter, "requests sent later than workload.ReconnectGrace after the database was back were refused: %v", f.RefusedAfterWhat)
	require.Empty(t, f.Vanished, "tasks held by workers that the database does not know")
	t.Logf("%d requests answered 503 during the outage, the slowest in %v; the first request after the restart succeeded %v after it",
		f.Refused503, f.Slowest503.Round(time.Millisecond), f.FirstSuccess.Round(time.Millisecond))

	// Every acknowledged submit ends DONE, completed once.
	outcome := workload.Check(t, db, cfg, l)
	outcome.RequireNothingLost(t, cfg)

	// The event stream resumed across the outage without loss or repeats.
	var done []string
	require.NoError(t, db.Select(&done, `SELECT id::text FROM tasks WHERE queue = $1`, queue))
	stream.RequireEveryCompletionOnce(t, done)
	require.Positive(t, stream.Resumed(), "the stream ended in the outage and resumed")
	t.Logf("the event stream resumed %d times and delivered each of the %d completions once", stream.Resumed(), tasks)
}
