package runtimes

import (
	"context"
	"encoding/json"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/faultproxy"
)

// countFaulted counts the requests on route ("" for any) that the proxy
// answered itself (a status) or refused.
func countFaulted(p *faultproxy.Proxy, route string) int {
	return p.Count(route, faultproxy.ActionStatus) + p.Count(route, faultproxy.ActionRefuse)
}

// onRoute reports whether e is a request on route (a faultproxy pattern).
func onRoute(e faultproxy.Exchange, route string) bool {
	method, pattern, _ := strings.Cut(route, " ")
	ok, err := path.Match(pattern, e.Path)
	return e.Method == method && err == nil && ok
}

// faultedBefore counts the requests on route that the proxy answered itself
// or refused before the first request on next came.
func faultedBefore(p *faultproxy.Proxy, route, next string) int {
	n := 0
	for _, e := range p.Log() {
		if onRoute(e, next) {
			break
		}
		if onRoute(e, route) && (e.Action == faultproxy.ActionStatus || e.Action == faultproxy.ActionRefuse) {
			n++
		}
	}
	return n
}

// timeline records, in order, what the handlers of several workers did.
type timeline struct {
	mu     sync.Mutex
	events []string
}

func (l *timeline) note(e string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, e)
}

func (l *timeline) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// claimAsOther registers the worker "other" on queue and claims until it
// gets a task, which it returns.
func claimAsOther(t *testing.T, c *client.Client, queue string) client.Task {
	t.Helper()
	_, err := c.Register(context.Background(), client.RegisterParams{ID: "other", Queues: []string{queue}})
	require.NoError(t, err)
	var taken []client.Task
	poll(t, 30*time.Second, "the task to be taken back and claimed by another worker", func() bool {
		taken, err = c.Claim(context.Background(), client.ClaimParams{WorkerID: "other"})
		require.NoError(t, err)
		return len(taken) == 1
	})
	return taken[0]
}

// finished reports whether a task is DONE or DEAD.
func finished(t *testing.T, c *client.Client, id string) func() bool {
	return func() bool {
		s := getTask(t, c, id).Status
		return s == client.StatusDone || s == client.StatusDead
	}
}

// faultRun is a runner, through a fault proxy, that handled one task.
type faultRun struct {
	p      *faultproxy.Proxy
	fault  *faultproxy.Injection
	r      *runner
	direct *client.Client
	task   *client.Task
	runs   atomic.Int32
}

// completeThroughFault submits a task on its last attempt to a fresh
// server and runs a runner with cfg through a fault proxy (Concurrency 1
// unless cfg says); the handler returns its result once fault is in. It
// returns when the task finished.
func completeThroughFault(t *testing.T, cfg client.RunnerConfig, fault faultproxy.Fault) *faultRun {
	t.Helper()
	s := startServer(t, nil)
	o := &faultRun{p: faultproxy.Start(t, s.URL), direct: sdk(t, s.URL)}
	o.task = submit(t, o.direct, client.SubmitParams{Queue: cfg.Queues[0], MaxAttempts: 1, Payload: map[string]int{"n": 7}})
	started, proceed := make(chan struct{}), make(chan struct{})
	o.r = startRunner(t, sdk(t, o.p.URL()), cfg, func(ctx context.Context, tk client.Task) (any, error) {
		if o.runs.Add(1) == 1 {
			close(started)
		}
		<-proceed
		return map[string]any{"ok": true, "payload": tk.Payload}, nil
	})
	<-started
	o.fault = o.p.Inject(fault)
	close(proceed)
	poll(t, 60*time.Second, "the task to finish", finished(t, o.direct, o.task.ID))
	return o
}

// requireCompletedOnce requires the task DONE with the handler's result,
// on its one attempt, the handler run once.
func (o *faultRun) requireCompletedOnce(t *testing.T) {
	t.Helper()
	got := getTask(t, o.direct, o.task.ID)
	require.Equal(t, client.StatusDone, got.Status, "dead reason %q, last error %q", got.DeadReason, got.LastError)
	require.JSONEq(t, `{"ok":true,"payload":{"n":7}}`, string(got.Result))
	require.Equal(t, []client.AttemptOutcome{client.AttemptCompleted}, outcomes(t, o.direct, o.task.ID))
	require.EqualValues(t, 1, o.runs.Load(), "the handler ran once")
}

