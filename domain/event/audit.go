package event

import "time"

// Audit event types: an operator's action, recorded in the outbox in the
// transaction of the action itself, with the API key that performed it
// (KeyID). They carry no From or To: the lifecycle events of the same
// transaction (task.retried, worker.draining, ...) describe the change, and
// projections that count transitions ignore them.
const (
	// AuditKeyCreated: an API key was created (TargetKeyID).
	AuditKeyCreated Type = "audit.key_created"
	// AuditKeyRevoked: an API key was revoked (TargetKeyID).
	AuditKeyRevoked Type = "audit.key_revoked"
	// AuditTaskRetried: an operator retried a DEAD task (TaskID, Queue).
	AuditTaskRetried Type = "audit.task_retried"
	// AuditTaskCancelled: an operator cancelled a task, or asked its worker
	// to stop it (TaskID, Queue).
	AuditTaskCancelled Type = "audit.task_cancelled"
	// AuditWorkerDrained: an operator asked a worker to stop claiming
	// (WorkerID, Queues).
	AuditWorkerDrained Type = "audit.worker_drained"
	// AuditScheduleCreated: an operator created a recurring schedule
	// (Schedule, Queue).
	AuditScheduleCreated Type = "audit.schedule_created"
	// AuditScheduleUpdated: an operator changed a schedule's expression,
	// time zone, task or overlap (Schedule, Queue).
	AuditScheduleUpdated Type = "audit.schedule_updated"
	// AuditSchedulePaused: an operator paused a schedule (Schedule, Queue).
	AuditSchedulePaused Type = "audit.schedule_paused"
	// AuditScheduleResumed: an operator resumed a paused schedule
	// (Schedule, Queue).
	AuditScheduleResumed Type = "audit.schedule_resumed"
	// AuditScheduleDeleted: an operator deleted a schedule (Schedule,
	// Queue).
	AuditScheduleDeleted Type = "audit.schedule_deleted"
	// AuditQueueSettingsChanged: an operator changed a queue's settings
	// (Queue; Settings: all of them after the change).
	AuditQueueSettingsChanged Type = "audit.queue_settings_changed"
	// AuditLimitSet: an operator created or changed a named limit (Limit:
	// its values after the change).
	AuditLimitSet Type = "audit.limit_set"
	// AuditLimitDeleted: an operator deleted a named limit (Limit: its
	// values before).
	AuditLimitDeleted Type = "audit.limit_deleted"
	// AuditQueuePurged: an operator purged a queue of its tasks of one
	// status (Queue, Filter: the status; Matched: how many were removed).
	// Each removed task has its own task.purged event.
	AuditQueuePurged Type = "audit.queue_purged"
	// AuditTasksBulkRetried: an operator retried every DEAD task a filter
	// matched (Filter; Matched: how many matched when the action began). The tasks' own
	// task.retried events carry the same correlation id.
	AuditTasksBulkRetried Type = "audit.tasks_bulk_retried"
	// AuditTasksBulkCancelled: an operator cancelled every PENDING, BLOCKED
	// or RUNNING task a filter matched (Filter, Matched).
	AuditTasksBulkCancelled Type = "audit.tasks_bulk_cancelled"
	// AuditTasksBulkReplayed: an operator replayed every DONE or DEAD task
	// a filter matched (Filter, Matched). Each replay has its own
	// task.submitted event, with ReplayOf.
	AuditTasksBulkReplayed Type = "audit.tasks_bulk_replayed"
	// AuditTaskReplayed: a task was replayed (TaskID and Queue: the new
	// task; ReplayOf: the original).
	AuditTaskReplayed Type = "audit.task_replayed"
	// AuditWorkflowCancelled: an operator cancelled a run's unfinished
	// tasks (WorkflowID; Matched: how many were unfinished when the
	// action began).
	AuditWorkflowCancelled Type = "audit.workflow_cancelled"
	// AuditWorkflowRetried: an operator retried a run's DEAD tasks
	// (WorkflowID; Matched: how many it moved out of DEAD).
	AuditWorkflowRetried Type = "audit.workflow_retried"
)

// Audit returns an audit event of type t performed by keyID ("" when no key
// did) at the database time at. The caller names what it concerns (TaskID
// and Queue, WorkerID and Queues, or TargetKeyID).
func Audit(t Type, keyID string, at time.Time) Event {
	return Event{Version: Version, Type: t, KeyID: keyID, OccurredAt: at}
}
