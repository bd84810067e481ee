package http

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// TaskJSON is the task object of the API.
type TaskJSON struct {
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
	// LeaseExpiresAt is when the holder's lease runs out (null unless
	// RUNNING).
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// CancelRequestedAt is when an operator asked to cancel the running task
	// (null unless RUNNING with such a request pending).
	CancelRequestedAt *time.Time `json:"cancel_requested_at"`
	// UniqueKey is the task's active-unique key (null: none).
	UniqueKey *string `json:"unique_key"`
	// Retry is the task's own retry policy (null: the server's).
	Retry *retryJSON `json:"retry"`
	// Snoozes counts the times the holder snoozed the task.
	Snoozes int `json:"snoozes"`
	// GroupKey is the task's group in its queue (null: none).
	GroupKey *string `json:"group_key"`
	// TimeoutSeconds is the task's own time limit on each attempt (null:
	// its queue's default_timeout_seconds applies, or none).
	TimeoutSeconds *int `json:"timeout_seconds"`
	// TimeoutAt is when the running attempt's time limit is up (null
	// unless RUNNING under a limit).
	TimeoutAt *time.Time `json:"timeout_at"`
	// Metadata is the producer's data ({} when none).
	Metadata map[string]string `json:"metadata"`
	// Trace is the W3C trace context the task was submitted under (null:
	// none).
	Trace *TraceJSON `json:"trace"`
	// Progress is the holder's last progress report (null: none since
	// the last claim).
	Progress *ProgressJSON `json:"progress"`
	// ScheduleName and ScheduleTick name the recurring schedule and the
	// tick that made the task (null both: not a schedule's).
	ScheduleName *string    `json:"schedule_name"`
	ScheduleTick *time.Time `json:"schedule_tick"`
	// WorkflowID is the task's run (its own id for a task submitted
	// alone).
	WorkflowID string `json:"workflow_id"`
	// ReplayOf is the task this one was replayed from (null: none).
	ReplayOf *string `json:"replay_of"`
	// DebounceUntil is the latest run_at debounced submissions may push
	// the task to (null: never debounced).
	DebounceUntil *time.Time `json:"debounce_until"`
}

// TraceJSON is a task's W3C trace context.
type TraceJSON struct {
	Traceparent string  `json:"traceparent"`
	Tracestate  *string `json:"tracestate"`
}

// ProgressJSON is a task's last progress report.
type ProgressJSON struct {
	Percent float64 `json:"percent"`
	Message string  `json:"message"`
	// Details is the worker's JSON value (null: none).
	Details   json.RawMessage `json:"details"`
	UpdatedAt time.Time       `json:"updated_at"`
}

func taskJSON(t *task.Task) TaskJSON {
	s := t.Snapshot()
	tags := s.Tags
	if tags == nil {
		tags = []string{}
	}
	out := TaskJSON{
		ID: s.ID.String(), Queue: s.Queue, Status: string(s.Status), Priority: s.Priority,
		Payload: rawOrNull(s.Payload), Tags: tags, Attempts: s.Attempts, MaxAttempts: s.MaxAttempts,
		WorkerID: optString(s.WorkerID), LastError: optString(s.LastError),
		DeadReason: optString(string(s.DeadReason)), Result: rawOrNull(s.Result),
		Deadline: optTime(s.Deadline), RunAt: s.RunAt.UTC(), IdempotencyKey: optString(s.IdempotencyKey),
		CreatedAt: s.CreatedAt.UTC(), ClaimedAt: optTime(s.ClaimedAt), FinishedAt: optTime(s.FinishedAt),
		UpdatedAt: s.UpdatedAt.UTC(), LeaseExpiresAt: optTime(s.LeaseExpiresAt),
		CancelRequestedAt: optTime(s.CancelRequestedAt),
		UniqueKey:         optString(s.UniqueKey), Retry: retryJSONOf(s.Retry), Snoozes: s.Snoozes,
		GroupKey: optString(s.GroupKey), ScheduleName: optString(s.ScheduleName), ScheduleTick: optTime(s.ScheduleTick),
		WorkflowID: s.WorkflowID.String(), DebounceUntil: optTime(s.DebounceUntil),
	}
	if s.ReplayOf != uuid.Nil {
		out.ReplayOf = optString(s.ReplayOf.String())
	}
	if s.LeaseID != uuid.Nil {
		out.LeaseID = optString(s.LeaseID.String())
	}
	out.Metadata = s.Metadata
	if out.Metadata == nil {
		out.Metadata = map[string]string{}
	}
	if s.TimeoutSeconds > 0 {
		n := s.TimeoutSeconds
		out.TimeoutSeconds = &n
	}
	out.TimeoutAt = optTime(s.TimeoutAt)
	if s.Trace.Parent != "" {
		out.Trace = &TraceJSON{Traceparent: s.Trace.Parent, Tracestate: optString(s.Trace.State)}
	}
	if p := s.Progress; p != nil {
		out.Progress = &ProgressJSON{Percent: p.Percent, Message: p.Message, Details: rawOrNull(p.Details), UpdatedAt: p.UpdatedAt.UTC()}
	}
	return out
}

