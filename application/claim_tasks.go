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
// worker, each RUNNING under a fresh lease. The claim counts as the worker's
// sign of life.
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
	if err := v.Err(); err != nil {
		return nil, err
	}
	var out []*task.Task
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		w, err := st.Workers.Touch(ctx, cmd.WorkerID, signOfLife)
		if err != nil {
			return err
		}
		queues := w.Queues()
		if cmd.Queue != "" {
			queues = []string{cmd.Queue}
		}
		out, err = st.Tasks.Claim(ctx, ports.ClaimParams{
			WorkerID:   w.ID(),
			WorkerTags: w.Tags(),
			Queues:     queues,
			Limit:      cmd.Limit,
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("claim tasks: %w", err)
	}
	return out, nil
}

func signOfLife(w *worker.Worker, now time.Time) ([]event.Event, bool, error) {
	return w.SignOfLife(now)
}