// Item 1: a successful task's completion survives an outage longer than the
// client's own retries (5 tries, about 1.5 s without Retry-After): a full
// outage (every route answers 503 for 4 s), a restart (every connection
// refused for 3 s), and the reports and claims alone refused for 4 s (the
// heartbeats, listing the task, renew its 2 s lease meanwhile). The
// handler returns while the runner (Concurrency 1) waits for a free slot,
// so the completion rides its next claim, refused until the client gives
// up on it; the runner keeps the task and sends the complete on its own
// until it is accepted: the task, on its last attempt, ends DONE with its
// result, the handler run once.
func TestRunnerCompletionSurvivesAnOutage(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name  string
		fault faultproxy.Fault
		lease int
	}{
		{"full outage", faultproxy.Unavailable(0).For(4 * time.Second), 30},
		{"restart", faultproxy.Refuse().For(3 * time.Second), 30},
		{"reports and claims refused, heartbeats through", faultproxy.Unavailable(0).On(append(faultproxy.Reports, faultproxy.Claim)...).For(4 * time.Second), 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := completeThroughFault(t, client.RunnerConfig{
				WorkerID: "outage-w", Queues: []string{"outage"}, LeaseSeconds: c.lease, HeartbeatInterval: 200 * time.Millisecond,
			}, c.fault)
			o.requireCompletedOnce(t)
			p := o.p
			// Refused more often than the client retries on its own: on
			// the claim until the client gave up on it, then on its own.
			require.GreaterOrEqual(t, faultedBefore(p, faultproxy.Claim, faultproxy.Complete), client.DefaultRetryPolicy().MaxAttempts,
				"the completion rode the claim, refused until the client gave up on it")
			require.Positive(t, countFaulted(p, faultproxy.Complete), "then the complete on its own was refused, the outage not over")
			require.Equal(t, countFaulted(p, ""), o.fault.Hits())
		})
	}
}

// A completion that rides the runner's next claim (Concurrency 1: the
// runner waits for a free slot as the handler returns) is not lost when
// that claim meets an outage: refused (connections reset for 4 s, longer
// than the client retries a claim), it goes on its own; with its answers
// dropped after the server saved it, the client's repeats (the same
// request_id) learn that the task is DONE, which counts as delivered, and
// so does the complete on its own when every answer was dropped. Either
// way the task ends DONE with its result, on one attempt, the handler run
// once; and the heartbeats, listing the task meanwhile, never take its
// report's success for a lost lease.
func TestRunnerReportOnAClaimSurvivesAnOutage(t *testing.T) {
	t.Parallel()
	retries := client.DefaultRetryPolicy().MaxAttempts
	for _, c := range []struct {
		name      string
		fault     faultproxy.Fault
		hits      int   // the claim tries the fault met at least
		completes []int // the statuses of the completes sent on their own
	}{
		{"claim refused", faultproxy.Refuse().On(faultproxy.Claim).For(4 * time.Second), retries, []int{http.StatusOK}},
		{"claim answers dropped", faultproxy.DropAnswers().On(faultproxy.Claim).Times(retries - 1), retries - 1, nil},
		{"every claim answer dropped", faultproxy.DropAnswers().On(faultproxy.Claim).Times(retries), retries, []int{http.StatusConflict}},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := completeThroughFault(t, client.RunnerConfig{
				WorkerID: "carried-w", Queues: []string{"carried"}, HeartbeatInterval: 100 * time.Millisecond,
			}, c.fault)
			// Run returns once the claim under way and the reports are over.
			require.NoError(t, o.r.stop())
			o.requireCompletedOnce(t)
			p, fault := o.p, o.fault
			require.GreaterOrEqual(t, fault.Hits(), c.hits, "the claim carrying the completion met the outage")
			var statuses []int
			for _, e := range p.Log() {
				if onRoute(e, faultproxy.Complete) {
					statuses = append(statuses, e.Status)
				}
			}
			require.Equal(t, c.completes, statuses, "the completes sent on their own")
			require.Zero(t, p.Count(faultproxy.Fail, ""))
			logs := o.r.logs.String()
			require.NotContains(t, logs, "dropping", "no outcome dropped")
			require.NotContains(t, logs, "task lost", "a report saved is not a lost lease")
		})
	}
}

