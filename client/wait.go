package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// MaxWait is the longest the server holds one request waiting for a task
// to finish (wait_ms); Wait and SubmitAndWait chain such requests.
const MaxWait = 60 * time.Second

// Wait returns the task once it is DONE or DEAD (see Task.Finished), or
// ctx's error when ctx ends first. It waits on the server, which answers
// within milliseconds of the task's end, in requests of up to MaxWait
// (and up to ctx's deadline), holding no database connection there; it
// polls nothing.
func (c *Client) Wait(ctx context.Context, id string) (*Task, error) {
	for {
		t, err := c.waitOnce(ctx, id, waitFor(ctx))
		if err != nil {
			return nil, err
		}
		if t.Finished() {
			return t, nil
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// waitFor is how long one waiting request may wait: up to MaxWait, and no
// longer than ctx's deadline (less a margin for the answer to come back).
func waitFor(ctx context.Context) time.Duration {
	wait := MaxWait
	if d, ok := ctx.Deadline(); ok {
		wait = min(wait, max(time.Until(d)-250*time.Millisecond, time.Millisecond))
	}
	return wait
}

// waitOnce is GET /tasks/v1/{id}?wait_ms=wait.
func (c *Client) waitOnce(ctx context.Context, id string, wait time.Duration) (*Task, error) {
	var t Task
	q := url.Values{"wait_ms": {strconv.FormatInt(roundMillis(wait), 10)}}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: taskPath(id, ""), query: q, out: &t, wait: wait}); err != nil {
		return nil, err
	}
	return &t, nil
}

// SubmitAndWait submits a task (as Submit) and returns it once it is DONE
// or DEAD, or ctx's error when ctx ends first (the task stays submitted:
// Wait for it again with its id, which the error names when the
// submission's answer came).
//
// The submission waits on the server (POST /tasks/v1?wait_ms), then goes on
// with Wait. It is retried like Submit: after transport errors and 5xx only
// with an IdempotencyKey, otherwise only when the request surely did not
// reach the server.
func (c *Client) SubmitAndWait(ctx context.Context, p SubmitParams) (*Task, error) {
	req, mode, err := p.single()
	if err != nil {
		return nil, err
	}
	wait := waitFor(ctx)
	q := url.Values{"wait_ms": {strconv.FormatInt(roundMillis(wait), 10)}}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1", query: q, body: req, out: &t, mode: mode, wait: wait}); err != nil {
		return nil, err
	}
	if t.Finished() {
		return &t, nil
	}
	done, err := c.Wait(ctx, t.ID)
	if err != nil {
		return nil, fmt.Errorf("taskmaster: wait for task %s: %w", t.ID, err)
	}
	return done, nil
}

// ProgressParams report a held task's progress.
type ProgressParams struct {
	// WorkerID is the holder (required).
	WorkerID string
	// LeaseID is the lease the task was claimed under (required).
	LeaseID string
	// Percent is how far the work is, 0 to 100.
	Percent float64
	// Message says what the worker is doing (at most 1 KiB).
	Message string
	// Details is any value encoding/json can marshal (at most 16 KiB of
	// JSON); nil sends none.
	Details any
}

// Progress reports how far a held task got. It is fenced like Complete
// (IsLeaseLost or IsInvalidTransition: the task is no longer this
// worker's) and counts as the worker's sign of life. The server keeps the
// last report on the task (Task.Progress) and announces reports with
// task.progress events, at most one a second per task (a report that
// comes sooner is announced when the second is over).
func (c *Client) Progress(ctx context.Context, taskID string, p ProgressParams) (*Task, error) {
	details, err := marshalValue(p.Details)
	if err != nil {
		return nil, fmt.Errorf("taskmaster: encode details: %w", err)
	}
	body := struct {
		WorkerID string          `json:"worker_id"`
		LeaseID  string          `json:"lease_id"`
		Percent  float64         `json:"percent"`
		Message  string          `json:"message,omitempty"`
		Details  json.RawMessage `json:"details,omitempty"`
	}{p.WorkerID, p.LeaseID, p.Percent, p.Message, details}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "progress"), body: body, out: &t}); err != nil {
		return nil, err
	}
	return &t, nil
}

// progressReporter reports the progress of a task a Runner handed to its
// handler (Task.Progress).
type progressReporter struct {
	client        *Client
	workerID      string
	reportTimeout time.Duration
}

// errNoRunner is Task.Progress's error for a task no Runner handed out.
var errNoRunner = errors.New("taskmaster: Task.Progress reports for the handler a Runner runs; elsewhere use Client.Progress")

// Progress reports how far the handler got with the task (percent, 0 to
// 100, and a message for a human): the server keeps it on the task
// (Task.Progress, the dashboard's bar) and announces it with a
// task.progress event, at most one a second. It works on the task a
// Runner hands to its handler, under the runner's worker and the task's
// lease; a report the server refuses because the task is no longer this
// worker's (IsLeaseLost, IsInvalidTransition) means the handler should
// stop. Report details with Client.Progress.
func (t Task) Progress(ctx context.Context, percent float64, message string) error {
	r := t.progress
	if r == nil {
		return errNoRunner
	}
	if r.reportTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, r.reportTimeout)
		defer cancel()
	}
	_, err := r.client.Progress(ctx, t.ID, ProgressParams{WorkerID: r.workerID, LeaseID: t.LeaseID, Percent: percent, Message: message})
	return err
}

// timeLimit is how long the task's attempt may run from its claim (false:
// no limit): TimeoutAt - ClaimedAt, both the server's.
func (t Task) timeLimit() (time.Duration, bool) {
	if t.TimeoutAt == nil || t.ClaimedAt == nil {
		return 0, false
	}
	return t.TimeoutAt.Sub(*t.ClaimedAt), true
}
