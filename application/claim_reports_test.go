package application_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Claims that carry reports share a transaction with other claims. One of
// them that fails after its reports changed tasks (its worker was declared
// DEAD) fails alone: the batch runs again a request at a time, its reports
// roll back, and the others' reports and claims stand.
func TestAClaimsReportsRollBackAloneInASharedTransaction(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	names := []string{"first", "w1", "w2", "dead"}
	held := map[string]*task.Task{}
	for _, id := range names {
		_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: id, Queues: []string{"shared"}})
		require.NoError(t, err)
		_, _, err = s.tasks.Submit(ctx, task.SubmitParams{Queue: "shared"})
		require.NoError(t, err)
		r, err := s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: id})
		require.NoError(t, err)
		require.Len(t, r.Tasks, 1)
		held[id] = r.Tasks[0]
	}
	for range 4 {
		_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: "shared"})
		require.NoError(t, err)
	}
	_, err := s.db.Exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'dead'`)
	require.NoError(t, err)
	tasks, g := gatedTasks(s)

	type answer struct {
		res ports.ClaimResult
		err error
	}
	answers := make([]chan answer, len(names))
	claim := func(i int) {
		answers[i] = make(chan answer, 1)
		go func() {
			h := held[names[i]]
			lease := h.Snapshot().LeaseID
			r, err := tasks.Claim(ctx, ports.ClaimCommand{WorkerID: names[i],
				Complete: []ports.CompleteItem{{TaskID: h.ID(), LeaseID: &lease}}})
			answers[i] <- answer{r, err}
		}()
	}
	claimWhileTheFirstWaits(t, tasks, g, len(names), claim)

	for i, name := range names {
		a := <-answers[i]
		now, err := s.tasks.Get(ctx, held[name].ID())
		require.NoError(t, err)
		if name == "dead" {
			require.ErrorIs(t, a.err, worker.ErrDead)
			require.Equal(t, task.StatusRunning, now.Status(), "its completion rolled back")
			continue
		}
		require.NoError(t, a.err, name)
		require.Len(t, a.res.Completed, 1, name)
		require.NoError(t, a.res.Completed[0].Err, name)
		require.Nil(t, a.res.Failed)
		require.Equal(t, task.StatusDone, now.Status(), name)
		require.Len(t, a.res.Tasks, 1, name)
	}
	require.Equal(t, int64(5), g.runs.Load(), "the first claim's transaction, the shared one that failed, then one per request")
}
