package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/client/clientotel"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/faultproxy"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

const submittedTrace = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

// The Runner starts each handler's context with its task's trace
// (HandlerContext: clientotel.TaskContext), lets the handler report
// progress (Task.Progress), and stops a handler whose task's time limit is
// up (cause ErrTaskTimeLimit), dropping its outcome: the server ends the
// attempt timed_out.
func TestRunnerTracesProgressAndTimeLimits(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.TimeoutReaperInterval = 100 * time.Millisecond })
	c := newSDK(t, s.URL, nil)
	ctx := t.Context()
	header := http.Header{"Traceparent": {submittedTrace}}
	var traced client.Task
	(&sdkRaw{t: t, url: s.URL}).post("/tasks/v1", map[string]any{"queue": "run23", "payload": "traced"}, header, &traced)
	slow, err := c.Submit(ctx, client.SubmitParams{Queue: "run23", Payload: "slow", TimeoutSeconds: 1, MaxAttempts: 1})
	require.NoError(t, err)

	var (
		mu     sync.Mutex
		seen   = map[string]trace.TraceID{}
		causes = &handlerCauses{}
	)
	handler := func(ctx context.Context, task client.Task) (any, error) {
		mu.Lock()
		seen[task.ID] = trace.SpanContextFromContext(ctx).TraceID()
		mu.Unlock()
		if err := task.Progress(ctx, 50, "half way"); err != nil {
			return nil, err
		}
		if string(task.Payload) == `"slow"` {
			return causes.untilStopped(ctx, task)
		}
		return "ok", nil
	}
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{"run23"}, Concurrency: 2, HandlerContext: clientotel.TaskContext}, handler)
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'run23' AND status IN ('DONE', 'DEAD')`) == 2
	}, 30*time.Second, 10*time.Millisecond)
	causes.await(t, slow.ID, 10*time.Second, "the slow handler is stopped")
	require.NoError(t, stop())

	mu.Lock()
	defer mu.Unlock()
	want, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	require.Equal(t, want, seen[traced.ID], "the handler continues the submit's trace")
	require.False(t, seen[slow.ID].IsValid(), "a task without a trace starts its handler without one")
	require.ErrorIs(t, causes.of(slow.ID), client.ErrTaskTimeLimit)

	done, err := c.Get(ctx, traced.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, done.Status)
	require.Equal(t, 50.0, done.LastProgress.Percent)
	require.Equal(t, "half way", done.LastProgress.Message)
	dead, err := c.Get(ctx, slow.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDead, dead.Status)
	require.Equal(t, "execution timeout after 1s", dead.LastError, "the server ended it; the handler's late result was dropped")
	attempts, err := c.Attempts(ctx, slow.ID)
	require.NoError(t, err)
	require.Equal(t, client.AttemptTimedOut, attempts[0].Outcome)

	var plain client.Task
	require.ErrorContains(t, plain.Progress(ctx, 1, ""), "Runner")
}

// `taskmaster worker --exec` gives the command its task's trace
// (TRACEPARENT), takes progress lines from file descriptor 3, and stops a
// command whose task's time limit is up.
func TestExecWorkerTracesProgressAndTimeLimits(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.TimeoutReaperInterval = 100 * time.Millisecond })
	url := s.URL
	c := newSDK(t, url, nil)
	ctx := t.Context()
	var traced client.Task
	(&sdkRaw{t: t, url: url}).post("/tasks/v1", map[string]any{"queue": "exec23", "payload": "fast"},
		http.Header{"Traceparent": {submittedTrace}, "Tracestate": {"a=1"}}, &traced)
	slow, err := c.Submit(ctx, client.SubmitParams{Queue: "exec23", Payload: "slow", TimeoutSeconds: 1, MaxAttempts: 1})
	require.NoError(t, err)

	script := `payload=$(cat)
echo "progress 30 starting" >&$TASKMASTER_PROGRESS_FD
echo "not a progress line" >&3
echo "progress 60 $TASKMASTER_QUEUE done" >&3
case "$payload" in
  *slow*) sleep 60 ;;
