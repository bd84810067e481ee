package client

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"time"
	"unicode/utf8"
)

// Submit creates a task, or returns the existing one when the queue
// already holds a task with p.IdempotencyKey.
//
// Without an idempotency key a submission is retried only when it surely
// did not reach the server, so a transport error cannot create a duplicate;
// with one, every transport error and 5xx is retried.
func (c *Client) Submit(ctx context.Context, p SubmitParams) (*Task, error) {
	req, mode, err := p.single()
	if err != nil {
		return nil, err
	}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1", body: req, out: &t, mode: mode}); err != nil {
		return nil, err
	}
	return &t, nil
}

// MaxBatch is the most items one batch call (SubmitBatch, CompleteBatch,
// FailBatch) may carry; the server refuses more with a validation problem.
const MaxBatch = 1000

// SubmitBatch creates up to MaxBatch tasks in one request and one
// transaction. It returns the tasks in request order, and created[i] false
// where ps[i].IdempotencyKey named an existing task (including one earlier
// in the same batch), which is returned in its place. Validation is
// all-or-nothing: a validation *Problem lists every bad item as
// "tasks[i].field", and nothing is created.
//
// Items may depend on earlier items (Ref, DependsOn) and on existing tasks
// (their ids in DependsOn): such a task is BLOCKED until every parent is
// DONE (Dependencies choose what a parent ending DEAD means). A reference
// to the item itself or a later one (a cycle), or to nothing the key may
// see, is a validation problem naming "tasks[i].depends_on[k]". A batch
// with dependencies is one run (Task.WorkflowID: its first task's id).
//
// The batch is retried like Submit: after any transport error or 5xx only
// when every item has an idempotency key, otherwise only when the request
// surely did not reach the server.
func (c *Client) SubmitBatch(ctx context.Context, ps []SubmitParams) ([]Task, []bool, error) {
	return c.submitBatch(ctx, "", ps)
}

func (c *Client) submitBatch(ctx context.Context, workflowID string, ps []SubmitParams) ([]Task, []bool, error) {
	body := struct {
		WorkflowID string          `json:"workflow_id,omitempty"`
		Tasks      []submitRequest `json:"tasks"`
	}{WorkflowID: workflowID, Tasks: make([]submitRequest, len(ps))}
	mode := retrySafe
	for i, p := range ps {
		req, err := p.request()
		if err != nil {
			return nil, nil, fmt.Errorf("taskmaster: tasks[%d]: %w", i, err)
		}
		body.Tasks[i] = req
		if p.IdempotencyKey == "" {
			mode = retryUnsent
		}
	}
	var out struct {
		Tasks   []Task `json:"tasks"`
		Created []bool `json:"created"`
	}
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1/batch", body: body, out: &out, mode: mode}); err != nil {
		return nil, nil, err
	}
	if len(out.Tasks) != len(ps) || len(out.Created) != len(ps) {
		return nil, nil, fmt.Errorf("taskmaster: batch of %d answered with %d tasks and %d created flags", len(ps), len(out.Tasks), len(out.Created))
	}
	return out.Tasks, out.Created, nil
}

// single is the body of a submission of one task and how it may be
// retried: after any transport error or 5xx only with an idempotency key.
func (p SubmitParams) single() (submitRequest, retryMode, error) {
	if p.Ref != "" || len(p.DependsOn) > 0 || len(p.Dependencies) > 0 {
		return submitRequest{}, 0, errors.New("taskmaster: Ref and DependsOn need SubmitBatch")
	}
	req, err := p.request()
	if err != nil {
		return req, 0, fmt.Errorf("taskmaster: %w", err)
	}
	if p.IdempotencyKey != "" {
		return req, retrySafe, nil
	}
	return req, retryUnsent, nil
}

