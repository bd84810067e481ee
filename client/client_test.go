package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
)

// fastRetries keeps retry tests quick.
var fastRetries = client.RetryPolicy{MaxAttempts: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond}

const taskJSON = `{"id":"8f0e3a4e-4f5e-4a51-9e0e-2b1b8c1d9a11","queue":"q","status":"PENDING","priority":0,"payload":{"n":1},` +
	`"tags":[],"attempts":0,"max_attempts":3,"worker_id":null,"lease_id":null,"last_error":null,"dead_reason":null,` +
	`"result":null,"deadline":null,"run_at":"2026-01-01T00:00:00Z","idempotency_key":null,"created_at":"2026-01-01T00:00:00Z",` +
	`"claimed_at":null,"finished_at":null,"updated_at":"2026-01-01T00:00:00Z","lease_expires_at":null,"cancel_requested_at":null,` +
	`"unique_key":null,"retry":null,"snoozes":0,"group_key":null,"timeout_seconds":null,"timeout_at":null,"metadata":{},` +
	`"trace":null,"progress":null,"schedule_name":null,"schedule_tick":null,` +
	`"workflow_id":"8f0e3a4e-4f5e-4a51-9e0e-2b1b8c1d9a11","replay_of":null,"debounce_until":null}`

// flaky answers the first `failures` requests with status, then with ok.
type flaky struct {
	mu       sync.Mutex
	requests []*http.Request
	failures int
	status   int
	ok       string
	okStatus int
}

func (f *flaky) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.requests = append(f.requests, r.Clone(context.Background()))
	n := len(f.requests)
	f.mu.Unlock()
	if n <= f.failures {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(f.status)
		_, _ = fmt.Fprintf(w, `{"type":"urn:problem-type:taskmaster:internal-error","title":"Internal server error","status":%d}`, f.status)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	status := f.okStatus
	if status == 0 {
		status = http.StatusOK
	}
	w.WriteHeader(status)
	_, _ = io.WriteString(w, f.ok)
}

func (f *flaky) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.requests)
}

func newClient(t *testing.T, url string, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(url, append([]client.Option{client.WithRetryPolicy(fastRetries)}, opts...)...)
	require.NoError(t, err)
	return c
}

func TestRetriesServerErrorsThenSucceeds(t *testing.T) {
	t.Parallel()
	f := &flaky{failures: 2, status: http.StatusBadGateway, ok: taskJSON}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newClient(t, srv.URL)

	got, err := c.Get(context.Background(), "8f0e3a4e-4f5e-4a51-9e0e-2b1b8c1d9a11")
	require.NoError(t, err)
	require.Equal(t, "q", got.Queue)
	require.JSONEq(t, `{"n":1}`, string(got.Payload))
	require.Equal(t, 3, f.count())
	// One logical call: one correlation id across its retries.
	ids := map[string]bool{}
	for _, r := range f.requests {
		ids[r.Header.Get(client.HeaderCorrelationID)] = true
	}
	require.Len(t, ids, 1)
}

func TestRetriesAreBounded(t *testing.T) {
	t.Parallel()
	f := &flaky{failures: 100, status: http.StatusInternalServerError}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newClient(t, srv.URL)

	_, err := c.Queues(context.Background())
	p, ok := client.AsProblem(err)
	require.True(t, ok, "%v", err)
	require.Equal(t, 500, p.Status)
	require.Equal(t, client.ProblemInternal, p.Type)
	require.Equal(t, fastRetries.MaxAttempts, f.count())
}

func TestClientErrorsAreNeverRetried(t *testing.T) {
	t.Parallel()
	for _, status := range []int{400, 404, 409, 413, 422} {
		f := &flaky{failures: 100, status: status}
		srv := httptest.NewServer(f)
		c := newClient(t, srv.URL)
		_, err := c.Complete(context.Background(), "x", client.CompleteParams{WorkerID: "w"})
		require.Error(t, err)
		require.Equal(t, 1, f.count(), "status %d", status)
		srv.Close()
	}
}

