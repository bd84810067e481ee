package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Claim hands up to cmd.Limit (default 1) claimable tasks to a registered,
// non-DEAD worker, each RUNNING under a fresh lease of cmd.LeaseSeconds (the
// configured default when absent), stopping before the response byte cap
// (Config.MaxResponseBytes; at least one task). The claim counts as the
// worker's sign of life. A claim with cmd.RequestID that the worker already
// made, and from which it still holds tasks, answers with those tasks (same
// leases) and claims nothing; once it holds none of them, the claim is made
// anew. With cmd.WaitMillis set, an empty claim waits for a notification (or
// polls) until a task is claimable or the wait is over; it holds no
// database connection while it waits. A draining worker gets no new tasks:
// its claim answers like a claim on empty queues (after the wait, so a
// worker that does not read its heartbeats does not spin).
func (s *TaskService) Claim(ctx context.Context, cmd ports.ClaimCommand) (ports.ClaimResult, error) {
	c, err := s.claimOf(cmd)
	if err != nil {
		return ports.ClaimResult{}, err
	}
	p := ports.Principal(ctx)
	if err := p.CheckWorkerID(c.workerID); err != nil {
		return ports.ClaimResult{}, err
	}
	if c.queue != "" {
		if err := p.CheckQueue(c.queue); err != nil {
			return ports.ClaimResult{}, err
		}
	}
	if c.wait == 0 {
		out, _, err := s.claimOnce(ctx, c)
		return out, err
	}
	return s.claimWaiting(ctx, c)
}

// claim is a validated ClaimCommand with its defaults filled in.
type claim struct {
	workerID     string
	queue        string
	limit        int
	wait         time.Duration
	leaseSeconds int
	requestID    string
}

// claimOf validates cmd: every field it names is checked, absent ones get
// their defaults.
func (s *TaskService) claimOf(cmd ports.ClaimCommand) (claim, error) {
	c := claim{workerID: cmd.WorkerID, queue: cmd.Queue, leaseSeconds: s.cfg.leaseSeconds()}
	var v validation.Errors
	if cmd.WorkerID == "" {
		v.Add("worker_id", "is required")
	}
	if cmd.Queue != "" {
		task.CheckQueue(&v, "queue", cmd.Queue)
	}
	c.limit = optionalCount(&v, "limit", cmd.Limit, 1, MaxClaimLimit)
	if cmd.WaitMillis != nil {
		if ms := *cmd.WaitMillis; ms < 0 || ms > MaxClaimWait.Milliseconds() {
			v.Add("wait_ms", fmt.Sprintf("must be between 0 and %d", MaxClaimWait.Milliseconds()))
		} else {
			c.wait = time.Duration(ms) * time.Millisecond
		}
	}
	if cmd.LeaseSeconds != nil {
		c.leaseSeconds = *cmd.LeaseSeconds
		task.CheckLeaseSeconds(&v, "lease_seconds", c.leaseSeconds)
	}
	if cmd.RequestID != nil {
		c.requestID = *cmd.RequestID
		task.CheckRequestID(&v, "request_id", c.requestID)
	}
	return c, v.Err()
}

// claimWaiting subscribes before the first attempt, so a task submitted
// between an empty attempt and the wait still wakes it.
func (s *TaskService) claimWaiting(ctx context.Context, cmd claim) (ports.ClaimResult, error) {
	deadline := time.NewTimer(cmd.wait)
	defer deadline.Stop()
	var (
		wake   <-chan struct{}
		cancel = func() {}
		queues []string
	)
	for {
		out, claimedFrom, err := s.claimOnce(ctx, cmd)
		if err != nil || len(out.Tasks) > 0 {
			cancel()
			return out, err
		}
		if wake == nil && s.notifier != nil {
			queues = claimedFrom
			wake, cancel = s.notifier.Subscribe(queues)
			defer cancel()
			// Look once more: a task may have come between the attempt and
			// the subscription.
			continue
		}
		poll := time.NewTimer(s.cfg.ClaimPollInterval)
		select {
		case _, open := <-wake:
			poll.Stop()
			if !open { // shutting down: answer at once
				return ports.ClaimResult{Tasks: []*task.Task{}}, nil
			}
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return ports.ClaimResult{Tasks: []*task.Task{}}, nil
		case <-ctx.Done():
			poll.Stop()
			return ports.ClaimResult{Tasks: []*task.Task{}}, nil
		}
	}
}

// claimOnce claims in one transaction and reports the queues it looked in
// (empty: any queue).
func (s *TaskService) claimOnce(ctx context.Context, cmd claim) (ports.ClaimResult, []string, error) {
	var (
		out    ports.ClaimResult
		queues []string
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		// Under the worker's liveness lock: a worker the heartbeat reaper
		// is declaring DEAD claims nothing. Only the worker's key may claim
		// as it (checked on this read of the worker).
		w, err := st.Workers.TouchLive(ctx, cmd.workerID, actAsFunc(ctx, signOfLife))
		if err != nil {
			return err
		}
		queues = w.Queues()
		if cmd.queue != "" {
			queues = []string{cmd.queue}
		}
		if err := ports.Principal(ctx).CheckQueues(queues); err != nil {
			return err
		}
		if cmd.requestID != "" {
			// A repeat of a claim whose answer was lost: the tasks it holds
			// from that claim, not new ones (they would be orphaned later,
			// each burning an attempt). Draining does not stop it: the
			// tasks were claimed before.
			if out.Tasks, err = st.Tasks.ClaimedUnder(ctx, w.ID(), cmd.requestID); err != nil || len(out.Tasks) > 0 {
				return err
			}
		}
		if w.Draining() {
			out.Tasks = []*task.Task{}
			return nil
		}
		out.Tasks, out.Truncated, err = st.Tasks.Claim(ctx, ports.ClaimParams{
			WorkerID:     w.ID(),
			WorkerTags:   w.Tags(),
			Queues:       queues,
			Limit:        cmd.limit,
			LeaseSeconds: cmd.leaseSeconds,
			RequestID:    cmd.requestID,
			MaxBytes:     s.cfg.maxResponseBytes(),
		})
		return err
	})
	if err != nil {
		return ports.ClaimResult{}, nil, fmt.Errorf("claim tasks: %w", err)
	}
	return out, queues, nil
}

func signOfLife(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
	return w.SignOfLife(now)
}

// optionalCount is an optional count's value: def when n is absent, else
// *n, which must lie between 1 and most (v names field otherwise). An
// explicit 0 is out of range, never the default.
func optionalCount(v *validation.Errors, field string, n *int, def, most int) int {
	if n == nil {
		return def
	}
	if *n < 1 || *n > most {
		v.Add(field, fmt.Sprintf("must be between 1 and %d", most))
	}
	return *n
}
