package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
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

// fastLeases runs the lease reaper every 50 ms.
func fastLeases(cfg *app.Config) { cfg.LeaseReaperInterval = 50 * time.Millisecond }

// causes records, per task, why its handler's context ended.
type causes struct {
	mu sync.Mutex
	m  map[string]error
}

func (c *causes) set(id string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]error{}
	}
	c.m[id] = err
}

func (c *causes) get(id string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[id]
}

// A runner whose task was taken from it (given to another worker behind its
// back, as a lease reaper and a claim would) learns it from its next
// heartbeat, which lists the task: the server answers it lost, the
// handler's context is cancelled with ErrTaskLost, and the runner reports
// nothing for it.
func TestRunnerAbandonsATaskItLost(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastLeases)
	counter := &countingTransport{next: spectest.New(t, s.URL).Transport(http.DefaultTransport)}
	c := newSDK(t, s.URL, counter)
	task, err := c.Submit(context.Background(), client.SubmitParams{Queue: "lost"})
	require.NoError(t, err)

	started := make(chan client.Task, 1)
	var seen causes
	stop, logs := startRunner(t, c, client.RunnerConfig{
		WorkerID: "robbed", Queues: []string{"lost"}, HeartbeatInterval: 100 * time.Millisecond,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		started <- tk
		<-ctx.Done()
		seen.set(tk.ID, context.Cause(ctx))
		return nil, ctx.Err()
	})
	held := <-started
	require.Equal(t, task.ID, held.ID)

	thief := newSDK(t, s.URL, nil)
	_, err = thief.Register(context.Background(), client.RegisterParams{ID: "thief", Queues: []string{"lost"}})
	require.NoError(t, err)
	thiefLease := uuid.NewString()
	_, err = s.DB.Exec(`UPDATE tasks SET worker_id = 'thief', lease_id = $2 WHERE id = $1`, task.ID, thiefLease)
	require.NoError(t, err)

	require.Eventually(t, func() bool { return errors.Is(seen.get(task.ID), client.ErrTaskLost) }, 10*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "dropping the outcome of a lost task") }, 10*time.Second, 10*time.Millisecond)
	require.Contains(t, logs.String(), "task lost: the server no longer gives this worker the task")
	require.NoError(t, stop())

	require.Zero(t, counter.count("POST /tasks/v1/"+task.ID+"/complete"))
	require.Zero(t, counter.count("POST /tasks/v1/"+task.ID+"/fail"), "a lost task's outcome is dropped, not reported")
	require.Zero(t, counter.count("POST /tasks/v1/release"))
	now, err := thief.Get(context.Background(), task.ID)
	require.NoError(t, err)
	require.Equal(t, "thief", now.WorkerID)
	require.Equal(t, thiefLease, now.LeaseID)
}

// An operator cancels two running tasks: the runner learns it from its
// heartbeat, cancels the handlers (cause ErrTaskCancelled) and fails the
// tasks, the one whose handler returns and the one whose handler ignores its
// context alike (after CancelGrace). Both end DEAD cancelled.
func TestRunnerFailsTasksAnOperatorCancelled(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, spectest.New(t, s.URL).Transport(http.DefaultTransport))
	obliging, err := c.Submit(context.Background(), client.SubmitParams{Queue: "cancel", Payload: "obliging"})
	require.NoError(t, err)
	stubborn, err := c.Submit(context.Background(), client.SubmitParams{Queue: "cancel", Payload: "stubborn"})
	require.NoError(t, err)

	started := make(chan string, 2)
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	var seen causes
	stop, _ := startRunner(t, c, client.RunnerConfig{
		WorkerID: "cancellable", Queues: []string{"cancel"}, Concurrency: 2,
		HeartbeatInterval: 50 * time.Millisecond, CancelGrace: 300 * time.Millisecond,
		DrainTimeout: 100 * time.Millisecond, // the stubborn handler keeps its slot until it returns: do not wait for it
	}, func(ctx context.Context, tk client.Task) (any, error) {
		started <- tk.ID
		var kind string
		_ = tk.DecodePayload(&kind)
		if kind == "stubborn" {
			<-release // ignores ctx
			return "too late", nil
		}
		<-ctx.Done()
		seen.set(tk.ID, context.Cause(ctx))
		return nil, ctx.Err()
	})
	<-started
	<-started

	for _, id := range []string{obliging.ID, stubborn.ID} {
		got, err := c.Cancel(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, client.StatusRunning, got.Status, "cancelling a running task is a request")
		require.NotNil(t, got.CancelRequestedAt)
	}
	for _, id := range []string{obliging.ID, stubborn.ID} {
		var got *client.Task
		require.Eventually(t, func() bool {
			got, err = c.Get(context.Background(), id)
			require.NoError(t, err)
			return got.Status == client.StatusDead
		}, 10*time.Second, 10*time.Millisecond)
		require.Equal(t, client.DeadCancelled, got.DeadReason)
		require.Equal(t, 1, got.Attempts, "not retried")
		require.Contains(t, got.LastError, "cancelled by an operator")
	}
	require.ErrorIs(t, seen.get(obliging.ID), client.ErrTaskCancelled)
	got, err := c.Get(context.Background(), stubborn.ID)
	require.NoError(t, err)
	require.Contains(t, got.LastError, "the handler did not return")
	require.NoError(t, stop())
}

