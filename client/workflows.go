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

// OnFailure is what a parent ending DEAD means for a task that depends on
// it: the failure policy of one dependency.
type OnFailure string

// Failure policies.
const (
	// OnFailureFail (the default): the dependant ends DEAD
	// DeadDependencyFailed.
	OnFailureFail OnFailure = "fail"
	// OnFailureIgnore: the dependant runs anyway once its other parents
	// allow, and sees the parent's status among its Parents.
	OnFailureIgnore OnFailure = "ignore"
	// OnFailureSkip: the dependant ends DEAD DeadDependencySkipped, like
	// a cancelled task: skipped, not failed.
	OnFailureSkip OnFailure = "skip"
)

// Dependency is one parent of a task with the failure policy of its edge:
// Ref names an earlier item of the list, or ID an existing task (one of
// the two).
type Dependency struct {
	Ref       string
	ID        string
	OnFailure OnFailure
}

// MarshalJSON encodes the dependency as the API's depends_on object.
func (d Dependency) MarshalJSON() ([]byte, error) {
	if (d.Ref == "") == (d.ID == "") {
		return nil, errors.New("taskmaster: a Dependency names a Ref or an ID, one of the two")
	}
	out := struct {
		Ref       string    `json:"ref,omitempty"`
		ID        string    `json:"id,omitempty"`
		OnFailure OnFailure `json:"on_failure,omitempty"`
	}{d.Ref, d.ID, d.OnFailure}
	return json.Marshal(out)
}

// AfterRef is a Dependency on an earlier item of the list.
func AfterRef(ref string, onFailure OnFailure) Dependency {
	return Dependency{Ref: ref, OnFailure: onFailure}
}

// AfterTask is a Dependency on an existing task.
func AfterTask(id string, onFailure OnFailure) Dependency {
	return Dependency{ID: id, OnFailure: onFailure}
}

// SpawnParams describe the tasks a running task creates.
type SpawnParams struct {
	// WorkerID is the holder (required).
	WorkerID string
	// LeaseID is the lease the task was claimed under (required).
	LeaseID string
	// Tasks are 1 to MaxBatch submissions; Ref and DependsOn (or
	// Dependencies) name earlier items and existing tasks, the spawning
	// one included.
	Tasks []SubmitParams
}

// Spawn creates tasks on behalf of a running task its worker holds, which
// stays RUNNING: the children a task discovers, and a join that depends
// on them (or complete with a join in CompleteParams.Enqueue). They are
// created atomically, in the task's run, and returned in order (created[i]
// false where an idempotency or unique key named an existing task). It is
// fenced like Complete (IsLeaseLost, IsInvalidTransition: the task is no
// longer this worker's), and refused with IsCancelRequested once an
// operator asked to cancel the task. The key needs the produce scope as
// well as work.
//
// Like SubmitBatch, a spawn is resent after any transport error or 5xx
// only when every task has an idempotency key.
func (c *Client) Spawn(ctx context.Context, taskID string, p SpawnParams) ([]Task, []bool, error) {
	body := struct {
		WorkerID string          `json:"worker_id"`
		LeaseID  string          `json:"lease_id"`
		Tasks    []submitRequest `json:"tasks"`
	}{WorkerID: p.WorkerID, LeaseID: p.LeaseID, Tasks: make([]submitRequest, len(p.Tasks))}
	mode := retrySafe
	for i, sp := range p.Tasks {
		req, err := sp.request()
		if err != nil {
			return nil, nil, fmt.Errorf("taskmaster: tasks[%d]: %w", i, err)
		}
		body.Tasks[i] = req
		if sp.IdempotencyKey == "" {
			mode = retryUnsent
		}
	}
	var out struct {
		Tasks   []Task `json:"tasks"`
		Created []bool `json:"created"`
	}
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(taskID, "spawn"), body: body, out: &out, mode: mode}); err != nil {
		return nil, nil, err
	}
	if len(out.Tasks) != len(p.Tasks) || len(out.Created) != len(p.Tasks) {
		return nil, nil, fmt.Errorf("taskmaster: spawn of %d answered with %d tasks", len(p.Tasks), len(out.Tasks))
	}
	return out.Tasks, out.Created, nil
}