// request is the submission's JSON body.
func (p SubmitParams) request() (submitRequest, error) {
	req := submitRequest{
		Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts, Tags: p.Tags,
		Deadline: p.Deadline, RunAt: p.RunAt, IdempotencyKey: p.IdempotencyKey,
		Ref:       p.Ref,
		UniqueKey: p.UniqueKey, Retry: p.Retry, GroupKey: p.GroupKey,
		TimeoutSeconds: p.TimeoutSeconds, Metadata: p.Metadata, Traceparent: p.Traceparent, Tracestate: p.Tracestate,
		DebounceSeconds: wholeSeconds(p.Debounce), DebounceMaxSeconds: wholeSeconds(p.DebounceMax), ThrottleSeconds: wholeSeconds(p.Throttle),
	}
	for _, d := range p.DependsOn {
		req.DependsOn = append(req.DependsOn, d)
	}
	for _, d := range p.Dependencies {
		req.DependsOn = append(req.DependsOn, d)
	}
	raw, err := marshalValue(p.Payload)
	if err != nil {
		return req, fmt.Errorf("encode payload: %w", err)
	}
	req.Payload = raw
	return req, nil
}

// Get returns one task.
func (c *Client) Get(ctx context.Context, id string) (*Task, error) {
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodGet, path: taskPath(id, ""), out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// Parents returns the tasks the task depends on, with their results, in
// the order it named them: a worker's input (work or read scope). It reads
// every page (ParentsPage), a join over 10,000 children included.
func (c *Client) Parents(ctx context.Context, id string) ([]Task, error) {
	var out []Task
	cursor := ""
	for {
		page, err := c.ParentsPage(ctx, id, 0, cursor)
		if err != nil {
			return nil, err
		}
		out = append(out, page.Parents...)
		if page.NextCursor == "" {
			if out == nil {
				out = []Task{}
			}
			return out, nil
		}
		cursor = page.NextCursor
	}
}

// Attempts returns every attempt of the task, oldest first, the running
// one (Outcome "") last.
func (c *Client) Attempts(ctx context.Context, id string) ([]Attempt, error) {
	var out struct {
		Attempts []Attempt `json:"attempts"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: taskPath(id, "attempts"), out: &out}); err != nil {
		return nil, err
	}
	return out.Attempts, nil
}

// List returns a page of tasks, newest first.
func (c *Client) List(ctx context.Context, p ListParams) (*TaskPage, error) {
	return c.ListFiltered(ctx, TaskFilter{Queue: p.Queue, Status: string(p.Status), Metadata: p.Metadata, WorkflowID: p.WorkflowID}, p.Limit, p.Cursor)
}

// Retry moves a DEAD task back to PENDING (attempts reset). Any other
// status is a 409 invalid-transition problem.
func (c *Client) Retry(ctx context.Context, id string) (*Task, error) {
	return c.admin(ctx, id, "retry")
}

// Cancel moves a PENDING task to DEAD (reason cancelled). On a RUNNING task
// it asks the holder to stop: the task stays RUNNING with CancelRequestedAt
// set, the holder learns it from its next heartbeat (HeartbeatResult.Cancel)
// and fails it, and the task ends DEAD cancelled (also when the holder never
// fails it: when its lease runs out). DONE and DEAD tasks are a 409
// invalid-transition problem.
func (c *Client) Cancel(ctx context.Context, id string) (*Task, error) {
	return c.admin(ctx, id, "cancel")
}

func (c *Client) admin(ctx context.Context, id, action string) (*Task, error) {
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(id, action), out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// Register registers the worker, or re-registers it (an idempotent upsert
// that also revives a DEAD worker).
func (c *Client) Register(ctx context.Context, p RegisterParams) (*Registration, error) {
	var r Registration
	status, err := c.do(ctx, call{method: http.MethodPost, path: "/workers/v1/register", body: p, out: &r})
	if err != nil {
		return nil, err
	}
	r.Created = status == http.StatusCreated
	return &r, nil
}

// MaxHeartbeatTasks is the most tasks one heartbeat may list on servers that
// do not say (Registration.MaxHeartbeatTasks): a worker that lists its tasks
// must never hold more. Splitting a longer list over several heartbeats is
// no way out: each heartbeat takes back the tasks it does not list.
const MaxHeartbeatTasks = 10000

// Heartbeat sends the worker's sign of life without listing its tasks: it
// renews no lease and takes back no task (a worker that does not list its
// tasks keeps their leases alive with Extend). The answer still carries
// Cancel and Drain. A *Problem with IsWorkerDead or IsWorkerNotFound means
// the worker must register again.
func (c *Client) Heartbeat(ctx context.Context, workerID string) (*HeartbeatResult, error) {
	return c.heartbeat(ctx, workerID, nil)
}

// HeartbeatTasks sends the worker's sign of life listing every task it
// holds, under the lease it got it with (none: an empty list, not nil's
// meaning for Heartbeat), at most Registration.MaxHeartbeatTasks of them:
// a longer list is a validation problem that changes nothing. The server renews each listed task's lease, takes
// back as orphaned the tasks it shows this worker holding, claimed more than
// a heartbeat interval ago, that the list leaves out (claims whose answer
// never arrived), and answers with the listed tasks the worker lost, the
// tasks to cancel, and whether to drain. List a task from the moment its
// claim's answer arrives until it is reported.
func (c *Client) HeartbeatTasks(ctx context.Context, workerID string, held []LeaseRef) (*HeartbeatResult, error) {
	return c.HeartbeatWith(ctx, workerID, HeartbeatParams{Tasks: held})
}

// HeartbeatParams is what a task-listing heartbeat says.
type HeartbeatParams struct {
	// Tasks are the tasks the worker holds, under the leases it knows (as
	// HeartbeatTasks).
	Tasks []LeaseRef
	// ClaimsInFlight are the request ids (ClaimParams.RequestID) of the
	// worker's claims it has sent but has no answer to yet: the tasks they
	// made RUNNING are not taken back as orphaned while they are named,
	// however late their answer. Name a claim until its tasks are in Tasks,
	// or until the worker gives up on it.
	ClaimsInFlight []string
}

// HeartbeatWith sends a task-listing heartbeat (see HeartbeatTasks) that
// may also name the claims in flight.
func (c *Client) HeartbeatWith(ctx context.Context, workerID string, p HeartbeatParams) (*HeartbeatResult, error) {
	if p.Tasks == nil {
		p.Tasks = []LeaseRef{}
	}
	return c.heartbeat(ctx, workerID, &p)
}

func (c *Client) heartbeat(ctx context.Context, workerID string, p *HeartbeatParams) (*HeartbeatResult, error) {
	var body any
	if p != nil {
		body = struct {
			Tasks          []LeaseRef `json:"tasks"`
			ClaimsInFlight []string   `json:"claims_in_flight,omitempty"`
		}{p.Tasks, p.ClaimsInFlight}
	}
	var res HeartbeatResult
	path := "/workers/v1/" + url.PathEscape(workerID) + "/heartbeat"
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, body: body, out: &res}); err != nil {
		return nil, err
	}
	return &res, nil
}

// Drain asks a worker to stop claiming (an operator action, for rolling
// deploys): its claims return nothing and its heartbeats answer Drain true
// until it registers again; it finishes the tasks it holds. Idempotent.
func (c *Client) Drain(ctx context.Context, workerID string) (*Worker, error) {
	var w Worker
	path := "/workers/v1/" + url.PathEscape(workerID) + "/drain"
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, out: &w}); err != nil {
		return nil, err
	}
	return &w, nil
}

// Extend sets a held task's lease to run out p.LeaseSeconds from now (the
// task's current length when 0), the length later renewals keep. It is
// fenced like Complete: IsLeaseLost or IsInvalidTransition means the task
// is no longer this worker's. Workers whose heartbeats list their tasks
// (HeartbeatTasks, as the Runner's do) need not call it: each heartbeat
// renews the listed leases.
func (c *Client) Extend(ctx context.Context, taskID string, p ExtendParams) (*Task, error) {
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "extend"), body: p, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// Workers lists every worker.
func (c *Client) Workers(ctx context.Context) ([]Worker, error) {
	var out struct {
		Workers []Worker `json:"workers"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/workers/v1", out: &out}); err != nil {
		return nil, err
	}
	return out.Workers, nil
}

// MaxClaimWait is the longest ClaimParams.Wait the server accepts.
const MaxClaimWait = 30 * time.Second

// Claim asks for up to p.Limit tasks for the worker; it may return none,
// and fewer than p.Limit when the server's response byte cap was reached
// (the rest stay claimable). Each task is RUNNING under a fresh Task.LeaseID.
//
// With p.Wait, a claim that finds nothing waits on the server until a task
// is claimable (woken by the server within milliseconds of a submission)
// or p.Wait is over, then answers with what it has, possibly nothing. A
// server shutting down answers waiting claims at once with nothing. Each
// try of a waiting claim may take p.Wait plus the HTTP client's timeout
// (see WithHTTPClient): the client's timeout bounds the rest of the
// exchange, not the wait.
//
// A claim is retried after transport errors and 5xx like other calls, with
// the same p.RequestID (a fresh random one when empty): if the server
// committed the first try and its answer was lost, the retry gets the same
// tasks under the same leases instead of new ones. If every try fails, or
// ctx is cancelled after the server committed the claim, its tasks stay
// held by this worker until its next task-listing heartbeat (HeartbeatTasks)
// after a heartbeat interval, which gives them back (each attempt counts),
// or until their leases run out. So let a waiting claim run out rather than
// cancel it: keep p.Wait short enough for the caller to wait for it. A
// draining worker's claims return nothing new.
func (c *Client) Claim(ctx context.Context, p ClaimParams) ([]Task, error) {
	if p.RequestID == "" {
		p.RequestID = newRequestID()
	}
	body := struct {
		ClaimParams
		WaitMS int64 `json:"wait_ms,omitempty"`
	}{ClaimParams: p, WaitMS: roundMillis(p.Wait)}
	var out struct {
		Tasks []Task `json:"tasks"`
	}
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1/claim", body: body, out: &out, wait: max(p.Wait, 0)}); err != nil {
		return nil, err
	}
	return out.Tasks, nil
}

