package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// sdkRetries keeps transient-error retries quick in tests.
var sdkRetries = client.RetryPolicy{MaxAttempts: 5, BaseDelay: 5 * time.Millisecond, MaxDelay: 50 * time.Millisecond}

func newSDK(t *testing.T, url string, transport http.RoundTripper) *client.Client {
	t.Helper()
	if transport == nil {
		transport = http.DefaultTransport
	}
	c, err := client.New(url, client.WithRetryPolicy(sdkRetries), client.WithHTTPClient(&http.Client{Transport: transport, Timeout: 30 * time.Second}))
	require.NoError(t, err)
	return c
}

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func testLogger(t *testing.T) (*slog.Logger, *syncBuffer) {
	t.Helper()
	buf := &syncBuffer{}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("runner log:\n%s", buf.String())
		}
	})
	return slog.New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug})), buf
}

// startRunner runs a runner with cfg (fast polling, short long polls and a
// captured log unless set) until the returned stop function is called; stop
// waits for Run to return and hands back its error.
func startRunner(t *testing.T, c *client.Client, cfg client.RunnerConfig, h client.HandlerFunc) (stop func() error, logs *syncBuffer) {
	t.Helper()
	if cfg.PollInterval == 0 {
		cfg.PollInterval, cfg.MaxIdleInterval = 5*time.Millisecond, 20*time.Millisecond
	}
	if cfg.ClaimWait == 0 {
		cfg.ClaimWait = 500 * time.Millisecond // an idle runner stops within it
	}
	if cfg.Logger == nil {
		cfg.Logger, logs = testLogger(t)
	}
	r, err := client.NewRunner(c, cfg, h)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return stopper(t, cancel, done, "runner"), logs
}

// stopper returns a function that cancels a running thing and waits (at
// most 30 s) for its error; it also runs at cleanup.
func stopper(t *testing.T, cancel context.CancelFunc, done <-chan error, what string) func() error {
	t.Helper()
	var once sync.Once
	var err error
	stop := func() error {
		once.Do(func() {
			cancel()
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				err = fmt.Errorf("%s did not stop within 30 s", what)
			}
		})
		return err
	}
	t.Cleanup(func() { _ = stop() })
	return stop
}

