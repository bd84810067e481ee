package ports

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
)

// ClaimCommand asks for tasks on behalf of a worker.
type ClaimCommand struct {
	// WorkerID is the registered worker claiming.
	WorkerID string
	// Queue, when set, restricts the claim to one queue; otherwise the
	// worker's registered queues (or any queue when it registered none).
	Queue string
	// Limit is the most tasks to return (1-1000); nil means 1.
	Limit *int
	// WaitMillis, when positive, makes an empty claim wait up to this many
	// milliseconds (0-30000) for a claimable task (long poll) without
	// holding a database connection; nil or 0 answers at once.
	WaitMillis *int64
	// LeaseSeconds is each claimed task's lease length (1-43200); nil means
	// the configured default.
	LeaseSeconds *int
	// RequestID, when not nil, names the claim (task.ValidRequestID): a
	// repeat by the same worker while tasks of that claim are still held by
	// it answers with those tasks, under the same leases, and claims nothing.
	RequestID *string
	// Push marks a push dispatcher's claim (set by the dispatcher, never
	// from a request): it takes from the push queue it names, whatever the
	// tasks' tags, where workers' claims pass push queues by.
	Push bool
	// Complete and Fail are the worker's reports of tasks it holds (at most
	// MaxBatch items together, none with Enqueue), applied as CompleteBatch
	// and FailBatch would apply them, in the transaction of the claim's
	// first attempt and before it: a worker reports its last task and
	// takes its next in one request. The request is all or nothing up to
	// that attempt (an error of the claim saves none of the reports); the
	// outcomes come back in ClaimResult.Completed and Failed.
	Complete []CompleteItem
	Fail     []FailItem
}

// ExtendCommand asks for a held task's lease to run out LeaseSeconds from
// now.
type ExtendCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	// LeaseID is required: only the current lease may be extended.
	LeaseID *uuid.UUID
	// LeaseSeconds is the new lease length (1-43200); nil keeps the task's
	// current one.
	LeaseSeconds *int
}

// HeartbeatCommand is a worker's heartbeat and, when ListsTasks, the tasks
// it holds.
type HeartbeatCommand struct {
	WorkerID string
	// ListsTasks says the heartbeat lists the worker's tasks (Tasks, possibly
	// none): listed tasks get their leases renewed, and tasks the worker holds
	// but did not list (claimed more than a heartbeat interval ago) are taken
	// back as orphaned. Without it the heartbeat renews and orphans nothing.
	ListsTasks bool
	// Tasks are the tasks the worker holds, each under the lease it knows.
	Tasks []task.LeaseRef
	// ClaimsInFlight are the request ids of the worker's claims it had sent
	// but had no answer to when it listed Tasks: the tasks they made
	// RUNNING are not taken back as orphaned (task.Listing.WithClaimsInFlight).
	ClaimsInFlight []string
	// Progress, when not nil, holds a progress report for Tasks[i] at i
	// (nil where the item carries none): each is stored as
	// TaskService.ReportProgress stores one, with the renewal.
	Progress []*ProgressReport
}

// ProgressReport is what a holder reports of its task's progress.
type ProgressReport struct {
	// Percent is required: 0 to 100.
	Percent *float64
	// Message is at most 1 KiB of UTF-8 (may be empty).
	Message string
	// Details, when not empty, is a JSON value of at most 16 KiB.
	Details json.RawMessage
}

// ProgressCommand reports a held task's progress.
type ProgressCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	// LeaseID is required: only the current lease's holder may report.
	LeaseID *uuid.UUID
	ProgressReport
}

// AwaitCommand asks for a task once it has finished, waiting for that.
type AwaitCommand struct {
	TaskID uuid.UUID
	// WaitMillis, when positive, is the longest wait for the task to be
	// DONE or DEAD (0-60000); nil or 0 answers at once.
	WaitMillis *int64
}

// HeartbeatResult is the worker after its heartbeat and what it must act on.
type HeartbeatResult struct {
	// Worker is the worker, ACTIVE.
	Worker *worker.Worker
	// Lost are the listed tasks the worker no longer holds under the listed
	// lease: it must abandon them (their reports would be refused).
	Lost []task.LeaseRef
	// Cancel are the tasks the worker holds that an operator asked to
	// cancel: it should stop them and fail them.
	Cancel []task.LeaseRef
	// Drain is true when the worker was asked to stop claiming.
	Drain bool
}

