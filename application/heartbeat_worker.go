package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Heartbeat records a worker's sign of life: a STALE worker becomes ACTIVE
// again; a DEAD one gets worker.ErrDead and must register again.
func (s *WorkerService) Heartbeat(ctx context.Context, id string) (*worker.Worker, error) {
	var out *worker.Worker
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Workers.Update(ctx, id, func(w *worker.Worker, now time.Time) ([]event.Event, error) {
			return w.Heartbeat(now)
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	return out, nil
}

// List returns every worker.
func (s *WorkerService) List(ctx context.Context) ([]*worker.Worker, error) {
	var out []*worker.Worker
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Workers.List(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	return out, nil
}