// ClaimReporting reports the tasks a worker finished (complete, fail: at
// most MaxBatch items together, no Enqueue) and claims its next ones with
// one request: the server applies the reports as CompleteBatch and
// FailBatch do, each item fenced on its own, in the transaction of the
// claim's first try and before it, then claims as Claim does. A worker that
// takes one task at a time spends one request per task instead of two.
//
// The request is all or nothing until the claim's first try: an error
// (*Problem, transport) means none of the reports was saved, unless a try
// was committed and its answer lost. The retries that Claim makes are made
// here too, with the same reports and RequestID: an item that a lost try
// saved comes back OutcomeError: invalid-transition with CurrentStatus
// DONE for a completion, DEAD for a failure that ended the task, lease-lost
// (PENDING) for a failure that requeued it; and the claim
// answers with the tasks the lost try claimed. Once saved, the answer
// carries the outcomes whatever the wait brings (an error while waiting
// ends it with no tasks).
func (c *Client) ClaimReporting(ctx context.Context, p ClaimParams, complete []CompleteItem, fail []FailItem) (ClaimResult, error) {
	if p.RequestID == "" {
		p.RequestID = newRequestID()
	}
	body := struct {
		ClaimParams
		WaitMS   int64             `json:"wait_ms,omitempty"`
		Complete []completeRequest `json:"complete,omitempty"`
		Fail     []failRequest     `json:"fail,omitempty"`
	}{ClaimParams: p, WaitMS: roundMillis(p.Wait)}
	for i, it := range complete {
		if it.Enqueue != nil {
			return ClaimResult{}, fmt.Errorf("taskmaster: complete[%d]: a claim's completions enqueue nothing (use CompleteBatch)", i)
		}
		r, err := it.request()
		if err != nil {
			return ClaimResult{}, fmt.Errorf("taskmaster: complete[%d]: %w", i, err)
		}
		body.Complete = append(body.Complete, r)
	}
	for _, it := range fail {
		body.Fail = append(body.Fail, it.request())
	}
	var out ClaimResult
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1/claim", body: body, out: &out, wait: max(p.Wait, 0)}); err != nil {
		return ClaimResult{}, err
	}
	if len(out.Completed) != len(complete) || len(out.Failed) != len(fail) {
		return ClaimResult{}, fmt.Errorf("taskmaster: a claim reporting %d completions and %d failures answered with %d and %d outcomes",
			len(complete), len(fail), len(out.Completed), len(out.Failed))
	}
	giveProblems(out.Completed, "/tasks/v1/claim")
	giveProblems(out.Failed, "/tasks/v1/claim")
	return out, nil
}