// Item 2: throttling is not a verdict. Completes answered 429 for 6 s
// (longer than the client retries on its own) are retried after each
// Retry-After, not taken for the server rejecting the results: every task
// ends DONE. The handlers return while the runner's next claim waits on
// the server (it has a free slot), so each complete goes on its own.
func TestRunnerRetriesThrottledReports(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	p := faultproxy.Start(t, s.URL)
	direct := sdk(t, s.URL)
	var ids []string
	for range 3 {
		ids = append(ids, submit(t, direct, client.SubmitParams{Queue: "throttled", MaxAttempts: 1}).ID)
	}
	throttle := p.Inject(faultproxy.TooManyRequests(time.Second).On(faultproxy.Complete).For(6 * time.Second))
	proceed := make(chan struct{})
	startRunner(t, sdk(t, p.URL()), client.RunnerConfig{
		WorkerID: "throttled-w", Queues: []string{"throttled"}, Concurrency: 4, ClaimWait: 5 * time.Second,
	}, func(context.Context, client.Task) (any, error) {
		<-proceed
		return "ok", nil
	})
	poll(t, 30*time.Second, "the runner's second claim, a long poll", func() bool { return p.Count(faultproxy.Claim, "") >= 2 })
	close(proceed)
	for _, id := range ids {
		poll(t, 60*time.Second, "the tasks to finish", finished(t, direct, id))
	}
	for _, id := range ids {
		got := getTask(t, direct, id)
		require.Equal(t, client.StatusDone, got.Status, "dead reason %q, last error %q", got.DeadReason, got.LastError)
		require.Equal(t, []client.AttemptOutcome{client.AttemptCompleted}, outcomes(t, direct, id))
	}
	require.Greater(t, throttle.Hits(), 3*5, "each complete was refused more often than the client retries on its own")
	require.Zero(t, p.Count(faultproxy.Fail, ""), "no task was failed")
	// Retry-After was honoured: a task's next complete came at least a
	// second after the one refused.
	last := map[string]time.Time{}
	for _, e := range p.Log() {
		if e.Method != http.MethodPost || !strings.HasSuffix(e.Path, "/complete") {
			continue
		}
		if prev, ok := last[e.Path]; ok {
			require.GreaterOrEqual(t, e.At.Sub(prev), time.Second, "%s retried before Retry-After", e.Path)
		}
		last[e.Path] = e.At
	}
}

// Item 2: an authentication answer stops the worker loudly (Run returns
// the problem) without failing the task: it stays RUNNING, to be taken back
// by the server, with no failed attempt. The key is refused on every route
// once the handler runs; its report goes on its own (the runner's next
// claim waits on the server) or rides that claim (the runner waits for a
// free slot), then on its own: refused both ways, once.
func TestRunnerStopsOnAuthenticationProblemsWithoutFailingTasks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name        string
		concurrency int
	}{
		{"report on its own", 2},
		{"report on a claim", 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			s := startServer(t, nil)
			p := faultproxy.Start(t, s.URL)
			direct := sdk(t, s.URL)
			task := submit(t, direct, client.SubmitParams{Queue: "auth", MaxAttempts: 1})
			started, proceed := make(chan struct{}), make(chan struct{})
			r := startRunner(t, sdk(t, p.URL()), client.RunnerConfig{
				WorkerID: "auth-w", Queues: []string{"auth"}, Concurrency: c.concurrency, ClaimWait: 5 * time.Second,
			}, func(context.Context, client.Task) (any, error) {
				close(started)
				<-proceed
				return "ok", nil
			})
			<-started
			if c.concurrency > 1 {
				poll(t, 30*time.Second, "the runner's second claim, a long poll", func() bool { return p.Count(faultproxy.Claim, "") >= 2 })
			}
			p.Inject(faultproxy.Status(http.StatusUnauthorized, 0))
			close(proceed)
			err := r.wait(30 * time.Second)
			require.Error(t, err, "Run returns on its own")
			prob, ok := client.AsProblem(err)
			require.True(t, ok, "%v", err)
			require.Equal(t, http.StatusUnauthorized, prob.Status)
			require.Contains(t, r.logs.String(), "refused this worker's credentials")
			got := getTask(t, direct, task.ID)
			require.Equal(t, client.StatusRunning, got.Status, "not failed: the server takes it back")
			require.Equal(t, []client.AttemptOutcome{""}, outcomes(t, direct, task.ID))
			require.Zero(t, p.Count(faultproxy.Fail, ""))
			require.Equal(t, 1, p.Count(faultproxy.Complete, ""), "the complete, refused, is not retried")
		})
	}
}

