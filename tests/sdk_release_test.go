package tests

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The SDK releases one task, and many in one request, each fenced: the
// attempt is given back and ends released.
func TestSDKReleaseAndReleaseBatch(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, nil)
	ctx := t.Context()
	_, err := c.Register(ctx, client.RegisterParams{ID: "sdk-rel", Queues: []string{"rel"}})
	require.NoError(t, err)
	for range 3 {
		_, err := c.Submit(ctx, client.SubmitParams{Queue: "rel", MaxAttempts: 1})
		require.NoError(t, err)
	}
	held, err := c.Claim(ctx, client.ClaimParams{WorkerID: "sdk-rel", Limit: 3})
	require.NoError(t, err)
	require.Len(t, held, 3)

	got, err := c.Release(ctx, held[0].ID, client.ReleaseParams{WorkerID: "sdk-rel", LeaseID: held[0].LeaseID})
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, got.Status)
	require.Equal(t, 0, got.Attempts)
	_, err = c.Release(ctx, held[0].ID, client.ReleaseParams{WorkerID: "sdk-rel", LeaseID: held[0].LeaseID})
	require.True(t, client.IsLeaseLost(err), "%v", err)
	attempts, err := c.Attempts(ctx, held[0].ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, client.AttemptReleased, attempts[0].Outcome)

	out, err := c.ReleaseBatch(ctx, "sdk-rel", []client.LeaseRef{held[1].Ref(), {ID: held[2].ID, LeaseID: uuid.NewString()}})
	require.NoError(t, err)
	require.Len(t, out, 2)
	require.Equal(t, client.OutcomeRequeued, out[0].Outcome)
	require.Equal(t, 0, out[0].Task.Attempts)
	require.Equal(t, client.OutcomeError, out[1].Outcome)
	require.True(t, client.IsLeaseLost(out[1].Err()), "%v", out[1].Err())
	_, err = c.ReleaseBatch(ctx, "sdk-rel", nil)
	require.True(t, client.IsValidation(err), "%v", err)
}