// CompleteItem is one success report of a batch.
type CompleteItem struct {
	TaskID  uuid.UUID
	LeaseID *uuid.UUID
	Result  json.RawMessage
	// Enqueue, when not nil, are tasks to create in the transaction that
	// completes the task, or not at all (see CompleteCommand.Enqueue).
	Enqueue []task.SubmitParams
	// EnqueueGraph, when not nil, is Enqueue's refs and depends_on (see
	// CompleteCommand.EnqueueGraph).
	EnqueueGraph []task.DependencySpec
}

// FailItem is one failure report of a batch.
type FailItem struct {
	TaskID    uuid.UUID
	LeaseID   *uuid.UUID
	Error     string
	Retryable bool
}

// ReleaseItem is one task a batch release hands back.
type ReleaseItem struct {
	TaskID  uuid.UUID
	LeaseID *uuid.UUID
}

// ReleaseCommand hands a held task back, claimable now, without spending
// an attempt.
type ReleaseCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	// LeaseID is required: only the current lease may release.
	LeaseID *uuid.UUID
}

// CompleteCommand reports a task's success.
type CompleteCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	LeaseID  *uuid.UUID
	Result   json.RawMessage
	// Enqueue, when not nil, are tasks to create in the transaction that
	// completes the task, or not at all: the next stage of a pipeline. A
	// refused completion (a stale holder) creates none. Each is a
	// submission (idempotency keys included: a repeated key names the
	// existing task). They join the completed task's run.
	Enqueue []task.SubmitParams
	// EnqueueGraph, when not nil, holds each of Enqueue's ref and
	// depends_on (EnqueueGraph[j] is Enqueue[j]'s): refs of earlier items
	// of Enqueue and ids of existing tasks, the completed task's included
	// (DONE by then).
	EnqueueGraph []task.DependencySpec
}

// SpawnCommand asks a held task to create tasks while it runs.
type SpawnCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	// LeaseID is required: only the current lease's holder may spawn.
	LeaseID *uuid.UUID
	// Tasks are the submissions (1 to 1,000), which join the task's run.
	Tasks []task.SubmitParams
	// Graph, when not nil, holds each of Tasks' ref and depends_on (as
	// CompleteCommand.EnqueueGraph; the spawning task, RUNNING, may be
	// named too).
	Graph []task.DependencySpec
}

// ReplayCommand asks for a new task made from a DONE or DEAD one.
type ReplayCommand struct {
	TaskID uuid.UUID
	// Params are the overrides (their ID is given by the use case).
	Params task.ReplayParams
}

// Completion is a completed task and the tasks its completion enqueued (or
// the existing ones their idempotency keys named), in request order.
type Completion struct {
	Task     *task.Task
	Enqueued []*task.Task
}

// TaskDetail is a task and its place among its dependencies.
type TaskDetail struct {
	Task *task.Task
	// DependsOn are the task's parents, in the order it named them (those
	// retention deleted are gone).
	DependsOn []uuid.UUID
	// BlockedBy are the parents not resolved yet: not DONE, nor DEAD under
	// an ignore edge.
	BlockedBy []uuid.UUID
}

// FailCommand reports a task's failure.
type FailCommand struct {
	TaskID    uuid.UUID
	WorkerID  string
	LeaseID   *uuid.UUID
	Error     string
	Retryable bool
}

// ListQuery asks for a page of a task listing, newest first.
type ListQuery struct {
	// Queue, when not empty, restricts to one queue.
	Queue string
	// Status, when not empty, restricts to one status.
	Status task.Status
	// DeadReason, GroupKey, CreatedAfter, CreatedBefore, ErrorContains
	// and Text, when set, restrict further, as the fields of task.Filter.
	DeadReason                  task.DeadReason
	GroupKey                    string
	CreatedAfter, CreatedBefore *time.Time
	ErrorContains, Text         string
	// Metadata, when not empty, are pairs the tasks' metadata must all
	// hold (task.Filter.Metadata).
	Metadata map[string]string
	// WorkflowID, when not uuid.Nil, restricts to one run.
	WorkflowID uuid.UUID
	// Limit is the page size (1-1000); nil means the default (100).
	Limit *int
	// After, when not nil, continues after this task id (the cursor).
	After *uuid.UUID
}