// roundMillis returns d in milliseconds, rounded away from zero so that a
// positive wait never becomes no wait (nor a negative one a valid one).
func roundMillis(d time.Duration) int64 {
	ms := int64(d / time.Millisecond)
	switch rem := d % time.Millisecond; {
	case rem > 0:
		ms++
	case rem < 0:
		ms--
	}
	return ms
}

// Complete reports a held task done with p.Result. A *Problem with
// IsLeaseLost (or IsInvalidTransition) means the worker no longer holds the
// task: drop it, do not retry.
//
// With p.Enqueue, the tasks are created in the transaction that completes
// the task, or not at all (a refused or invalid report creates none), and
// come back in Task.Enqueued. A retry after a lost answer is as safe as
// without: if the first try committed, the retry is refused
// (invalid-transition) and enqueues nothing.
func (c *Client) Complete(ctx context.Context, taskID string, p CompleteParams) (*Task, error) {
	item, err := CompleteItem{LeaseID: p.LeaseID, Result: p.Result, Enqueue: p.Enqueue}.request()
	if err != nil {
		return nil, fmt.Errorf("taskmaster: %w", err)
	}
	body := struct {
		WorkerID string `json:"worker_id"`
		completeRequest
	}{WorkerID: p.WorkerID, completeRequest: item}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "complete"), body: body, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// MaxErrorBytes is the longest failure message the server accepts; Fail