func TestProblemDecoding(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.Header().Set(client.HeaderCorrelationID, "cid-1")
		w.WriteHeader(http.StatusConflict)
		_, _ = io.WriteString(w, `{"type":"urn:problem-type:taskmaster:lease-lost","title":"Lease lost","status":409,`+
			`"detail":"the task is RUNNING and held by another worker or under another lease","instance":"/tasks/v1/t1/complete",`+
			`"correlation_id":"cid-1","current_status":"RUNNING"}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)

	_, err := c.Complete(context.Background(), "t1", client.CompleteParams{WorkerID: "w", LeaseID: "l"})
	var p *client.Problem
	require.ErrorAs(t, err, &p)
	require.Equal(t, client.Problem{
		Type: client.ProblemLeaseLost, Title: "Lease lost", Status: 409,
		Detail:   "the task is RUNNING and held by another worker or under another lease",
		Instance: "/tasks/v1/t1/complete", CorrelationID: "cid-1", CurrentStatus: client.StatusRunning,
	}, *p)
	require.Equal(t, "lease-lost", p.Slug())
	require.True(t, client.IsLeaseLost(err))
	require.True(t, client.IsConflict(err))
	require.False(t, client.IsInvalidTransition(err))
	require.False(t, client.IsNotFound(err))
	require.Contains(t, err.Error(), "409 lease-lost")
	require.Contains(t, err.Error(), "cid-1")
}

func TestValidationProblemListsFields(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusUnprocessableEntity)
		_, _ = io.WriteString(w, `{"type":"urn:problem-type:taskmaster:validation-error","title":"Invalid input","status":422,`+
			`"errors":[{"field":"queue","message":"is required"},{"field":"tags[0]","message":"must be 1 to 64 printable characters"}]}`)
	}))
	defer srv.Close()
	_, err := newClient(t, srv.URL).Submit(context.Background(), client.SubmitParams{})
	require.True(t, client.IsValidation(err))
	p, _ := client.AsProblem(err)
	require.Equal(t, []client.FieldError{{Field: "queue", Message: "is required"}, {Field: "tags[0]", Message: "must be 1 to 64 printable characters"}}, p.Errors)
	require.Contains(t, err.Error(), "queue is required")
	require.Equal(t, "/tasks/v1", p.Instance, "the request path stands in for a missing instance")
}

func TestNonProblemErrorBody(t *testing.T) {
	t.Parallel()
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = io.WriteString(w, "<html>upstream down</html>")
	}))
	defer proxy.Close()
	_, err := newClient(t, proxy.URL).Workers(context.Background())
	p, ok := client.AsProblem(err)
	require.True(t, ok)
	require.Equal(t, "about:blank", p.Type)
	require.Equal(t, 503, p.Status)
	require.Equal(t, "<html>upstream down</html>", p.Detail)
	require.Empty(t, p.Slug())
}

// failingTransport fails the first n round trips with err.
type failingTransport struct {
	n     atomic.Int32
	err   error
	calls atomic.Int32
	next  http.RoundTripper
}

func (f *failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	f.calls.Add(1)
	if f.n.Add(-1) >= 0 {
		return nil, f.err
	}
	return f.next.RoundTrip(r)
}

func TestTransportErrorsAreRetried(t *testing.T) {
	t.Parallel()
	f := &flaky{ok: `{"workers":[]}`}
	srv := httptest.NewServer(f)
	defer srv.Close()
	tr := &failingTransport{err: errors.New("connection reset by peer"), next: http.DefaultTransport}
	tr.n.Store(2)
	c := newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: tr}))
	ws, err := c.Workers(context.Background())
	require.NoError(t, err)
	require.Empty(t, ws)
	require.Equal(t, int32(3), tr.calls.Load())
}

// A submission without an idempotency key could be duplicated by a
// retry, so it is retried only when it surely never reached the server.
func TestSubmitWithoutIdempotencyKeyRetriesOnlyUnsentRequests(t *testing.T) {
	t.Parallel()
	f := &flaky{ok: taskJSON, okStatus: http.StatusCreated}
	srv := httptest.NewServer(f)
	defer srv.Close()

	ambiguous := &failingTransport{err: errors.New("connection reset by peer"), next: http.DefaultTransport}
	ambiguous.n.Store(1)
	c := newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: ambiguous}))
	_, err := c.Submit(context.Background(), client.SubmitParams{Queue: "q"})
	require.Error(t, err)
	require.Equal(t, int32(1), ambiguous.calls.Load())

	refused := &failingTransport{err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, next: http.DefaultTransport}
	refused.n.Store(2)
	c = newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: refused}))
	task, err := c.Submit(context.Background(), client.SubmitParams{Queue: "q"})
	require.NoError(t, err)
	require.Equal(t, "q", task.Queue)
	require.Equal(t, int32(3), refused.calls.Load())

	withKey := &failingTransport{err: errors.New("connection reset by peer"), next: http.DefaultTransport}
	withKey.n.Store(2)
	c = newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: withKey}))
	_, err = c.Submit(context.Background(), client.SubmitParams{Queue: "q", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.Equal(t, int32(3), withKey.calls.Load())

	f500 := &flaky{failures: 1, status: 500, ok: taskJSON, okStatus: 201}
	srv500 := httptest.NewServer(f500)
	defer srv500.Close()
	_, err = newClient(t, srv500.URL).Submit(context.Background(), client.SubmitParams{Queue: "q"})
	require.Error(t, err)
	require.Equal(t, 1, f500.count())
}

func TestSubmitSendsOnlyWhatIsSet(t *testing.T) {
	t.Parallel()
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.Equal(t, "/prefix/tasks/v1", r.URL.Path)
		require.NoError(t, json.NewDecoder(r.Body).Decode(&body))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, taskJSON)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL+"/prefix/")
	_, err := c.Submit(context.Background(), client.SubmitParams{Queue: "q", Payload: json.RawMessage(`{"a":[1,2]}`), Tags: []string{"gpu"}})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"queue": "q", "payload": map[string]any{"a": []any{1.0, 2.0}}, "tags": []any{"gpu"}}, body)

	_, err = c.Submit(context.Background(), client.SubmitParams{Queue: "q", Payload: json.RawMessage(`{bad`)})
	require.ErrorContains(t, err, "encode payload")
}

func TestContextCancellationStopsRetries(t *testing.T) {
	t.Parallel()
	f := &flaky{failures: 100, status: 503}
	srv := httptest.NewServer(f)
	defer srv.Close()
	c := newClient(t, srv.URL, client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 100, BaseDelay: time.Hour, MaxDelay: time.Hour}))
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := c.Queues(ctx)
	require.Error(t, err)
	require.Less(t, time.Since(start), 10*time.Second)
	require.Equal(t, 1, f.count())
}

func TestNewRejectsBadURLs(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"127.0.0.1:8080", "ftp://x", "http://"} {
		_, err := client.New(u)
		require.Error(t, err, u)
	}
	c, err := client.New("")
	require.NoError(t, err)
	require.Equal(t, client.DefaultURL, c.BaseURL())
	_, err = client.New("http://x", client.WithRetryPolicy(client.RetryPolicy{}))
	require.Error(t, err)
}

func TestNonRetryable(t *testing.T) {
	t.Parallel()
	base := errors.New("bad input")
	err := client.NonRetryable(base)
	require.True(t, client.IsNonRetryable(err))
	require.True(t, client.IsNonRetryable(errors.Join(errors.New("x"), err)))
	require.ErrorIs(t, err, base)
	require.Equal(t, "bad input", err.Error())
	require.False(t, client.IsNonRetryable(base))
	require.NoError(t, client.NonRetryable(nil))
}

func TestDefaultWorkerID(t *testing.T) {
	t.Parallel()
	id := client.DefaultWorkerID()
	require.Regexp(t, regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}-[0-9]+$`), id)
	require.Equal(t, id, client.DefaultWorkerID(), "stable within the process")
}