func submitN(t *testing.T, c *client.Client, queue string, n int, payload func(i int) any) []string {
	t.Helper()
	ids := make([]string, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	const producers = 8
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := p; i < n; i += producers {
				var pl any
				if payload != nil {
					pl = payload(i)
				}
				task, err := c.Submit(context.Background(), client.SubmitParams{Queue: queue, Payload: pl})
				if err != nil {
					errs <- err
					return
				}
				ids[i] = task.ID
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return ids
}

// sdkQueuesEventually reads the queue statistics until done accepts them
// or 30 s pass, and returns the last answer: the statistics are projected
// from the outbox and lag writes by about one poll interval.
func sdkQueuesEventually(t *testing.T, c *client.Client, done func([]client.Queue) bool) []client.Queue {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		qs, err := c.Queues(context.Background())
		require.NoError(t, err)
		if done(qs) || time.Now().After(deadline) {
			return qs
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
}

// queueCounts keeps only the counts of each queue, for comparisons.
func queueCounts(qs []client.Queue) []client.Queue {
	out := make([]client.Queue, len(qs))
	for i, q := range qs {
		out[i] = client.Queue{Queue: q.Queue, Pending: q.Pending, Running: q.Running, Done: q.Done, Dead: q.Dead, Blocked: q.Blocked, ActiveWorkers: q.ActiveWorkers}
	}
	return out
}

func countRows(t *testing.T, s *testserver.Server, query string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB.Get(&n, query, args...))
	return n
}

// A runner with concurrency 8 processes 1,000 tasks, each exactly once.
func TestRunnerProcessesEveryTaskExactlyOnce(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, nil)
	const n = 1000
	ids := submitN(t, c, "bulk", n, func(i int) any { return map[string]int{"i": i} })

	var (
		mu          sync.Mutex
		invocations = map[string]int{}
		running     atomic.Int32
		peak        atomic.Int32
	)
	handler := func(ctx context.Context, task client.Task) (any, error) {
		now := running.Add(1)
		defer running.Add(-1)
		for p := peak.Load(); now > p && !peak.CompareAndSwap(p, now); p = peak.Load() {
		}
		mu.Lock()
		invocations[task.ID]++
		mu.Unlock()
		var p struct{ I int }
		if err := task.DecodePayload(&p); err != nil {
			return nil, client.NonRetryable(err)
		}
		return map[string]any{"id": task.ID, "double": p.I * 2}, nil
	}
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{"bulk"}, Concurrency: 8}, handler)

	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'bulk' AND status = 'DONE'`) == n
	}, 90*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, invocations, n)
	for _, id := range ids {
		require.Equal(t, 1, invocations[id], "task %s handled %d times", id, invocations[id])
	}
	require.LessOrEqual(t, peak.Load(), int32(8))
	require.Equal(t, n, countRows(t, s, `SELECT count(*) FROM tasks
		WHERE queue = 'bulk' AND status = 'DONE' AND attempts = 1
		  AND result->>'id' = id::text AND (result->>'double')::int = 2 * (payload->>'i')::int`))
}

// On shutdown, a handler that ignores its context is abandoned after the
// drain timeout and grace, one that honours it is cancelled; both tasks are
// failed as retryable, requeued, and later completed by another runner.
func TestRunnerShutdownRequeuesUnfinishedTasks(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.Backoff.Base = 10 * time.Millisecond })
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	ignoring, err := c.Submit(context.Background(), client.SubmitParams{Queue: "hang", Payload: map[string]string{"mode": "ignore"}})
	require.NoError(t, err)
	cooperative, err := c.Submit(context.Background(), client.SubmitParams{Queue: "hang", Payload: map[string]string{"mode": "cooperative"}})
	require.NoError(t, err)

	release := make(chan struct{})
	t.Cleanup(func() { close(release) }) // lets the abandoned handler return at last
	started := make(chan string, 2)
	causes := make(chan error, 1)
	handler := func(ctx context.Context, task client.Task) (any, error) {
		var p struct{ Mode string }
		_ = task.DecodePayload(&p)
		started <- task.ID
		if p.Mode == "ignore" {
			<-release
			return "too late", nil
		}
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return nil, ctx.Err()
	}
	stop, logs := startRunner(t, c, client.RunnerConfig{
		WorkerID: "hang-worker", Queues: []string{"hang"}, Concurrency: 2,
		DrainTimeout: 100 * time.Millisecond, CancelGrace: 200 * time.Millisecond,
	}, handler)
	for range 2 {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			t.Fatal("handlers did not start")
		}
	}

	begin := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(begin), 20*time.Second)
	require.ErrorIs(t, <-causes, client.ErrShutdown)
	require.Contains(t, logs.String(), "handler did not return after its context was cancelled")

	for _, id := range []string{ignoring.ID, cooperative.ID} {
		task, err := c.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, client.StatusPending, task.Status, "task %s must be requeued, not lost", id)
		require.Equal(t, 0, task.Attempts, "released: the attempt was given back")
		require.Empty(t, task.WorkerID)
		require.Empty(t, task.LastError)
		attempts, err := c.Attempts(context.Background(), id)
		require.NoError(t, err)
		require.Len(t, attempts, 1)
		require.Equal(t, client.AttemptReleased, attempts[0].Outcome)
	}

	// Never lost: another runner finishes both.
	stop2, _ := startRunner(t, c, client.RunnerConfig{WorkerID: "rescuer", Queues: []string{"hang"}, Concurrency: 2},
		func(ctx context.Context, task client.Task) (any, error) { return "rescued", nil })
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'hang' AND status = 'DONE' AND attempts = 1 AND result = '"rescued"'`) == 2
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, stop2())
}

// countingTransport counts requests by "METHOD path", their answers (or
// failures) by "answered METHOD path", and the reports that claims carry
// by "claim complete <task id>" and "claim fail <task id>".
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	keys := []string{r.Method + " " + r.URL.Path}
	if r.URL.Path == "/tasks/v1/claim" && r.Body != nil {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return nil, err
		}
		_ = r.Body.Close()
		r.Body = io.NopCloser(bytes.NewReader(body))
		var claim struct {
			Complete, Fail []struct{ ID string }
		}
		if err := json.Unmarshal(body, &claim); err != nil {
			return nil, fmt.Errorf("counting transport: a claim's body: %w", err)
		}
		for _, it := range claim.Complete {
			keys = append(keys, "claim complete "+it.ID)
		}
		for _, it := range claim.Fail {
			keys = append(keys, "claim fail "+it.ID)
		}
	}
	c.mu.Lock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	for _, k := range keys {
		c.n[k]++
	}
	c.mu.Unlock()
	resp, err := c.next.RoundTrip(r)
	c.mu.Lock()
	c.n["answered "+keys[0]]++
	c.mu.Unlock()
	return resp, err
}