// cuts longer ones.
const MaxErrorBytes = 64 << 10

// Fail reports a held task failed. Like Complete, a lease-lost or
// invalid-transition problem means the task is no longer this worker's.
func (c *Client) Fail(ctx context.Context, taskID string, p FailParams) (*Task, error) {
	body := struct {
		WorkerID string `json:"worker_id"`
		failRequest
	}{WorkerID: p.WorkerID, failRequest: FailItem{LeaseID: p.LeaseID, Error: p.Error, NonRetryable: p.NonRetryable}.request()}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "fail"), body: body, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// CompleteBatch reports up to MaxBatch held tasks done in one request and
// one transaction. Each item is fenced on its own, so one refused item does
// not stop the others: the outcomes, in request order, are OutcomeDone or
// OutcomeError with the item's Problem (IsLeaseLost(o.Err()): drop the
// task, do not report it again). The error is for the request as a whole
// (a validation problem such as a repeated id, a transport failure).
//
// Like Complete, the batch is retried after transport errors and 5xx: the
// fencing makes a repeat harmless, but if the first try was committed and
// its answer lost, the repeat's items come back as invalid-transition
// errors although the tasks are done.
func (c *Client) CompleteBatch(ctx context.Context, workerID string, items []CompleteItem) ([]ItemOutcome, error) {
	reqs := make([]completeRequest, len(items))
	for i, it := range items {
		r, err := it.request()
		if err != nil {
			return nil, fmt.Errorf("taskmaster: items[%d]: %w", i, err)
		}
		reqs[i] = r
	}
	return c.reportBatch(ctx, "/tasks/v1/complete", workerID, reqs, len(items))
}

