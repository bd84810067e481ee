// Package ha_test fails PostgreSQL over under load: a primary and a
// standby (synchronous, or asynchronous), two `taskmaster serve` processes
// whose TASKMASTER_DATABASE_URL lists both hosts, producers and workers;
// the primary is killed with SIGKILL (every process of it, as a crash of
// its machine) and the standby promoted, as Patroni or pg_auto_failover
// would. Nothing in Taskmaster is told: each new connection goes to the
// host that accepts writes.
//
// With a synchronous standby nothing acknowledged is lost; with an
// asynchronous one, what the standby had not received is, and the test
// shows how that looks (docs/operations.md#failover).
package ha_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/binary"
	"github.com/taskmaster/taskmaster/tests/workload"
)

const (
	queue = "failover"
	// gapAtLeast is how long no host accepts writes, at the least: the
	// probes run in it, and producers and workers feel it.
	gapAtLeast = 2 * time.Second
	// standbyName is the standby's name in synchronous_standby_names.
	standbyName = "standby1"
)

// jobs are the background jobs, as named in leader_leases.
var jobs = app.LeaderJobs()

// cluster is a primary, its standby and the database "taskmaster" on them.
type cluster struct {
	primary, standby *localpg.Server
	// url lists both hosts, the primary first.
	url string
}

// startCluster starts a primary and a standby streaming from it; with
// synchronous, every commit on the primary waits until the standby has
// flushed it (synchronous_commit=on), so an acknowledged commit is on both.
func startCluster(t *testing.T, synchronous bool) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	settings := map[string]string{"synchronous_commit": "on"}
	if synchronous {
		settings["synchronous_standby_names"] = standbyName
	}
	primary, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(t.TempDir(), "primary"), Fast: true, ExtraSettings: settings})
	require.NoError(t, err)
	t.Cleanup(func() { _ = primary.Stop() }) // an error once killed
	standby, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(t.TempDir(), "standby"), Fast: true,
		Primary: primary, StandbyName: standbyName})
	require.NoError(t, err)
	t.Cleanup(func() { _ = standby.Stop() })

	admin, err := sqlx.Connect("postgres", primary.URL("postgres"))
	require.NoError(t, err)
	defer admin.Close()
	want := "async"
	if synchronous {
		want = "sync"
	}
	workload.WaitUntil(t, "the standby streaming as "+want, func() bool {
		var state string
		err := admin.Get(&state, `SELECT sync_state FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'`, standbyName)
		return err == nil && state == want
	})
	_, err = admin.Exec(`CREATE DATABASE taskmaster`)
	require.NoError(t, err)
	return &cluster{primary: primary, standby: standby,
		url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/taskmaster?sslmode=disable", primary.Port(), standby.Port())}
}

// open opens a pool on the cluster's URL (whichever host is the primary).
func (c *cluster) open(t *testing.T) *sqlx.DB { return openURL(t, c.url) }

