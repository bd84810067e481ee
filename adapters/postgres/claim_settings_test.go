package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// claimAsTheService is a claim transaction as the service runs it: the
// workers' liveness read (TouchLiveEach), then the claim of their group.
func (f *storeFixture) claimAsTheService(workerID string, queues ...string) []*task.Task {
	f.t.Helper()
	var out []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Workers.TouchLiveEach(ctx, []string{workerID}, func(*worker.Worker, time.Time) ([]event.Event, bool, error) {
			return nil, false, nil
		})
		if err != nil {
			return err
		}
		res, err := st.Tasks.ClaimGroup(ctx, ports.ClaimGroupParams{Queues: queues,
			Requests: []ports.ClaimRequest{{WorkerID: workerID, Limit: 10, LeaseSeconds: task.DefaultLeaseSeconds}}})
		if err != nil {
			return err
		}
		out = res[0].Tasks
		return nil
	})
	return out
}

// The settings a claim reads (pause, a default time limit, limits) apply
// to the claims of the service's transactions whether the queue had a
// settings row before or not, and a queue's row does not hold back the
// claims of another.
func TestClaimsOfTheServiceHonourQueueSettingsWrittenAtAnyTime(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.register(worker.RegisterParams{ID: "w1", Queues: []string{"plain"}})
	f.register(worker.RegisterParams{ID: "w2", Queues: []string{"plain", "set"}})

	first := f.submit(task.SubmitParams{Queue: "plain"})
	got := f.claimAsTheService("w1", "plain")
	require.Len(t, got, 1)
	require.Equal(t, first.ID(), got[0].ID())
	require.Nil(t, got[0].Snapshot().TimeoutAt)

	f.setQueue("plain", "default_timeout_seconds = 60")
	f.submit(task.SubmitParams{Queue: "plain"})
	got = f.claimAsTheService("w1", "plain")
	require.Len(t, got, 1)
	require.NotNil(t, got[0].Snapshot().TimeoutAt, "the queue's default time limit")

	f.setQueue("plain", "paused = true")
	f.submit(task.SubmitParams{Queue: "plain"})
	require.Empty(t, f.claimAsTheService("w1", "plain"), "a paused queue")

	set := f.submit(task.SubmitParams{Queue: "set"})
	got = f.claimAsTheService("w2", "plain", "set")
	require.Len(t, got, 1)
	require.Equal(t, set.ID(), got[0].ID(), "only the queue that is not paused")

	f.setQueue("plain", "paused = false, default_timeout_seconds = NULL")
	f.setQueue("set", "max_running = 1")
	f.submit(task.SubmitParams{Queue: "set"})
	require.Empty(t, f.claimAsTheService("w2", "set"), "max_running 1, one running")
	got = f.claimAsTheService("w1", "plain")
	require.Len(t, got, 1, "the task left in the resumed queue")
	require.Nil(t, got[0].Snapshot().TimeoutAt)
}
