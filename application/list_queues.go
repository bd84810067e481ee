package application

import (
	"context"
	"fmt"
	"slices"

	"github.com/taskmaster/taskmaster/ports"
)

// Queues returns the statistics of every known queue (of the key's queues,
// for a key limited to some).
func (s *QueueService) Queues(ctx context.Context) ([]ports.QueueStats, error) {
	out, err := s.stats.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	if p := ports.Principal(ctx); p.Restricted() {
		out = slices.DeleteFunc(out, func(q ports.QueueStats) bool { return !p.QueueAllowed(q.Queue) })
	}
	return out, nil
}
