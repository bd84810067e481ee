// Package ports is the hexagon's edge: the interfaces the application offers
// to transports (driving ports) and the ones it needs from storage and
// infrastructure (driven ports). It holds no implementations.
package ports

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
)

// BatchObserver is told of every shared transaction a use case runs for
// concurrent requests (claims, reports, waits for tasks to finish): its kind,
// how long each of its requests waited for it to start, and how long it ran
// until its requests could be answered. Metrics implement it.
type BatchObserver interface {
	ObserveBatch(kind string, waited []time.Duration, ran time.Duration)
}

// TxRunner runs fn in one database transaction. Stores handed to fn work on
// that transaction; every event they (or fn, through Stores.Outbox) record is
// appended to the outbox in the same transaction just before it commits. If fn
// returns an error, the transaction rolls back and no event is kept. When ctx
// carries a Fence (WithFence), the transaction first renews that term's
// lease, and keeps the lease locked until it ends (no other term can begin
// meanwhile); if the term is over it fails, with an error matching
// leadership.ErrLost, before fn runs.
type TxRunner interface {
	Run(ctx context.Context, fn func(ctx context.Context, st Stores) error) error
}

// Stores are the stores bound to one transaction.
type Stores struct {
	// Tasks stores tasks.
	Tasks TaskStore
	// Workers stores workers.
	Workers WorkerStore
	// Outbox records events to publish with the transaction.
	Outbox Outbox
	// Reaper holds the set-based operations of the background jobs.
	Reaper ReaperStore
	// Keys stores API keys.
	Keys KeyStore
	// Schedules stores recurring schedules.
	Schedules ScheduleStore
	// Sessions stores dashboard sessions.
	Sessions SessionStore
	// Bulk holds the filtered reads and batched writes of bulk actions
	// and purges.
	Bulk BulkStore
	// QueueSettings stores the queues' settings.
	QueueSettings QueueSettingsStore
	// Workflows reads and changes runs as a whole.
	Workflows WorkflowStore
	// Limits stores the named limits.
	Limits LimitStore
	// Push holds what the push dispatchers read and write besides tasks.
	Push PushStore
}

// Outbox collects the lifecycle events of one transaction.
type Outbox interface {
	// Record adds events to be published when the transaction commits.
	Record(events ...event.Event)
}

// TaskUpdateFunc decides a change to a loaded task at the database time now
// and returns the events of that change. Returning an error saves nothing.
type TaskUpdateFunc func(t *task.Task, now time.Time) ([]event.Event, error)

// TaskCreateFunc builds a new task at the database time now.
type TaskCreateFunc func(now time.Time) (*task.Task, event.Event, error)

// TaskCreateManyFunc builds new tasks at the database time now.
type TaskCreateManyFunc func(now time.Time) ([]*task.Task, []event.Event, error)

// TaskDecideFunc decides at the database time now whether and how to change
// a loaded task; changed false saves nothing (and events must then be empty).
type TaskDecideFunc func(t *task.Task, now time.Time) (events []event.Event, changed bool, err error)

// ReleaseFunc decides at the database time now whether to take a task back
// from the holder that was judged dead: the worker and lease the task ran
// under when it was selected. changed false leaves the task as it is (it has
// another holder by now) and events must then be empty.
type ReleaseFunc func(t *task.Task, judged task.Holder, now time.Time) (events []event.Event, changed bool, err error)

// TaskUpdateEachFunc decides a change to the i-th task of a batch.
type TaskUpdateEachFunc func(i int, t *task.Task, now time.Time) ([]event.Event, error)

// CompleteRef is one completion for TaskStore.CompleteEach: the task, the
// holder that reports it done under its lease, and the result.
type CompleteRef struct {
	ID       uuid.UUID
	WorkerID string
	LeaseID  uuid.UUID
	Result   json.RawMessage
}

// TaskResult is the outcome of one item of a batch.
type TaskResult struct {
	// ID is the task the item named.
	ID uuid.UUID
	// Task is the task after the change (or as it is, when refused; nil
	// when not found).
	Task *task.Task
	// Err is why the item's change was refused, or nil.
	Err error
	// Enqueued are the tasks a completion created with the task's
	// completion, or the existing ones their idempotency keys named (nil
	// unless the item asked to enqueue).
	Enqueued []*task.Task
}

