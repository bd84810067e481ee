package ports

import (
	"context"
	"encoding/json"
	"time"

	"github.com/google/uuid"

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
	// Limit is the most tasks to return (1-1000).
	Limit int
	// Wait, when positive, makes an empty claim wait up to this long for a
	// claimable task (long poll) without holding a database connection.
	Wait time.Duration
}

// CompleteItem is one success report of a batch.
type CompleteItem struct {
	TaskID  uuid.UUID
	LeaseID *uuid.UUID
	Result  json.RawMessage
}

// FailItem is one failure report of a batch.
type FailItem struct {
	TaskID    uuid.UUID
	LeaseID   *uuid.UUID
	Error     string
	Retryable bool
}

// CompleteCommand reports a task's success.
type CompleteCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	LeaseID  *uuid.UUID
	Result   json.RawMessage
}

// FailCommand reports a task's failure.
type FailCommand struct {
	TaskID    uuid.UUID
	WorkerID  string
	LeaseID   *uuid.UUID
	Error     string
	Retryable bool
}

// TaskService is what producers, workers and operators can do with tasks.
type TaskService interface {
	// Submit creates a task, or returns the existing one (created false)
	// when its queue already holds the same idempotency key.
	Submit(ctx context.Context, p task.SubmitParams) (t *task.Task, created bool, err error)
	// Get returns one task.
	Get(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// List returns a page of tasks, newest first.
	List(ctx context.Context, f TaskFilter) ([]*task.Task, error)
	// Claim hands claimable tasks to a worker.
	Claim(ctx context.Context, cmd ClaimCommand) ([]*task.Task, error)
	// Complete marks a held task DONE.
	Complete(ctx context.Context, cmd CompleteCommand) (*task.Task, error)
	// Fail records a held task's failure (retry after backoff, or DEAD).
	Fail(ctx context.Context, cmd FailCommand) (*task.Task, error)
	// SubmitBatch creates up to MaxBatch tasks in one transaction,
	// all-or-nothing; created[i] is false for an existing idempotency key.
	SubmitBatch(ctx context.Context, ps []task.SubmitParams) (tasks []*task.Task, created []bool, err error)
	// CompleteBatch reports many successes of one worker; each item is fenced
	// on its own and has its own result.
	CompleteBatch(ctx context.Context, workerID string, items []CompleteItem) ([]TaskResult, error)
	// FailBatch reports many failures of one worker, each fenced on its own.
	FailBatch(ctx context.Context, workerID string, items []FailItem) ([]TaskResult, error)
	// Retry moves a DEAD task back to PENDING.
	Retry(ctx context.Context, id uuid.UUID) (*task.Task, error)
	// Cancel moves a PENDING task to DEAD (cancelled).
	Cancel(ctx context.Context, id uuid.UUID) (*task.Task, error)
}

// WorkerService is what workers and operators can do with workers.
type WorkerService interface {
	// Register creates or re-registers a worker (created false when it
	// existed).
	Register(ctx context.Context, p worker.RegisterParams) (w *worker.Worker, created bool, err error)
	// Heartbeat records a sign of life.
	Heartbeat(ctx context.Context, id string) (*worker.Worker, error)
	// List returns every worker.
	List(ctx context.Context) ([]*worker.Worker, error)
	// Liveness returns the thresholds in force.
	Liveness() worker.LivenessConfig
}

// QueueService reads queue statistics.
type QueueService interface {
	// Queues returns the statistics of every known queue.
	Queues(ctx context.Context) ([]QueueStats, error)
}