func TestTaskMarshalsNullsLikeTheServer(t *testing.T) {
	t.Parallel()
	withPolicy := strings.Replace(taskJSON, `"unique_key":null,"retry":null,"snoozes":0,"group_key":null,"timeout_seconds":null,`+
		`"timeout_at":null,"metadata":{},"trace":null,"progress":null,"schedule_name":null,"schedule_tick":null`,
		`"unique_key":"u","retry":{"base_seconds":0.5,"max_seconds":600,"jitter":"full"},"snoozes":2,"group_key":"g",`+
			`"timeout_seconds":30,"timeout_at":"2026-01-01T00:00:30Z","metadata":{"tenant":"acme"},`+
			`"trace":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","tracestate":null},`+
			`"progress":{"percent":12.5,"message":"m","details":{"n":1},"updated_at":"2026-01-01T00:00:10Z"},`+
			`"schedule_name":"nightly","schedule_tick":"2026-01-01T02:30:00Z"`, 1)
	withPolicy = strings.Replace(withPolicy, `"replay_of":null,"debounce_until":null`,
		`"replay_of":"1f0e3a4e-4f5e-4a51-9e0e-2b1b8c1d9a11","debounce_until":"2026-01-01T00:01:00Z"`, 1)
	require.NotEqual(t, taskJSON, withPolicy)
	for _, in := range []string{taskJSON, withPolicy} {
		var task client.Task
		require.NoError(t, json.Unmarshal([]byte(in), &task))
		out, err := json.Marshal(task)
		require.NoError(t, err)
		require.JSONEq(t, in, string(out))
	}
	var task client.Task
	require.NoError(t, json.Unmarshal([]byte(taskJSON), &task))
	var payload struct{ N int }
	require.NoError(t, task.DecodePayload(&payload))
	require.Equal(t, 1, payload.N)
}