// errNoRunnerSpawn is Task.Spawn's error for a task no Runner handed out.
var errNoRunnerSpawn = errors.New("taskmaster: Task.Spawn spawns for the handler a Runner runs; elsewhere use Client.Spawn")

// Spawn creates tasks on behalf of the task a Runner handed to its
// handler, under the runner's worker and the task's lease (see
// Client.Spawn); the task stays RUNNING. A handler that fans out spawns
// its children, then returns a Next whose Enqueue holds the join, which
// depends on them by id.
func (t Task) Spawn(ctx context.Context, tasks ...SubmitParams) ([]Task, error) {
	r := t.progress
	if r == nil {
		return nil, errNoRunnerSpawn
	}
	out, _, err := r.client.Spawn(ctx, t.ID, SpawnParams{WorkerID: r.workerID, LeaseID: t.LeaseID, Tasks: tasks})
	return out, err
}

// IsCancelRequested reports whether err is the server's refusal of a spawn
// by a task an operator asked to cancel: stop it and fail it.
func IsCancelRequested(err error) bool { return isType(err, ProblemCancelRequested) }

// IsWorkflowNotFound reports whether err says no run has the id.
func IsWorkflowNotFound(err error) bool { return isType(err, ProblemWorkflowNotFound) }

// ParentsPage is a page of a task's parents, in the order it named them.
type ParentsPage struct {
	Parents []Task `json:"parents"`
	// NextCursor fetches the next page; "" on the last one.
	NextCursor string `json:"next_cursor"`
	// Truncated: the page stopped before its limit at the server's
	// response byte cap (NextCursor continues).
	Truncated bool `json:"truncated"`
}

// ParentsPage returns a page of the task's parents with their results:
// limit 1-1000 (0: 1000), cursor the previous page's NextCursor.
func (c *Client) ParentsPage(ctx context.Context, id string, limit int, cursor string) (*ParentsPage, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var page struct {
		Parents    []Task  `json:"parents"`
		NextCursor *string `json:"next_cursor"`
		Truncated  bool    `json:"truncated"`
	}
	if _, err := c.do(ctx, call{method: http.MethodGet, path: taskPath(id, "parents"), query: q, out: &page}); err != nil {
		return nil, err
	}
	out := &ParentsPage{Parents: page.Parents, Truncated: page.Truncated}
	if page.NextCursor != nil {
		out.NextCursor = *page.NextCursor
	}
	return out, nil
}

// SubmitBatchToWorkflow is SubmitBatch whose tasks all join the run
// workflowID (any id: an existing run's to add to it, or one of the
// caller's choosing).
func (c *Client) SubmitBatchToWorkflow(ctx context.Context, workflowID string, ps []SubmitParams) ([]Task, []bool, error) {
	return c.submitBatch(ctx, workflowID, ps)
}

// ReplayParams are a replay's overrides of the original's settings (zero
// values: the original's).
type ReplayParams struct {
	// Payload replaces the payload (nil: the original's).
	Payload any
	// Priority, MaxAttempts and TimeoutSeconds replace the original's
	// (nil: the original's).
	Priority, MaxAttempts, TimeoutSeconds *int
	// GroupKey replaces the group ("": the original's).
	GroupKey string
	// Tags and Metadata replace the original's (nil: the original's; an
	// empty one: none).
	Tags     []string
	Metadata map[string]string
	// RunAt and Deadline (nil: now, none).
	RunAt, Deadline *time.Time
}

// Replay creates a new task from a DONE or DEAD one: the same queue,
// payload and settings (p's overrides apply), linked by ReplayOf, in a run
// of its own; it keeps the call's trace context (the original's without
// one). Another status is an invalid-transition problem; a replay whose
// unique key an unfinished task holds, a unique-key-taken problem. A
// replay is not idempotent: it is resent only when the request surely did
// not reach the server.
func (c *Client) Replay(ctx context.Context, id string, p ReplayParams) (*Task, error) {
	body := map[string]any{}
	payload, err := marshalValue(p.Payload)
	if err != nil {
		return nil, fmt.Errorf("taskmaster: encode payload: %w", err)
	}
	if payload != nil {
		body["payload"] = payload
	}
	for name, v := range map[string]*int{"priority": p.Priority, "max_attempts": p.MaxAttempts, "timeout_seconds": p.TimeoutSeconds} {
		if v != nil {
			body[name] = *v
		}
	}
	if p.GroupKey != "" {
		body["group_key"] = p.GroupKey
	}
	if p.Tags != nil {
		body["tags"] = p.Tags
	}
	if p.Metadata != nil {
		body["metadata"] = p.Metadata
	}
	if p.RunAt != nil {
		body["run_at"] = p.RunAt
	}
	if p.Deadline != nil {
		body["deadline"] = p.Deadline
	}
	var t Task
	if _, err := c.do(ctx, call{method: http.MethodPost, path: taskPath(id, "replay"), body: body, out: &t, mode: retryUnsent}); err != nil {
		return nil, err
	}
	return &t, nil
}