// openURL opens a pool on a URL listing the hosts; it goes to the primary.
func openURL(t *testing.T, url string) *sqlx.DB {
	t.Helper()
	db, err := postgres.Open(t.Context(), url, postgres.PoolConfig{MaxOpen: 4, Conn: postgres.DefaultConnConfig()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// failover is one run: the database's URL, the instances, the ledger and
// the stream, up to the promotion.
type failover struct {
	url       string
	cfg       workload.Config
	hc        *http.Client
	instances []*binary.Process
	l         *workload.Ledger
	stream    *workload.EventStream
	run       *workload.Run
	wake      *workload.Waker
	// woken receives the task ids of the long poll that waits across the
	// failover, started at pollStarted.
	woken       <-chan []string
	pollStarted time.Time
	ctx         context.Context
	// killedAt is when the primary was killed, promotedAt when the standby
	// accepted writes, promotedAtDB the new primary's clock just after.
	killedAt, promotedAt time.Time
	promotedAtDB         time.Time
	cancel               context.CancelFunc
	bg                   sync.WaitGroup
}

// start serves two instances on the database at url (its hosts listed),
// with extra settings in their environment, opens an event stream, starts
// a long poll that will wait across the failover, and runs the workload
// until a third of it is acknowledged.
func start(t *testing.T, url string, extra ...string) *failover {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	f := &failover{url: url, cfg: workload.DefaultConfig(queue), hc: &http.Client{Timeout: 40 * time.Second}, l: workload.NewLedger(),
		ctx: ctx, cancel: cancel}
	t.Cleanup(f.stop)
	db := openURL(t, url)
	bin := binary.Build(t)
	var urls []string
	for range 2 {
		in := binary.Serve(t, bin, workload.ServeEnv(url, extra...)...)
		f.instances = append(f.instances, in)
		urls = append(urls, in.URL)
	}

	f.stream = workload.NewEventStream(f.hc, urls[0]+"/events/v1?queue="+queue+"&type=task.completed", f.l)
	f.bg.Add(1)
	go func() {
		defer f.bg.Done()
		f.stream.Run(ctx)
	}()
	select {
	case <-f.stream.Connected():
	case <-time.After(workload.WaitFor):
		require.FailNow(t, "the event stream did not open")
	}

	f.wake = &workload.Waker{HC: f.hc, Instance: urls[0], Other: urls[1], L: f.l}
	f.wake.Register(t)
	f.longPoll(t)

	f.run = workload.Start(ctx, f.hc, f.cfg, urls, f.l)
	workload.WaitUntil(t, "a third of the tasks submitted and some done", func() bool {
		return f.l.AckedCount() >= f.cfg.Tasks()/3 && workload.CountStatus(t, db, queue, "DONE") >= 20
	})
	return f
}

// longPollWait is how long the long poll waits: the most a claim may.
const longPollWait = 30 * time.Second

// longPoll starts the long poll on "wake" and waits until it waits (after
// its first, empty attempt it subscribes, holding no connection).
func (f *failover) longPoll(t *testing.T) {
	t.Helper()
	f.pollStarted = time.Now()
	f.woken = f.wake.LongPoll(f.ctx, longPollWait)
	workload.WaitUntil(t, "the long poll waiting", func() bool {
		code, body, err := workload.Get(f.hc, f.instances[0].URL+"/metrics")
		return err == nil && code == http.StatusOK && strings.Contains(string(body), "\ntaskmaster_claims_waiting 1\n")
	})
}

// killAndPromote kills the primary, checks that every instance is unready
// and answers 503 to everything during the gap, and, after gapAtLeast,
// promotes the standby (or waits for the failover manager to).
func (f *failover) killAndPromote(t *testing.T, kill func() error, promote func(context.Context) error) {
	t.Helper()
	f.l.MarkDown()
	require.NoError(t, kill())
	f.killedAt = f.l.MarkGone()
	t.Logf("primary killed (SIGKILL) with %d of %d submits acknowledged", f.l.AckedCount(), f.cfg.Tasks())
	for _, in := range f.instances {
		workload.WaitUntil(t, "/readyz 503", func() bool {
			code, _, _ := workload.Get(f.hc, in.URL+"/readyz")
			return code == http.StatusServiceUnavailable
		})
	}
	t.Logf("/readyz said 503 on every instance %v after the kill", time.Since(f.killedAt).Round(time.Millisecond))
	for _, in := range f.instances {
		workload.ProbeUnavailable(t, f.hc, in.URL, queue, f.l)
	}
	for time.Since(f.killedAt) < gapAtLeast {
		time.Sleep(50 * time.Millisecond) // the gap's length, not a synchronisation
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, promote(ctx))
	f.promotedAt = f.l.MarkUp()
	db := openURL(t, f.url) // the new primary
	require.NoError(t, db.Get(&f.promotedAtDB, `SELECT now()`))
	t.Logf("standby promoted %v after the kill", f.promotedAt.Sub(f.killedAt).Round(time.Millisecond))
}

// requireResumed checks, on the new primary, that every instance is ready
// again, listens again (the long poll that waited across the failover is
// woken by a task submitted after it), leads every background job again
// (each lease renewed since the promotion, the reapers acting).
func (f *failover) requireResumed(t *testing.T, db *sqlx.DB) {
	t.Helper()
	for _, in := range f.instances {
		workload.WaitUntil(t, "/readyz 200", func() bool {
			code, _, _ := workload.Get(f.hc, in.URL+"/readyz")
			return code == http.StatusOK
		})
	}
	t.Logf("/readyz said 200 on every instance %v after the promotion", time.Since(f.promotedAt).Round(time.Millisecond))

	workload.WaitUntil(t, "every instance listening on the new primary", func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
			postgres.NotifierApplicationName))
		return n == len(f.instances)
	})
	across := "waiting since before the kill"
	if time.Since(f.pollStarted) > longPollWait-5*time.Second {
		// The gap outlasted what a claim may wait: the long poll answered
		// at its deadline, empty (a 200: the ledger would hold anything
		// else), as a client's next one does; that one waits for the task.
		select {
		case got := <-f.woken:
			require.Empty(t, got, "the long poll that outlived its wait")
		case <-time.After(workload.WaitFor):
			require.FailNow(t, "the long poll did not answer at its deadline")
		}
		f.longPoll(t)
		across = "started after the promotion (the gap outlasted a claim's longest wait)"
	}
	submitted := f.wake.Submit(t)
	select {
	case got := <-f.woken:
		require.Equal(t, []string{submitted}, got, "the long poll got the task submitted after it; %v", f.l.Unexpected())
	case <-time.After(workload.WaitFor):
		require.FailNow(t, "the long poll was not woken")
	}
	t.Logf("the long poll %s was woken by a task submitted %v after the promotion", across, time.Since(f.promotedAt).Round(time.Millisecond))

	workload.WaitUntil(t, "every background job led again", func() bool {
		var led []string
		require.NoError(t, db.Select(&led, `SELECT job FROM leader_leases WHERE renewed_at > $1 ORDER BY job`, f.promotedAtDB))
		return slices.Equal(led, jobs)
	})
	ghostTask := f.wake.Ghost(t)
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
	t.Logf("every background job led again and the reapers acted %v after the promotion", time.Since(f.promotedAt).Round(time.Millisecond))
}