func TestRunnerConfigValidate(t *testing.T) {
	t.Parallel()
	require.NoError(t, client.RunnerConfig{}.Validate())
	require.Error(t, client.RunnerConfig{Concurrency: -1}.Validate())
	require.Error(t, client.RunnerConfig{WorkerID: "has space"}.Validate())
	require.Error(t, client.RunnerConfig{PollInterval: time.Second, MaxIdleInterval: time.Millisecond}.Validate())
	require.Error(t, client.RunnerConfig{ClaimWait: client.MaxClaimWait + time.Millisecond}.Validate())
	require.NoError(t, client.RunnerConfig{ClaimWait: -1}.Validate(), "negative: no long poll")
	require.NoError(t, client.RunnerConfig{LeaseSeconds: client.MaxLeaseSeconds, TaskTimeout: time.Hour}.Validate())
	require.Error(t, client.RunnerConfig{LeaseSeconds: client.MaxLeaseSeconds + 1}.Validate())
	require.Error(t, client.RunnerConfig{LeaseSeconds: -1}.Validate())
	require.Error(t, client.RunnerConfig{TaskTimeout: -1}.Validate())
}

// Other services import this package: it must stay on the standard library.
func TestDependsOnStandardLibraryOnly(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	require.NoError(t, err)
	for _, dep := range strings.Fields(string(out)) {
		require.Equal(t, "github.com/taskmaster/taskmaster/client", dep, "client must import only the standard library")
	}
}