esac
echo "{\"traceparent\": \"$TRACEPARENT\", \"tracestate\": \"$TRACESTATE\"}"`
	stop := startCLIWorker(t, url, "--queue", "exec23", "--exec", script, "--concurrency", "2")
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'exec23' AND status IN ('DONE', 'DEAD')`) == 2
	}, 30*time.Second, 10*time.Millisecond)
	require.Eventually(t, func() bool {
		task, err := c.Get(ctx, traced.ID)
		return err == nil && task.LastProgress != nil && task.LastProgress.Percent == 60
	}, 10*time.Second, 10*time.Millisecond, "the last progress line is reported")
	require.NoError(t, stop())

	done, err := c.Get(ctx, traced.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, done.Status)
	var result struct{ Traceparent, Tracestate string }
	require.NoError(t, json.Unmarshal(done.Result, &result), string(done.Result))
	require.Equal(t, submittedTrace, result.Traceparent)
	require.Equal(t, "a=1", result.Tracestate)
	require.Equal(t, "exec23 done", done.LastProgress.Message)
	dead, err := c.Get(ctx, slow.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDead, dead.Status)
	require.True(t, strings.HasPrefix(dead.LastError, "execution timeout after 1s"), dead.LastError)
}

// sdkRaw posts raw requests with headers (the SDK sends no traceparent of
// its own without clientotel).
type sdkRaw struct {
	t   *testing.T
	url string
}

func (r *sdkRaw) post(path string, body any, header http.Header, out any) {
	r.t.Helper()
	b, err := json.Marshal(body)
	require.NoError(r.t, err)
	req, err := http.NewRequest(http.MethodPost, r.url+path, strings.NewReader(string(b)))
	require.NoError(r.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(r.t, err)
	defer resp.Body.Close()
	require.Less(r.t, resp.StatusCode, 300)
	require.NoError(r.t, json.NewDecoder(resp.Body).Decode(out))
}

// A task a heartbeat names both lost and to cancel is one whose attempt the
// server ended at its time limit, not a lost one: when the claim's answer
// is slow, the server's clock gets there before the Runner's own, which
// counts the limit from the answer. The handler is stopped with
// ErrTaskTimeLimit and its outcome dropped.
func TestRunnerCountsAGoneTaskPastItsTimeLimitAsTheLimit(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.TimeoutReaperInterval = 100 * time.Millisecond })
	proxy := faultproxy.Start(t, s.URL)
	c := newSDK(t, proxy.URL(), nil)
	slow, err := c.Submit(t.Context(), client.SubmitParams{Queue: "limit-late", Payload: "slow", TimeoutSeconds: 1, MaxAttempts: 1})
	require.NoError(t, err)
	// The claim's answer comes 2.5 s after the server claimed the task: its
	// attempt timed out meanwhile, and the first heartbeat after it (every
	// 100 ms) says so well before the Runner's clock would (1 s after it).
	held := proxy.Inject(faultproxy.DelayAnswers(2500 * time.Millisecond).On(faultproxy.Claim).Times(1))

	causes := &handlerCauses{}
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{"limit-late"}, HeartbeatInterval: 100 * time.Millisecond},
		causes.untilStopped)
	causes.await(t, slow.ID, 20*time.Second, "the handler is stopped")
	require.NoError(t, stop())
	require.Equal(t, 1, held.Hits(), "the claim's answer was held")
	require.ErrorIs(t, causes.of(slow.ID), client.ErrTaskTimeLimit)
	attempts, err := c.Attempts(t.Context(), slow.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, client.AttemptTimedOut, attempts[0].Outcome, "the server ended it; the late result was dropped")
}

// handlerCauses records why each task's handler was stopped.
type handlerCauses struct {
	mu sync.Mutex
	m  map[string]error
}

// untilStopped is a handler that waits until it is stopped, records the
// cause, and returns a result that must not be reported.
func (h *handlerCauses) untilStopped(ctx context.Context, task client.Task) (any, error) {
	<-ctx.Done()
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[string]error{}
	}
	h.m[task.ID] = context.Cause(ctx)
	return "too late", nil
}

// of is the cause recorded for task id (nil: not stopped yet).
func (h *handlerCauses) of(id string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[id]
}

// await waits until the handler of task id was stopped.
func (h *handlerCauses) await(t *testing.T, id string, within time.Duration, msg string) {
	t.Helper()
	require.Eventually(t, func() bool { return h.of(id) != nil }, within, 10*time.Millisecond, msg)
}