// reports counts the reports sent for task id, as what ("complete" or
// "fail"): on their own and carried by claims.
func (c *countingTransport) reports(what, id string) int {
	return c.count("POST /tasks/v1/"+id+"/"+what) + c.count("claim "+what+" "+id)
}

func (c *countingTransport) count(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// A runner whose worker was declared dead while its handlers were paused,
// and whose tasks went to another worker, registers again and never changes
// those tasks: either its task-listing heartbeat tells it first that it lost
// them (it drops their outcomes and sends nothing), or its late complete and
// fail get lease-lost, each sent exactly once.
func TestRunnerDropsTasksWhoseLeaseWasLost(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	v := spectest.New(t, s.URL)
	counter := &countingTransport{next: v.Transport(http.DefaultTransport)}
	c := newSDK(t, s.URL, counter)
	toComplete, err := c.Submit(context.Background(), client.SubmitParams{Queue: "lease", Payload: map[string]string{"then": "complete"}})
	require.NoError(t, err)
	toFail, err := c.Submit(context.Background(), client.SubmitParams{Queue: "lease", Payload: map[string]string{"then": "fail"}})
	require.NoError(t, err)

	resume := make(chan struct{})
	started := make(chan string, 2)
	handler := func(ctx context.Context, task client.Task) (any, error) {
		started <- task.ID
		<-resume
		var p struct{ Then string }
		_ = task.DecodePayload(&p)
		if p.Then == "fail" {
			return nil, errors.New("late failure")
		}
		return "late result", nil
	}
	stop, logs := startRunner(t, c, client.RunnerConfig{
		WorkerID: "paused-worker", Queues: []string{"lease"}, Concurrency: 2, HeartbeatInterval: 20 * time.Millisecond,
	}, handler)
	for range 2 {
		<-started
	}

	// What the heartbeat reaper does to a silent worker: declare it dead
	// and requeue its tasks, in one transaction. Tasks first, then the
	// worker: the order the runner's heartbeats lock them in (the other
	// order deadlocked with a heartbeat now and then).
	tx := s.DB.MustBegin()
	tx.MustExec(`UPDATE tasks SET status = 'PENDING', worker_id = NULL, lease_id = NULL, run_at = now(), updated_at = now()
		WHERE worker_id = 'paused-worker' AND status = 'RUNNING'`)
	tx.MustExec(`UPDATE workers SET status = 'DEAD' WHERE id = 'paused-worker'`)
	require.NoError(t, tx.Commit())
	// Another worker takes both tasks.
	thief := newSDK(t, s.URL, nil)
	_, err = thief.Register(context.Background(), client.RegisterParams{ID: "thief", Queues: []string{"lease"}})
	require.NoError(t, err)
	// A heartbeat of the paused worker that waited on the update above may
	// still hold the rows it could not keep (a locking read keeps its lock
	// on a row that no longer matched once the update committed) until it
	// ends: the claim skips locked rows, so it tries until it has both.
	var taken []client.Task
	require.Eventually(t, func() bool {
		got, err := thief.Claim(context.Background(), client.ClaimParams{WorkerID: "thief", Limit: 2 - len(taken)})
		require.NoError(t, err)
		taken = append(taken, got...)
		return len(taken) == 2
	}, 10*time.Second, 10*time.Millisecond)
	leases := map[string]string{taken[0].ID: taken[0].LeaseID, taken[1].ID: taken[1].LeaseID}

	// The dead worker's heartbeat got worker-dead: it registers again.
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM workers WHERE id = 'paused-worker' AND status = 'ACTIVE'`) == 1
	}, 10*time.Second, 10*time.Millisecond)

	close(resume)
	dropped := func() (lost, refused int) {
		return strings.Count(logs.String(), "dropping the outcome of a lost task"),
			strings.Count(logs.String(), "task no longer held by this worker")
	}
	require.Eventually(t, func() bool { lost, refused := dropped(); return lost+refused == 2 }, 10*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())

	lost, refused := dropped()
	t.Logf("%d outcomes dropped as lost, %d refused as lease-lost", lost, refused)
	// A report goes on its own or rides a claim (when the runner waited
	// for a free slot as the handler returned): refused either way, it is
	// sent once.
	require.LessOrEqual(t, counter.reports("complete", toComplete.ID), 1, "a lease-lost complete must not be retried")
	require.LessOrEqual(t, counter.reports("fail", toFail.ID), 1, "a lease-lost fail must not be retried")
	require.Zero(t, counter.reports("fail", toComplete.ID))
	require.Equal(t, refused, strings.Count(logs.String(), "lease-lost"))
	require.Equal(t, refused, counter.reports("complete", toComplete.ID)+counter.reports("fail", toFail.ID))
	require.GreaterOrEqual(t, counter.count("POST /workers/v1/register"), 2)
	for id, lease := range leases {
		task, err := thief.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, client.StatusRunning, task.Status)
		require.Equal(t, "thief", task.WorkerID)
		require.Equal(t, lease, task.LeaseID, "the late reports changed nothing")
	}
}

// Handler errors: NonRetryable goes straight to DEAD, a plain error is
// retried, a panic is a retryable failure, an unencodable result or one the
// server refuses is a non-retryable one.
func TestRunnerReportsHandlerOutcomes(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.Backoff.Base = 5 * time.Millisecond })
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	submit := func(kind string) string {
		task, err := c.Submit(context.Background(), client.SubmitParams{Queue: "outcomes", Payload: map[string]string{"kind": kind}})
		require.NoError(t, err)
		return task.ID
	}
	nonRetryable, flaky, panicky, unencodable := submit("non-retryable"), submit("flaky"), submit("panic"), submit("unencodable")
	tooLarge := submit("too-large")

	handler := func(ctx context.Context, task client.Task) (any, error) {
		var p struct{ Kind string }
		_ = task.DecodePayload(&p)
		switch {
		case p.Kind == "non-retryable":
			return nil, client.NonRetryable(fmt.Errorf("payload rejected: %w", errors.New("schema mismatch")))
		case p.Kind == "flaky" && task.Attempts == 1:
			return nil, errors.New("temporary outage")
		case p.Kind == "panic" && task.Attempts == 1:
			panic("handler bug")
		case p.Kind == "unencodable":
			return make(chan int), nil
		case p.Kind == "too-large":
			return strings.Repeat("x", 1<<20), nil // over the server's 1 MiB body limit
		}
		return map[string]int{"attempt": task.Attempts}, nil
	}
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{"outcomes"}, Concurrency: 4}, handler)
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'outcomes' AND status IN ('DONE', 'DEAD')`) == 5
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())

	get := func(id string) *client.Task {
		task, err := c.Get(context.Background(), id)
		require.NoError(t, err)
		return task
	}
	got := get(nonRetryable)
	require.Equal(t, client.StatusDead, got.Status)
	require.Equal(t, client.DeadNonRetryable, got.DeadReason)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "payload rejected: schema mismatch", got.LastError)

	got = get(flaky)
	require.Equal(t, client.StatusDone, got.Status)
	require.Equal(t, 2, got.Attempts)
	require.Equal(t, "temporary outage", got.LastError)
	require.JSONEq(t, `{"attempt":2}`, string(got.Result))

	got = get(panicky)
	require.Equal(t, client.StatusDone, got.Status)
	require.Equal(t, 2, got.Attempts)
	require.Contains(t, got.LastError, "handler panic: handler bug")

	got = get(unencodable)
	require.Equal(t, client.StatusDead, got.Status)
	require.Equal(t, client.DeadNonRetryable, got.DeadReason)
	require.Contains(t, got.LastError, "cannot be encoded as JSON")

	got = get(tooLarge)
	require.Equal(t, client.StatusDead, got.Status)
	require.Equal(t, client.DeadNonRetryable, got.DeadReason)
	require.Contains(t, got.LastError, "rejected the handler's result")
	require.Contains(t, got.LastError, "body-too-large")
}

