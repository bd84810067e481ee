package tests

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
)

// The Go SDK reports and claims in one request; a try whose answer was lost
// is repeated with the same reports and request id: the completion it
// saved comes back as an invalid-transition whose status is DONE, and the
// claim answers with the tasks the lost try claimed.
func TestSDKClaimReportingSurvivesALostAnswer(t *testing.T) {
	t.Parallel()
	s, _ := startAPI(t, nil)
	ctx := t.Context()
	lose := &loseClaimAnswers{next: http.DefaultTransport, tries: 1}
	c := newSDK(t, s.URL, lose)
	_, err := c.Register(ctx, client.RegisterParams{ID: "w1", Queues: []string{"q"}})
	require.NoError(t, err)
	var ids []string
	for range 3 {
		task, err := c.Submit(ctx, client.SubmitParams{Queue: "q"})
		require.NoError(t, err)
		ids = append(ids, task.ID)
	}
	plain := newSDK(t, s.URL, nil)
	first, err := plain.Claim(ctx, client.ClaimParams{WorkerID: "w1", Limit: 2})
	require.NoError(t, err)
	require.Len(t, first, 2)

	got, err := c.ClaimReporting(ctx, client.ClaimParams{WorkerID: "w1"},
		[]client.CompleteItem{{ID: first[0].ID, LeaseID: first[0].LeaseID, Result: map[string]int{"n": 1}}},
		[]client.FailItem{{ID: first[1].ID, LeaseID: first[1].LeaseID, Error: "boom", NonRetryable: true}})
	require.NoError(t, err)
	require.Equal(t, 1, lose.lost, "the first answer was lost")
	require.Equal(t, lose.ids, []string{got.Tasks[0].ID}, "the retry answers with the lost try's task")
	require.Equal(t, ids[2], got.Tasks[0].ID)
	require.Len(t, got.Completed, 1)
	require.Equal(t, client.OutcomeError, got.Completed[0].Outcome)
	require.True(t, client.IsInvalidTransition(got.Completed[0].Err()))
	require.Equal(t, client.StatusDone, got.Completed[0].Problem.CurrentStatus, "saved by the lost try")
	require.Len(t, got.Failed, 1)
	require.Equal(t, client.StatusDead, got.Failed[0].Problem.CurrentStatus)

	// Without a loss, the outcomes are the reports' own.
	got, err = plain.ClaimReporting(ctx, client.ClaimParams{WorkerID: "w1"},
		[]client.CompleteItem{{ID: got.Tasks[0].ID, LeaseID: got.Tasks[0].LeaseID}}, nil)
	require.NoError(t, err)
	require.Empty(t, got.Tasks)
	require.Equal(t, client.OutcomeDone, got.Completed[0].Outcome)
	require.Equal(t, client.StatusDone, got.Completed[0].Task.Status)
	require.Nil(t, got.Failed)

	_, err = plain.ClaimReporting(ctx, client.ClaimParams{WorkerID: "w1"},
		[]client.CompleteItem{{ID: ids[0], LeaseID: first[0].LeaseID, Enqueue: []client.SubmitParams{{Queue: "q"}}}}, nil)
	require.ErrorContains(t, err, "enqueue nothing")
}
