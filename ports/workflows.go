package ports

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
)

// WorkflowSummary is what a run's page shows of it: its tasks counted by
// status, and its times.
type WorkflowSummary struct {
	// ID is the run's id (its first task's).
	ID uuid.UUID
	// Total counts its tasks.
	Total int64
	// Counts are its tasks by status (every status, 0 included).
	Counts map[task.Status]int64
	// DeadReasons are its DEAD tasks by dead reason.
	DeadReasons map[task.DeadReason]int64
	// FirstCreatedAt is when its first task was created.
	FirstCreatedAt time.Time
	// LastUpdatedAt is the latest change of any of its tasks.
	LastUpdatedAt time.Time
	// LastFinishedAt is the latest end (DONE or DEAD) of its tasks (nil
	// when none has finished).
	LastFinishedAt *time.Time
	// Finished reports that none of its tasks is unfinished (PENDING,
	// RUNNING or BLOCKED).
	Finished bool
	// AsOf is the database time of the count.
	AsOf time.Time
}

// GraphNode is one task of a run's graph.
type GraphNode struct {
	ID         uuid.UUID
	Queue      string
	Status     task.Status
	DeadReason task.DeadReason
}

// WorkflowGraph is a run's tasks and the dependencies among them.
type WorkflowGraph struct {
	// Nodes are the run's tasks, in id order (the first Limit).
	Nodes []GraphNode
	// Edges are the dependencies whose parent and child are both nodes.
	Edges []Dependency
	// Truncated: the run has more tasks than Nodes.
	Truncated bool
}

// RunToRetry is what a run's retry decides on: its DEAD tasks, locked, and
// what task.RetryRun needs to know of their parents.
type RunToRetry struct {
	// Dead are the run's DEAD tasks (without payload), locked.
	Dead []*task.Task
	// Edges are the dependencies of each DEAD task that has parents.
	Edges map[uuid.UUID][]task.Edge
	// Parents are the statuses of those parents that are not among Dead,
	// read under a share lock: none of them finishes before the retry
	// commits without seeing it.
	Parents map[uuid.UUID]task.Status
	// Taken are the (queue, unique key) pairs of DEAD tasks that another
	// unfinished task holds.
	Taken map[UniqueKey]bool
	// Now is the transaction's database time.
	Now time.Time
}

// WorkflowStore reads and changes runs as a whole, on the transaction of
// its Stores. visible, when not nil, restricts every method to the tasks
// of the queues matching these patterns (as BulkBatchParams.Visible).
type WorkflowStore interface {
	// Summary counts the run's tasks (task.ErrWorkflowNotFound when it has
	// none).
	Summary(ctx context.Context, id uuid.UUID, visible []string) (*WorkflowSummary, error)
	// Graph returns the run's first limit tasks and the edges among them.
	Graph(ctx context.Context, id uuid.UUID, visible []string, limit int) (WorkflowGraph, error)
	// LockForRetry locks the run's DEAD tasks (id order), reads their
	// edges and share-locks their other parents.
	LockForRetry(ctx context.Context, id uuid.UUID, visible []string) (RunToRetry, error)
	// SaveRetried writes the tasks a run's retry moved out of DEAD
	// (task.RunRetry.Retried), their blockers included.
	SaveRetried(ctx context.Context, ts []*task.Task) error
}

// WorkflowQuery asks for a run's page.
type WorkflowQuery struct {
	ID uuid.UUID
	// Limit is the size of the page of tasks (1-1000); nil means the
	// default (100).
	Limit *int
	// After, when not nil, continues the tasks after this id (in id
	// order).
	After *uuid.UUID
}

// WorkflowPage is a run's summary and a page of its tasks, oldest first.
type WorkflowPage struct {
	WorkflowSummary
	Tasks []*task.Task
	// Next, when not nil, continues the tasks after this id.
	Next *uuid.UUID
	// Truncated: the page stopped before its limit at the byte cap.
	Truncated bool
}

// WorkflowResult is what a run's cancel or retry did.
type WorkflowResult struct {
	// ID is the run.
	ID uuid.UUID
	// Matched is how many of its tasks the action concerned when it began:
	// unfinished ones for a cancel, DEAD ones for a retry.
	Matched int64
	// Changed is how many it changed: cancelled, or asked to stop (a
	// cancel); moved out of DEAD (a retry).
	Changed int64
	// Blocked, for a retry, is how many of those wait again for parents
	// (BLOCKED); the others are PENDING.
	Blocked int64
	// Skipped is how many it left alone: changed meanwhile or held by
	// other transactions throughout (a cancel); left DEAD because another
	// unfinished task holds their unique key or a parent stays DEAD (a
	// retry).
	Skipped int64
}

// WorkflowService is what producers and operators do with runs.
type WorkflowService interface {
	// Workflow returns a run's summary and a page of its tasks.
	Workflow(ctx context.Context, q WorkflowQuery) (WorkflowPage, error)
	// Graph returns a run's first limit tasks and the edges among them
	// (the dashboard draws it).
	Graph(ctx context.Context, id uuid.UUID, limit int) (*WorkflowSummary, WorkflowGraph, error)
	// Cancel cancels every unfinished task of a run and asks the holders
	// of its RUNNING ones to stop them.
	Cancel(ctx context.Context, id uuid.UUID) (WorkflowResult, error)
	// Retry moves a run's DEAD tasks back to PENDING, or BLOCKED behind
	// their parents (task.RetryRun).
	Retry(ctx context.Context, id uuid.UUID) (WorkflowResult, error)
}