// A long-poll claim may take its wait on top of the HTTP client's timeout;
// other calls stay bound by the timeout.
func TestLongPollClaimOutlivesTheClientTimeout(t *testing.T) {
	t.Parallel()
	var waits []any
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if r.Body != nil {
			_ = json.NewDecoder(r.Body).Decode(&body)
		}
		mu.Lock()
		waits = append(waits, body["wait_ms"])
		mu.Unlock()
		time.Sleep(300 * time.Millisecond) // the server's wait
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"tasks":[]}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Timeout: 100 * time.Millisecond}),
		client.WithRetryPolicy(client.RetryPolicy{MaxAttempts: 1}))

	tasks, err := c.Claim(context.Background(), client.ClaimParams{WorkerID: "w", Wait: 299*time.Millisecond + 500*time.Microsecond})
	require.NoError(t, err)
	require.Empty(t, tasks)
	_, err = c.Claim(context.Background(), client.ClaimParams{WorkerID: "w"})
	require.Error(t, err, "a claim without a wait keeps the client's timeout")
	_, err = c.Workers(context.Background())
	require.Error(t, err, "so does any other call")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []any{300.0, nil, nil}, waits, "wait_ms is rounded up, and sent only with a wait")
}

// A batch is retried after an ambiguous transport error only when every
// item has an idempotency key.
func TestSubmitBatchRetriesLikeSubmit(t *testing.T) {
	t.Parallel()
	f := &flaky{ok: `{"tasks":[` + taskJSON + `,` + taskJSON + `],"created":[true,false]}`, okStatus: http.StatusCreated}
	srv := httptest.NewServer(f)
	defer srv.Close()

	partlyKeyed := []client.SubmitParams{{Queue: "q", IdempotencyKey: "a"}, {Queue: "q"}}
	ambiguous := &failingTransport{err: errors.New("connection reset by peer"), next: http.DefaultTransport}
	ambiguous.n.Store(1)
	c := newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: ambiguous}))
	_, _, err := c.SubmitBatch(context.Background(), partlyKeyed)
	require.Error(t, err)
	require.Equal(t, int32(1), ambiguous.calls.Load())

	refused := &failingTransport{err: &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, next: http.DefaultTransport}
	refused.n.Store(1)
	c = newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: refused}))
	_, _, err = c.SubmitBatch(context.Background(), partlyKeyed)
	require.NoError(t, err, "a request that never left is always retried")
	require.Equal(t, int32(2), refused.calls.Load())

	keyed := &failingTransport{err: errors.New("connection reset by peer"), next: http.DefaultTransport}
	keyed.n.Store(2)
	c = newClient(t, srv.URL, client.WithHTTPClient(&http.Client{Transport: keyed}))
	tasks, created, err := c.SubmitBatch(context.Background(), []client.SubmitParams{{Queue: "q", IdempotencyKey: "a"}, {Queue: "q", IdempotencyKey: "b"}})
	require.NoError(t, err)
	require.Equal(t, int32(3), keyed.calls.Load())
	require.Len(t, tasks, 2)
	require.Equal(t, []bool{true, false}, created)

	_, _, err = c.SubmitBatch(context.Background(), []client.SubmitParams{{Queue: "q"}, {Queue: "q", Payload: json.RawMessage(`{bad`)}})
	require.ErrorContains(t, err, "tasks[1]: encode payload")
}