// Filter returns the query's filter.
func (q ListQuery) Filter() task.Filter {
	f := task.Filter{
		Queue: q.Queue, DeadReason: q.DeadReason, GroupKey: q.GroupKey, CreatedAfter: q.CreatedAfter,
		CreatedBefore: q.CreatedBefore, ErrorContains: q.ErrorContains, Text: q.Text, Metadata: q.Metadata,
		WorkflowID: q.WorkflowID,
	}
	if q.Status != "" {
		f.Statuses = []task.Status{q.Status}
	}
	return f
}

// ParentsQuery asks for a page of a task's parents.
type ParentsQuery struct {
	// Limit is the page size (1-1000); nil means 1000.
	Limit *int
	// After, when not nil, continues after this position (the cursor).
	After *int64
}

// TaskPage is one page of a task listing.
type TaskPage struct {
	// Tasks are the page's tasks, newest first.
	Tasks []*task.Task
	// Next, when not nil, is the cursor of the next page: the listing
	// continues after this task id. Nil on the last page.
	Next *uuid.UUID
	// Truncated reports that the page stopped before its limit because the
	// next task would have taken the response past the byte cap (Next is
	// then set).
	Truncated bool
}

// ClaimResult is what a claim handed out.
type ClaimResult struct {
	// Tasks are the claimed tasks, in claim order.
	Tasks []*task.Task
	// Truncated reports that the claim stopped before its limit because the
	// next task would have taken the response past the byte cap: that task
	// and the rest were not claimed and stay claimable.
	Truncated bool
	// Completed and Failed are the outcomes of the command's Complete and
	// Fail items, in order (nil when it carried none).
	Completed, Failed []TaskResult
}