// finish waits until every submit is acknowledged and every task the
// database holds is DONE, stops the workload, and waits until the event
// stream and the statistics of every instance caught up.
func (f *failover) finish(t *testing.T, db *sqlx.DB, streamed func() bool) {
	t.Helper()
	workload.WaitUntil(t, "every submit acknowledged", func() bool { return f.l.AckedCount() == f.cfg.Tasks() })
	workload.WaitUntil(t, "every task done", func() bool {
		var notDone int
		require.NoError(t, db.Get(&notDone, `SELECT count(*) FROM tasks WHERE queue = $1 AND status <> 'DONE'`, queue))
		return notDone == 0
	})
	t.Logf("every task done %v after the promotion", time.Since(f.promotedAt).Round(time.Millisecond))
	f.run.Stop()
	workload.WaitUntil(t, "the event stream caught up", streamed)
	for _, in := range f.instances {
		workload.WaitUntil(t, "statistics equal the tasks table on "+in.URL, func() bool {
			return workload.StatsMatch(t, f.hc, db, in.URL, queue)
		})
	}
	t.Logf("statistics equal the tasks table on every instance %v after the promotion", time.Since(f.promotedAt).Round(time.Millisecond))
	f.stop()
}

// stop ends the workload and the stream; calling it again does nothing.
func (f *failover) stop() {
	if f.run != nil {
		f.run.Stop()
	}
	f.cancel()
	f.bg.Wait()
}

// figures prints the figures of the run.
func figures(t *testing.T, kind string, o workload.Outcome, f workload.Figures) {
	t.Helper()
	t.Logf("FAILOVER (%s standby): tasks %d, acknowledged %d, lost %d, doubles %d, completed twice %d, gap %.2f s "+
		"(kill to the first success; the first request after the promotion succeeded after %.3f s), 503s %d, 500s %d",
		kind, o.Tasks, o.Acknowledged, len(o.Lost), len(o.Doubles), len(o.CompletedTwice), f.Gap.Seconds(),
		f.FirstSuccess.Seconds(), f.Refused503, f.Status500)
}

// The standby is synchronous: every commit Taskmaster acknowledged was on
// it when the primary died, so nothing is lost.
func TestFailoverToSynchronousStandbyLosesNothing(t *testing.T) {
	t.Parallel()
	c := startCluster(t, true)
	f := start(t, c.url)
	f.killAndPromote(t, c.primary.Kill, c.standby.Promote)
	db := c.open(t) // on the new primary
	f.requireResumed(t, db)
	f.finish(t, db, func() bool { return f.stream.Count() >= f.cfg.Tasks() })

	o := workload.Check(t, db, f.cfg, f.l)
	fig := f.l.Figures()
	figures(t, "synchronous", o, fig)
	require.Empty(t, fig.Unexpected, "answers that are neither success nor a 503 problem with Retry-After")
	require.Zero(t, fig.Status500)
	require.Positive(t, fig.Refused503, "the clients felt the failover")
	require.Less(t, fig.Slowest503, workload.AnswerWithin, "no request hung on the dead primary")
	require.Zero(t, fig.RefusedAfter, "requests sent later than workload.ReconnectGrace after the promotion were refused: %v", fig.RefusedAfterWhat)
	require.Empty(t, fig.Vanished, "tasks held by workers that the new primary does not know")
	o.RequireNothingLost(t, f.cfg)

	var done []string
	require.NoError(t, db.Select(&done, `SELECT id::text FROM tasks WHERE queue = $1`, queue))
	f.stream.RequireEveryCompletionOnce(t, done)
	require.Positive(t, f.stream.Resumed(), "the stream ended in the failover and resumed")
}