// Item 4: a stopping runner hands the tasks it will not finish back
// without spending their attempts, in one batch request: on their last
// attempt they are PENDING again, not DEAD, their attempts ended released.
// Both the handler that returns when cancelled and the one that ignores
// its context are released.
func TestRunnerDrainReleasesTasksWithoutSpendingAttempts(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	p := faultproxy.Start(t, s.URL)
	direct := sdk(t, s.URL)
	var ids []string
	for _, mode := range []string{"cooperative", "cooperative", "ignore"} {
		ids = append(ids, submit(t, direct, client.SubmitParams{Queue: "drain", MaxAttempts: 1, Payload: mode}).ID)
	}
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	var started atomic.Int32
	causes := make(chan error, 3)
	r := startRunner(t, sdk(t, p.URL()), client.RunnerConfig{
		WorkerID: "drain-w", Queues: []string{"drain"}, Concurrency: 3,
		DrainTimeout: 100 * time.Millisecond, CancelGrace: 300 * time.Millisecond,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		started.Add(1)
		var mode string
		_ = tk.DecodePayload(&mode)
		if mode == "ignore" {
			<-hold
			return "too late", nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	poll(t, 30*time.Second, "three handlers to start", func() bool { return started.Load() == 3 })
	require.NoError(t, r.stop())
	for range 2 {
		require.ErrorIs(t, <-causes, client.ErrShutdown)
	}
	for _, id := range ids {
		got := getTask(t, direct, id)
		require.Equal(t, client.StatusPending, got.Status, "task %s", id)
		require.Equal(t, 0, got.Attempts, "the attempt was given back")
		require.Empty(t, got.LastError)
		require.Equal(t, []client.AttemptOutcome{client.AttemptReleased}, outcomes(t, direct, id))
	}
	require.Equal(t, 1, p.Count(faultproxy.ReleaseBatch, faultproxy.ActionForward), "one request for the whole drain")
	require.Zero(t, p.Count(faultproxy.Fail, ""))
	require.Zero(t, p.Count(faultproxy.Release, ""))
}

// Item 6: a runner that cannot renew its lease stops its handler before
// the lease runs out, by its own clock: partitioned from the server for
// longer than its 4 s lease, the handler's context is cancelled with
// ErrTaskLost before the task, taken back by the server, starts on another
// worker; after the partition the lost runner reports nothing for it.
func TestRunnerStopsAHandlerWhoseLeaseItCannotRenew(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	p := faultproxy.Start(t, s.URL)
	direct := sdk(t, s.URL)
	task := submit(t, direct, client.SubmitParams{Queue: "partition"})

	var seen timeline
	started := make(chan struct{})
	causes := make(chan error, 1)
	lost := startRunner(t, sdk(t, p.URL()), client.RunnerConfig{
		WorkerID: "partitioned", Queues: []string{"partition"}, LeaseSeconds: 4, HeartbeatInterval: 300 * time.Millisecond,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		seen.note("partitioned started")
		close(started)
		<-ctx.Done()
		seen.note("partitioned stopped")
		causes <- context.Cause(ctx)
		return "too late", nil
	})
	<-started
	partition := p.Inject(faultproxy.Hang().For(12 * time.Second))

	taken := claimAsOther(t, direct, "partition")
	seen.note("other started")
	require.Equal(t, task.ID, taken.ID)
	require.ErrorIs(t, <-causes, client.ErrTaskLost)
	require.Equal(t, []string{"partitioned started", "partitioned stopped", "other started"}, seen.get(), "never two handlers at once")

	partition.Remove()
	poll(t, 30*time.Second, "the partitioned runner to drop the outcome", func() bool {
		return strings.Contains(lost.logs.String(), "dropping the outcome of a lost task")
	})
	require.NoError(t, lost.stop())
	require.Zero(t, p.Count(faultproxy.Complete, faultproxy.ActionForward), "the lost task's result is not reported")
	require.Zero(t, p.Count(faultproxy.Fail, faultproxy.ActionForward))
	require.Zero(t, p.Count(faultproxy.ReleaseBatch, faultproxy.ActionForward))
	got := getTask(t, direct, task.ID)
	require.Equal(t, "other", got.WorkerID)
	require.Equal(t, taken.LeaseID, got.LeaseID)
}

// Item 6, the claim's side: a claim whose answer was lost is repeated and
// answered with the tasks the lost answer carried, whose leases started
// with the first try. The runner counts such a lease from the first try:
// here the first answer is dropped and the repeat held 2 s, the heartbeats
// never get through, and the handler still stops before the 3 s lease runs
// out and another worker gets the task.
func TestRunnerCountsALeaseFromTheFirstTryOfARepeatedClaim(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	p := faultproxy.Start(t, s.URL)
	direct := sdk(t, s.URL)
	task := submit(t, direct, client.SubmitParams{Queue: "replay"})
	p.Inject(faultproxy.Hang().On(faultproxy.Heartbeat))
	p.Inject(faultproxy.DropAnswers().On(faultproxy.Claim).Times(1))
	p.Inject(faultproxy.Delay(2 * time.Second).On(faultproxy.Claim).Times(1))

	var seen timeline
	started := make(chan struct{})
	causes := make(chan error, 1)
	startRunner(t, sdk(t, p.URL()), client.RunnerConfig{
		WorkerID: "replayed", Queues: []string{"replay"}, LeaseSeconds: 3, HeartbeatInterval: 300 * time.Millisecond,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		seen.note("replayed started")
		close(started)
		<-ctx.Done()
		seen.note("replayed stopped")
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	})
	<-started
	// Drained, the runner does not claim the task again once it gave it up.
	_, err := direct.Drain(context.Background(), "replayed")
	require.NoError(t, err)
	taken := claimAsOther(t, direct, "replay")
	seen.note("other started")
	require.Equal(t, task.ID, taken.ID)
	require.Equal(t, 1, p.Count(faultproxy.Claim, faultproxy.ActionDrop))
	require.Equal(t, 1, p.Count(faultproxy.Claim, faultproxy.ActionDelay))
	require.ErrorIs(t, <-causes, client.ErrTaskLost)
	require.Equal(t, []string{"replayed started", "replayed stopped", "other started"}, seen.get(), "never two handlers at once")
}

// Item 7: concurrency is a promise. Handlers that ignore their contexts run
// past TaskTimeout and CancelGrace; the runner fails their tasks on their
// behalf but keeps their slots until they return: never more than
// Concurrency handlers run at once.
func TestRunnerHoldsASlotUntilItsHandlerReturns(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil)
	direct := sdk(t, s.URL)
	var ids []string
	for range 6 {
		ids = append(ids, submit(t, direct, client.SubmitParams{Queue: "slots", MaxAttempts: 1}).ID)
	}
	hold := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(hold) }) }
	t.Cleanup(letGo)
	var running, most, started atomic.Int32
	startRunner(t, direct, client.RunnerConfig{
		WorkerID: "slots-w", Queues: []string{"slots"}, Concurrency: 2,
		TaskTimeout: 100 * time.Millisecond, CancelGrace: 100 * time.Millisecond,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		started.Add(1)
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-hold // ignores its context
		return "done", nil
	})
	dead := func() int {
		n := 0
		for _, id := range ids {
			if getTask(t, direct, id).Status == client.StatusDead {
				n++
			}
		}
		return n
	}
	poll(t, 30*time.Second, "two tasks failed on their stuck handlers' behalf", func() bool { return dead() == 2 })
	// The old runner freed both slots here and started more handlers
	// within milliseconds; give it time to show it.
	time.Sleep(500 * time.Millisecond)
	require.EqualValues(t, 2, started.Load(), "no handler starts while two still run")
	letGo()
	for _, id := range ids {
		poll(t, 30*time.Second, "every task to finish", finished(t, direct, id))
	}
	require.EqualValues(t, 2, most.Load(), "never more than Concurrency handlers at once")
	for _, id := range ids {
		var res any
		got := getTask(t, direct, id)
		if got.Status == client.StatusDone {
			require.NoError(t, json.Unmarshal(got.Result, &res))
			require.Equal(t, "done", res)
		} else {
			require.Contains(t, got.LastError, "did not return")
		}
	}
	require.Equal(t, 2, dead())
}

