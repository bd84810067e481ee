package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// TaskFilter selects tasks for a bulk action. Empty fields match every
// task; a filter without Queue covers every queue.
type TaskFilter struct {
	// Queue is the tasks' queue.
	Queue string `json:"queue,omitempty"`
	// Status is a status, or several comma-separated ("PENDING,BLOCKED"):
	// DEAD for a retry (the default); PENDING, BLOCKED or RUNNING for a
	// cancel (by default all three).
	Status string `json:"status,omitempty"`
	// DeadReason is the DEAD tasks' reason (exhausted, cancelled, ...).
	DeadReason string `json:"dead_reason,omitempty"`
	// GroupKey is the tasks' group.
	GroupKey string `json:"group_key,omitempty"`
	// CreatedAfter and CreatedBefore bound the tasks' creation (exclusive).
	CreatedAfter  *time.Time `json:"created_after,omitempty"`
	CreatedBefore *time.Time `json:"created_before,omitempty"`
	// ErrorContains must occur in the task's last error, ignoring case
	// (1-200 characters).
	ErrorContains string `json:"error_contains,omitempty"`
	// Text must occur in the task's last error or idempotency key, ignoring
	// case (1-200 characters).
	Text string `json:"text,omitempty"`
	// Metadata are pairs the task's metadata must all hold.
	Metadata map[string]string `json:"metadata,omitempty"`
	// WorkflowID is the tasks' run.
	WorkflowID string `json:"workflow_id,omitempty"`
}

// BulkResult is what a bulk action or a purge did.
type BulkResult struct {
	// Matched is how many tasks matched when the action began.
	Matched int64 `json:"matched"`
	// DryRun is true when nothing was changed.
	DryRun bool `json:"dry_run"`
	// Changed (retry, cancel) is how many tasks the action changed; nil on
	// a dry run.
	Changed *int64 `json:"changed,omitempty"`
	// Removed (purge) is how many tasks the purge removed; nil on a dry
	// run.
	Removed *int64 `json:"removed,omitempty"`
	// Skipped is how many matched but were not changed: they changed
	// meanwhile, other transactions held them throughout, or (a retry)
	// another unfinished task holds their unique key. Nil on a dry run.
	Skipped *int64 `json:"skipped,omitempty"`
}