// Batch reports send one body per batch and decode an outcome per item.
func TestBatchReportsSendItemsAndDecodeOutcomes(t *testing.T) {
	t.Parallel()
	var bodies []string
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		mu.Lock()
		bodies = append(bodies, r.URL.Path+" "+string(raw))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items":[{"id":"t1","outcome":"done","task":`+taskJSON+`},`+
			`{"id":"t2","outcome":"error","problem":{"type":"urn:problem-type:taskmaster:lease-lost","title":"Lease lost","status":409,"current_status":"RUNNING"}}]}`)
	}))
	defer srv.Close()
	c := newClient(t, srv.URL)

	out, err := c.CompleteBatch(context.Background(), "w", []client.CompleteItem{{ID: "t1", LeaseID: "l1", Result: []int{1}}, {ID: "t2"}})
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, client.OutcomeDone, out[0].Outcome)
	require.Equal(t, "q", out[0].Task.Queue)
	require.NoError(t, out[0].Err())
	require.Equal(t, client.OutcomeError, out[1].Outcome)
	require.Nil(t, out[1].Task)
	require.True(t, client.IsLeaseLost(out[1].Err()))
	require.Equal(t, client.StatusRunning, out[1].Problem.CurrentStatus)

	_, err = c.FailBatch(context.Background(), "w", []client.FailItem{{ID: "t1", LeaseID: "l1", Error: "boom"}, {ID: "t2", Error: strings.Repeat("x", client.MaxErrorBytes+1), NonRetryable: true}})
	require.NoError(t, err)

	_, err = c.CompleteBatch(context.Background(), "w", []client.CompleteItem{{ID: "t1", Result: make(chan int)}})
	require.ErrorContains(t, err, "items[0]: encode result")
	_, err = c.CompleteBatch(context.Background(), "w", []client.CompleteItem{{ID: "t1"}})
	require.ErrorContains(t, err, "batch of 1 answered with 2 outcomes")

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, bodies, 3)
	require.Equal(t, `/tasks/v1/complete {"worker_id":"w","items":[{"id":"t1","lease_id":"l1","result":[1]},{"id":"t2"}]}`, bodies[0])
	path, body, _ := strings.Cut(bodies[1], " ")
	require.Equal(t, "/tasks/v1/fail", path)
	var fail struct {
		WorkerID string `json:"worker_id"`
		Items    []map[string]any
	}
	require.NoError(t, json.Unmarshal([]byte(body), &fail))
	require.Equal(t, map[string]any{"id": "t1", "lease_id": "l1", "error": "boom", "retryable": true}, fail.Items[0])
	require.Equal(t, false, fail.Items[1]["retryable"])
	require.LessOrEqual(t, len(fail.Items[1]["error"].(string)), client.MaxErrorBytes)
}