// FailBatch reports up to MaxBatch held tasks failed in one request and one
// transaction, each fenced on its own like CompleteBatch. The outcomes are
// OutcomeRequeued (PENDING again after backoff), OutcomeDead (attempts
// exhausted, or NonRetryable) or OutcomeError with the item's Problem.
// Errors longer than MaxErrorBytes are cut.
func (c *Client) FailBatch(ctx context.Context, workerID string, items []FailItem) ([]ItemOutcome, error) {
	reqs := make([]failRequest, len(items))
	for i, it := range items {
		reqs[i] = it.request()
	}
	return c.reportBatch(ctx, "/tasks/v1/fail", workerID, reqs, len(items))
}

func (c *Client) reportBatch(ctx context.Context, path, workerID string, items any, n int) ([]ItemOutcome, error) {
	body := struct {
		WorkerID string `json:"worker_id"`
		Items    any    `json:"items"`
	}{WorkerID: workerID, Items: items}
	var out struct {
		Items []ItemOutcome `json:"items"`
	}
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, body: body, out: &out}); err != nil {
		return nil, err
	}
	if len(out.Items) != n {
		return nil, fmt.Errorf("taskmaster: batch of %d answered with %d outcomes", n, len(out.Items))
	}
	giveProblems(out.Items, path)
	return out.Items, nil
}

// giveProblems gives every refused outcome of list without a problem a
// generic one, so that ItemOutcome.Err is never nil for OutcomeError.
func giveProblems(list []ItemOutcome, path string) {
	for i, o := range list {
		if o.Outcome == OutcomeError && o.Problem == nil {
			list[i].Problem = &Problem{Type: "about:blank", Title: "Item refused", Instance: path}
		}
	}
}

// completeRequest is a complete body's task part, or a batch item.
type completeRequest struct {
	ID      string          `json:"id,omitempty"`
	LeaseID string          `json:"lease_id,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Enqueue []submitRequest `json:"enqueue,omitempty"`
}

func (it CompleteItem) request() (completeRequest, error) {
	raw, err := marshalValue(it.Result)
	if err != nil {
		return completeRequest{}, fmt.Errorf("encode result: %w", err)
	}
	out := completeRequest{ID: it.ID, LeaseID: it.LeaseID, Result: raw}
	for j, p := range it.Enqueue {
		req, err := p.request()
		if err != nil {
			return completeRequest{}, fmt.Errorf("enqueue[%d]: %w", j, err)
		}
		out.Enqueue = append(out.Enqueue, req)
	}
	return out, nil
}

// failRequest is a fail body's task part, or a batch item.
type failRequest struct {
	ID        string `json:"id,omitempty"`
	LeaseID   string `json:"lease_id,omitempty"`
	Error     string `json:"error"`
	Retryable bool   `json:"retryable"`
}

func (it FailItem) request() failRequest {
	return failRequest{ID: it.ID, LeaseID: it.LeaseID, Error: truncateUTF8(it.Error, MaxErrorBytes), Retryable: !it.NonRetryable}
}

func taskPath(id, action string) string {
	p := "/tasks/v1/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// marshalValue encodes v, passing a json.RawMessage through unchanged. A
// nil v or an empty json.RawMessage means no value (nil).
func marshalValue(v any) (json.RawMessage, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case json.RawMessage:
		if len(x) == 0 {
			return nil, nil // nothing to send
		}
		if !json.Valid(x) {
			return nil, errors.New("json.RawMessage is not valid JSON")
		}
		return x, nil
	default:
		return json.Marshal(v)
	}
}

// wholeSeconds is d in whole seconds, rounded up (0 for none).
func wholeSeconds(d time.Duration) int {
	if d <= 0 {
		return 0
	}
	return int((d + time.Second - 1) / time.Second)
}

// truncateUTF8 cuts s to at most n bytes without splitting a character.
func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	const marker = "...(truncated)"
	cut := n - len(marker)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + marker
}

// newRequestID returns a fresh random claim request id.
func newRequestID() string {
	var b [16]byte
	_, _ = crand.Read(b[:]) // never fails (Go 1.24+)
	return "tmc-" + hex.EncodeToString(b[:])
}
