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

// Claim hands up to cmd.Limit claimable tasks to a registered, non-DEAD
// worker, each RUNNING under a fresh lease of cmd.LeaseSeconds (the
// configured default when 0). The claim counts as the worker's sign of life.
// With cmd.Wait set, an empty claim waits for a notification (or polls) until
// a task is claimable or the wait is over; it holds no database connection
// while it waits. A draining worker gets no tasks: its claim answers like a
// claim on empty queues (after the wait, so a worker that does not read its
// heartbeats does not spin).
func (s *TaskService) Claim(ctx context.Context, cmd ports.ClaimCommand) ([]*task.Task, error) {
	var v validation.Errors
	if cmd.WorkerID == "" {
		v.Add("worker_id", "is required")
	}
	if cmd.Limit == 0 {
		cmd.Limit = 1
	}
	if cmd.Limit < 1 || cmd.Limit > MaxClaimLimit {
		v.Add("limit", fmt.Sprintf("must be between 1 and %d", MaxClaimLimit))
	}
	if cmd.Wait < 0 || cmd.Wait > MaxClaimWait {
		v.Add("wait_ms", fmt.Sprintf("must be between 0 and %d", MaxClaimWait.Milliseconds()))
	}
	if cmd.LeaseSeconds == 0 {
		cmd.LeaseSeconds = s.cfg.leaseSeconds()
	}
	task.CheckLeaseSeconds(&v, "lease_seconds", cmd.LeaseSeconds)
	if err := v.Err(); err != nil {
		return nil, err
	}
	p := ports.Principal(ctx)
	if err := p.CheckWorkerID(cmd.WorkerID); err != nil {
		return nil, err
	}
	if cmd.Queue != "" {
		if err := p.CheckQueue(cmd.Queue); err != nil {
			return nil, err
		}
	}
	if cmd.Wait == 0 {
		out, _, err := s.claimOnce(ctx, cmd)
		return out, err
	}
	return s.claimWaiting(ctx, cmd)
}

// claimWaiting subscribes before the first attempt, so a task submitted
// between an empty attempt and the wait still wakes it.
func (s *TaskService) claimWaiting(ctx context.Context, cmd ports.ClaimCommand) ([]*task.Task, error) {
	deadline := time.NewTimer(cmd.Wait)
	defer deadline.Stop()
	var (
		wake   <-chan struct{}
		cancel = func() {}
		queues []string
	)
	for {
		out, claimedFrom, err := s.claimOnce(ctx, cmd)
		if err != nil || len(out) > 0 {
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
				return []*task.Task{}, nil
			}
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return []*task.Task{}, nil
		case <-ctx.Done():
			poll.Stop()
			return []*task.Task{}, nil
		}
	}
}

// claimOnce claims in one transaction and reports the queues it looked in
// (empty: any queue).
func (s *TaskService) claimOnce(ctx context.Context, cmd ports.ClaimCommand) ([]*task.Task, []string, error) {
	var (
		out    []*task.Task
		queues []string
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		// Under the worker's liveness lock: a worker the heartbeat reaper
		// is declaring DEAD claims nothing. Only the worker's key may claim
		// as it (checked on this read of the worker).
		w, err := st.Workers.TouchLive(ctx, cmd.WorkerID, actAsFunc(ctx, signOfLife))
		if err != nil {
			return err
		}
		queues = w.Queues()
		if cmd.Queue != "" {
			queues = []string{cmd.Queue}
		}
		if err := ports.Principal(ctx).CheckQueues(queues); err != nil {
			return err
		}
		if w.Draining() {
			out = []*task.Task{}
			return nil
		}
		out, err = st.Tasks.Claim(ctx, ports.ClaimParams{
			WorkerID:     w.ID(),
			WorkerTags:   w.Tags(),
			Queues:       queues,
			Limit:        cmd.Limit,
			LeaseSeconds: cmd.LeaseSeconds,
		})
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("claim tasks: %w", err)
	}
	return out, queues, nil
}

func signOfLife(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
	return w.SignOfLife(now)
}
