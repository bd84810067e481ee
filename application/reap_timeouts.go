package application

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// DefaultTimeoutReaperInterval is the timeout reaper's period unless
// configured: a limit is enforced within about that much of its end.
const DefaultTimeoutReaperInterval = time.Second

// TimeoutReport is what one timeout reaper cycle did.
type TimeoutReport struct {
	// Requeued counts timed-out attempts whose task went back to PENDING,
	// for its retry after backoff.
	Requeued int
	// DeadLettered counts timed-out attempts that were their task's last
	// (DEAD exhausted).
	DeadLettered int
	// Cancelled counts timed-out attempts of tasks an operator had asked
	// to cancel (DEAD cancelled).
	Cancelled int
}

// Idle reports whether the cycle changed nothing.
func (r TimeoutReport) Idle() bool { return r == TimeoutReport{} }

// Fields are the cycle's counts, for its log line.
func (r TimeoutReport) Fields() []zap.Field {
	return []zap.Field{
		zap.Int("tasks_requeued", r.Requeued), zap.Int("tasks_dead_lettered", r.DeadLettered),
		zap.Int("tasks_cancelled", r.Cancelled),
	}
}

func (r *TimeoutReport) add(o TimeoutReport) {
	r.Requeued += o.Requeued
	r.DeadLettered += o.DeadLettered
	r.Cancelled += o.Cancelled
}

// TimeoutReaper ends the RUNNING attempts that used up their time limit,
// whatever their holders' heartbeats say (task.Task.TimeOut): outcome
// timed_out, the task retried after the backoff of its retry policy (the
// task's own, else the server's), or DEAD exhausted on its last attempt.
// The holder's later reports are refused (lease lost), and its next
// task-listing heartbeat names the task in lost and cancel. Each cycle
// reads only the attempts that are due (an index of running limits), so it
// costs nothing while none is.
type TimeoutReaper struct {
	tx     ports.TxRunner
	batch  int
	policy backoff.Policy
	rand   backoff.Source
}

// NewTimeoutReaper returns the timeout reaper over tx, retrying under
// policy (with jitter from rand, when the policy asks for it); batchSize
// bounds the rows of one transaction (DefaultReaperBatchSize when 0).
func NewTimeoutReaper(tx ports.TxRunner, policy backoff.Policy, rand backoff.Source, batchSize int) *TimeoutReaper {
	if batchSize <= 0 {
		batchSize = DefaultReaperBatchSize
	}
	return &TimeoutReaper{tx: tx, batch: batchSize, policy: policy, rand: rand}
}

// Reap runs one cycle: batches, each in its own short transaction, until
// one comes back short.
func (r *TimeoutReaper) Reap(ctx context.Context) (TimeoutReport, error) {
	var rep TimeoutReport
	err := inBatches(ctx, r.tx, r.batch, func(ctx context.Context, st ports.Stores) (TimeoutReport, int, error) {
		var b TimeoutReport
		ts, err := st.Reaper.UpdateTimedOutTasks(ctx, r.batch, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.TimeOut(r.policy, r.rand, now)
			if err != nil {
				return nil, err
			}
			return []event.Event{e}, nil
		})
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
		return b, len(ts), err
	}, rep.add)
	if err != nil {
		return rep, fmt.Errorf("reap timed-out attempts: %w", err)
	}
	return rep, nil
}
