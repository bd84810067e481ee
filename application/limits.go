package application

import (
	"context"
	"fmt"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// LimitService implements ports.LimitService: named limits that queues
// share (queue.Limit). Every change is one transaction with its audit
// event (audit.limit_set, audit.limit_deleted).
type LimitService struct {
	tx ports.TxRunner
}

var _ ports.LimitService = (*LimitService)(nil)

// NewLimitService returns the named limits' use cases over tx.
func NewLimitService(tx ports.TxRunner) *LimitService { return &LimitService{tx: tx} }

// checkLimitName refuses a name that cannot name a limit (422, field name).
func checkLimitName(name string) error {
	var v validation.Errors
	queue.CheckLimitName(&v, "name", name)
	return v.Err()
}

// Put creates or replaces a named limit. Claims of the queues naming it
// take from it from the next claim on; a changed rate starts with a full
// bucket.
func (s *LimitService) Put(ctx context.Context, name string, p queue.LimitParams) (ports.LimitInfo, bool, error) {
	l, err := queue.NewLimit(name, p)
	if err != nil {
		return ports.LimitInfo{}, false, err
	}
	var (
		out     ports.LimitInfo
		created bool
	)
	err = s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, created, err = st.Limits.Put(ctx, name, func(_ *queue.Limit, now time.Time) (queue.Limit, []event.Event, error) {
			audit := event.Audit(event.AuditLimitSet, auditKeyID(ctx), now)
			saved := l
			audit.Limit = &saved
			return l, []event.Event{audit}, nil
		})
		return err
	})
	if err != nil {
		return ports.LimitInfo{}, false, fmt.Errorf("put limit: %w", err)
	}
	return visibleLimit(ctx, out), created, nil
}

// Get returns one named limit.
func (s *LimitService) Get(ctx context.Context, name string) (ports.LimitInfo, error) {
	if err := checkLimitName(name); err != nil {
		return ports.LimitInfo{}, err
	}
	var out ports.LimitInfo
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Limits.Get(ctx, name)
		return err
	})
	if err != nil {
		return ports.LimitInfo{}, fmt.Errorf("get limit: %w", err)
	}
	return visibleLimit(ctx, out), nil
}

// List returns every named limit, by name.
func (s *LimitService) List(ctx context.Context) ([]ports.LimitInfo, error) {
	var out []ports.LimitInfo
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Limits.List(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list limits: %w", err)
	}
	for i := range out {
		out[i] = visibleLimit(ctx, out[i])
	}
	return out, nil
}

// Delete removes a named limit that no queue names (a *queue.LimitInUseError
// otherwise).
func (s *LimitService) Delete(ctx context.Context, name string) (queue.Limit, error) {
	if err := checkLimitName(name); err != nil {
		return queue.Limit{}, err
	}
	var out queue.Limit
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Limits.Delete(ctx, name, func(l queue.Limit, now time.Time) ([]event.Event, error) {
			audit := event.Audit(event.AuditLimitDeleted, auditKeyID(ctx), now)
			audit.Limit = &l
			return []event.Event{audit}, nil
		})
		return err
	})
	if err != nil {
		return queue.Limit{}, fmt.Errorf("delete limit: %w", err)
	}
	return out, nil
}

// visibleLimit leaves out of info the queues the principal may not see.
func visibleLimit(ctx context.Context, info ports.LimitInfo) ports.LimitInfo {
	p := ports.Principal(ctx)
	if !p.Restricted() {
		return info
	}
	queues := make([]string, 0, len(info.Queues))
	for _, q := range info.Queues {
		if p.QueueAllowed(q) {
			queues = append(queues, q)
		}
	}
	info.Queues = queues
	return info
}
