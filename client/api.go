package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"unicode/utf8"
)

// Submit creates a task, or returns the existing one when the queue
// already holds a task with p.IdempotencyKey.
//
// Without an idempotency key a submission is retried only when it surely
// did not reach the server, so a transport error cannot create a duplicate;
// with one, every transport error and 5xx is retried.
func (c *Client) Submit(ctx context.Context, p SubmitParams) (*Task, error) {
	req := submitRequest{
		Queue: p.Queue, Priority: p.Priority, MaxAttempts: p.MaxAttempts, Tags: p.Tags,
		Deadline: p.Deadline, RunAt: p.RunAt, IdempotencyKey: p.IdempotencyKey,
	}
	if p.Payload != nil {
		raw, err := marshalValue(p.Payload)
		if err != nil {
			return nil, fmt.Errorf("taskmaster: encode payload: %w", err)
		}
		req.Payload = raw
	}
	mode := retryUnsent
	if p.IdempotencyKey != "" {
		mode = retrySafe
	}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1", body: req, out: &t, mode: mode}); err != nil {
		return nil, err
	}
	return &t, nil
}

// Get returns one task.
func (c *Client) Get(ctx context.Context, id string) (*Task, error) {
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodGet, path: taskPath(id, ""), out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// List returns a page of tasks, newest first.
func (c *Client) List(ctx context.Context, p ListParams) (*TaskPage, error) {
	q := url.Values{}
	if p.Queue != "" {
		q.Set("queue", p.Queue)
	}
	if p.Status != "" {
		q.Set("status", string(p.Status))
	}
	if p.Limit != 0 {
		q.Set("limit", strconv.Itoa(p.Limit))
	}
	if p.Cursor != "" {
		q.Set("cursor", p.Cursor)
	}
	var page struct {
		Tasks      []Task  `json:"tasks"`
		NextCursor *string `json:"next_cursor"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/tasks/v1", query: q, out: &page}); err != nil {
		return nil, err
	}
	out := &TaskPage{Tasks: page.Tasks}
	if page.NextCursor != nil {
		out.NextCursor = *page.NextCursor
	}
	return out, nil
}

// Retry moves a DEAD task back to PENDING (attempts reset). Any other
// status is a 409 invalid-transition problem.
func (c *Client) Retry(ctx context.Context, id string) (*Task, error) {
	return c.admin(ctx, id, "retry")
}

// Cancel moves a PENDING task to DEAD (reason cancelled). Any other status
// is a 409 invalid-transition problem.
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

// Heartbeat sends the worker's sign of life. A *Problem with IsWorkerDead
// or IsWorkerNotFound means the worker must register again.
func (c *Client) Heartbeat(ctx context.Context, workerID string) (*Worker, error) {
	var w Worker
	path := "/workers/v1/" + url.PathEscape(workerID) + "/heartbeat"
	if _, err := c.do(ctx, call{method: http.MethodPost, path: path, out: &w}); err != nil {
		return nil, err
	}
	return &w, nil
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

// Queues returns every known queue's statistics.
func (c *Client) Queues(ctx context.Context) ([]Queue, error) {
	var out struct {
		Queues []Queue `json:"queues"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/queues/v1", out: &out}); err != nil {
		return nil, err
	}
	return out.Queues, nil
}

// Claim asks for up to p.Limit tasks for the worker; it may return none.
// Each task is RUNNING under a fresh Task.LeaseID.
//
// A claim is retried after transport errors and 5xx like other calls. If
// a claim's answer is lost after the server committed it, its tasks stay
// held by this worker until the worker dies (or, with leases, until they
// expire).
func (c *Client) Claim(ctx context.Context, p ClaimParams) ([]Task, error) {
	var out struct {
		Tasks []Task `json:"tasks"`
	}
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1/claim", body: p, out: &out}); err != nil {
		return nil, err
	}
	return out.Tasks, nil
}

// Complete reports a held task done with p.Result. A *Problem with
// IsLeaseLost (or IsInvalidTransition) means the worker no longer holds the
// task: drop it, do not retry.
func (c *Client) Complete(ctx context.Context, taskID string, p CompleteParams) (*Task, error) {
	body := struct {
		WorkerID string          `json:"worker_id"`
		LeaseID  string          `json:"lease_id,omitempty"`
		Result   json.RawMessage `json:"result,omitempty"`
	}{WorkerID: p.WorkerID, LeaseID: p.LeaseID}
	if p.Result != nil {
		raw, err := marshalValue(p.Result)
		if err != nil {
			return nil, fmt.Errorf("taskmaster: encode result: %w", err)
		}
		body.Result = raw
	}
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
		WorkerID  string `json:"worker_id"`
		LeaseID   string `json:"lease_id,omitempty"`
		Error     string `json:"error"`
		Retryable bool   `json:"retryable"`
	}{WorkerID: p.WorkerID, LeaseID: p.LeaseID, Error: truncateUTF8(p.Error, MaxErrorBytes), Retryable: !p.NonRetryable}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "fail"), body: body, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

func taskPath(id, action string) string {
	p := "/tasks/v1/" + url.PathEscape(id)
	if action != "" {
		p += "/" + action
	}
	return p
}

// marshalValue encodes v, passing a json.RawMessage through unchanged (an
// empty one means no value).
func marshalValue(v any) (json.RawMessage, error) {
	switch x := v.(type) {
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