// TaskDetailJSON is the task object of GET /tasks/v1/{id}: the task and
// its dependencies.
type TaskDetailJSON struct {
	TaskJSON
	// DependsOn are the task's parents, in the order it named them.
	DependsOn []string `json:"depends_on"`
	// BlockedBy are the parents not DONE yet.
	BlockedBy []string `json:"blocked_by"`
}

func taskDetailJSON(d ports.TaskDetail) TaskDetailJSON {
	return TaskDetailJSON{TaskJSON: taskJSON(d.Task), DependsOn: idsJSON(d.DependsOn), BlockedBy: idsJSON(d.BlockedBy)}
}

func idsJSON(ids []uuid.UUID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

// AttemptJSON is one attempt of a task.
type AttemptJSON struct {
	Attempt    int        `json:"attempt"`
	WorkerID   string     `json:"worker_id"`
	ClaimedAt  time.Time  `json:"claimed_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Outcome is null while the attempt runs.
	Outcome *string `json:"outcome"`
	Error   *string `json:"error"`
	// HTTPStatus is a push delivery's response status (null: no delivery,
	// or no response).
	HTTPStatus *int `json:"http_status"`
}

func attemptsJSON(as []task.Attempt) []AttemptJSON {
	out := make([]AttemptJSON, len(as))
	for i, a := range as {
		out[i] = AttemptJSON{
			Attempt: a.Number, WorkerID: a.WorkerID, ClaimedAt: a.ClaimedAt.UTC(), FinishedAt: optTime(a.FinishedAt),
			Outcome: optString(string(a.Outcome)), Error: optString(a.Error),
		}
		if a.HTTPStatus != 0 {
			status := a.HTTPStatus
			out[i].HTTPStatus = &status
		}
	}
	return out
}

func tasksJSON(ts []*task.Task) []TaskJSON {
	out := make([]TaskJSON, len(ts))
	for i, t := range ts {
		out[i] = taskJSON(t)
	}
	return out
}

// WorkerJSON is the worker object of the API.
type WorkerJSON struct {
	ID              string    `json:"id"`
	Queues          []string  `json:"queues"`
	Tags            []string  `json:"tags"`
	Status          string    `json:"status"`
	RegisteredAt    time.Time `json:"registered_at"`
	LastHeartbeatAt time.Time `json:"last_heartbeat_at"`
	// Draining is true when the worker was asked to stop claiming.
	Draining bool `json:"draining"`
}

func workerJSON(w *worker.Worker) WorkerJSON {
	s := w.Snapshot()
	return WorkerJSON{
		ID: s.ID, Queues: nonNil(s.Queues), Tags: nonNil(s.Tags), Status: string(s.Status),
		RegisteredAt: s.RegisteredAt.UTC(), LastHeartbeatAt: s.LastHeartbeatAt.UTC(), Draining: s.Draining,
	}
}

// LeaseRefJSON names a task and a lease on it.
type LeaseRefJSON struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

// HeartbeatResponse is the worker plus what its heartbeat asks of it.
type HeartbeatResponse struct {
	WorkerJSON
	// Lost are the listed tasks the worker no longer holds.
	Lost []LeaseRefJSON `json:"lost"`
	// Cancel are held tasks an operator asked to cancel.
	Cancel []LeaseRefJSON `json:"cancel"`
	// Drain is true when the worker must stop claiming.
	Drain bool `json:"drain"`
}

func heartbeatJSON(r ports.HeartbeatResult) HeartbeatResponse {
	return HeartbeatResponse{WorkerJSON: workerJSON(r.Worker), Lost: leaseRefsJSON(r.Lost), Cancel: leaseRefsJSON(r.Cancel), Drain: r.Drain}
}

func leaseRefsJSON(refs []task.LeaseRef) []LeaseRefJSON {
	out := make([]LeaseRefJSON, len(refs))
	for i, r := range refs {
		out[i] = LeaseRefJSON{ID: r.ID.String(), LeaseID: r.LeaseID.String()}
	}
	return out
}

// RegisterResponse is a worker plus the heartbeat interval asked of it and
// the most tasks a heartbeat may list (so the most it may hold).
type RegisterResponse struct {
	WorkerJSON
	HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
	MaxHeartbeatTasks        int     `json:"max_heartbeat_tasks"`
}

func nonNilMap(m map[string]int64) map[string]int64 {
	if m == nil {
		return map[string]int64{}
	}
	return m
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

func optString(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func optTime(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
