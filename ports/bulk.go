package ports

import (
	"context"
	"errors"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
)

// ErrPurgeJobNotFound: no purge job of that queue has this id.
var ErrPurgeJobNotFound = errors.New("purge job not found")

// BulkBatchParams select one batch of a bulk action, or a page of a
// filtered listing.
type BulkBatchParams struct {
	// Filter selects the tasks (task.Filter.Matches).
	Filter task.Filter
	// Visible, when not nil, restricts to queues matching one of these
	// patterns (apikey.MatchQueue: exact names, or prefixes ending in "*");
	// an empty, non-nil list matches nothing.
	Visible []string
	// After, when not nil, continues after this task id: batches walk the
	// matching tasks in id order (a listing: in reverse).
	After *uuid.UUID
	// Limit is the most tasks of the batch.
	Limit int
	// OldestFirst walks a listing in id order instead of its reverse.
	OldestFirst bool
}

// BulkBatch is what one batch of a bulk action did.
type BulkBatch struct {
	// Changed counts the tasks the batch changed (or removed).
	Changed int
	// Refused counts the tasks the decision refused (they had moved to a
	// status the action cannot change), and the retries refused because
	// another unfinished task of their queue holds their unique key.
	Refused int
	// Locked counts the matching tasks of the batch's range that other
	// transactions held: the batch left them alone (a later pass may take
	// them).
	Locked int
	// Last is the id of the last matching task of the batch's range (nil
	// when there was none: the pass is over).
	Last *uuid.UUID
	// Full reports that the range held Limit tasks (more may follow).
	Full bool
	// Now is the batch's database time.
	Now time.Time
}

// BulkStore holds the filtered reads and the batched writes of operators'
// bulk actions and purges, on the transaction of its Stores.
type BulkStore interface {
	// Count counts the tasks that match, and returns the database time
	// of the count.
	Count(ctx context.Context, f task.Filter) (n int64, now time.Time, err error)
	// UpdateMatching takes the next p.Limit matching tasks after p.After,
	// in id order, and locks those no other transaction holds (SKIP
	// LOCKED); fn decides each at the database time; the changed ones are
	// saved with one statement and fn's events recorded. A task fn refuses
	// with an error is left as it is and counted in Refused, as is a task
	// moving back into an unfinished status whose unique key another
	// unfinished task of its queue holds (the first of the batch by id
	// takes a free key).
	UpdateMatching(ctx context.Context, p BulkBatchParams, fn TaskUpdateFunc) (BulkBatch, error)
	// PurgeMatching is UpdateMatching for a purge: fn decides each locked
	// task (task.Task.Purge), and the accepted ones are deleted after their
	// ends are passed on to their dependants as a DEAD parent's.
	PurgeMatching(ctx context.Context, p BulkBatchParams, fn TaskUpdateFunc) (BulkBatch, error)
	// Search returns up to p.Limit matching tasks after the cursor, newest
	// first (oldest first with p.OldestFirst), within maxBytes (as TaskStore.List; truncated likewise).
	Search(ctx context.Context, p BulkBatchParams, maxBytes int64) (tasks []*task.Task, truncated bool, err error)

	// CreatePurgeJob stores a new purge job.
	CreatePurgeJob(ctx context.Context, j *task.PurgeJob) error
	// PurgeJob returns the purge job of queue with this id
	// (ErrPurgeJobNotFound).
	PurgeJob(ctx context.Context, queue string, id uuid.UUID) (*task.PurgeJob, error)
	// LockRunningPurgeJob locks and returns the oldest running purge job,
	// skipping those other transactions hold (nil when there is none).
	LockRunningPurgeJob(ctx context.Context) (*task.PurgeJob, error)
	// SavePurgeJob writes a job's progress and state.
	SavePurgeJob(ctx context.Context, j *task.PurgeJob) error
}

// BulkCommand asks for a bulk retry or cancel.
type BulkCommand struct {
	// Filter selects the tasks (task.Filter.ForBulk).
	Filter task.Filter
	// DryRun counts the matching tasks and changes nothing.
	DryRun bool
}

// BulkResult is what a bulk action or purge did.
type BulkResult struct {
	// Matched is how many tasks matched when the action began.
	Matched int64
	// Changed is how many the action changed or removed (nil on a dry run,
	// and for a purge accepted as a job).
	Changed *int64
	// Skipped is how many matched but were not changed: they changed
	// meanwhile, other transactions held them throughout, or (a retry)
	// another unfinished task holds their unique key (nil when Changed
	// is).
	Skipped *int64
	// Job is the background job of a large purge (nil otherwise).
	Job *task.PurgeJob
}

// PurgeCommand asks to purge a queue of its tasks of one status.
type PurgeCommand struct {
	Queue string
	// Status is PENDING or DEAD ("" means PENDING).
	Status task.Status
	// DryRun counts the matching tasks and removes nothing.
	DryRun bool
}

// BulkService is what operators do with many tasks at once: retry or
// cancel every task a filter matches, and purge a queue.
type BulkService interface {
	// BulkRetry retries every DEAD task the filter matches, in batches.
	BulkRetry(ctx context.Context, cmd BulkCommand) (BulkResult, error)
	// BulkCancel cancels every PENDING or BLOCKED task the filter matches
	// and asks the holders of the RUNNING ones to stop them, in batches.
	BulkCancel(ctx context.Context, cmd BulkCommand) (BulkResult, error)
	// BulkReplay makes a new task of every DONE or DEAD task the filter
	// matches, in batches.
	BulkReplay(ctx context.Context, cmd BulkCommand) (BulkResult, error)
	// Purge removes a queue's tasks of one status: at once, in batches,
	// or, when many match, as a background job (BulkResult.Job).
	Purge(ctx context.Context, cmd PurgeCommand) (BulkResult, error)
	// PurgeJob returns a purge job of a queue.
	PurgeJob(ctx context.Context, queue string, id uuid.UUID) (*task.PurgeJob, error)
}
