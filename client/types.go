package client

import (
	"encoding/json"
	"time"
)

// Status is where a task is in its lifecycle.
type Status string

// Task statuses.
const (
	// StatusPending: waiting for a claim (from RunAt on).
	StatusPending Status = "PENDING"
	// StatusRunning: held by one worker under a lease.
	StatusRunning Status = "RUNNING"
	// StatusDone: completed. Terminal.
	StatusDone Status = "DONE"
	// StatusDead: will not run again unless an operator retries it.
	StatusDead Status = "DEAD"
	// StatusBlocked: waiting for the tasks it depends on (DependsOn) to be
	// DONE; never claimed. It becomes PENDING when the last of them
	// completes, or DEAD (DeadDependencyFailed) when one ends DEAD.
	StatusBlocked Status = "BLOCKED"
)

// DeadReason says why a task is DEAD.
type DeadReason string

// Dead reasons.
const (
	DeadExhausted    DeadReason = "exhausted"
	DeadNonRetryable DeadReason = "non_retryable"
	DeadWorkerDead   DeadReason = "worker_dead"
	DeadDeadline     DeadReason = "deadline"
	DeadCancelled    DeadReason = "cancelled"
	// DeadLeaseExpired: the lease ran out on the task's last attempt.
	DeadLeaseExpired DeadReason = "lease_expired"
	// DeadOrphaned: the holder's heartbeats stopped listing the task on its
	// last attempt.
	DeadOrphaned DeadReason = "orphaned"
	// DeadDependencyFailed: a task it depends on ended DEAD.
	DeadDependencyFailed DeadReason = "dependency_failed"
	// DeadDependencySkipped: a task it depends on under OnFailureSkip
	// ended DEAD; it was skipped, not failed.
	DeadDependencySkipped DeadReason = "dependency_skipped"
)

// WorkerStatus is a worker's liveness.
type WorkerStatus string

// Worker statuses.
const (
	WorkerActive WorkerStatus = "ACTIVE"
	WorkerStale  WorkerStatus = "STALE"
	WorkerDead   WorkerStatus = "DEAD"
)