// A lease shorter than three of the server's heartbeat intervals (3 s
// against 10 s here) is renewed in time all the same: the runner beats
// every third of the shortest lease it holds, so a handler that runs twice
// as long as its lease is not taken for lost, and completes.
func TestRunnerHeartbeatsOftenEnoughForShortLeases(t *testing.T) {
	t.Parallel()
	s := startServer(t, func(c *app.Config) { c.App.Liveness.StaleAfter = 30 * time.Second })
	direct := sdk(t, s.URL)
	task := submit(t, direct, client.SubmitParams{Queue: "short-lease", MaxAttempts: 1})
	causes := make(chan error, 1)
	startRunner(t, direct, client.RunnerConfig{WorkerID: "short-lease-w", Queues: []string{"short-lease"}, LeaseSeconds: 3},
		func(ctx context.Context, tk client.Task) (any, error) {
			select {
			case <-time.After(6 * time.Second): // the work: twice the lease
				return "done", nil
			case <-ctx.Done():
				causes <- context.Cause(ctx)
				return nil, ctx.Err()
			}
		})
	poll(t, 60*time.Second, "the task to finish", finished(t, direct, task.ID))
	got := getTask(t, direct, task.ID)
	require.Equal(t, client.StatusDone, got.Status, "dead reason %q, last error %q", got.DeadReason, got.LastError)
	require.Equal(t, []client.AttemptOutcome{client.AttemptCompleted}, outcomes(t, direct, task.ID))
	select {
	case err := <-causes:
		t.Fatalf("the handler was cancelled: %v", err)
	default:
	}
}