// TaskNotifier tells waiting claims that tasks may have become claimable.
// It wakes as many waiters as tasks became claimable (not every waiter of
// the queue), and wakes them again when delayed tasks fall due. It also
// tells producers waiting for a task that it finished.
type TaskNotifier interface {
	// Wait subscribes a waiting claim described by spec.
	Wait(spec WaitSpec) TaskWait
	// WaitFinished subscribes a producer waiting for task id to finish
	// (DONE or DEAD) on any instance. Only the ends of awaited tasks are
	// announced (TaskStore.MarkAwaited), so the waiter subscribes first,
	// then marks the task.
	WaitFinished(id uuid.UUID) FinishWait
}

// FinishWait is one producer's wait for a task's end.
type FinishWait interface {
	// C receives (coalesced) when the task may have finished: its end was
	// announced, or announcements may have been lost (the listening
	// connection was re-established). It is closed when the notifier
	// shuts down, so the waiter answers at once.
	C() <-chan struct{}
	// Close ends the subscription.
	Close()
}

// WaitSpec describes a waiting claim to the notifier.
type WaitSpec struct {
	// Queues the claim takes from; empty means any queue.
	Queues []string
	// Limit is the most tasks the claim takes when woken (at least 1): a
	// wake-up for n tasks wakes waiters until their limits add up to n.
	Limit int
	// Tags are the worker's capability tags: a wake-up also wakes one
	// waiter of each other set of tags waiting on the queue, as the tasks
	// may need tags that the first waiters lack.
	Tags []string
}

// TaskWait is one waiting claim's subscription.
type TaskWait interface {
	// C receives (coalesced, never blocking the sender) when tasks may
	// have become claimable for this waiter. It is closed when the notifier
	// shuts down, so the waiter returns at once.
	C() <-chan struct{}
	// Pass hands a wake-up that this waiter took from C but could not use
	// (its claim failed or its request ended) to another waiter of its
	// queues, so the task it was meant for is not left waiting.
	Pass()
	// Close ends the subscription; a wake-up not yet taken from C is
	// passed on.
	Close()
}

// ClaimParams select and assign tasks in one claim.
type ClaimParams struct {
	// WorkerID is the claiming worker.
	WorkerID string
	// WorkerTags are its capability tags (tasks' tags must be a subset).
	WorkerTags []string
	// Queues to claim from; empty means any queue.
	Queues []string
	// Limit is the most tasks to claim.
	Limit int
	// LeaseSeconds is each claimed task's lease length.
	LeaseSeconds int
	// RequestID is the claim's request id, kept with each claimed task
	// (empty: none).
	RequestID string
	// MaxBytes caps the estimated response size of the claimed tasks
	// (TaskBytes): tasks are claimed in claim order while the running sum
	// stays within it, and always at least one.
	MaxBytes int64
	// Push marks a push dispatcher's claim: it takes from push queues
	// only, where every other claim passes push queues by.
	Push bool
}

// ClaimGroupParams are the claims of several workers that claim from the
// same queues with the same tags, served by one statement.
type ClaimGroupParams struct {
	// Queues to claim from; empty means any queue.
	Queues []string
	// WorkerTags are the workers' capability tags.
	WorkerTags []string
	// Requests are the workers' claims.
	Requests []ClaimRequest
	// Push marks push dispatchers' claims (see ClaimParams.Push).
	Push bool
}

// ClaimRequest is one worker's claim in a group.
type ClaimRequest struct {
	// WorkerID is the claiming worker.
	WorkerID string
	// Limit is the most tasks to claim (at least 1).
	Limit int
	// LeaseSeconds is each claimed task's lease length.
	LeaseSeconds int
	// RequestID is kept with each claimed task (empty: none).
	RequestID string
	// MaxBytes caps the estimated response size (as ClaimParams.MaxBytes).
	MaxBytes int64
	// CorrelationID, when set, is stamped on the request's events (the
	// group's transaction serves several requests).
	CorrelationID string
}

// ClaimRef names a worker's claim by its request id.
type ClaimRef struct {
	WorkerID  string
	RequestID string
}

// ClaimOutcome is what one request of a group claimed.
type ClaimOutcome struct {
	// Tasks are the claimed tasks, in claim order (never nil).
	Tasks []*task.Task
	// Truncated: the byte cap left candidates unclaimed.
	Truncated bool
	// Limited: one of the queues looked in is rate-limited or capped, so
	// a task may become claimable there without a notification (a token
	// refills, a slot frees).
	Limited bool
}

