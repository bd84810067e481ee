// Package event defines the lifecycle events that task and worker transitions
// produce. Every committed transition appends its events to the outbox in the
// same database transaction; projectors and subscribers consume them.
package event

import (
	"encoding/json"
	"time"

	"github.com/taskmaster/taskmaster/domain/queue"
)

// Version is the schema version of Event. It changes only when a field changes
// meaning or disappears; new optional fields do not bump it.
const Version = 1

// Type names what happened.
type Type string

// Task event types. From and To carry the task statuses on either side of the
// transition (From is empty for a submission, To for a cleaned task).
const (
	// TaskSubmitted: a new task entered PENDING, or BLOCKED when it depends
	// on tasks not yet DONE.
	TaskSubmitted Type = "task.submitted"
	// TaskClaimed: PENDING -> RUNNING under a worker.
	TaskClaimed Type = "task.claimed"
	// TaskCompleted: RUNNING -> DONE.
	TaskCompleted Type = "task.completed"
	// TaskFailed: the holder reported a failure; To is PENDING (retry after
	// backoff) or DEAD (Reason exhausted or non_retryable).
	TaskFailed Type = "task.failed"
	// TaskRequeued: the service took a RUNNING task back and it went to
	// PENDING; Reason says why: worker_dead, lease_expired, orphaned, or
	// timed_out (the attempt ran past its time limit; the task waits for
	// its retry's backoff).
	TaskRequeued Type = "task.requeued"
	// TaskDeadLettered: the service moved a task to DEAD without a failure
	// report (Reason worker_dead, lease_expired, orphaned, deadline,
	// cancelled, or dependency_failed: from BLOCKED, a task it depends on
	// ended DEAD).
	TaskDeadLettered Type = "task.dead_lettered"
	// TaskUnblocked: BLOCKED -> PENDING, in the transaction that completed
	// the last of the task's parents (Reason dependencies_done).
	TaskUnblocked Type = "task.unblocked"
	// TaskCancelRequested: an operator asked to cancel a RUNNING task; it
	// stays RUNNING (From and To are both RUNNING) until its holder fails it
	// or the service takes it back, either way into DEAD cancelled.
	TaskCancelRequested Type = "task.cancel_requested"
	// TaskRetried: an operator moved a DEAD task back to PENDING.
	TaskRetried Type = "task.retried"
	// TaskCleaned: retention deleted a finished task.
	TaskCleaned Type = "task.cleaned"
	// TaskPurged: an operator's purge removed a PENDING or DEAD task (From
	// its status, To empty: the task is gone).
	TaskPurged Type = "task.purged"
	// TaskSnoozed: the holder put a RUNNING task back to PENDING for later
	// (Reason snoozed, DelaySeconds) without spending an attempt: Attempt
	// is the count after the claim's attempt was given back.
	TaskSnoozed Type = "task.snoozed"
	// TaskReleased: the holder handed a RUNNING task back to PENDING,
	// claimable at once (Reason released), without spending an attempt:
	// Attempt is the count after the claim's attempt was given back.
	TaskReleased Type = "task.released"
	// TaskProgress: the holder of a RUNNING task reported progress (From
	// and To are both RUNNING; Progress carries the report). At most one
	// per task per second: a report that comes sooner is announced by a
	// later event, with the latest values.
	TaskProgress Type = "task.progress"
	// TaskDebounced: a debounced submission replaced the payload of the
	// PENDING task holding its unique key and pushed its run_at on (From
	// and To are both PENDING; Reason debounced; DelaySeconds is how long
	// from now the task waits).
	TaskDebounced Type = "task.debounced"
)

// Schedule event types. They carry the schedule's name (Schedule) and the
// queue of its tasks (Queue), and no From or To: a tick that creates a task
// is that task's task.submitted.
const (
	// ScheduleTickSkipped: a due tick created no task (Reason overlap: the
	// previous task was unfinished and the schedule's overlap is skip;
	// unique_key: an unfinished task already held the template's unique
	// key).
	ScheduleTickSkipped Type = "schedule.tick_skipped"
)

// Worker event types.
const (
	// WorkerRegistered: a worker registered or re-registered.
	WorkerRegistered Type = "worker.registered"
	// WorkerStale: ACTIVE -> STALE after a silence.
	WorkerStale Type = "worker.stale"
	// WorkerRevived: STALE -> ACTIVE on a sign of life.
	WorkerRevived Type = "worker.revived"
	// WorkerDied: ACTIVE or STALE -> DEAD after a long silence.
	WorkerDied Type = "worker.died"
	// WorkerCleaned: retention deleted a DEAD worker.
	WorkerCleaned Type = "worker.cleaned"
	// WorkerDraining: an operator asked the worker to stop claiming (From
	// and To are both its liveness status, which does not change).
	WorkerDraining Type = "worker.draining"
)

