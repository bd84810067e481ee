package application

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// RetentionConfig says what retention keeps.
type RetentionConfig struct {
	// TTL is how long DONE and DEAD tasks (since finished_at) and DEAD
	// workers (since their last heartbeat) are kept; 0 keeps them forever.
	TTL time.Duration
	// BatchSize is how many rows one retention transaction deletes
	// (DefaultReaperBatchSize when 0).
	BatchSize int
}

// RetentionReport is what one retention cycle did.
type RetentionReport struct {
	// Tasks counts deleted DONE and DEAD tasks.
	Tasks int
	// Workers counts deleted DEAD workers.
	Workers int
}

// Idle reports whether the cycle deleted nothing.
func (r RetentionReport) Idle() bool { return r == RetentionReport{} }

// Fields are the cycle's counts, for its log line.
func (r RetentionReport) Fields() []zap.Field {
	return []zap.Field{zap.Int("tasks_deleted", r.Tasks), zap.Int("workers_deleted", r.Workers)}
}

// Retention deletes finished tasks and dead workers older than the TTL,
// recording a task.cleaned or worker.cleaned event for each.
type Retention struct {
	tx  ports.TxRunner
	cfg RetentionConfig
}

// NewRetention returns the retention use case over tx.
func NewRetention(tx ports.TxRunner, cfg RetentionConfig) *Retention {
	if cfg.BatchSize <= 0 {
		cfg.BatchSize = DefaultReaperBatchSize
	}
	return &Retention{tx: tx, cfg: cfg}
}

// Apply runs one cycle, in batches until one comes back short, each batch
// in its own short transaction deleting up to BatchSize tasks and up to
// BatchSize workers. With a TTL of 0 it does nothing.
func (r *Retention) Apply(ctx context.Context) (RetentionReport, error) {
	var rep RetentionReport
	if r.cfg.TTL <= 0 {
		return rep, nil
	}
	err := inBatches(ctx, r.tx, r.cfg.BatchSize, func(ctx context.Context, st ports.Stores) (RetentionReport, int, error) {
		ts, err := st.Reaper.DeleteExpiredTasks(ctx, r.cfg.TTL, r.cfg.BatchSize, r.cleanTask)
		if err != nil {
			return RetentionReport{}, 0, fmt.Errorf("tasks: %w", err)
		}
		ws, err := st.Reaper.DeleteExpiredWorkers(ctx, r.cfg.TTL, r.cfg.BatchSize, r.cleanWorker)
		if err != nil {
			return RetentionReport{}, 0, fmt.Errorf("workers: %w", err)
		}
		return RetentionReport{Tasks: len(ts), Workers: len(ws)}, max(len(ts), len(ws)), nil
	}, rep.add)
	if err != nil {
		return rep, fmt.Errorf("apply retention: %w", err)
	}
	return rep, nil
}

func (r *RetentionReport) add(o RetentionReport) {
	r.Tasks += o.Tasks
	r.Workers += o.Workers
}

func (r *Retention) cleanTask(t *task.Task, now time.Time) ([]event.Event, error) {
	e, err := t.Clean(r.cfg.TTL, now)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", t.ID(), err)
	}
	return []event.Event{e}, nil
}

func (r *Retention) cleanWorker(w *worker.Worker, now time.Time) ([]event.Event, error) {
	e, err := w.Clean(r.cfg.TTL, now)
	if err != nil {
		return nil, fmt.Errorf("worker %s: %w", w.ID(), err)
	}
	return []event.Event{e}, nil
}