// TaskStore persists tasks.
type TaskStore interface {
	// Create inserts the task that fn builds. When the queue already holds a
	// task with the same idempotency key it returns that task and created
	// false, and records no event.
	Create(ctx context.Context, fn TaskCreateFunc) (t *task.Task, created bool, err error)
	// CreateKeyed is Create for a submission with rules for the holders
	// of its unique key (see KeyRules): the holders are looked up first,
	// so that a throttled submission is answered by the last one, and a
	// debounced one changes the unfinished one, under its row lock.
	CreateKeyed(ctx context.Context, fn TaskCreateFunc, rules KeyRules) (t *task.Task, created bool, err error)
	// Get loads one task (task.ErrNotFound when absent).
	Get(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// Update locks the task, lets fn decide at the database time, saves the
	// result and records fn's events.
	Update(ctx context.Context, id uuid.UUID, fn TaskUpdateFunc) (*task.Task, error)
	// CreateMany inserts the tasks fn builds with one statement, in order.
	// created[i] is false when the queue already held tasks[i]'s
	// idempotency key (tasks[i] is then the existing task, and no event is
	// recorded for it).
	CreateMany(ctx context.Context, fn TaskCreateManyFunc) (tasks []*task.Task, created []bool, err error)
	// UpdateEach locks the tasks with these ids (in id order), lets fn
	// decide for each one that exists, saves the accepted changes with one
	// statement, and records their events. Results are in ids order; a
	// missing task's result has Err task.ErrNotFound, a refused change fn's
	// error.
	UpdateEach(ctx context.Context, ids []uuid.UUID, fn TaskUpdateEachFunc) ([]TaskResult, error)
	// CompleteEach is UpdateEach for holders' completions, with one
	// statement: it locks the tasks the items name (in id order), completes
	// those RUNNING under the item's worker and lease (task.Task.Complete's
	// fence) with the item's result, and writes their ended attempts. fn
	// decides every task it locked, at the database time: for a task the
	// statement completed it must agree (a disagreement fails the call: the
	// store's contract is broken), and its events are recorded; for one the
	// statement left alone it must refuse, and its error is the item's.
	// Results are as UpdateEach's.
	CompleteEach(ctx context.Context, items []CompleteRef, fn TaskUpdateEachFunc) ([]TaskResult, error)
	// Claim assigns up to p.Limit claimable tasks to the worker in one
	// statement (the rule of task.Task.Claimable, priority DESC then FIFO
	// across p.Queues, skipping rows other claims hold), each under a fresh
	// lease of p.LeaseSeconds, and records a claimed event for each. It
	// stops before p.MaxBytes would be exceeded (truncated: candidates were
	// left unclaimed), but claims at least one task. It locks no row it
	// does not claim, unless the byte cap cut it.
	Claim(ctx context.Context, p ClaimParams) (tasks []*task.Task, truncated bool, err error)
	// ClaimGroup is Claim for several workers at once, with one statement:
	// the claimable rows, in claim order, are dealt round-robin to the
	// requests (a request of limit n takes up to n), each keeping what fits
	// its byte cap. Outcomes are in p.Requests order.
	ClaimGroup(ctx context.Context, p ClaimGroupParams) ([]ClaimOutcome, error)
	// ClaimedUnder returns the tasks RUNNING under the worker from the claim
	// that carried requestID (task.Task.ClaimedUnder), in claim order
	// (priority DESC then FIFO), with every column.
	ClaimedUnder(ctx context.Context, workerID, requestID string) ([]*task.Task, error)
	// ClaimedUnderEach is ClaimedUnder for several claims with one
	// statement: out[i] holds refs[i]'s tasks (never nil).
	ClaimedUnderEach(ctx context.Context, refs []ClaimRef) ([][]*task.Task, error)
	// Held returns the tasks RUNNING under the worker, in id order, without
	// locking them. The tasks carry every column but their payload.
	Held(ctx context.Context, workerID string) ([]*task.Task, error)
	// UpdateHeld locks the tasks RUNNING under the worker (in id order,
	// waiting for rows other transactions hold), lets fn decide each at the
	// database time, saves the ones fn changed with one statement and records
	// their events. It returns every task it loaded, as fn left it; like
	// Held's, they carry no payload.
	UpdateHeld(ctx context.Context, workerID string, fn TaskDecideFunc) ([]*task.Task, error)
	// StoredJSONSize returns how many bytes raw takes once stored as a
	// task's payload or result (the text reads of the task carry), or, when
	// storage cannot or will not hold it, an error saying why, fit for the
	// client: valid JSON that the database cannot store (a \u0000 escape,
	// an unpaired surrogate, a number out of range) must be refused before a
	// statement fails on it, and a number whose stored form is far longer
	// than written is refused too.
	StoredJSONSize(raw json.RawMessage) (int64, error)
	// Attempts returns the task's ended attempts, oldest first (the
	// running one is the task itself: task.Task.RunningAttempt).
	Attempts(ctx context.Context, id uuid.UUID) ([]task.Attempt, error)
	// DependsOn returns the task's parents in depends_on order, with their
	// statuses now, without locking them. Parents that retention deleted
	// are gone from it.
	DependsOn(ctx context.Context, id uuid.UUID) ([]Parent, error)
	// Parents returns a page of the task's parents in depends_on order,
	// with every column, without locking them (see ParentsPage).
	Parents(ctx context.Context, id uuid.UUID, p PageParams) (ParentsPage, error)
	// LockTasks locks, in id order, the tasks p names (see LockParams)
	// and returns them (missing ones are absent), with every column. A
	// holder of a unique key that finished while LockTasks waited for its
	// lock is returned finished; one returned unfinished stays so until the
	// transaction ends. A task outside p.Visible is neither locked nor
	// returned, as if missing.
	LockTasks(ctx context.Context, p LockParams) ([]*task.Task, error)
	// UpdateProgress locks the tasks with these ids (in id order), lets fn
	// decide for each one that exists (a progress report, or the
	// announcement of one), writes the progress of the changed ones with
	// one statement and records their events. fn may change nothing but
	// the progress. Results are as UpdateEach's.
	UpdateProgress(ctx context.Context, ids []uuid.UUID, fn TaskUpdateEachFunc) ([]TaskResult, error)
	// MarkAwaited sets the task's awaited flag (task.Snapshot.Awaited)
	// when it is unfinished, and returns the task as it is now
	// (task.ErrNotFound when absent). Once it returns, a transaction that
	// moves the task into DONE or DEAD announces it on commit
	// (TaskNotifier.WaitFinished), or had committed before.
	MarkAwaited(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// TimedOutUnder returns those of the tasks with these ids whose last
	// attempt under the worker ended timed_out (task.OutcomeTimedOut).
	TimedOutUnder(ctx context.Context, workerID string, ids []uuid.UUID) ([]uuid.UUID, error)
	// Statuses returns the statuses of the tasks with these ids, without
	// locking them; absent tasks are missing from it.
	Statuses(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]task.Status, error)
	// CreateGraph inserts the new tasks, dependencies and dependants that
	// fn builds at the database time now, with a statement each, and
	// records fn's events. Every task must be new: when a concurrent
	// transaction took one's idempotency key or unique key since LockTasks
	// looked, the whole transaction is run again. It returns the tasks as
	// stored, in order.
	CreateGraph(ctx context.Context, fn TaskGraphFunc) ([]*task.Task, error)
}

// Parent is one parent of a task, its status and the failure policy of
// the edge.
type Parent struct {
	ID        uuid.UUID
	Status    task.Status
	OnFailure task.OnFailure
}

// KeyRules are what a submission asks of the holders of its unique key
// beyond the active-unique rule (task.Task.Debounce, Throttles).
type KeyRules struct {
	// ThrottleSeconds, when positive: without an unfinished holder, the
	// last holder answers while it finished less than this long ago.
	ThrottleSeconds int
	// Debounce, when not nil, decides at the database time the change a
	// debounced submission makes to the unfinished holder, locked (changed
	// false: it is answered as it is).
	Debounce TaskDecideFunc
}

// PageParams select a page of a listing in a fixed order.
type PageParams struct {
	// After, when not nil, continues after this position (a cursor).
	After *int64
	// Limit is the most items of the page.
	Limit int
	// MaxBytes caps the estimated size of the page's tasks (as
	// ClaimParams.MaxBytes; at least one is always returned).
	MaxBytes int64
}

// ParentsPage is a page of a task's parents.
type ParentsPage struct {
	// Parents are in depends_on order.
	Parents []*task.Task
	// Next, when not nil, is the position the next page continues after.
	Next *int64
	// Truncated: the page stopped before its limit at MaxBytes.
	Truncated bool
}

// LockParams name the tasks LockTasks locks: those with IDs, those that
// hold Keys, and the unfinished ones (task.UnfinishedStatuses) that hold
// Unique.
type LockParams struct {
	IDs    []uuid.UUID
	Keys   []IdempotencyKey
	Unique []UniqueKey
	// Visible, when not nil, restricts them to the queues matching one of
	// these patterns (an API key's, as BulkBatchParams.Visible): a task of
	// a queue the principal may not see is never locked, so that naming
	// one cannot make its writers wait.
	Visible []string
}

// IdempotencyKey names the task of a queue that holds an idempotency key.
type IdempotencyKey struct {
	Queue string
	Key   string
}

// UniqueKey names the unfinished task of a queue that holds an
// active-unique key.
type UniqueKey struct {
	Queue string
	Key   string
}

// Dependency says that Child depends on Parent, Parent being the
// Position-th (from 0) of Child's depends_on.
type Dependency struct {
	Parent   uuid.UUID
	Child    uuid.UUID
	Position int
	// OnFailure is the edge's failure policy.
	OnFailure task.OnFailure
}

// TaskGraph is what a batch with dependencies adds.
type TaskGraph struct {
	// Tasks are the new tasks, in batch order.
	Tasks []*task.Task
	// Events are the new tasks' events.
	Events []event.Event
	// Dependencies are the edges from the new tasks to their parents.
	Dependencies []Dependency
	// Dependants are existing tasks that gained dependants
	// (task.Task.AddDependant returned true).
	Dependants []uuid.UUID
}

// TaskGraphFunc builds a TaskGraph at the database time now.
type TaskGraphFunc func(now time.Time) (TaskGraph, error)

// WorkerUpdateFunc decides a change to a loaded worker at the database time.
type WorkerUpdateFunc func(w *worker.Worker, now time.Time) ([]event.Event, error)

// WorkerTouchFunc decides a sign of life; changed false saves nothing.
type WorkerTouchFunc func(w *worker.Worker, now time.Time) (events []event.Event, changed bool, err error)

// WorkerStore persists workers.
type WorkerStore interface {
	// Upsert locks the worker with this id if it exists and calls fn with it
	// (nil when new); fn returns the worker to save and its events.
	Upsert(ctx context.Context, id string, fn func(existing *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error)) (w *worker.Worker, created bool, err error)
	// Get loads one worker (worker.ErrNotFound when absent).
	Get(ctx context.Context, id string) (*worker.Worker, error)
	// Update locks the worker, lets fn decide at the database time, saves it
	// and records fn's events.
	Update(ctx context.Context, id string, fn WorkerUpdateFunc) (*worker.Worker, error)
	// Touch records a sign of life without queueing behind the worker's row
	// lock: fn decides at the database time; when it reports a change the
	// worker is saved unless another transaction changed it meanwhile.
	Touch(ctx context.Context, id string, fn WorkerTouchFunc) (*worker.Worker, error)
	// TouchLive is Touch for a claim: it first takes the worker's liveness
	// lock, shared, until the transaction ends. The heartbeat reaper changes
	// a worker's liveness only while it holds that lock exclusively (and
	// never waits for it), so the worker read is what the reaper left: a
	// worker it is declaring DEAD is read DEAD, and one read alive is not
	// declared DEAD before the transaction ends. Concurrent claims and
	// heartbeats of one worker do not wait for each other's locks.
	TouchLive(ctx context.Context, id string, fn WorkerTouchFunc) (*worker.Worker, error)
	// TouchEach is Touch for several workers at once (an id may repeat).
	// Results are in ids order: a worker that does not exist has Err
	// worker.ErrNotFound, one fn refused fn's error (with the worker as
	// read).
	TouchEach(ctx context.Context, ids []string, fn WorkerTouchFunc) ([]WorkerResult, error)
	// TouchLiveEach is TouchLive for several workers at once, as
	// TouchEach.
	TouchLiveEach(ctx context.Context, ids []string, fn WorkerTouchFunc) ([]WorkerResult, error)
	// List returns every worker, in id order.
	List(ctx context.Context) ([]*worker.Worker, error)
	// Owners returns the owner (apikey.Key.OwnerID) of each of these workers
	// that exists and has one, without locking them.
	Owners(ctx context.Context, ids []string) (map[string]string, error)
}

// WorkerResult is the outcome for one worker of a multi-worker operation.
type WorkerResult struct {
	// ID is the worker the operation named.
	ID string
	// Worker is the worker as the operation left it (nil when not found).
	Worker *worker.Worker
	// Err is why the operation refused it, or nil.
	Err error
}

// ReaperStore holds the set-based operations of the background jobs, on the
// transaction of its Stores. Each Update method selects at most limit rows
// that match the domain rule it names at the database time, locking them and
// skipping rows other transactions hold (FOR UPDATE SKIP LOCKED); fn decides
// each row at that time, then every row is saved in one statement and fn's
// events are recorded. fn may change a task's lifecycle (status, attempts,
// holder, lease, dead reason, run_at and timestamps) but not its result or
// last error. An error from fn (the domain disagreeing with the query) saves
// nothing and is returned. Each Delete method deletes at most limit rows that
// match the retention rule, oldest first, skipping locked rows, and lets fn
// confirm each and return its events. Every method returns what it changed.
type ReaperStore interface {
	// UpdateSilentWorkers selects the workers whose liveness cfg changes at
	// the database time (worker.Worker.CheckLiveness: ACTIVE silent for
	// cfg.StaleAfter, or ACTIVE or STALE silent for cfg.DeadAfter), longest
	// silent first.
	UpdateSilentWorkers(ctx context.Context, cfg worker.LivenessConfig, limit int, fn WorkerUpdateFunc) ([]*worker.Worker, error)
	// UpdateOrphanedTasks selects RUNNING tasks whose worker is DEAD or no
	// longer exists, and hands fn each locked task with the holder that the
	// selection judged dead (the task may have another one by the time it is
	// locked). It saves and returns the tasks fn changed.
	UpdateOrphanedTasks(ctx context.Context, limit int, fn ReleaseFunc) ([]*task.Task, error)
	// UpdateExpiredLeases selects RUNNING tasks whose lease has run out
	// (task.Task.LeaseExpired).
	UpdateExpiredLeases(ctx context.Context, limit int, fn TaskUpdateFunc) ([]*task.Task, error)
	// UpdateTimedOutTasks selects RUNNING tasks whose attempt used up its
	// time limit (task.Task.TimedOut), earliest limit first. Unlike the
	// other takebacks, fn may set the task's last error (the timeout's).
	UpdateTimedOutTasks(ctx context.Context, limit int, fn TaskUpdateFunc) ([]*task.Task, error)
	// UpdateOverdueTasks selects PENDING tasks whose deadline has passed
	// (task.Task.ExpireDeadline), earliest deadline first.
	UpdateOverdueTasks(ctx context.Context, limit int, fn TaskUpdateFunc) ([]*task.Task, error)
	// DeleteExpiredTasks deletes DONE and DEAD tasks finished at least ttl
	// ago (task.Task.Expired). The tasks handed to fn carry the columns the
	// rule and its event need, not their payload or result.
	DeleteExpiredTasks(ctx context.Context, ttl time.Duration, limit int, fn TaskUpdateFunc) ([]*task.Task, error)
	// DeleteExpiredWorkers deletes DEAD workers silent for at least ttl
	// (worker.Worker.Expired).
	DeleteExpiredWorkers(ctx context.Context, ttl time.Duration, limit int, fn WorkerUpdateFunc) ([]*worker.Worker, error)
}

// QueueStats are the counts of one queue.
type QueueStats struct {
	Queue         string
	Pending       int64
	Running       int64
	Done          int64
	Dead          int64
	Blocked       int64
	ActiveWorkers int64
	// Totals are the queue's cumulative transition counts.
	Totals QueueTotals
	// Rates are per-minute rates over recent windows, shortest first.
	Rates []QueueRate
	// OldestPendingAge is the age of the oldest PENDING task (nil when none).
	OldestPendingAge *time.Duration
	// StatsAsOf is when the statistics last applied an event (nil before
	// the first).
	StatsAsOf *time.Time
	// Settings are the queue's settings (the zero value when it has none).
	Settings queue.Settings
}

// QueueTotals are cumulative transition counts of a queue.
type QueueTotals struct {
	Submitted int64
	Claimed   int64
	Completed int64
	Failed    int64
	Cleaned   int64
	// DeadLettered counts transitions to DEAD by reason.
	DeadLettered map[string]int64
	// Requeued counts transitions back to PENDING by reason.
	Requeued map[string]int64
}

// QueueRate is a queue's throughput over a recent window, in events per
// minute.
type QueueRate struct {
	Window       time.Duration
	Enqueued     float64
	Claimed      float64
	Completed    float64
	DeadLettered float64
}

// QueueFilter selects a page of queues, by name order. A queue is listed
// when it holds tasks or has settings.
type QueueFilter struct {
	// Prefix, when not empty, keeps the queues whose names start with it.
	Prefix string
	// Pattern, when not empty, keeps the queues whose names match it: a
	// glob where * matches any run of characters and ? any one character.
	Pattern string
	// MinPending, when not nil, keeps the queues with at least this many
	// PENDING tasks.
	MinPending *int64
	// Paused, when not nil, keeps the paused (true) or the other (false)
	// queues.
	Paused *bool
	// Limit is the page size.
	Limit int
	// After, when not empty, continues after this queue name (keyset).
	After string
	// Visible, when not nil, restricts to queues matching one of these
	// patterns (as BulkBatchParams.Visible).
	Visible []string
	// CountsOnly leaves out each queue's Totals and Rates.
	CountsOnly bool
	// Names, when not nil, is the page: these queues, in this order (those
	// holding tasks or settings), instead of a page by name; the filters
	// and Limit are not used.
	Names []string
}

// QueuePage is a page of queues.
type QueuePage struct {
	Queues []QueueStats
	// More reports that queues after the last one match too.
	More bool
}

// QueueDetail is what GET /queues/v1/{queue} shows of one queue.
type QueueDetail struct {
	QueueStats
	// Leased is the queue's RUNNING tasks, counted now (not projected).
	Leased int64
	// LeasedSample are some of them (LeasedSampleSize at most), the
	// longest held first.
	LeasedSample []LeasedTask
	// Averages are the average durations over QueueAverageWindows,
	// shortest first.
	Averages []QueueAverage
	// Deliveries summarizes a push queue's recent deliveries (nil for a
	// queue without push delivery, or when no dispatcher reported lately).
	Deliveries *DeliverySummary
}

// LeasedTask is one RUNNING task of a queue.
type LeasedTask struct {
	ID             uuid.UUID
	WorkerID       string
	ClaimedAt      time.Time
	LeaseExpiresAt time.Time
	// ProgressPercent and ProgressMessage are its last progress report's
	// (nil and "" when none since its claim).
	ProgressPercent *float64
	ProgressMessage string
}

// QueueAverage is a queue's average durations over a recent window; nil
// when no event of the window carried one.
type QueueAverage struct {
	Window           time.Duration
	ExecutionSeconds *float64
	QueueWaitSeconds *float64
}

// StatsReader reads queue statistics.
type StatsReader interface {
	// Queues returns a page of queues, by name, with their statistics.
	Queues(ctx context.Context, f QueueFilter) (QueuePage, error)
	// Queue returns one queue's statistics and detail; queue.ErrNotFound
	// when it holds no task and has no settings.
	Queue(ctx context.Context, name string) (*QueueDetail, error)
}

// HealthChecker tells whether storage is usable.
type HealthChecker interface {
	// Ready returns nil when the database answers and is fully migrated.
	Ready(ctx context.Context) error
}

// QueueSettingsFunc decides a change to a queue's settings (the zero value
// when it has none) at the database time now; it returns the settings to
// save and the events of the change.
type QueueSettingsFunc func(s queue.Settings, now time.Time) (queue.Settings, []event.Event, error)

// QueueSettingsStore persists the queues' settings (a queue without any has
// the zero queue.Settings).
type QueueSettingsStore interface {
	// Update locks the queue's settings (creating them, zero, when it has
	// none), lets fn decide at the database time, saves the result and
	// records fn's events. A changed rate limit starts with a full bucket;
	// a change that may let claims take more (resumed, a limit raised or
	// cleared) wakes the claims waiting on the queue when the transaction
	// commits.
	Update(ctx context.Context, name string, fn QueueSettingsFunc) (s queue.Settings, updatedAt time.Time, err error)
}