// Event is one lifecycle transition. It is JSON-encoded into the outbox.
type Event struct {
	// Version is the event schema version (see Version).
	Version int `json:"version"`
	// Type is what happened.
	Type Type `json:"type"`
	// TaskID is the task concerned, for task events.
	TaskID string `json:"task_id,omitempty"`
	// WorkflowID is the run of the task concerned, on every event of a
	// task that belongs to another task's run (absent: the task is its
	// own run, TaskID), and on the audit events of a run's cancel and
	// retry.
	WorkflowID string `json:"workflow_id,omitempty"`
	// ReplayOf is the task a replay was made from (task.submitted of a
	// replay, audit.task_replayed).
	ReplayOf string `json:"replay_of,omitempty"`
	// Queue is the task's queue, for task events.
	Queue string `json:"queue,omitempty"`
	// Queues are a worker's queues, for worker events.
	Queues []string `json:"queues,omitempty"`
	// From is the status before the transition (empty when the entity is new).
	From string `json:"from,omitempty"`
	// To is the status after the transition (empty when the entity was deleted).
	To string `json:"to,omitempty"`
	// Reason qualifies the transition: the dead reason, the requeue reason.
	Reason string `json:"reason,omitempty"`
	// Attempt is the task's attempt count after the transition.
	Attempt int `json:"attempt,omitempty"`
	// WorkerID is the worker concerned.
	WorkerID string `json:"worker_id,omitempty"`
	// OccurredAt is the database time of the transition.
	OccurredAt time.Time `json:"occurred_at"`
	// CorrelationID is the id of the request that caused the transition.
	CorrelationID string `json:"correlation_id,omitempty"`
	// KeyID is the API key that performed an audited action (audit events
	// only; absent when authentication is off or the action came through
	// the database, as `taskmaster keys` with TASKMASTER_DATABASE_URL).
	KeyID string `json:"key_id,omitempty"`
	// TargetKeyID is the API key an audited key action concerns (the key
	// created or revoked).
	TargetKeyID string `json:"target_key_id,omitempty"`
	// Schedule is the recurring schedule concerned (schedule events, and
	// audit events of schedules).
	Schedule string `json:"schedule,omitempty"`
	// Settings are a queue's settings after an audited change
	// (audit.queue_settings_changed).
	Settings *queue.Settings `json:"settings,omitempty"`
	// Limit is a named limit after (audit.limit_set) or before
	// (audit.limit_deleted) an audited change.
	Limit *queue.Limit `json:"limit,omitempty"`
	// Filter is the filter of an audited bulk action or purge, by the API's
	// field names (queue, status, dead_reason, created_after, ...).
	Filter map[string]string `json:"filter,omitempty"`
	// Matched is how many tasks an audited bulk action or purge changed.
	Matched *int64 `json:"matched,omitempty"`
	// DelaySeconds is how long a snoozed task waits (task.snoozed), or a
	// debounced one (task.debounced).
	DelaySeconds *float64 `json:"delay_seconds,omitempty"`
	// QueueWaitSeconds is claimed_at - created_at, on claims.
	QueueWaitSeconds *float64 `json:"queue_wait_seconds,omitempty"`
	// ExecutionSeconds is finished - claimed_at, when a running attempt ends.
	ExecutionSeconds *float64 `json:"execution_seconds,omitempty"`
	// EndToEndSeconds is terminal time - created_at, when a task reaches DONE
	// or DEAD (across retries).
	EndToEndSeconds *float64 `json:"end_to_end_seconds,omitempty"`
	// Metadata is the task's metadata, on every event of a task that has
	// some.
	Metadata map[string]string `json:"metadata,omitempty"`
	// Progress is the holder's report (task.progress).
	Progress *Progress `json:"progress,omitempty"`
}

// Progress is a progress report in a task.progress event.
type Progress struct {
	// Percent is from 0 to 100.
	Percent float64 `json:"percent"`
	// Message may be empty.
	Message string `json:"message"`
	// Details is the worker's JSON value, or absent.
	Details json.RawMessage `json:"details,omitempty"`
}

// Seconds returns d in seconds as a pointer, for the duration fields.
func Seconds(d time.Duration) *float64 {
	s := d.Seconds()
	if s < 0 {
		s = 0
	}
	return &s
}
