package application

import (
	"context"
	"fmt"

	"github.com/taskmaster/taskmaster/ports"
)

// Queues returns the statistics of every known queue.
func (s *QueueService) Queues(ctx context.Context) ([]ports.QueueStats, error) {
	out, err := s.stats.Queues(ctx)
	if err != nil {
		return nil, fmt.Errorf("queue statistics: %w", err)
	}
	return out, nil
}