// PurgeJob is the progress of a large purge, which the server runs in the
// background (PurgeResult.Job).
type PurgeJob struct {
	ID    string `json:"id"`
	Queue string `json:"queue"`
	// Status is the status purged (PENDING or DEAD).
	Status string `json:"status"`
	// State is running, done or failed.
	State string `json:"state"`
	// Matched is how many tasks matched when the purge was accepted.
	Matched int64 `json:"matched"`
	// Removed is how many the job removed so far.
	Removed    int64      `json:"removed"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Error says why a failed job failed.
	Error string `json:"error,omitempty"`
}

// Finished reports whether the job is over (done or failed).
func (j *PurgeJob) Finished() bool { return j.State != "running" }

// PurgeResult is the answer to a purge: what it did (Result), or, for a
// purge larger than the server removes at once, the job that runs it
// (Job; poll it with PurgeProgress).
type PurgeResult struct {
	Result *BulkResult
	Job    *PurgeJob
}

// PurgeParams ask for a purge.
type PurgeParams struct {
	// Status is PENDING (the default: RUNNING tasks stay with their
	// holders) or DEAD.
	Status string `json:"status,omitempty"`
	// DryRun counts the tasks and removes nothing.
	DryRun bool `json:"dry_run,omitempty"`
}

// bulkRequest is a filter and dry_run, as the bulk routes take them.
type bulkRequest struct {
	TaskFilter
	DryRun bool `json:"dry_run,omitempty"`
}

// BulkRetry retries every DEAD task f matches (as Retry does each),
// skipping those whose unique key an unfinished task holds; with dryRun it
// only counts them. It needs the admin scope.
func (c *Client) BulkRetry(ctx context.Context, f TaskFilter, dryRun bool) (*BulkResult, error) {
	return c.bulk(ctx, "retry", f, dryRun)
}

// BulkCancel cancels every PENDING or BLOCKED task f matches and asks the
// holders of the RUNNING ones to stop them (as Cancel does each); with
// dryRun it only counts them. It needs the admin scope.
func (c *Client) BulkCancel(ctx context.Context, f TaskFilter, dryRun bool) (*BulkResult, error) {
	return c.bulk(ctx, "cancel", f, dryRun)
}

// BulkReplay makes a new task of every DONE or DEAD task f matches (f's
// Status: DONE, DEAD, or both, the default), as Replay does each, skipping
// those whose unique key an unfinished task holds; with dryRun it only
// counts them. It needs the admin scope.
func (c *Client) BulkReplay(ctx context.Context, f TaskFilter, dryRun bool) (*BulkResult, error) {
	return c.bulk(ctx, "replay", f, dryRun)
}

func (c *Client) bulk(ctx context.Context, action string, f TaskFilter, dryRun bool) (*BulkResult, error) {
	var out BulkResult
	// A repeated run changes only what still matches; it is still not
	// resent after a failure that may have reached the server, unless a
	// dry run.
	mode := retryUnsent
	if dryRun {
		mode = retrySafe
	}
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/tasks/v1/bulk/" + action,
		body: bulkRequest{TaskFilter: f, DryRun: dryRun}, out: &out, mode: mode}); err != nil {
		return nil, err
	}
	return &out, nil
}

// PurgeQueue removes the queue's tasks of one status, each with a
// task.purged event; their dependants end DEAD dependency_failed. A purge
// larger than the server removes at once answers with a job
// (PurgeResult.Job). It needs the admin scope.
func (c *Client) PurgeQueue(ctx context.Context, queue string, p PurgeParams) (*PurgeResult, error) {
	var raw json.RawMessage
	mode := retryUnsent
	if p.DryRun {
		mode = retrySafe
	}
	status, err := c.do(ctx, call{method: http.MethodPost, path: "/queues/v1/" + url.PathEscape(queue) + "/purge",
		body: p, out: &raw, mode: mode})
	if err != nil {
		return nil, err
	}
	var out PurgeResult
	if status == http.StatusAccepted {
		out.Job = &PurgeJob{}
		err = json.Unmarshal(raw, out.Job)
	} else {
		out.Result = &BulkResult{}
		err = json.Unmarshal(raw, out.Result)
	}
	if err != nil {
		return nil, fmt.Errorf("taskmaster: decode purge answer: %w", err)
	}
	return &out, nil
}

// PurgeProgress returns a purge job of the queue.
func (c *Client) PurgeProgress(ctx context.Context, queue, id string) (*PurgeJob, error) {
	var out PurgeJob
	if _, err := c.do(ctx, call{method: http.MethodGet,
		path: "/queues/v1/" + url.PathEscape(queue) + "/purges/" + url.PathEscape(id), out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListFiltered returns a page of the tasks f matches, newest first (f's
// Status: one status); limit 0 is the server's default page, cursor the
// previous page's NextCursor.
func (c *Client) ListFiltered(ctx context.Context, f TaskFilter, limit int, cursor string) (*TaskPage, error) {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("queue", f.Queue)
	set("status", f.Status)
	set("dead_reason", f.DeadReason)
	set("group_key", f.GroupKey)
	set("error_contains", f.ErrorContains)
	set("text", f.Text)
	set("workflow_id", f.WorkflowID)
	for k, v := range f.Metadata {
		q.Set("metadata."+k, v)
	}
	if f.CreatedAfter != nil {
		set("created_after", f.CreatedAfter.Format(time.RFC3339Nano))
	}
	if f.CreatedBefore != nil {
		set("created_before", f.CreatedBefore.Format(time.RFC3339Nano))
	}
	if limit != 0 {
		set("limit", strconv.Itoa(limit))
	}
	set("cursor", cursor)
	var page struct {
		Tasks      []Task  `json:"tasks"`
		NextCursor *string `json:"next_cursor"`
		Truncated  bool    `json:"truncated"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/tasks/v1", query: q, out: &page}); err != nil {
		return nil, err
	}
	out := &TaskPage{Tasks: page.Tasks, Truncated: page.Truncated}
	if page.NextCursor != nil {
		out.NextCursor = *page.NextCursor
	}
	return out, nil
}