// Workflow is a run: its tasks counted by status, its times, and a page of
// its tasks, oldest first.
type Workflow struct {
	ID    string `json:"id"`
	Total int64  `json:"total"`
	// StatusCounts are the run's tasks by status (every status).
	StatusCounts map[Status]int64 `json:"status_counts"`
	// DeadReasons are its DEAD tasks by reason.
	DeadReasons map[DeadReason]int64 `json:"dead_reasons"`
	// Finished: no task of the run is PENDING, RUNNING or BLOCKED.
	Finished       bool       `json:"finished"`
	FirstCreatedAt time.Time  `json:"first_created_at"`
	LastUpdatedAt  time.Time  `json:"last_updated_at"`
	LastFinishedAt *time.Time `json:"last_finished_at"`
	// Tasks are a page of the run's tasks, oldest first.
	Tasks []Task `json:"tasks"`
	// NextCursor fetches the next page of tasks; "" on the last one.
	NextCursor string `json:"next_cursor"`
	Truncated  bool   `json:"truncated"`
}

// UnmarshalJSON reads next_cursor's null as "".
func (w *Workflow) UnmarshalJSON(b []byte) error {
	type plain Workflow
	var in struct {
		plain
		NextCursor *string `json:"next_cursor"`
	}
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*w = Workflow(in.plain)
	if in.NextCursor != nil {
		w.NextCursor = *in.NextCursor
	}
	return nil
}

// Workflow returns the run id: its counts and a page of its tasks (limit
// 1-1000, 0: 100; cursor: the previous page's NextCursor). A run is named
// by its first task's id; IsWorkflowNotFound when no task (that the key
// may see) belongs to it.
func (c *Client) Workflow(ctx context.Context, id string, limit int, cursor string) (*Workflow, error) {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	var out Workflow
	if _, err := c.do(ctx, call{method: http.MethodGet, path: "/workflows/v1/" + url.PathEscape(id), query: q, out: &out}); err != nil {
		return nil, err
	}
	return &out, nil
}

// WorkflowResult is what a run's cancel or retry did.
type WorkflowResult struct {
	ID string `json:"id"`
	// Matched: the unfinished tasks (cancel), the DEAD ones (retry), when
	// the action began.
	Matched int64 `json:"matched"`
	// Changed: cancelled or asked to stop (cancel), moved out of DEAD
	// (retry).
	Changed int64 `json:"changed"`
	// Blocked (retry): how many of those wait for their parents again.
	Blocked int64 `json:"blocked"`
	// Skipped: left alone.
	Skipped int64 `json:"skipped"`
}

// CancelWorkflow cancels every unfinished task of the run (its RUNNING
// tasks' holders learn it from their heartbeats). It needs the admin
// scope.
func (c *Client) CancelWorkflow(ctx context.Context, id string) (*WorkflowResult, error) {
	return c.workflowAction(ctx, id, "cancel")
}

// RetryWorkflow re-runs what failed in the run, and what failed with it:
// its DEAD tasks PENDING again, or BLOCKED behind their parents; DONE tasks
// are left alone. It needs the admin scope.
func (c *Client) RetryWorkflow(ctx context.Context, id string) (*WorkflowResult, error) {
	return c.workflowAction(ctx, id, "retry")
}

func (c *Client) workflowAction(ctx context.Context, id, action string) (*WorkflowResult, error) {
	var out WorkflowResult
	if _, err := c.do(ctx, call{method: http.MethodPost, path: "/workflows/v1/" + url.PathEscape(id) + "/" + action, out: &out,
		mode: retryUnsent}); err != nil {
		return nil, err
	}
	return &out, nil
}
