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

// LeaseReport is what one lease reaper cycle did.
type LeaseReport struct {
	// Requeued counts tasks whose lease ran out that went back to PENDING.
	Requeued int
	// DeadLettered counts tasks whose lease ran out on their last attempt
	// (DEAD lease_expired).
	DeadLettered int
	// Cancelled counts tasks whose lease ran out after an operator asked to
	// cancel them (DEAD cancelled).
	Cancelled int
}

// Idle reports whether the cycle changed nothing.
func (r LeaseReport) Idle() bool { return r == LeaseReport{} }

// Fields are the cycle's counts, for its log line.
func (r LeaseReport) Fields() []zap.Field {
	return []zap.Field{
		zap.Int("tasks_requeued", r.Requeued), zap.Int("tasks_dead_lettered", r.DeadLettered),
		zap.Int("tasks_cancelled", r.Cancelled),
	}
}

func (r *LeaseReport) add(o LeaseReport) {
	r.Requeued += o.Requeued
	r.DeadLettered += o.DeadLettered
	r.Cancelled += o.Cancelled
}

// LeaseReaper takes back RUNNING tasks whose lease has run out: their holder
// hung, or never learned of its claim and does not list its tasks. Each goes
// back to PENDING with the attempt counted (reason lease_expired), or to
// DEAD: lease_expired on its last attempt, cancelled when an operator had
// asked to cancel it. The holder's later reports are refused (lease lost).
type LeaseReaper struct {
	tx    ports.TxRunner
	batch int
}

// NewLeaseReaper returns the lease reaper over tx; batchSize bounds the rows
// of one transaction (DefaultReaperBatchSize when 0).
func NewLeaseReaper(tx ports.TxRunner, batchSize int) *LeaseReaper {
	if batchSize <= 0 {
		batchSize = DefaultReaperBatchSize
	}
	return &LeaseReaper{tx: tx, batch: batchSize}
}

// Reap runs one cycle: batches, each in its own short transaction, until one
// comes back short. It returns what the committed transactions did.
func (r *LeaseReaper) Reap(ctx context.Context) (LeaseReport, error) {
	var rep LeaseReport
	err := inBatches(ctx, r.tx, r.batch, func(ctx context.Context, st ports.Stores) (LeaseReport, int, error) {
		ts, err := st.Reaper.UpdateExpiredLeases(ctx, r.batch, expireLease)
		return takebacks(ts), len(ts), err
	}, rep.add)
	if err != nil {
		return rep, fmt.Errorf("reap expired leases: %w", err)
	}
	return rep, nil
}

// takebacks counts what a takeback did to ts: requeued, DEAD cancelled,
// or DEAD otherwise.
func takebacks(ts []*task.Task) LeaseReport {
	var b LeaseReport
	for _, t := range ts {
		switch v := t.Snapshot(); {
		case v.Status == task.StatusPending:
			b.Requeued++
		case v.DeadReason == task.DeadCancelled:
			b.Cancelled++
		default:
			b.DeadLettered++
		}
	}
	return b
}

func expireLease(t *task.Task, now time.Time) ([]event.Event, error) {
	e, err := t.ExpireLease(now)
	if err != nil {
		return nil, err
	}
	return []event.Event{e}, nil
}