// A server that answers a long-poll claim at once with nothing (it is
// shutting down) must not turn the runner into a busy loop: it backs off
// as it does without long polls. Long polls shorter than 100 ms (here cut
// by a short drain timeout) are not made at all.
func TestRunnerBacksOffWhenTheServerDoesNotWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		drain  time.Duration
		waitMS any
	}{{time.Minute, 1000.0}, {time.Millisecond, nil}} {
		var mu sync.Mutex
		var waits []any
		mux := http.NewServeMux()
		mux.HandleFunc("POST /workers/v1/register", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE","heartbeat_interval_seconds":10}`)
		})
		mux.HandleFunc("POST /tasks/v1/claim", func(w http.ResponseWriter, r *http.Request) {
			var body map[string]any
			_ = json.NewDecoder(r.Body).Decode(&body)
			mu.Lock()
			waits = append(waits, body["wait_ms"])
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"tasks":[]}`)
		})
		srv := httptest.NewServer(mux)
		r, err := client.NewRunner(newClient(t, srv.URL), client.RunnerConfig{
			WorkerID: "w", ClaimWait: time.Second, DrainTimeout: tc.drain,
			PollInterval: 50 * time.Millisecond, MaxIdleInterval: 50 * time.Millisecond,
		}, func(context.Context, client.Task) (any, error) { return nil, nil })
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		require.NoError(t, r.Run(ctx))
		cancel()
		srv.Close()

		mu.Lock()
		require.NotEmpty(t, waits)
		require.LessOrEqual(t, len(waits), 10, "about one claim per 50 ms, not a busy loop")
		for _, w := range waits {
			require.Equal(t, tc.waitMS, w)
		}
		mu.Unlock()
	}
}

// Queues carries every field GET /queues/v1 serves, and marshals back to
// what was served (the CLI's --json prints it).
func TestQueuesCarryEveryServedField(t *testing.T) {
	t.Parallel()
	const queue = `{"queue":"emails","pending":2,"running":1,"done":5,"dead":1,"blocked":4,"active_workers":3,` +
		`"oldest_pending_age_seconds":90.5,` +
		`"rates":{"last_1m":{"enqueued":2,"claimed":1,"completed":1,"dead_lettered":0},` +
		`"last_5m":{"enqueued":0.4,"claimed":0.2,"completed":0.2,"dead_lettered":0.2},` +
		`"last_15m":{"enqueued":0.6,"claimed":0.4,"completed":0.33,"dead_lettered":0.07}},` +
		`"totals":{"submitted":9,"claimed":7,"completed":5,"failed":2,"dead_lettered":{"exhausted":1},"requeued":{"failed":1},"cleaned":0},` +
		`"stats_as_of":"2026-01-01T00:00:00.5Z","paused":true,` +
		`"settings":{"paused":true,"max_running":5,"rate_limit":{"per_second":2.5,"burst":10},"max_running_per_group":null,"default_timeout_seconds":600,` +
		`"rate_limit_per_group":{"per_second":1,"burst":2},"limits":["tenant-api"],` +
		`"push":{"url":"https://hooks.example.com/in","timeout_seconds":30,"max_in_flight":10,"header_names":["Authorization"],` +
		`"non_retryable_statuses":[400,404],"secret_rotated_at":"2026-01-01T00:00:00Z","previous_secret_expires_at":null}}}`
	const idle = `{"queue":"idle","pending":0,"running":0,"done":1,"dead":0,"blocked":0,"active_workers":0,"oldest_pending_age_seconds":null,` +
		`"rates":{"last_1m":{"enqueued":0,"claimed":0,"completed":0,"dead_lettered":0},` +
		`"last_5m":{"enqueued":0,"claimed":0,"completed":0,"dead_lettered":0},` +
		`"last_15m":{"enqueued":0,"claimed":0,"completed":0,"dead_lettered":0}},` +
		`"totals":{"submitted":1,"claimed":1,"completed":1,"failed":0,"dead_lettered":{},"requeued":{},"cleaned":0},"stats_as_of":null,` +
		`"paused":false,"settings":{"paused":false,"max_running":null,"rate_limit":null,"max_running_per_group":null,"default_timeout_seconds":null,` +
		`"rate_limit_per_group":null,"limits":[],"push":null}}`
	srv := httptest.NewServer(&flaky{ok: `{"queues":[` + queue + `,` + idle + `]}`})
	defer srv.Close()

	qs, err := newClient(t, srv.URL).Queues(context.Background())
	require.NoError(t, err)
	require.Len(t, qs, 2)
	q := qs[0]
	age, ok := q.OldestPendingAge()
	require.True(t, ok)
	require.Equal(t, 90500*time.Millisecond, age)
	require.Equal(t, 0.2, q.Rates[client.RateLast5m].Completed)
	require.Equal(t, int64(1), q.Totals.DeadLettered[client.DeadExhausted])
	require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 5e8, time.UTC), q.StatsAsOf.UTC())
	require.Equal(t, int64(4), q.Blocked)
	require.True(t, q.Paused)
	require.Equal(t, 5, *q.Settings.MaxRunning)
	require.Equal(t, client.RateLimit{PerSecond: 2.5, Burst: 10}, *q.Settings.RateLimit)
	require.Equal(t, []string{"tenant-api"}, q.Settings.Limits)
	require.Equal(t, "https://hooks.example.com/in", q.Settings.Push.URL)
	_, ok = qs[1].OldestPendingAge()
	require.False(t, ok)
	require.Nil(t, qs[1].StatsAsOf)
	for i, served := range []string{queue, idle} {
		back, err := json.Marshal(qs[i])
		require.NoError(t, err)
		require.JSONEq(t, served, string(back))
	}
}

// A server without leases refuses a heartbeat's task list as an unknown
// field: the runner then sends plain heartbeats and carries on.
func TestRunnerFallsBackToPlainHeartbeats(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var beats []string // "list" or "plain", in order
	mux := http.NewServeMux()
	mux.HandleFunc("POST /workers/v1/register", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE","heartbeat_interval_seconds":0.01}`)
	})
	mux.HandleFunc("POST /tasks/v1/claim", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"tasks":[]}`)
	})
	mux.HandleFunc("POST /workers/v1/w/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if len(body) > 0 {
			beats = append(beats, "list")
			w.Header().Set("Content-Type", "application/problem+json")
			w.WriteHeader(http.StatusBadRequest)
			// As every server version answers an unknown field: naming it.
			_, _ = io.WriteString(w, `{"type":"urn:problem-type:taskmaster:malformed-request","title":"Malformed request","status":400,"detail":"unknown field \"tasks\"","errors":[{"field":"tasks","message":"is not a known field"}]}`)
			return
		}
		beats = append(beats, "plain")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE"}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r, err := client.NewRunner(newClient(t, srv.URL), client.RunnerConfig{
		WorkerID: "w", ClaimWait: -1, PollInterval: 20 * time.Millisecond, MaxIdleInterval: 20 * time.Millisecond,
	}, func(context.Context, client.Task) (any, error) { return nil, nil })
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(beats) >= 4
	}, 10*time.Second, 5*time.Millisecond)
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"list", "plain", "plain", "plain"}, beats[:4], "one refused list, then plain heartbeats only")
	for _, b := range beats[4:] {
		require.Equal(t, "plain", b)
	}
}

// A runner never holds more tasks than one heartbeat may list: Concurrency
// is capped at MaxHeartbeatTasks, and cut to the cap a server advertises at
// registration. Here the server lets a heartbeat list 2 tasks: a runner with
// Concurrency 5 claims for at most 2 free slots and lists at most 2.
func TestRunnerHoldsNoMoreTasksThanAHeartbeatMayList(t *testing.T) {
	t.Parallel()
	require.Error(t, client.RunnerConfig{Concurrency: client.MaxHeartbeatTasks + 1}.Validate())
	require.NoError(t, client.RunnerConfig{Concurrency: client.MaxHeartbeatTasks}.Validate())

	var (
		mu             sync.Mutex
		limits, listed []int
		running, peak  int
		claims         int
	)
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("POST /workers/v1/register", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE","heartbeat_interval_seconds":0.02,"max_heartbeat_tasks":2}`)
	})
	mux.HandleFunc("POST /tasks/v1/claim", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Limit int }
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		limits = append(limits, body.Limit)
		claims++
		tasks := make([]string, body.Limit)
		for i := range tasks {
			tasks[i] = fmt.Sprintf(`{"id":"t-%d-%d","queue":"q","status":"RUNNING","lease_id":"l-%d-%d","payload":null}`, claims, i, claims, i)
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"tasks":[`+strings.Join(tasks, ",")+`]}`)
	})
	mux.HandleFunc("POST /workers/v1/w/heartbeat", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Tasks []client.LeaseRef }
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		listed = append(listed, len(body.Tasks))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"w","queues":[],"tags":[],"status":"ACTIVE","lost":[],"cancel":[],"drain":false}`)
	})
	mux.HandleFunc("POST /tasks/v1/{id}/complete", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"x","status":"DONE"}`)
	})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	r, err := client.NewRunner(newClient(t, srv.URL), client.RunnerConfig{WorkerID: "w", Concurrency: 5, ClaimWait: -1},
		func(ctx context.Context, _ client.Task) (any, error) {
			mu.Lock()
			running++
			peak = max(peak, running)
			mu.Unlock()
			<-release
			mu.Lock()
			running--
			mu.Unlock()
			return nil, nil
		})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return running == 2 && len(listed) >= 3
	}, 10*time.Second, 5*time.Millisecond)
	close(release)
	cancel()
	require.NoError(t, <-done)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 2, peak, "never more tasks at once than a heartbeat may list")
	for _, n := range limits {
		require.LessOrEqual(t, n, 2, "claims ask for the free slots under the cap")
	}
	for _, n := range listed {
		require.LessOrEqual(t, n, 2)
	}
}