// Task is the API's task object. Fields the server sends as null are zero
// here ("" or nil); marshalling a Task writes them back as null.
type Task struct {
	ID             string          `json:"id"`
	Queue          string          `json:"queue"`
	Status         Status          `json:"status"`
	Priority       int             `json:"priority"`
	Payload        json.RawMessage `json:"payload"`
	Tags           []string        `json:"tags"`
	Attempts       int             `json:"attempts"`
	MaxAttempts    int             `json:"max_attempts"`
	WorkerID       string          `json:"worker_id"`
	LeaseID        string          `json:"lease_id"`
	LastError      string          `json:"last_error"`
	DeadReason     DeadReason      `json:"dead_reason"`
	Result         json.RawMessage `json:"result"`
	Deadline       *time.Time      `json:"deadline"`
	RunAt          time.Time       `json:"run_at"`
	IdempotencyKey string          `json:"idempotency_key"`
	CreatedAt      time.Time       `json:"created_at"`
	ClaimedAt      *time.Time      `json:"claimed_at"`
	FinishedAt     *time.Time      `json:"finished_at"`
	UpdatedAt      time.Time       `json:"updated_at"`
	// LeaseExpiresAt is when the holder's lease runs out (nil unless
	// RUNNING).
	LeaseExpiresAt *time.Time `json:"lease_expires_at"`
	// CancelRequestedAt is when an operator asked to cancel the running
	// task (nil unless RUNNING with a cancel pending).
	CancelRequestedAt *time.Time `json:"cancel_requested_at"`
	// DependsOn are the ids of the tasks this one depends on, in the order
	// it named them, and BlockedBy those not DONE yet: Get only (nil
	// elsewhere).
	DependsOn []string `json:"depends_on,omitempty"`
	BlockedBy []string `json:"blocked_by,omitempty"`
	// Enqueued are the tasks a Complete with Enqueue created (or found, for
	// repeated idempotency keys), in order: its answer only.
	Enqueued []Task `json:"enqueued,omitempty"`
	// UniqueKey is the task's active-unique key ("" when none).
	UniqueKey string `json:"unique_key"`
	// Retry is the task's own retry policy (nil: the server's).
	Retry *Backoff `json:"retry"`
	// Snoozes counts the times the holder snoozed the task (each gave its
	// attempt back).
	Snoozes int `json:"snoozes"`
	// GroupKey is the task's group in its queue ("" when none).
	GroupKey string `json:"group_key"`
	// TimeoutSeconds is the task's own time limit on each attempt (0:
	// its queue's default_timeout_seconds at each claim, or none).
	TimeoutSeconds int `json:"timeout_seconds"`
	// TimeoutAt is when the running attempt's time limit is up (nil unless
	// RUNNING under a limit): the server ends the attempt then, whatever
	// its heartbeats say (attempt outcome timed_out).
	TimeoutAt *time.Time `json:"timeout_at"`
	// Metadata is the producer's data (empty when none).
	Metadata map[string]string `json:"metadata"`
	// Trace is the W3C trace context the task was submitted under (nil:
	// none); clientotel.TaskContext continues it.
	Trace *Trace `json:"trace"`
	// LastProgress is the holder's last progress report (nil: none since
	// the last claim). (Task.Progress reports one, from a Runner's handler.)
	LastProgress *Progress `json:"progress"`

	// ScheduleName and ScheduleTick name the recurring schedule and the
	// tick that made the task ("" and nil for any other task).
	ScheduleName string     `json:"schedule_name"`
	ScheduleTick *time.Time `json:"schedule_tick"`
	// WorkflowID is the task's run: its own id when submitted alone, its
	// run's when a complete's Enqueue, a Spawn or a batch with
	// dependencies created it (see Client.Workflow).
	WorkflowID string `json:"workflow_id"`
	// ReplayOf is the task this one was replayed from ("" when none).
	ReplayOf string `json:"replay_of"`
	// DebounceUntil is the latest RunAt debounced submissions may push the
	// task to (nil: never debounced).
	DebounceUntil *time.Time `json:"debounce_until"`

	// progress reports for a Runner's handler (see Task.Progress).
	progress *progressReporter
}

// Trace is a task's W3C trace context.
type Trace struct {
	// Traceparent is version-traceid-parentid-flags.
	Traceparent string `json:"traceparent"`
	// Tracestate is the vendor-specific entries ("" when none).
	Tracestate string `json:"tracestate"`
}

// MarshalJSON writes the trace as the server does: no tracestate as null.
func (tr Trace) MarshalJSON() ([]byte, error) {
	return json.Marshal(struct {
		Traceparent string  `json:"traceparent"`
		Tracestate  *string `json:"tracestate"`
	}{tr.Traceparent, nullable(tr.Tracestate)})
}

// Progress is a task's last progress report.
type Progress struct {
	// Percent is from 0 to 100.
	Percent float64 `json:"percent"`
	// Message says what the worker is doing ("" when nothing).
	Message string `json:"message"`
	// Details is the worker's JSON value (nil: none).
	Details json.RawMessage `json:"details"`
	// UpdatedAt is when the server stored the report.
	UpdatedAt time.Time `json:"updated_at"`
}

// Finished reports whether the task is DONE or DEAD.
func (t Task) Finished() bool { return t.Status == StatusDone || t.Status == StatusDead }

// Jitter says how a retry delay is randomised.
type Jitter string

// Jitters.
const (
	// JitterNone waits exactly the delay.
	JitterNone Jitter = "none"
	// JitterFull waits a uniformly random time between zero and the delay.
	JitterFull Jitter = "full"
)