// The producer side and the typed problems, against the real server.
func TestClientAgainstServer(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	ctx := context.Background()

	runAt := time.Now().Add(-time.Minute).UTC().Truncate(time.Microsecond)
	first, err := c.Submit(ctx, client.SubmitParams{
		Queue: "sdk", Payload: map[string]any{"to": "a@example.com"}, Priority: 7, MaxAttempts: 2,
		Tags: []string{"mail"}, RunAt: &runAt, IdempotencyKey: "order-1",
	})
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, first.Status)
	require.Equal(t, 7, first.Priority)
	require.Equal(t, 2, first.MaxAttempts)
	require.Equal(t, []string{"mail"}, first.Tags)
	require.True(t, runAt.Equal(first.RunAt))
	require.Equal(t, "order-1", first.IdempotencyKey)
	again, err := c.Submit(ctx, client.SubmitParams{Queue: "sdk", IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.Equal(t, first.ID, again.ID)

	for range 3 {
		_, err := c.Submit(ctx, client.SubmitParams{Queue: "sdk"})
		require.NoError(t, err)
	}
	page, err := c.List(ctx, client.ListParams{Queue: "sdk", Limit: 3})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 3)
	require.NotEmpty(t, page.NextCursor)
	rest, err := c.List(ctx, client.ListParams{Queue: "sdk", Limit: 3, Cursor: page.NextCursor})
	require.NoError(t, err)
	require.Len(t, rest.Tasks, 1)
	require.Equal(t, first.ID, rest.Tasks[0].ID, "newest first")
	require.Empty(t, rest.NextCursor)

	got, err := c.Get(ctx, first.ID)
	require.NoError(t, err)
	require.JSONEq(t, `{"to":"a@example.com"}`, string(got.Payload))

	cancelled, err := c.Cancel(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, client.DeadCancelled, cancelled.DeadReason)
	_, err = c.Cancel(ctx, first.ID)
	require.True(t, client.IsInvalidTransition(err), "%v", err)
	p, _ := client.AsProblem(err)
	require.Equal(t, client.StatusDead, p.CurrentStatus)
	retried, err := c.Retry(ctx, first.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, retried.Status)

	// The worker protocol by hand.
	reg, err := c.Register(ctx, client.RegisterParams{ID: "sdk-worker", Queues: []string{"sdk"}, Tags: []string{"mail"}})
	require.NoError(t, err)
	require.True(t, reg.Created)
	require.Equal(t, 10*time.Second, reg.HeartbeatInterval())
	reg, err = c.Register(ctx, client.RegisterParams{ID: "sdk-worker", Queues: []string{"sdk"}, Tags: []string{"mail"}})
	require.NoError(t, err)
	require.False(t, reg.Created)
	w, err := c.Heartbeat(ctx, "sdk-worker")
	require.NoError(t, err)
	require.Equal(t, client.WorkerActive, w.Status)
	claimed, err := c.Claim(ctx, client.ClaimParams{WorkerID: "sdk-worker", Limit: 10})
	require.NoError(t, err)
	require.Len(t, claimed, 4)
	require.Equal(t, first.ID, claimed[0].ID, "priority first")
	require.NotEmpty(t, claimed[0].LeaseID)

	_, err = c.Complete(ctx, claimed[0].ID, client.CompleteParams{WorkerID: "someone-else", LeaseID: claimed[0].LeaseID})
	require.True(t, client.IsLeaseLost(err), "%v", err)
	p, _ = client.AsProblem(err)
	require.Equal(t, client.StatusRunning, p.CurrentStatus)
	_, err = c.Fail(ctx, claimed[0].ID, client.FailParams{WorkerID: "sdk-worker", LeaseID: uuid.NewString()})
	require.True(t, client.IsLeaseLost(err), "%v", err)
	done, err := c.Complete(ctx, claimed[0].ID, client.CompleteParams{WorkerID: "sdk-worker", LeaseID: claimed[0].LeaseID, Result: []int{1, 2}})
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, done.Status)
	require.JSONEq(t, `[1,2]`, string(done.Result))
	failed, err := c.Fail(ctx, claimed[1].ID, client.FailParams{WorkerID: "sdk-worker", LeaseID: claimed[1].LeaseID,
		Error: strings.Repeat("é", client.MaxErrorBytes), NonRetryable: true})
	require.NoError(t, err, "an over-long error is cut to the server's limit")
	require.Equal(t, client.DeadNonRetryable, failed.DeadReason)
	require.LessOrEqual(t, len(failed.LastError), client.MaxErrorBytes)

	workers, err := c.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	want := []client.Queue{{Queue: "sdk", Running: 2, Done: 1, Dead: 1, ActiveWorkers: 1}}
	queues := sdkQueuesEventually(t, c, func(qs []client.Queue) bool { return reflect.DeepEqual(want, queueCounts(qs)) })
	require.Equal(t, want, queueCounts(queues))
	require.Equal(t, client.QueueTotals{
		Submitted: 4, Claimed: 4, Completed: 1, Failed: 1,
		DeadLettered: map[client.DeadReason]int64{client.DeadCancelled: 1, client.DeadNonRetryable: 1},
		Requeued:     map[string]int64{"retried": 1},
	}, queues[0].Totals)
	require.Contains(t, queues[0].Rates, client.RateLast1m)
	require.InDelta(t, 4.0/5, queues[0].Rates[client.RateLast5m].Enqueued, 1e-9)
	_, anyPending := queues[0].OldestPendingAge()
	require.False(t, anyPending)
	require.NotNil(t, queues[0].StatsAsOf)

	// Problems.
	_, err = c.Get(client.WithCorrelationID(ctx, "sdk-test-cid"), uuid.NewString())
	require.True(t, client.IsNotFound(err))
	p, _ = client.AsProblem(err)
	require.Equal(t, client.ProblemTaskNotFound, p.Type)
	require.Equal(t, "sdk-test-cid", p.CorrelationID)
	_, err = c.Submit(ctx, client.SubmitParams{Queue: "", MaxAttempts: 1000})
	require.True(t, client.IsValidation(err))
	p, _ = client.AsProblem(err)
	require.ElementsMatch(t, []string{"queue", "max_attempts"}, []string{p.Errors[0].Field, p.Errors[1].Field})
	_, err = c.Heartbeat(ctx, "nobody")
	require.True(t, client.IsWorkerNotFound(err))
	_, err = c.Register(ctx, client.RegisterParams{ID: "bad id"})
	require.True(t, client.IsValidation(err))
	_, err = s.DB.Exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'sdk-worker'`)
	require.NoError(t, err)
	_, err = c.Claim(ctx, client.ClaimParams{WorkerID: "sdk-worker"})
	require.True(t, client.IsWorkerDead(err))
	_, err = c.Heartbeat(ctx, "sdk-worker")
	require.True(t, client.IsWorkerDead(err))
}

// SubmitBatch keeps request order and honours idempotency keys per item,
// including a key repeated inside the batch; a resubmitted keyed batch
// creates nothing.
func TestSDKSubmitBatch(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	ctx := context.Background()
	existing, err := c.Submit(ctx, client.SubmitParams{Queue: "sb", IdempotencyKey: "k-existing"})
	require.NoError(t, err)

	batch := []client.SubmitParams{
		{Queue: "sb", Payload: map[string]int{"n": 0}},
		{Queue: "sb", IdempotencyKey: "k-existing"},
		{Queue: "sb", IdempotencyKey: "k-new", Payload: map[string]int{"n": 2}},
		{Queue: "sb", IdempotencyKey: "k-new", Payload: map[string]int{"n": 3}},
		{Queue: "sb", Payload: map[string]int{"n": 4}, Priority: 2, MaxAttempts: 5, Tags: []string{"gpu"}},
	}
	tasks, created, err := c.SubmitBatch(ctx, batch)
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, true, false, true}, created)
	require.Len(t, tasks, 5)
	require.JSONEq(t, `{"n":0}`, string(tasks[0].Payload))
	require.Equal(t, existing.ID, tasks[1].ID)
	require.Equal(t, tasks[2].ID, tasks[3].ID, "a key repeated in the batch names the first task")
	require.JSONEq(t, `{"n":2}`, string(tasks[3].Payload))
	require.Equal(t, "k-new", tasks[2].IdempotencyKey)
	require.Equal(t, 2, tasks[4].Priority)
	require.Equal(t, 5, tasks[4].MaxAttempts)
	require.Equal(t, []string{"gpu"}, tasks[4].Tags)
	for _, task := range tasks {
		require.Equal(t, client.StatusPending, task.Status)
	}
	require.Equal(t, 4, countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'sb'`))

	// Every item keyed: safe to resend, and it creates nothing new.
	again, created, err := c.SubmitBatch(ctx, batch[1:4])
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false}, created)
	require.Equal(t, []string{existing.ID, tasks[2].ID, tasks[2].ID}, []string{again[0].ID, again[1].ID, again[2].ID})

	// All or nothing: every bad item is named, nothing is created.
	_, _, err = c.SubmitBatch(ctx, []client.SubmitParams{{Queue: "sb"}, {Queue: ""}, {Queue: "sb", MaxAttempts: 101}})
	require.True(t, client.IsValidation(err), "%v", err)
	p, _ := client.AsProblem(err)
	var fields []string
	for _, f := range p.Errors {
		fields = append(fields, f.Field)
	}
	require.ElementsMatch(t, []string{"tasks[1].queue", "tasks[2].max_attempts"}, fields)
	_, _, err = c.SubmitBatch(ctx, make([]client.SubmitParams, client.MaxBatch+1))
	require.True(t, client.IsValidation(err), "%v", err)
	require.Equal(t, 4, countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'sb'`))
}

// CompleteBatch and FailBatch fence each item on its own: the worker's own
// items go through, a stale lease or another worker's task is lease-lost
// and changes nothing, an unknown id is not found.
func TestSDKBatchReportsPerItemOutcomes(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	ctx := context.Background()
	// Distinct priorities fix the claim order: claimed[i] is batch[i].
	batch := []client.SubmitParams{
		{Queue: "rb", Priority: 5},                 // completed
		{Queue: "rb", Priority: 4, MaxAttempts: 2}, // stale lease on complete, then failed: requeued
		{Queue: "rb", Priority: 3, MaxAttempts: 2}, // failed non-retryable: dead
		{Queue: "rb", Priority: 2, MaxAttempts: 1}, // failed, attempts exhausted: dead
		{Queue: "rb", Priority: 1},                 // claimed by the other worker
	}
	submitted, _, err := c.SubmitBatch(ctx, batch)
	require.NoError(t, err)
	for _, w := range []string{"w1", "w2"} {
		_, err := c.Register(ctx, client.RegisterParams{ID: w, Queues: []string{"rb"}})
		require.NoError(t, err)
	}
	mine, err := c.Claim(ctx, client.ClaimParams{WorkerID: "w1", Limit: 4})
	require.NoError(t, err)
	require.Len(t, mine, 4)
	for i := range mine {
		require.Equal(t, submitted[i].ID, mine[i].ID)
	}
	theirs, err := c.Claim(ctx, client.ClaimParams{WorkerID: "w2"})
	require.NoError(t, err)
	require.Len(t, theirs, 1)

	out, err := c.CompleteBatch(ctx, "w1", []client.CompleteItem{
		{ID: mine[0].ID, LeaseID: mine[0].LeaseID, Result: map[string]bool{"ok": true}},
		{ID: mine[1].ID, LeaseID: uuid.NewString()},                                    // stale lease
		{ID: theirs[0].ID, LeaseID: theirs[0].LeaseID},                                 // held by w2
		{ID: uuid.Must(uuid.NewV7()).String(), LeaseID: uuid.NewString(), Result: "x"}, // no such task
	})
	require.NoError(t, err)
	require.Len(t, out, 4)
	require.Equal(t, client.OutcomeDone, out[0].Outcome)
	require.NoError(t, out[0].Err())
	require.Equal(t, client.StatusDone, out[0].Task.Status)
	require.JSONEq(t, `{"ok":true}`, string(out[0].Task.Result))
	for _, o := range out[1:3] {
		require.Equal(t, client.OutcomeError, o.Outcome)
		require.True(t, client.IsLeaseLost(o.Err()), "%v", o.Err())
		require.Equal(t, client.StatusRunning, o.Problem.CurrentStatus)
		require.NotEmpty(t, o.Problem.CorrelationID)
	}
	require.Equal(t, []string{mine[1].ID, theirs[0].ID}, []string{out[1].ID, out[2].ID})
	require.Equal(t, client.OutcomeError, out[3].Outcome)
	require.True(t, client.IsNotFound(out[3].Err()), "%v", out[3].Err())
	held, err := c.Get(ctx, theirs[0].ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, held.Status)
	require.Equal(t, "w2", held.WorkerID)
	require.Equal(t, theirs[0].LeaseID, held.LeaseID, "the lease-lost item changed nothing")

	out, err = c.FailBatch(ctx, "w1", []client.FailItem{
		{ID: mine[1].ID, LeaseID: mine[1].LeaseID, Error: "temporary"},
		{ID: mine[2].ID, LeaseID: mine[2].LeaseID, Error: "bad input", NonRetryable: true},
		{ID: mine[3].ID, LeaseID: mine[3].LeaseID, Error: "last try"},
		{ID: mine[0].ID, LeaseID: mine[0].LeaseID, Error: "too late"}, // already DONE
		{ID: theirs[0].ID, LeaseID: mine[3].LeaseID, Error: "not mine"},
	})
	require.NoError(t, err)
	require.Equal(t, []client.Outcome{client.OutcomeRequeued, client.OutcomeDead, client.OutcomeDead, client.OutcomeError, client.OutcomeError},
		[]client.Outcome{out[0].Outcome, out[1].Outcome, out[2].Outcome, out[3].Outcome, out[4].Outcome})
	require.Equal(t, client.StatusPending, out[0].Task.Status)
	require.Equal(t, "temporary", out[0].Task.LastError)
	require.Equal(t, client.DeadNonRetryable, out[1].Task.DeadReason)
	require.Equal(t, client.DeadExhausted, out[2].Task.DeadReason)
	require.True(t, client.IsInvalidTransition(out[3].Err()), "%v", out[3].Err())
	require.Equal(t, client.StatusDone, out[3].Problem.CurrentStatus)
	require.True(t, client.IsLeaseLost(out[4].Err()), "%v", out[4].Err())

	// A malformed batch is refused as a whole.
	_, err = c.CompleteBatch(ctx, "w1", []client.CompleteItem{{ID: theirs[0].ID}, {ID: theirs[0].ID}})
	require.True(t, client.IsValidation(err), "%v", err)
	p, _ := client.AsProblem(err)
	require.Equal(t, "items[1].id", p.Errors[0].Field)
}

// waitForIdleClaim waits until the runner has sent its n-th claim and that
// claim is waiting on the server: a probe's own 200 ms long poll on the
// same queue gives it the time to get there.
func waitForIdleClaim(t *testing.T, runnerTraffic *countingTransport, n int, probe *client.Client, queue string) {
	t.Helper()
	require.Eventually(t, func() bool { return runnerTraffic.count("POST /tasks/v1/claim") >= n }, 30*time.Second, time.Millisecond)
	_, err := probe.Register(context.Background(), client.RegisterParams{ID: "probe", Queues: []string{queue}})
	require.NoError(t, err)
	got, err := probe.Claim(context.Background(), client.ClaimParams{WorkerID: "probe", Wait: 200 * time.Millisecond})
	require.NoError(t, err)
	require.Empty(t, got)
}

// A runner idle on an empty queue waits in a long-poll claim, so a task
// submitted later starts at once (within milliseconds on an idle machine).
// The server polls only every 10 s, the runner's own idle wait would be a
// minute, and its claim would run out only after ClaimWait (5 s): a start
// within 2 s can only come from the submission's notification. The bound
// is that far above the usual latency so that a loaded machine does not
// fail the test; it still fails when the notification does not wake the
// claim.
func TestRunnerIdleOnEmptyQueueStartsNewTasksAtOnce(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.ClaimPollInterval = 10 * time.Second })
	v := spectest.New(t, s.URL)
	traffic := &countingTransport{next: v.Transport(http.DefaultTransport)}
	c := newSDK(t, s.URL, traffic)
	probe := newSDK(t, s.URL, nil)
	started := make(chan time.Time, 1)
	stop, _ := startRunner(t, c, client.RunnerConfig{
		WorkerID: "idle-worker", Queues: []string{"idle"},
		ClaimWait: 5 * time.Second, PollInterval: time.Minute, MaxIdleInterval: time.Minute,
	}, func(ctx context.Context, task client.Task) (any, error) {
		started <- time.Now()
		return "ok", nil
	})

	const rounds = 3
	for i := range rounds {
		waitForIdleClaim(t, traffic, i+1, probe, "idle")
		begin := time.Now()
		task, err := c.Submit(context.Background(), client.SubmitParams{Queue: "idle"})
		require.NoError(t, err)
		submitted := time.Now() // the submission is acknowledged
		select {
		case at := <-started:
			latency := at.Sub(submitted)
			t.Logf("round %d: submit took %s; from its answer to the handler's start %s", i, submitted.Sub(begin), latency)
			require.Less(t, latency, 2*time.Second, "woken by the submission, not by the claim running out")
		case <-time.After(30 * time.Second):
			t.Fatal("the idle runner did not start the task")
		}
		require.Eventually(t, func() bool {
			got, err := c.Get(context.Background(), task.ID)
			return err == nil && got.Status == client.StatusDone
		}, 10*time.Second, 5*time.Millisecond)
	}
	require.NoError(t, stop())
}

// A stopping runner does not cut off its waiting claim (whose tasks would
// then be held by no one): the claim runs out, and a task it brings is
// handled within the drain, not stranded. The runner claims nothing more.
func TestStoppingRunnerLetsItsWaitingClaimFinish(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.ClaimPollInterval = 10 * time.Second })
	v := spectest.New(t, s.URL)
	traffic := &countingTransport{next: v.Transport(http.DefaultTransport)}
	c := newSDK(t, s.URL, traffic)
	logger, _ := testLogger(t)
	r, err := client.NewRunner(c, client.RunnerConfig{
		WorkerID: "stopping-worker", Queues: []string{"stopping"}, Logger: logger,
		ClaimWait: 5 * time.Second, PollInterval: time.Minute, MaxIdleInterval: time.Minute,
	}, func(ctx context.Context, task client.Task) (any, error) {
		return "handled while stopping", nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := stopper(t, cancel, done, "runner")
	waitForIdleClaim(t, traffic, 1, newSDK(t, s.URL, nil), "stopping")

	cancel()
	task, err := c.Submit(context.Background(), client.SubmitParams{Queue: "stopping"})
	require.NoError(t, err)
	require.NoError(t, stop())

	got, err := c.Get(context.Background(), task.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, got.Status)
	require.Equal(t, 1, got.Attempts)
	require.JSONEq(t, `"handled while stopping"`, string(got.Result))
	require.Equal(t, 1, traffic.count("POST /tasks/v1/claim"), "no claim after the stop")
}