// The standby is asynchronous: commits are acknowledged without waiting for
// it. To make the loss certain rather than a matter of a few milliseconds,
// the primary's WAL sender is frozen (SIGSTOP) for a while before the kill:
// whatever was committed meanwhile never left the primary. Those submits were
// acknowledged and are gone; completions acknowledged meanwhile are lost
// too, so their tasks run again. Everything that remains is consistent.
func TestFailoverToAsynchronousStandbyLosesWhatItHadNotReceived(t *testing.T) {
	t.Parallel()
	c := startCluster(t, false)
	f := start(t, c.url)

	admin, err := sqlx.Connect("postgres", c.primary.URL("postgres"))
	require.NoError(t, err)
	var sender int
	require.NoError(t, admin.Get(&sender, `SELECT pid FROM pg_stat_replication WHERE application_name = $1`, standbyName))
	_ = admin.Close()
	frozenAt := time.Now()
	require.NoError(t, syscall.Kill(sender, syscall.SIGSTOP))
	// Submits sent after the freeze were committed after it.
	workload.WaitUntil(t, "submits acknowledged while the standby received nothing", func() bool {
		return len(f.l.AckedSentSince(frozenAt)) >= 10
	})
	unreplicated := f.l.AckedSentSince(frozenAt)
	f.killAndPromote(t, c.primary.Kill, c.standby.Promote) // the kill ends the frozen sender too
	db := c.open(t)
	f.requireResumed(t, db)
	f.finish(t, db, func() bool {
		var done []string
		require.NoError(t, db.Select(&done, `SELECT id::text FROM tasks WHERE queue = $1`, queue))
		seen := f.stream.Seen()
		for _, id := range done {
			if seen[id] == 0 {
				return false
			}
		}
		return true
	})

	o := workload.Check(t, db, f.cfg, f.l)
	fig := f.l.Figures()
	figures(t, "asynchronous", o, fig)
	require.Empty(t, fig.Unexpected, "answers that are neither success nor a 503 problem with Retry-After")
	require.Zero(t, fig.Status500)
	require.Zero(t, o.NotDone, "every task the new primary holds ends DONE")
	require.Empty(t, o.Doubles, "the new primary's outbox completes no task twice")

	// What was lost: the submits committed while nothing reached the
	// standby, all of them, and nothing acknowledged well before (the
	// sender was streaming until the freeze, a few milliseconds behind).
	require.NotEmpty(t, o.Lost, "an asynchronous standby loses what it had not received")
	require.Subset(t, o.Lost, unreplicated, "every submit committed after the freeze is lost")
	lostBefore := 0
	acked := f.l.AckedSince(frozenAt.Add(-2 * time.Second))
	for _, key := range o.Lost {
		if !slices.Contains(acked, key) {
			lostBefore++
		}
	}
	require.Zero(t, lostBefore, "a submit acknowledged before the freeze is lost")
	t.Logf("lost: %d acknowledged submits (%s ...); %d completions acknowledged twice (the first one lost, the task ran again); "+
		"%d tasks claimed from the old primary that the new one does not hold (their reports answered 404)",
		len(o.Lost), strings.Join(o.Lost[:min(5, len(o.Lost))], ", "), len(o.CompletedTwice), len(fig.Vanished))

	// The event stream delivered what the old primary committed, lost
	// transactions included. Resuming on the new primary, whose transaction
	// ids restart below the stream's position when it had read past what
	// the standby received, it was told that events were lost and went back
	// before the failover: every completion the new primary holds was
	// streamed, some twice.
	seen := f.stream.Seen()
	var done []string
	require.NoError(t, db.Select(&done, `SELECT id::text FROM tasks WHERE queue = $1`, queue))
	var missed []string
	repeated := 0
	for _, id := range done {
		switch {
		case seen[id] == 0:
			missed = append(missed, id)
		case seen[id] > 1:
			repeated++
		}
	}
	phantom := 0
	for id := range seen {
		if !slices.Contains(done, id) {
			phantom++
		}
	}
	t.Logf("the event stream resumed %d times with %d stream.events_lost notices: of the new primary's %d completions %d were not streamed and %d twice; %d streamed completions are of tasks it does not hold",
		f.stream.Resumed(), f.stream.LostNotices(), len(done), len(missed), repeated, phantom)
	// It is told when it had read past what the standby received: then it
	// streamed events the new primary does not have (of tasks it does not
	// hold). A stream that had not read that far has nothing to be told
	// (the run where the kill came before it did: no notice, nothing
	// missed, nothing phantom).
	if phantom > 0 {
		require.Positive(t, f.stream.LostNotices(), "the stream, which streamed events the new primary does not have, was told")
	}
	require.Empty(t, missed, "completions the new primary holds that the stream skipped")
}
