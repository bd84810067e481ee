package application_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// Limit 0 means the default of one task (the HTTP adapter sends 0 only when
// the client gave no limit); outside 1-1000 the claim is refused before it
// touches anything.
func TestClaimLimitBounds(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	for range 3 {
		_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: "q"})
		require.NoError(t, err)
	}
	_, _, err := s.workers.Register(ctx, worker.RegisterParams{ID: "w"})
	require.NoError(t, err)

	for _, limit := range []int{-1, application.MaxClaimLimit + 1} {
		_, err := s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", Limit: ptr(limit)})
		var verr *validation.Error
		require.ErrorAs(t, err, &verr, "limit %d", limit)
		require.Equal(t, "limit", verr.Fields[0].Field)
	}
	var running int
	require.NoError(t, s.db.Get(&running, `SELECT count(*) FROM tasks WHERE status = 'RUNNING'`))
	require.Zero(t, running)

	got, err := claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w"}))
	require.NoError(t, err)
	require.Len(t, got, 1, "no limit means one task")
	got, err = claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "w", Limit: ptr(1000)}))
	require.NoError(t, err)
	require.Len(t, got, 2, "the largest limit takes what is left")
}
