package worker_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/worker"
)

func TestCleanExpiredDeadWorkers(t *testing.T) {
	t.Parallel()
	now := time.Date(2025, 3, 8, 12, 0, 0, 0, time.UTC)
	const ttl = 24 * time.Hour
	cases := []struct {
		name   string
		status worker.Status
		silent time.Duration
		ttl    time.Duration
		want   bool
	}{
		{"DEAD silent exactly ttl", worker.StatusDead, ttl, ttl, true},
		{"DEAD silent longer", worker.StatusDead, 2 * ttl, ttl, true},
		{"DEAD a microsecond too young", worker.StatusDead, ttl - time.Microsecond, ttl, false},
		{"ACTIVE never", worker.StatusActive, 2 * ttl, ttl, false},
		{"STALE never", worker.StatusStale, 2 * ttl, ttl, false},
		{"ttl 0 disables", worker.StatusDead, 2 * ttl, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			w := worker.Restore(worker.Snapshot{
				ID: "w1", Queues: []string{"q"}, Status: c.status,
				RegisteredAt: now.Add(-3 * ttl), LastHeartbeatAt: now.Add(-c.silent),
			})
			before := w.Snapshot()
			require.Equal(t, c.want, w.Expired(c.ttl, now))
			e, err := w.Clean(c.ttl, now)
			require.Equal(t, before, w.Snapshot(), "cleaning changes nothing in the worker")
			if !c.want {
				require.ErrorIs(t, err, worker.ErrRetained)
				return
			}
			require.NoError(t, err)
			require.Equal(t, event.Event{
				Version: event.Version, Type: event.WorkerCleaned, WorkerID: "w1", Queues: []string{"q"},
				From: string(worker.StatusDead), OccurredAt: now,
			}, e)
		})
	}
}