// A claim's answer that arrives later than the server's heartbeat interval
// (the orphan grace) does not cost the task: heartbeats sent while the
// claim is in flight name it (claims_in_flight), so the server does not
// take its task back as orphaned, and the handler runs once, on the first
// attempt. Without it, a heartbeat that listed nothing was processed after
// the grace, the task was requeued as orphaned, and the late answer started
// a handler whose task was already gone.
func TestRunnerKeepsATaskWhoseClaimAnswerIsLate(t *testing.T) {
	t.Parallel()
	s := startServer(t, nil) // asks for a heartbeat every 2 s: the grace
	p := faultproxy.Start(t, s.URL)
	direct := sdk(t, s.URL)
	task := submit(t, direct, client.SubmitParams{Queue: "late-answer"})
	delayed := p.Inject(faultproxy.DelayAnswers(3500 * time.Millisecond).On(faultproxy.Claim).Times(1))

	var runs atomic.Int32
	startRunner(t, sdk(t, p.URL()), client.RunnerConfig{
		WorkerID: "late", Queues: []string{"late-answer"}, HeartbeatInterval: 200 * time.Millisecond,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		runs.Add(1)
		return "ok", nil
	})
	poll(t, 30*time.Second, "the task done", finished(t, direct, task.ID))
	require.Equal(t, 1, delayed.Hits(), "the claim's answer was held")
	require.Equal(t, client.StatusDone, getTask(t, direct, task.ID).Status)
	require.Equal(t, []client.AttemptOutcome{client.AttemptCompleted}, outcomes(t, direct, task.ID), "one attempt, completed")
	require.EqualValues(t, 1, runs.Load(), "the handler ran once")
}
