package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// DefaultTimeoutReaperInterval is the timeout reaper's period unless
// configured: a limit is enforced within about that much of its end.
const DefaultTimeoutReaperInterval = time.Second

// TimeoutReport is what one timeout reaper cycle did: the counts of a
// takeback, as the lease reaper's (requeued for a retry after backoff,
// DEAD exhausted on the last attempt, DEAD cancelled).
type TimeoutReport = LeaseReport

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
		ts, err := st.Reaper.UpdateTimedOutTasks(ctx, r.batch, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.TimeOut(r.policy, r.rand, now)
			if err != nil {
				return nil, err
			}
			return []event.Event{e}, nil
		})
		return takebacks(ts), len(ts), err
	}, rep.add)
	if err != nil {
		return rep, fmt.Errorf("reap timed-out attempts: %w", err)
	}
	return rep, nil
}