// Backoff is a task's own retry policy (the API's "retry"): a retryable
// failure with attempts left waits min(2^attempts x Base, Max), jittered as
// asked. (RetryPolicy is the client's own retrying of requests.)
type Backoff struct {
	// Base is the delay unit: 100 ms to 1 h (required).
	Base time.Duration
	// Max caps the delay: at least Base, at most 7 days (0: the server's
	// default, max(5 min, Base)).
	Max time.Duration
	// Jitter: JitterNone (the default) or JitterFull.
	Jitter Jitter
}

type retryJSON struct {
	BaseSeconds float64  `json:"base_seconds"`
	MaxSeconds  *float64 `json:"max_seconds,omitempty"`
	Jitter      Jitter   `json:"jitter,omitempty"`
}

// MarshalJSON writes the policy as the API takes it (seconds).
func (p Backoff) MarshalJSON() ([]byte, error) {
	out := retryJSON{BaseSeconds: p.Base.Seconds(), Jitter: p.Jitter}
	if p.Max > 0 {
		m := p.Max.Seconds()
		out.MaxSeconds = &m
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads the policy as the API shows it.
func (p *Backoff) UnmarshalJSON(b []byte) error {
	var in retryJSON
	if err := json.Unmarshal(b, &in); err != nil {
		return err
	}
	*p = Backoff{Base: seconds(in.BaseSeconds), Jitter: in.Jitter}
	if in.MaxSeconds != nil {
		p.Max = seconds(*in.MaxSeconds)
	}
	return nil
}

func seconds(s float64) time.Duration { return time.Duration(s*1e6+0.5) * time.Microsecond }

// DecodePayload unmarshals the task's payload into v.
func (t Task) DecodePayload(v any) error { return json.Unmarshal(t.Payload, v) }

// MarshalJSON writes the task as the server does: absent values as null.
func (t Task) MarshalJSON() ([]byte, error) {
	type plain Task
	return json.Marshal(struct {
		plain
		WorkerID       *string           `json:"worker_id"`
		LeaseID        *string           `json:"lease_id"`
		LastError      *string           `json:"last_error"`
		DeadReason     *string           `json:"dead_reason"`
		IdempotencyKey *string           `json:"idempotency_key"`
		UniqueKey      *string           `json:"unique_key"`
		GroupKey       *string           `json:"group_key"`
		ScheduleName   *string           `json:"schedule_name"`
		ReplayOf       *string           `json:"replay_of"`
		Payload        json.RawMessage   `json:"payload"`
		Result         json.RawMessage   `json:"result"`
		TimeoutSeconds *int              `json:"timeout_seconds"`
		Metadata       map[string]string `json:"metadata"`
	}{
		plain: plain(t), WorkerID: nullable(t.WorkerID), LeaseID: nullable(t.LeaseID),
		LastError: nullable(t.LastError), DeadReason: nullable(string(t.DeadReason)),
		IdempotencyKey: nullable(t.IdempotencyKey), UniqueKey: nullable(t.UniqueKey), GroupKey: nullable(t.GroupKey),
		ScheduleName: nullable(t.ScheduleName), ReplayOf: nullable(t.ReplayOf), Payload: rawOrNull(t.Payload), Result: rawOrNull(t.Result),
		TimeoutSeconds: nullableInt(t.TimeoutSeconds), Metadata: nonNilMetadata(t.Metadata),
	})
}

func nullableInt(n int) *int {
	if n == 0 {
		return nil
	}
	return &n
}

func nonNilMetadata(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func rawOrNull(b json.RawMessage) json.RawMessage {
	if len(b) == 0 {
		return json.RawMessage("null")
	}
	return b
}

// Worker is the API's worker object.
type Worker struct {
	ID              string       `json:"id"`
	Queues          []string     `json:"queues"`
	Tags            []string     `json:"tags"`
	Status          WorkerStatus `json:"status"`
	RegisteredAt    time.Time    `json:"registered_at"`
	LastHeartbeatAt time.Time    `json:"last_heartbeat_at"`
	// Draining is true once an operator asked the worker to stop claiming
	// (until it registers again).
	Draining bool `json:"draining"`
}

// LeaseRef names a task and the lease a worker holds it under.
type LeaseRef struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

// Ref returns the task's id and lease.
func (t Task) Ref() LeaseRef { return LeaseRef{ID: t.ID, LeaseID: t.LeaseID} }

// HeartbeatResult is the worker after a heartbeat, and what it must act on.
type HeartbeatResult struct {
	Worker
	// Lost are the listed tasks the worker no longer holds under the listed
	// lease (requeued, cancelled, finished, taken by another worker): stop
	// them and drop their reports. Empty unless the heartbeat listed tasks.
	Lost []LeaseRef `json:"lost"`
	// Cancel are tasks the worker holds that an operator asked to cancel:
	// stop them and fail them (they end DEAD, reason cancelled); and listed
	// tasks whose attempt under this worker ran past its time limit (also
	// in Lost: stop them, drop their reports).
	Cancel []LeaseRef `json:"cancel"`
	// Drain is true once the worker must stop claiming.
	Drain bool `json:"drain"`
}

// Registration is a registered worker plus what the server asks of it.
type Registration struct {
	Worker
	// HeartbeatIntervalSeconds is how often the server asks the worker to
	// send a heartbeat.
	HeartbeatIntervalSeconds float64 `json:"heartbeat_interval_seconds"`
	// MaxHeartbeatTasks is the most tasks one heartbeat may list, so the
	// most tasks the worker may hold at once: a longer list is refused, and
	// a worker whose heartbeats are refused is declared dead and loses every
	// task it holds. 0 from servers that do not say (MaxHeartbeatTasks).
	MaxHeartbeatTasks int `json:"max_heartbeat_tasks"`
	// Created is true when the worker did not exist before (201).
	Created bool `json:"-"`
}

// HeartbeatInterval returns HeartbeatIntervalSeconds as a duration.
func (r Registration) HeartbeatInterval() time.Duration {
	return time.Duration(r.HeartbeatIntervalSeconds * float64(time.Second))
}

// Queue is one queue's statistics, as GET /queues/v1 serves them.
//
// The statistics are eventually consistent: the counts, Totals and Rates are
// projected from the lifecycle events and lag the tasks table by about one
// outbox poll interval (100 ms by default; longer while a long transaction
// in the database holds delivery back). StatsAsOf says when the projection
// last applied an event. ActiveWorkers and OldestPendingAgeSeconds are read
// live. To see your own writes, read the tasks, or poll until the counts
// match.
type Queue struct {
	Queue   string `json:"queue"`
	Pending int64  `json:"pending"`
	Running int64  `json:"running"`
	Done    int64  `json:"done"`
	Dead    int64  `json:"dead"`
	// Blocked are the tasks waiting for the tasks they depend on.
	Blocked int64 `json:"blocked"`
	// ActiveWorkers are the ACTIVE workers registered for the queue, or for
	// every queue.
	ActiveWorkers int64 `json:"active_workers"`
	// OldestPendingAgeSeconds is how long ago the oldest PENDING task was
	// submitted; nil when none is PENDING. See OldestPendingAge.
	OldestPendingAgeSeconds *float64 `json:"oldest_pending_age_seconds"`
	// Rates are the queue's throughput, per minute, over the windows
	// RateLast1m, RateLast5m and RateLast15m.
	Rates map[string]QueueRate `json:"rates"`
	// Totals are cumulative transition counts.
	Totals QueueTotals `json:"totals"`
	// StatsAsOf is when the statistics projection last applied an event
	// (nil before it applied any): the counts are exact as of then.
	StatsAsOf *time.Time `json:"stats_as_of"`
	// Paused is Settings.Paused.
	Paused bool `json:"paused"`
	// Settings are the queue's settings (see UpdateQueue).
	Settings QueueSettings `json:"settings"`
}

// OldestPendingAge returns OldestPendingAgeSeconds as a duration, and
// false when no task is PENDING.
func (q Queue) OldestPendingAge() (time.Duration, bool) {
	if q.OldestPendingAgeSeconds == nil {
		return 0, false
	}
	return time.Duration(*q.OldestPendingAgeSeconds * float64(time.Second)), true
}

// The windows of Queue.Rates.
const (
	RateLast1m  = "last_1m"
	RateLast5m  = "last_5m"
	RateLast15m = "last_15m"
)

// QueueRate is a queue's throughput over one window, in tasks per minute.
type QueueRate struct {
	// Enqueued counts submitted tasks.
	Enqueued  float64 `json:"enqueued"`
	Claimed   float64 `json:"claimed"`
	Completed float64 `json:"completed"`
	// DeadLettered counts tasks that moved to DEAD, for any reason.
	DeadLettered float64 `json:"dead_lettered"`
}

// QueueTotals are a queue's cumulative transition counts; they do not go
// down when retention deletes tasks.
type QueueTotals struct {
	Submitted int64 `json:"submitted"`
	Claimed   int64 `json:"claimed"`
	Completed int64 `json:"completed"`
	// Failed counts failures reported by workers, retried or not.
	Failed int64 `json:"failed"`
	// DeadLettered counts transitions to DEAD by DeadReason.
	DeadLettered map[DeadReason]int64 `json:"dead_lettered"`
	// Requeued counts transitions back to PENDING by reason: "failed"
	// (retry after backoff), "worker_dead", "lease_expired", "orphaned",
	// "retried" (by an operator), "snoozed", "timed_out" (an attempt ran
	// past its time limit).
	Requeued map[string]int64 `json:"requeued"`
	// Cleaned counts finished tasks deleted by retention.
	Cleaned int64 `json:"cleaned"`
}

// SubmitParams describe a new task.
type SubmitParams struct {
	// Queue is required.
	Queue string
	// Payload is any value encoding/json can marshal (a json.RawMessage is
	// sent as is); nil sends no payload.
	Payload any
	// Priority: higher is claimed first (default 0).
	Priority int
	// MaxAttempts is 1-100; 0 leaves the server's default (3).
	MaxAttempts int
	// Tags a worker must all have to claim the task (at most 16).
	Tags []string
	// Deadline: still PENDING after it, the task is DEAD (reason deadline).
	Deadline *time.Time
	// RunAt is the earliest claim (default now).
	RunAt *time.Time
	// IdempotencyKey: a second submission with the same key on the same
	// queue returns the first task. Setting it also lets the client retry a
	// submission safely after any transport error.
	IdempotencyKey string
	// Ref names the task for later items' DependsOn (SubmitBatch, a
	// complete's Enqueue, Spawn): unique in the list, not a UUID.
	Ref string
	// DependsOn are refs of earlier items of the list and ids of existing
	// tasks (SubmitBatch, Enqueue, Spawn): the task is BLOCKED until they
	// are all DONE, and DEAD (DeadDependencyFailed) if one ends DEAD.
	DependsOn []string
	// Dependencies are more parents, each named as a ref or an id only and
	// with the failure policy of its edge (sent after DependsOn).
	Dependencies []Dependency
	// Debounce, with UniqueKey (Submit only): the PENDING task holding the
	// key takes this submission's payload and waits Debounce from now
	// again (whole seconds, rounded up), never past DebounceMax after the
	// first submission (0: ten times Debounce); the first submission waits
	// Debounce. Submit returns the holder.
	Debounce, DebounceMax time.Duration
	// Throttle, with UniqueKey (Submit only): with no unfinished holder,
	// the key's last holder is returned while it finished less than
	// Throttle ago (whole seconds, rounded up); then a new task.
	Throttle time.Duration
	// UniqueKey: while a task of the queue with this key is unfinished
	// (PENDING, RUNNING or BLOCKED), a submission returns it instead of
	// creating another; once it is DONE or DEAD a new one is created. 1-255
	// bytes of printable UTF-8. With both keys, the idempotency key decides
	// first.
	UniqueKey string
	// Retry overrides the server's backoff for this task (nil: the
	// server's).
	Retry *Backoff
	// GroupKey puts the task in a group of its queue (a tenant, a
	// customer; 1-128 characters): claims take turns across a queue's
	// groups, and the queue's max_running_per_group caps each group.
	GroupKey string
	// TimeoutSeconds limits each attempt of the task, from its claim
	// (1-86400; 0: the queue's default_timeout_seconds). An attempt still
	// running at its limit is ended by the server (retried after backoff,
	// or DEAD exhausted), whatever its heartbeats say; the Runner cancels
	// its handler's context then.
	TimeoutSeconds int
	// Metadata is free-form data of the task (at most 32 keys of 1-64
	// characters of [A-Za-z0-9_.-], values of at most 512 characters): a
	// tenant, a request id. Tasks can be listed and bulk-changed by it.
	Metadata map[string]string
	// Traceparent and Tracestate, when set, are the task's own W3C trace
	// context (SubmitBatch items). Without them the task keeps the trace
	// context of the call's headers (see WithHeaders and
	// clientotel.Propagation).
	Traceparent, Tracestate string
}

type submitRequest struct {
	Queue          string            `json:"queue"`
	Payload        json.RawMessage   `json:"payload,omitempty"`
	Priority       int               `json:"priority,omitempty"`
	MaxAttempts    int               `json:"max_attempts,omitempty"`
	Tags           []string          `json:"tags,omitempty"`
	Deadline       *time.Time        `json:"deadline,omitempty"`
	RunAt          *time.Time        `json:"run_at,omitempty"`
	IdempotencyKey string            `json:"idempotency_key,omitempty"`
	Ref            string            `json:"ref,omitempty"`
	DependsOn      []any             `json:"depends_on,omitempty"`
	UniqueKey      string            `json:"unique_key,omitempty"`
	Retry          *Backoff          `json:"retry,omitempty"`
	GroupKey       string            `json:"group_key,omitempty"`
	TimeoutSeconds int               `json:"timeout_seconds,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
	Traceparent    string            `json:"traceparent,omitempty"`
	Tracestate     string            `json:"tracestate,omitempty"`
	// Debounce and throttle windows in whole seconds (0: none).
	DebounceSeconds    int `json:"debounce_seconds,omitempty"`
	DebounceMaxSeconds int `json:"debounce_max_seconds,omitempty"`
	ThrottleSeconds    int `json:"throttle_seconds,omitempty"`
}

// ListParams filter a task listing.
type ListParams struct {
	// Queue, when set, lists only this queue.
	Queue string
	// Status, when set, lists only this status.
	Status Status
	// Metadata, when set, lists only the tasks whose metadata holds every
	// one of these pairs.
	Metadata map[string]string
	// WorkflowID, when set, lists only the tasks of this run.
	WorkflowID string
	// Limit is the page size, 1-1000 (0: the server's default, 100).
	Limit int
	// Cursor is the previous page's NextCursor.
	Cursor string
}

// TaskPage is one page of a listing, newest first.
type TaskPage struct {
	Tasks []Task `json:"tasks"`
	// NextCursor fetches the next page; "" on the last one.
	NextCursor string `json:"next_cursor"`
	// Truncated is true when the page stopped before its limit because the
	// server's response byte cap was reached (NextCursor continues).
	Truncated bool `json:"truncated"`
}

// RegisterParams describe a worker registration.
type RegisterParams struct {
	// ID is the worker's stable id (1-128 of [A-Za-z0-9._:-]); the server
	// generates one when empty. DefaultWorkerID gives hostname-pid.
	ID string `json:"id,omitempty"`
	// Queues the worker serves; claims without a queue use them (none: any).
	Queues []string `json:"queues,omitempty"`
	// Tags the worker has; it may claim tasks whose tags are a subset.
	Tags []string `json:"tags,omitempty"`
}

// ClaimParams ask for tasks.
type ClaimParams struct {
	// WorkerID is the registered worker (required).
	WorkerID string `json:"worker_id"`
	// Queue restricts the claim to one queue (default: the worker's).
	Queue string `json:"queue,omitempty"`
	// Limit is the most tasks to return, 1-1000 (0: 1).
	Limit int `json:"limit,omitempty"`
	// Wait makes a claim that finds nothing wait on the server, up to
	// MaxClaimWait, until a task is claimable (long poll); it is sent as
	// wait_ms, rounded up to a millisecond. 0 answers at once.
	Wait time.Duration `json:"-"`
	// LeaseSeconds is each claimed task's lease, 1 to MaxLeaseSeconds (0:
	// the server's default, 300 unless configured). Heartbeats that list
	// the task renew it (see HeartbeatTasks); Extend sets it anew.
	LeaseSeconds int `json:"lease_seconds,omitempty"`
	// RequestID names the claim, so that sending it again is safe: a
	// repeat (same worker, same id) while the worker still holds tasks of
	// that claim returns those tasks under the same leases and claims
	// nothing. 1-128 printable ASCII characters other than space. Empty:
	// Claim makes a fresh random one, which its own retries reuse.
	RequestID string `json:"request_id,omitempty"`
}

// ClaimResult is the answer of a claim that carried reports
// (Client.ClaimReporting).
type ClaimResult struct {
	// Tasks are the claimed tasks, possibly none.
	Tasks []Task `json:"tasks"`
	// Truncated says the claim stopped before its limit at the server's
	// response byte cap: more tasks may be claimable at once.
	Truncated bool `json:"truncated"`
	// Completed and Failed are the outcomes of the reports, in order.
	Completed []ItemOutcome `json:"completed"`
	Failed    []ItemOutcome `json:"failed"`
}

// MaxLeaseSeconds is the longest lease the server grants (12 h).
const MaxLeaseSeconds = 43200

// ExtendParams extend a held task's lease.
type ExtendParams struct {
	// WorkerID is the holder (required).
	WorkerID string `json:"worker_id"`
	// LeaseID is the lease the task was claimed under (required).
	LeaseID string `json:"lease_id"`
	// LeaseSeconds is the new lease length, from now (0: the task's
	// current length); later heartbeat renewals keep it.
	LeaseSeconds int `json:"lease_seconds,omitempty"`
}

// CompleteParams report a held task done.
type CompleteParams struct {
	// WorkerID is the holder (required).
	WorkerID string
	// LeaseID is the lease the task was claimed under (Task.LeaseID),
	// required: the server refuses a report without it (422) and one under
	// any other lease (409 lease-lost).
	LeaseID string
	// Result is any value encoding/json can marshal; nil sends none.
	Result any
	// Enqueue are tasks to create in the transaction that completes this
	// one, or not at all (at most 1,000): the next stage of a pipeline, in
	// this task's run. Their Ref and DependsOn name earlier items of
	// Enqueue and existing tasks, this one included (DONE by then): a join
	// over the children of a Spawn. The key needs the produce scope as well
	// as work. The answer lists them in Task.Enqueued.
	Enqueue []SubmitParams
}

// FailParams report a held task failed.
type FailParams struct {
	// WorkerID is the holder (required).
	WorkerID string
	// LeaseID is the lease the task was claimed under (Task.LeaseID),
	// required, as for CompleteParams.
	LeaseID string
	// Error says what went wrong (at most 64 KiB; longer is cut).
	Error string
	// NonRetryable sends the task straight to DEAD (reason non_retryable);
	// otherwise it is retried after backoff while attempts remain.
	NonRetryable bool
}

// CompleteItem is one task of a CompleteBatch.
type CompleteItem struct {
	// ID is the task's id (required).
	ID string
	// LeaseID is the lease the task was claimed under (Task.LeaseID),
	// required: the server refuses a report without it (422) and one under
	// any other lease (409 lease-lost).
	LeaseID string
	// Result is any value encoding/json can marshal; nil sends none.
	Result any
	// Enqueue are tasks to create with this item's completion, or not at
	// all, as for CompleteParams (at most 1,000 across the items).
	Enqueue []SubmitParams
}

// FailItem is one task of a FailBatch.
type FailItem struct {
	// ID is the task's id (required).
	ID string
	// LeaseID is the lease the task was claimed under (Task.LeaseID),
	// required, as for CompleteParams.
	LeaseID string
	// Error says what went wrong (at most 64 KiB; longer is cut).
	Error string
	// NonRetryable sends the task straight to DEAD (reason non_retryable).
	NonRetryable bool
}

// Outcome is what a batch report did to one item.
type Outcome string

// Outcomes of a batch report's items.
const (
	// OutcomeDone: the task completed.
	OutcomeDone Outcome = "done"
	// OutcomeRequeued: the failed task is PENDING again, after backoff (a
	// released task: claimable now).
	OutcomeRequeued Outcome = "requeued"
	// OutcomeDead: the failed task is DEAD (attempts exhausted, or
	// non-retryable; a released task: an operator had asked to cancel it).
	OutcomeDead Outcome = "dead"
	// OutcomeError: the server refused the item; see ItemOutcome.Problem.
	OutcomeError Outcome = "error"
)

// ItemOutcome is one item's result in a batch report, in request order.
type ItemOutcome struct {
	// ID is the item's task id.
	ID string `json:"id"`
	// Outcome says what happened to the task.
	Outcome Outcome `json:"outcome"`
	// Task is the task after the report (nil for an error).
	Task *Task `json:"task"`
	// Problem says why the item was refused (OutcomeError only): a
	// lease-lost or invalid-transition problem means the worker no longer
	// holds the task (drop it, do not report it again), task-not-found
	// that there is no such task.
	Problem *Problem `json:"problem"`
	// Enqueued are the tasks a completed item's Enqueue created (or found,
	// for repeated idempotency keys), in order.
	Enqueued []Task `json:"enqueued"`
}

// Err returns the item's problem as an error, or nil when the item was
// accepted, for use with IsLeaseLost and the other helpers.
func (o ItemOutcome) Err() error {
	if o.Problem == nil {
		return nil
	}
	return o.Problem
}

// AttemptOutcome says how an attempt ended.
type AttemptOutcome string

// Attempt outcomes.
const (
	AttemptCompleted AttemptOutcome = "completed"
	// AttemptFailed: the holder failed it (retried or not).
	AttemptFailed       AttemptOutcome = "failed"
	AttemptLeaseExpired AttemptOutcome = "lease_expired"
	AttemptOrphaned     AttemptOutcome = "orphaned"
	AttemptWorkerDead   AttemptOutcome = "worker_dead"
	// AttemptCancelled: an operator had asked to cancel the running task.
	AttemptCancelled AttemptOutcome = "cancelled"
	// AttemptSnoozed: the holder gave the task back for later.
	AttemptSnoozed AttemptOutcome = "snoozed"
	// AttemptReleased: the holder handed the task back, claimable at once,
	// without spending the attempt (a stopping worker's drain).
	AttemptReleased AttemptOutcome = "released"
	// AttemptTimedOut: the attempt ran past its time limit and the server
	// ended it (the task retried after backoff, or DEAD exhausted).
	AttemptTimedOut AttemptOutcome = "timed_out"
)

// Attempt is one claim of a task and how it ended.
type Attempt struct {
	// Attempt is the task's attempt count at the claim (from 1; it starts
	// again at 1 after an operator's retry).
	Attempt    int        `json:"attempt"`
	WorkerID   string     `json:"worker_id"`
	ClaimedAt  time.Time  `json:"claimed_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// Outcome is "" while the attempt runs.
	Outcome AttemptOutcome `json:"outcome"`
	// Error is the holder's failure message, if any.
	Error string `json:"error"`
	// HTTPStatus is a push delivery's response status (0: the attempt was
	// no push delivery, or got no response).
	HTTPStatus int `json:"http_status"`
}
