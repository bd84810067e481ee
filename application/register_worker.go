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
// DEAD. A registration without an id gets a generated one (starting with
// the key's worker prefix, if it has one).
//
// The worker belongs to the key that registered it first (p.Owner is set
// from the principal): another key may not register it again (403), and a
// key limited to some queues must list queues among them.
func (s *WorkerService) Register(ctx context.Context, p worker.RegisterParams) (*worker.Worker, bool, error) {
	principal := ports.Principal(ctx)
	if p.ID == "" {
		p.ID = principal.WorkerPrefix() + "worker-" + uuid.NewString()
	}
	if err := worker.ValidateRegister(&p); err != nil {
		return nil, false, err
	}
	if err := principal.CheckWorkerID(p.ID); err != nil {
		return nil, false, err
	}
	if err := principal.CheckQueues(p.Queues); err != nil {
		return nil, false, err
	}
	p.Owner = principal.OwnerID()
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
			if err := principal.CheckRegister(existing.ID(), existing.Owner()); err != nil {
				return nil, nil, err
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