// TaskService is what producers, workers and operators can do with tasks.
type TaskService interface {
	// Submit creates a task, or returns the existing one (created false)
	// when its queue already holds the same idempotency key.
	Submit(ctx context.Context, p task.SubmitParams) (t *task.Task, created bool, err error)
	// Get returns one task.
	Get(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// List returns a page of tasks, newest first.
	List(ctx context.Context, q ListQuery) (TaskPage, error)
	// Claim hands claimable tasks to a worker.
	Claim(ctx context.Context, cmd ClaimCommand) (ClaimResult, error)
	// Complete marks a held task DONE (with cmd.Enqueue, see
	// CompleteEnqueue).
	Complete(ctx context.Context, cmd CompleteCommand) (*task.Task, error)
	// CompleteEnqueue marks a held task DONE and creates cmd.Enqueue in the
	// same transaction.
	CompleteEnqueue(ctx context.Context, cmd CompleteCommand) (Completion, error)
	// Spawn creates tasks on behalf of a held task, which stays RUNNING;
	// created[i] is false where a key named an existing task.
	Spawn(ctx context.Context, cmd SpawnCommand) (tasks []*task.Task, created []bool, err error)
	// Replay creates a new task from a DONE or DEAD one (task.Replay).
	Replay(ctx context.Context, cmd ReplayCommand) (*task.Task, error)
	// Fail records a held task's failure (retry after backoff, or DEAD).
	Fail(ctx context.Context, cmd FailCommand) (*task.Task, error)
	// SubmitBatch creates up to MaxBatch tasks in one transaction,
	// all-or-nothing; created[i] is false for an existing idempotency key.
	SubmitBatch(ctx context.Context, ps []task.SubmitParams) (tasks []*task.Task, created []bool, err error)
	// SubmitGraph is SubmitBatch with dependencies: specs[i] is item i's
	// ref and depends_on (earlier items' refs, existing tasks' ids).
	SubmitGraph(ctx context.Context, ps []task.SubmitParams, specs []task.DependencySpec) (tasks []*task.Task, created []bool, err error)
	// Describe returns one task with its dependencies.
	Describe(ctx context.Context, id uuid.UUID) (TaskDetail, error)
	// Parents returns a page of a task's parents, with their results, in
	// the order it named them.
	Parents(ctx context.Context, id uuid.UUID, q ParentsQuery) (ParentsPage, error)
	// Attempts returns a task's attempts, oldest first, the running one
	// last.
	Attempts(ctx context.Context, id uuid.UUID) ([]task.Attempt, error)
	// CompleteBatch reports many successes of one worker; each item is fenced
	// on its own and has its own result.
	CompleteBatch(ctx context.Context, workerID string, items []CompleteItem) ([]TaskResult, error)
	// FailBatch reports many failures of one worker, each fenced on its own.
	FailBatch(ctx context.Context, workerID string, items []FailItem) ([]TaskResult, error)
	// Retry moves a DEAD task back to PENDING.
	Retry(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// Cancel moves a PENDING task to DEAD (cancelled), or records an
	// operator's cancel request on a RUNNING one.
	Cancel(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// Extend sets a held task's lease to run out LeaseSeconds from now.
	Extend(ctx context.Context, cmd ExtendCommand) (*task.Task, error)
	// Snooze puts a held task back to PENDING, claimable DelaySeconds from
	// now, without spending an attempt.
	Snooze(ctx context.Context, cmd SnoozeCommand) (*task.Task, error)
	// Release hands a held task back to PENDING, claimable now, without
	// spending an attempt (a stopping worker's drain).
	Release(ctx context.Context, cmd ReleaseCommand) (*task.Task, error)
	// ReleaseBatch hands many held tasks of one worker back, each fenced on
	// its own.
	ReleaseBatch(ctx context.Context, workerID string, items []ReleaseItem) ([]TaskResult, error)
	// ReportProgress stores a holder's progress report on its task.
	ReportProgress(ctx context.Context, cmd ProgressCommand) (*task.Task, error)
	// Await returns a task with its dependencies (as Describe) once it is
	// DONE or DEAD, or as it is when the wait ends. It holds no database
	// connection while it waits.
	Await(ctx context.Context, cmd AwaitCommand) (TaskDetail, error)
	// SubmitAndAwait submits a task (as Submit) and returns it once it is
	// DONE or DEAD, or as it is when the wait ends (created false when an
	// idempotency or unique key named an existing task).
	SubmitAndAwait(ctx context.Context, p task.SubmitParams, waitMillis *int64) (t *task.Task, created bool, err error)
}

// WorkerService is what workers and operators can do with workers.
type WorkerService interface {
	// Register creates or re-registers a worker (created false when it
	// existed).
	Register(ctx context.Context, p worker.RegisterParams) (w *worker.Worker, created bool, err error)
	// Heartbeat records a sign of life and, for a heartbeat that lists the
	// worker's tasks, renews their leases and takes back the ones it lost
	// track of; it answers with what the worker must act on.
	Heartbeat(ctx context.Context, cmd HeartbeatCommand) (HeartbeatResult, error)
	// Drain asks a worker to stop claiming.
	Drain(ctx context.Context, id string) (*worker.Worker, error)
	// List returns every worker.
	List(ctx context.Context) ([]*worker.Worker, error)
	// Liveness returns the thresholds in force.
	Liveness() worker.LivenessConfig
	// MaxHeartbeatTasks is the most tasks one heartbeat may list, so the
	// most a worker that lists its tasks may hold at once.
	MaxHeartbeatTasks() int
}

// QueueService reads queue statistics and steers queues.
type QueueService interface {
	// Queues returns a page of queues (those that hold tasks or have
	// settings), by name, with their statistics.
	Queues(ctx context.Context, q QueueQuery) (QueuePage, error)
	// Queue returns one queue's statistics and detail (queue.ErrNotFound
	// when it holds no task and has no settings).
	Queue(ctx context.Context, name string) (*QueueDetail, error)
	// UpdateSettings applies p to the queue's settings (a queue without
	// tasks may have settings) and returns them.
	UpdateSettings(ctx context.Context, name string, p queue.Patch) (QueueSettings, error)
}

// QueueQuery asks for a page of the queue listing.
type QueueQuery struct {
	// Prefix, Pattern, MinPending and Paused filter as in QueueFilter.
	Prefix     string
	Pattern    string
	MinPending *int64
	Paused     *bool
	// Limit is the page size (1-1000); nil means the default (100).
	Limit *int
	// After, when not empty, continues after this queue name (the cursor).
	After string
	// CountsOnly leaves out each queue's Totals and Rates (the dashboard's
	// overview draws its own rates and reads neither).
	CountsOnly bool
	// Names, when not nil, asks for these queues (1-1000, those that exist
	// and the principal may see), in this order, instead of a page by
	// name: the other fields but CountsOnly are not used.
	Names []string
}

// QueueSettings are a queue's settings as saved.
type QueueSettings struct {
	Queue     string
	Settings  queue.Settings
	UpdatedAt time.Time
	// NewSecret is the push signing secret the change created or rotated
	// to, in clear: shown in this answer only ("" when none).
	NewSecret string
}
