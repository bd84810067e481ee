// Package testclient calls the Taskmaster REST API for end-to-end tests. It
// is written from the contract, not from the server's code: its types carry
// the contract's JSON names, and Problem checks every RFC 9457 member the
// contract promises.
package testclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ProblemTypePrefix starts every problem type URI of the API.
const ProblemTypePrefix = "urn:problem-type:taskmaster:"

// HeaderCorrelationID is the correlation id header.
const HeaderCorrelationID = "X-Correlation-Id"

// Task is the task object of the contract.
type Task struct {
	ID             string          `json:"id"`
	Queue          string          `json:"queue"`
	Status         string          `json:"status"`
	Priority       int             `json:"priority"`
	Payload        json.RawMessage `json:"payload"`
	Tags           []string        `json:"tags"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"max_attempts"`
	WorkerID       *string         `json:"worker_id"`
	LeaseID        *string         `json:"lease_id"`
	LastError      *string         `json:"last_error"`
	DeadReason     *string         `json:"dead_reason"`
	Result         json.RawMessage `json:"result"`
	Deadline       *time.Time      `json:"deadline"`
	RunAt          time.Time       `json:"run_at"`
	IdempotencyKey *string         `json:"idempotency_key"`
	CreatedAt      time.Time       `json:"created_at"`
	ClaimedAt      *time.Time      `json:"claimed_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	// LeaseExpiresAt is when the holder's lease runs out (RUNNING only).
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// CancelRequestedAt is when an operator asked to cancel the running task.
	CancelRequestedAt *time.Time `json:"cancel_requested_at"`
	// Enqueued are the tasks a complete with enqueue created (its answer
	// only).
	Enqueued []Task `json:"enqueued"`
	// UniqueKey is the task's active-unique key.
	UniqueKey *string `json:"unique_key"`
	// Retry is the task's own retry policy (nil: the server's).
	Retry *RetryPolicy `json:"retry"`
	// Snoozes counts the times the holder snoozed the task.
	Snoozes int `json:"snoozes"`
	// GroupKey is the task's group in its queue.
	GroupKey *string `json:"group_key"`
	// TimeoutSeconds is the task's own time limit on each attempt.
	TimeoutSeconds *int `json:"timeout_seconds"`
	// TimeoutAt is when the running attempt's time limit is up.
	TimeoutAt *time.Time `json:"timeout_at"`
	// Metadata is the producer's data.
	Metadata map[string]string `json:"metadata"`
	// Trace is the task's W3C trace context.
	Trace *Trace `json:"trace"`
	// Progress is the holder's last progress report.
	Progress *Progress `json:"progress"`
	// ScheduleName and ScheduleTick name the schedule and tick that made
	// the task.
	ScheduleName *string    `json:"schedule_name"`
	ScheduleTick *time.Time `json:"schedule_tick"`
	// WorkflowID is the task's run.
	WorkflowID string `json:"workflow_id"`
	// ReplayOf is the task this one was replayed from.
	ReplayOf *string `json:"replay_of"`
	// DebounceUntil is the latest run_at debounced submissions may push
	// the task to.
	DebounceUntil *time.Time `json:"debounce_until"`
}

// Trace is a task's W3C trace context.
type Trace struct {
	Traceparent string  `json:"traceparent"`
	Tracestate  *string `json:"tracestate"`
}

// Progress is a task's last progress report.
type Progress struct {
	Percent   float64         `json:"percent"`
	Message   string          `json:"message"`
	Details   json.RawMessage `json:"details"`
	UpdatedAt time.Time       `json:"updated_at"`
}

// RetryPolicy is a task's own retry policy.
type RetryPolicy struct {
	BaseSeconds float64 `json:"base_seconds"`
	MaxSeconds  float64 `json:"max_seconds"`
	Jitter      string  `json:"jitter"`
}

// Lease returns the task's lease id, or "" when it has none.
func (t Task) Lease() string { return deref(t.LeaseID) }

// Holder returns the worker holding the task, or "" when none does.
func (t Task) Holder() string { return deref(t.WorkerID) }

// Reason returns the dead reason, or "".
func (t Task) Reason() string { return deref(t.DeadReason) }

// Error returns last_error, or "".
func (t Task) Error() string { return deref(t.LastError) }

// Worker is the worker object of the contract, with the heartbeat interval
// that registration adds.
type Worker struct {
	ID                       string    `json:"id"`
	Queues                   []string  `json:"queues"`
	Tags                     []string  `json:"tags"`
	Status                   string    `json:"status"`
	RegisteredAt             time.Time `json:"registered_at"`
	LastHeartbeatAt          time.Time `json:"last_heartbeat_at"`
	Draining                 bool      `json:"draining"`
	HeartbeatIntervalSeconds *float64  `json:"heartbeat_interval_seconds,omitempty"`
	MaxHeartbeatTasks        *int      `json:"max_heartbeat_tasks,omitempty"`
}

// LeaseRef names a task and the lease a worker holds it under.
type LeaseRef struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

// Beat is the answer to a heartbeat: the worker and what it must act on.
type Beat struct {
	Worker
	Lost   []LeaseRef `json:"lost"`
	Cancel []LeaseRef `json:"cancel"`
	Drain  bool       `json:"drain"`
}

// QueueCounts are the counts of one entry of GET /queues/v1.
type QueueCounts struct {
	Queue         string `json:"queue"`
	Pending       int64  `json:"pending"`
	Running       int64  `json:"running"`
	Done          int64  `json:"done"`
	Dead          int64  `json:"dead"`
	Blocked       int64  `json:"blocked"`
	ActiveWorkers int64  `json:"active_workers"`
}

// Queue is one entry of GET /queues/v1.
type Queue struct {
	QueueCounts
	OldestPendingAgeSeconds *float64             `json:"oldest_pending_age_seconds"`
	Rates                   map[string]QueueRate `json:"rates"`
	Totals                  QueueTotals          `json:"totals"`
	StatsAsOf               *time.Time           `json:"stats_as_of"`
}

// QueueRate is a queue's throughput over one window, per minute.
type QueueRate struct {
	Enqueued     float64 `json:"enqueued"`
	Claimed      float64 `json:"claimed"`
	Completed    float64 `json:"completed"`
	DeadLettered float64 `json:"dead_lettered"`
}

// QueueTotals are a queue's cumulative transition counts.
type QueueTotals struct {
	Submitted    int64            `json:"submitted"`
	Claimed      int64            `json:"claimed"`
	Completed    int64            `json:"completed"`
	Failed       int64            `json:"failed"`
	DeadLettered map[string]int64 `json:"dead_lettered"`
	Requeued     map[string]int64 `json:"requeued"`
	Cleaned      int64            `json:"cleaned"`
}

// Counts returns the counts of each queue, in order.
func Counts(qs []Queue) []QueueCounts {
	out := make([]QueueCounts, len(qs))
	for i, q := range qs {
		out[i] = q.QueueCounts
	}
	return out
}

// FieldError is one entry of a validation problem's errors.
type FieldError struct {
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Problem is an RFC 9457 problem body.
type Problem struct {
	Type          string       `json:"type"`
	Title         string       `json:"title"`
	Status        int          `json:"status"`
	Detail        string       `json:"detail"`
	Instance      string       `json:"instance"`
	CorrelationID string       `json:"correlation_id"`
	Errors        []FieldError `json:"errors"`
	CurrentStatus string       `json:"current_status"`
}

// Fields returns the names of the offending fields, in order.
func (p Problem) Fields() []string {
	out := make([]string, len(p.Errors))
	for i, e := range p.Errors {
		out[i] = e.Field
	}
	return out
}

// Page is the body of GET /tasks/v1.
type Page struct {
	Tasks      []Task  `json:"tasks"`
	NextCursor *string `json:"next_cursor"`
}

// Client calls one instance.
type Client struct {
	t    testing.TB
	base string
	hc   *http.Client
	// header is sent with every request (an API key; see WithKey).
	header http.Header
}

// New returns a client of the instance at baseURL; t fails on transport
// errors and unexpected answers.
func New(t testing.TB, baseURL string) *Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 32
	t.Cleanup(tr.CloseIdleConnections)
	return &Client{t: t, base: strings.TrimSuffix(baseURL, "/"), hc: &http.Client{Transport: tr, Timeout: time.Minute}}
}

// Response is a finished request.
type Response struct {
	// Method and Path are the request's.
	Method, Path string
	// Status is the response status code.
	Status int
	// Header is the response header.
	Header http.Header
	// Body is the whole response body.
	Body []byte
}

func (r *Response) String() string {
	return fmt.Sprintf("%s %s -> %d %s", r.Method, r.Path, r.Status, r.Body)
}

// Send makes one request and reports transport errors instead of failing
// the test, so goroutines may call it. body is sent as is when it is a
// string or []byte, JSON-encoded otherwise, and omitted when nil.
func (c *Client) Send(method, path string, body any, header http.Header) (*Response, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		enc, err := json.Marshal(b)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(enc)
	}
	req, err := http.NewRequest(method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, vs := range c.header {
		req.Header[k] = vs
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if rd != nil && req.Header.Get("Content-Type") == "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	return &Response{Method: method, Path: path, Status: resp.StatusCode, Header: resp.Header, Body: data}, nil
}

// Do makes one request (see Send); a transport error fails the test.
func (c *Client) Do(method, path string, body any) *Response {
	c.t.Helper()
	return c.DoHeader(method, path, body, nil)
}

// DoHeader is Do with extra request headers.
func (c *Client) DoHeader(method, path string, body any, header http.Header) *Response {
	c.t.Helper()
	r, err := c.Send(method, path, body, header)
	require.NoError(c.t, err, "%s %s", method, path)
	return r
}

// Expect requires the status and, when v is not nil, decodes the JSON body
// into v.
func (r *Response) Expect(t testing.TB, status int, v any) *Response {
	t.Helper()
	require.Equal(t, status, r.Status, "%s", r)
	if v != nil {
		require.Equal(t, "application/json", r.Header.Get("Content-Type"), "%s", r)
		require.NoError(t, json.Unmarshal(r.Body, v), "%s", r)
	}
	return r
}

// Problem requires r to be an RFC 9457 problem of the given status and type
// slug carrying every member the contract promises, and returns it.
func (r *Response) Problem(t testing.TB, status int, slug string) Problem {
	t.Helper()
	require.Equal(t, status, r.Status, "%s", r)
	require.Equal(t, "application/problem+json", r.Header.Get("Content-Type"), "%s", r)
	var members map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(r.Body, &members), "%s", r)
	for _, name := range []string{"type", "title", "status", "detail", "instance", "correlation_id"} {
		require.Contains(t, members, name, "%s", r)
	}
	var p Problem
	require.NoError(t, json.Unmarshal(r.Body, &p), "%s", r)
	require.Equal(t, ProblemTypePrefix+slug, p.Type, "%s", r)
	require.NotEmpty(t, p.Title, "%s", r)
	require.Equal(t, status, p.Status, "%s", r)
	require.NotEmpty(t, p.Detail, "%s", r)
	require.Equal(t, strings.SplitN(r.Path, "?", 2)[0], p.Instance, "%s", r)
	require.NotEmpty(t, p.CorrelationID, "%s", r)
	require.Equal(t, r.Header.Get(HeaderCorrelationID), p.CorrelationID, "%s", r)
	return p
}

// Submit submits a task and requires 201.
func (c *Client) Submit(body any) Task {
	c.t.Helper()
	var out Task
	r := c.Do(http.MethodPost, "/tasks/v1", body).Expect(c.t, http.StatusCreated, &out)
	require.Equal(c.t, "/tasks/v1/"+out.ID, r.Header.Get("Location"))
	return out
}

// Get loads a task and requires 200.
func (c *Client) Get(id string) Task {
	c.t.Helper()
	var out Task
	c.Do(http.MethodGet, "/tasks/v1/"+id, nil).Expect(c.t, http.StatusOK, &out)
	return out
}

// TaskDetail is GET /tasks/v1/{id}'s answer: the task and its
// dependencies.
type TaskDetail struct {
	Task
	// DependsOn and BlockedBy are the task's parents and those not DONE
	// yet.
	DependsOn []string `json:"depends_on"`
	BlockedBy []string `json:"blocked_by"`
}

// Describe reads one task with its dependencies and requires 200.
func (c *Client) Describe(id string) TaskDetail {
	c.t.Helper()
	var out TaskDetail
	c.Do(http.MethodGet, "/tasks/v1/"+id, nil).Expect(c.t, http.StatusOK, &out)
	return out
}

// Register registers a worker and requires 201 or 200.
func (c *Client) Register(body any) Worker {
	c.t.Helper()
	r := c.Do(http.MethodPost, "/workers/v1/register", body)
	require.Contains(c.t, []int{http.StatusCreated, http.StatusOK}, r.Status, "%s", r)
	var out Worker
	r.Expect(c.t, r.Status, &out)
	return out
}

// Claim claims for a worker and requires 200.
func (c *Client) Claim(body any) []Task {
	c.t.Helper()
	var out struct {
		Tasks []Task `json:"tasks"`
	}
	r := c.Do(http.MethodPost, "/tasks/v1/claim", body).Expect(c.t, http.StatusOK, &out)
	require.NotNil(c.t, out.Tasks, "tasks is an array, never null: %s", r)
	return out.Tasks
}

// Complete reports success and requires 200.
func (c *Client) Complete(id string, body any) Task {
	c.t.Helper()
	var out Task
	c.Do(http.MethodPost, "/tasks/v1/"+id+"/complete", body).Expect(c.t, http.StatusOK, &out)
	return out
}

// Fail reports failure and requires 200.
func (c *Client) Fail(id string, body any) Task {
	c.t.Helper()
	var out Task
	c.Do(http.MethodPost, "/tasks/v1/"+id+"/fail", body).Expect(c.t, http.StatusOK, &out)
	return out
}

// Heartbeat sends a heartbeat with body (nil: none) and requires 200.
func (c *Client) Heartbeat(workerID string, body any) Beat {
	c.t.Helper()
	var out Beat
	r := c.Do(http.MethodPost, "/workers/v1/"+workerID+"/heartbeat", body).Expect(c.t, http.StatusOK, &out)
	require.NotNil(c.t, out.Lost, "lost is an array, never null: %s", r)
	require.NotNil(c.t, out.Cancel, "cancel is an array, never null: %s", r)
	return out
}

// Listing is the body of a heartbeat that lists tasks (as claimed).
func Listing(tasks ...Task) map[string]any {
	refs := make([]LeaseRef, len(tasks))
	for i, t := range tasks {
		refs[i] = LeaseRef{ID: t.ID, LeaseID: t.Lease()}
	}
	return map[string]any{"tasks": refs}
}

// Ref is t's id and lease.
func (t Task) Ref() LeaseRef { return LeaseRef{ID: t.ID, LeaseID: t.Lease()} }

// List reads one page of tasks (query is the raw query string) and requires
// 200.
func (c *Client) List(query string) Page {
	c.t.Helper()
	var out Page
	r := c.Do(http.MethodGet, "/tasks/v1?"+query, nil).Expect(c.t, http.StatusOK, &out)
	require.NotNil(c.t, out.Tasks, "tasks is an array, never null: %s", r)
	return out
}

// QueuesEventually reads GET /queues/v1 until done accepts the answer or
// timeout passes, and returns the last answer for the caller to assert on.
// The statistics are projected from the outbox and lag writes by about one
// poll interval, so a test that has just written polls instead of reading
// once.
func (c *Client) QueuesEventually(timeout time.Duration, done func([]Queue) bool) []Queue {
	c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		qs := c.Queues()
		if done(qs) || time.Now().After(deadline) {
			return qs
		}
		time.Sleep(10 * time.Millisecond) // polling, with a deadline
	}
}

// Queues reads GET /queues/v1 once and requires 200.
func (c *Client) Queues() []Queue {
	c.t.Helper()
	var out struct {
		Queues []Queue `json:"queues"`
	}
	r := c.Do(http.MethodGet, "/queues/v1", nil).Expect(c.t, http.StatusOK, &out)
	require.NotNil(c.t, out.Queues, "queues is an array, never null: %s", r)
	return out.Queues
}

// Poll calls cond until it returns true, failing the test when timeout
// passes first. It is how tests wait for something: never a bare sleep.
func Poll(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			require.FailNow(t, "timed out waiting for "+what, "after %s", timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
