package application

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Register creates a worker, or re-registers an existing one (created false):
// its queues and tags are replaced and it is ACTIVE again, even if it was
// DEAD. A registration without an id gets a generated one.
func (s *WorkerService) Register(ctx context.Context, p worker.RegisterParams) (*worker.Worker, bool, error) {
	if p.ID == "" {
		p.ID = "worker-" + uuid.NewString()
	}
	if err := worker.ValidateRegister(&p); err != nil {
		return nil, false, err
	}
	var (
		out     *worker.Worker
		created bool
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, created, err = st.Workers.Upsert(ctx, p.ID, func(existing *worker.Worker, now time.Time) (*worker.Worker, []event.Event, error) {
			if existing == nil {
				w, e, err := worker.Register(p, now)
				return w, []event.Event{e}, err
			}
			e, err := existing.Reregister(p, now)
			return existing, []event.Event{e}, err
		})
		return err
	})
	if err != nil {
		return nil, false, fmt.Errorf("register worker: %w", err)
	}
	return out, created, nil
}