// Drained, a runner claims nothing more but finishes what it holds; it
// learns of the drain from its heartbeat.
func TestRunnerStopsClaimingWhenDrained(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	counter := &countingTransport{next: spectest.New(t, s.URL).Transport(http.DefaultTransport)}
	c := newSDK(t, s.URL, counter)
	logger, _ := testLogger(t)
	inHand := make(chan struct{})
	finish := make(chan struct{})
	var handled atomic.Int32
	r, err := client.NewRunner(c, client.RunnerConfig{
		WorkerID: "drained", Queues: []string{"drain"}, Concurrency: 2, HeartbeatInterval: 50 * time.Millisecond,
		ClaimWait: 200 * time.Millisecond, PollInterval: 5 * time.Millisecond, MaxIdleInterval: 20 * time.Millisecond, Logger: logger,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		handled.Add(1)
		close(inHand)
		<-finish
		return "finished", nil
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	stop := stopper(t, cancel, done, "runner")

	held, err := c.Submit(context.Background(), client.SubmitParams{Queue: "drain"})
	require.NoError(t, err)
	<-inHand
	w, err := c.Drain(context.Background(), "drained")
	require.NoError(t, err)
	require.True(t, w.Draining)
	require.Eventually(t, r.Draining, 10*time.Second, 5*time.Millisecond)

	claims := counter.count("POST /tasks/v1/claim")
	beats := counter.count("POST /workers/v1/drained/heartbeat")
	waiting, err := c.Submit(context.Background(), client.SubmitParams{Queue: "drain"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return counter.count("POST /workers/v1/drained/heartbeat") >= beats+5 }, 10*time.Second, 5*time.Millisecond)
	require.LessOrEqual(t, counter.count("POST /tasks/v1/claim"), claims+1, "at most the claim already under way when the drain came")
	got, err := c.Get(context.Background(), waiting.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, got.Status, "a drained runner leaves new tasks to others")

	close(finish)
	require.Eventually(t, func() bool {
		got, err := c.Get(context.Background(), held.ID)
		require.NoError(t, err)
		return got.Status == client.StatusDone
	}, 10*time.Second, 5*time.Millisecond, "the task in hand is finished")
	require.NoError(t, stop())
	require.EqualValues(t, 1, handled.Load())
}

// loseClaimAnswers is a transport that lets the server commit the first
// claim that hands out tasks and then drops its answer, as a connection cut
// after the commit would; it also drops the answers of that claim's next
// tries (the same request_id) until it has dropped tries answers in all.
type loseClaimAnswers struct {
	next  http.RoundTripper
	tries int

	mu        sync.Mutex
	requestID string   // the claim whose answers are lost
	lost      int      // answers dropped
	ids       []string // the tasks of the first lost answer
}

func (l *loseClaimAnswers) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path != "/tasks/v1/claim" {
		return l.next.RoundTrip(r)
	}
	reqBody, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	r.Body = io.NopCloser(bytes.NewReader(reqBody))
	var claim struct {
		RequestID string `json:"request_id"`
	}
	_ = json.Unmarshal(reqBody, &claim)
	resp, err := l.next.RoundTrip(r)
	if err != nil {
		return resp, err
	}
	body, rerr := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if rerr != nil {
		return nil, rerr
	}
	var claimed struct{ Tasks []client.Task }
	l.mu.Lock()
	defer l.mu.Unlock()
	if json.Unmarshal(body, &claimed) == nil && len(claimed.Tasks) > 0 && l.lost < l.tries &&
		(l.requestID == "" || l.requestID == claim.RequestID) {
		if l.requestID == "" {
			l.requestID = claim.RequestID
			for _, tk := range claimed.Tasks {
				l.ids = append(l.ids, tk.ID)
			}
		}
		l.lost++
		return nil, errors.New("connection reset after the claim committed")
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// lostAnswer reports the claim whose answers were lost and its tasks.
func (l *loseClaimAnswers) lostAnswer() (requestID string, lost int, ids []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.requestID, l.lost, slices.Clone(l.ids)
}

// runLosingClaimAnswers runs a runner whose claims go through loser, and
// which heartbeats every third of staleAfter, until every task of queue that
// submit creates is DONE; it requires each to have been handled once, and
// returns the server and the task ids.
func runLosingClaimAnswers(t *testing.T, loser *loseClaimAnswers, staleAfter time.Duration, queue string, submit func(*client.Client) []string) (*testserver.Server, []string) {
	t.Helper()
	s := testserver.Start(t, func(cfg *app.Config) {
		cfg.App.Liveness.StaleAfter = staleAfter
		cfg.App.Liveness.DeadAfter = 10 * time.Second
	})
	loser.next = http.DefaultTransport
	c := newSDK(t, s.URL, loser)
	ids := submit(c)
	var mu sync.Mutex
	handled := map[string]int{}
	stop, _ := startRunner(t, c, client.RunnerConfig{WorkerID: "unlucky", Queues: []string{queue}, Concurrency: len(ids)},
		func(ctx context.Context, tk client.Task) (any, error) {
			mu.Lock()
			handled[tk.ID]++
			mu.Unlock()
			return nil, nil
		})
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'DONE'`, queue) == len(ids)
	}, 30*time.Second, 10*time.Millisecond)
	require.NoError(t, stop())
	mu.Lock()
	defer mu.Unlock()
	for _, id := range ids {
		require.Equal(t, 1, handled[id], "task %s handled once", id)
	}
	return s, ids
}

// A claim's answer is lost after the server committed it. The SDK retries
// the claim with the same request_id and gets the same tasks under the same
// leases: each is handled once, no attempt is burnt, and a task with
// max_attempts 1 completes instead of ending DEAD without ever running.
func TestRunnerRetryOfAClaimWhoseAnswerWasLostGetsTheSameTasks(t *testing.T) {
	t.Parallel()
	loser := &loseClaimAnswers{tries: 1}
	var once string
	// Heartbeats a second apart: the retry (within 100 ms) comes long before
	// a heartbeat could take the tasks back.
	s, ids := runLosingClaimAnswers(t, loser, 3*time.Second, "retried", func(c *client.Client) []string {
		tk, err := c.Submit(context.Background(), client.SubmitParams{Queue: "retried", MaxAttempts: 1, Priority: 1})
		require.NoError(t, err)
		once = tk.ID
		return append([]string{once}, submitN(t, c, "retried", 4, nil)...)
	})
	requestID, lost, lostIDs := loser.lostAnswer()
	require.Equal(t, 1, lost)
	require.NotEmpty(t, requestID)
	require.Contains(t, lostIDs, once)
	for _, id := range ids {
		require.Equal(t, 1, countRows(t, s, `SELECT attempts FROM tasks WHERE id = $1`, id), "task %s claimed once", id)
	}
	require.Zero(t, countRows(t, s, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' IN ('task.requeued', 'task.dead_lettered')`), "nothing was orphaned")
	require.Equal(t, len(ids), countRows(t, s, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.claimed'`), "the retry claimed nothing more")
}

// When every try of a claim loses its answer, the SDK gives up on it; the
// tasks that claim took come back through the lease protocol: a
// task-listing heartbeat (more than a heartbeat interval later) takes them
// back as orphaned, and the runner claims and handles them, each once. A
// retry that comes after its tasks were taken back is a new claim under the
// same request_id; its lost answer costs those tasks one more orphaning
// (and attempt) each, which is why they have attempts to spare here.
func TestRunnerRecoversTheTasksOfAClaimWhoseEveryAnswerWasLost(t *testing.T) {
	t.Parallel()
	loser := &loseClaimAnswers{tries: client.DefaultRetryPolicy().MaxAttempts}
	// Heartbeats every 400 ms: the grace a claim gets before a heartbeat
	// that does not list its tasks may orphan them is one interval, counted
	// from the claim's transaction. At 100 ms, with the race detector and
	// the suite's parallel tests on two cores, the runner's own later
	// claim of the orphaned tasks was sometimes answered after its next
	// heartbeat left without them, which orphaned them once more.
	s, _ := runLosingClaimAnswers(t, loser, 1200*time.Millisecond, "orphans", func(c *client.Client) []string {
		ids := make([]string, 5)
		for i := range ids {
			tk, err := c.Submit(context.Background(), client.SubmitParams{Queue: "orphans", MaxAttempts: 10})
			require.NoError(t, err)
			ids[i] = tk.ID
		}
		return ids
	})
	_, lost, lostIDs := loser.lostAnswer()
	require.Equal(t, client.DefaultRetryPolicy().MaxAttempts, lost, "every try of the claim lost its answer")
	require.NotEmpty(t, lostIDs)
	for _, id := range lostIDs {
		orphaned := countRows(t, s, `
			SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
			WHERE e->>'type' = 'task.requeued' AND e->>'reason' = 'orphaned' AND e->>'task_id' = $1`, id)
		require.GreaterOrEqual(t, orphaned, 1, "task %s of the lost claim was taken back", id)
		require.Equal(t, orphaned+1, countRows(t, s, `SELECT attempts FROM tasks WHERE id = $1`, id),
			"task %s: each lost claim counted, and the one that reached the runner", id)
	}
}
