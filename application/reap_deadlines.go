package application

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// DeadlineReport is what one deadline reaper cycle did.
type DeadlineReport struct {
	// Expired counts PENDING tasks that went DEAD past their deadline.
	Expired int
}

// Idle reports whether the cycle changed nothing.
func (r DeadlineReport) Idle() bool { return r.Expired == 0 }

// Fields are the cycle's counts, for its log line.
func (r DeadlineReport) Fields() []zap.Field {
	return []zap.Field{zap.Int("tasks_expired", r.Expired)}
}

// DeadlineReaper moves PENDING tasks past their deadline to DEAD (reason
// deadline). Claims never hand out such a task, so a late reaper only delays
// the status change, never lets an overdue task run.
type DeadlineReaper struct {
	tx    ports.TxRunner
	batch int
}

// NewDeadlineReaper returns the deadline reaper over tx; batchSize bounds the
// rows of one transaction (DefaultReaperBatchSize when 0).
func NewDeadlineReaper(tx ports.TxRunner, batchSize int) *DeadlineReaper {
	if batchSize <= 0 {
		batchSize = DefaultReaperBatchSize
	}
	return &DeadlineReaper{tx: tx, batch: batchSize}
}

// Reap runs one cycle: batches, each in its own transaction, until one comes
// back short.
func (r *DeadlineReaper) Reap(ctx context.Context) (DeadlineReport, error) {
	var rep DeadlineReport
	err := inBatches(ctx, r.tx, r.batch, func(ctx context.Context, st ports.Stores) (int, int, error) {
		ts, err := st.Reaper.UpdateOverdueTasks(ctx, r.batch, expireDeadline)
		return len(ts), len(ts), err
	}, func(n int) { rep.Expired += n })
	if err != nil {
		return rep, fmt.Errorf("reap overdue tasks: %w", err)
	}
	return rep, nil
}

func expireDeadline(t *task.Task, now time.Time) ([]event.Event, error) {
	e, err := t.ExpireDeadline(now)
	if err != nil {
		return nil, err
	}
	return []event.Event{e}, nil
}
