package tests

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// A runner that takes one task at a time (Concurrency 1) reports each
// outcome, completion or failure, on the claim that asks for its next task:
// n tasks cost n+1 claims (the last carries the last outcome and waits on
// the empty queue), and not one complete or fail request. Each task is
// handled once, on one attempt, and ends as its handler said.
func TestRunnerReportsWithItsNextClaim(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	traffic := &countingTransport{next: spectest.New(t, s.URL).Transport(http.DefaultTransport)}
	producer := newSDK(t, s.URL, nil)
	const n = 20
	ids := make([]string, n)
	for i := range n {
		task, err := producer.Submit(context.Background(), client.SubmitParams{Queue: "fused", Payload: i, MaxAttempts: 1})
		require.NoError(t, err)
		ids[i] = task.ID
	}
	failing := func(i int) bool { return i%5 == 4 }
	stop, _ := startRunner(t, newSDK(t, s.URL, traffic), client.RunnerConfig{
		WorkerID: "fused-w", Queues: []string{"fused"}, ClaimWait: 5 * time.Second,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		var i int
		if err := tk.DecodePayload(&i); err != nil {
			return nil, err
		}
		if failing(i) {
			return nil, client.NonRetryable(errors.New("refused by the handler"))
		}
		return map[string]int{"double": 2 * i}, nil
	})
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'fused' AND status IN ('DONE', 'DEAD')`) == n
	}, 60*time.Second, 10*time.Millisecond)
	claims := traffic.count("POST /tasks/v1/claim")
	require.NoError(t, stop())

	require.GreaterOrEqual(t, claims, n+1, "a claim per task, and one that carries the last outcome")
	require.LessOrEqual(t, claims, n+2, "and perhaps one more after that one's wait ran out")
	for i, id := range ids {
		require.Zero(t, traffic.count("POST /tasks/v1/"+id+"/complete"), "task %d: no complete on its own", i)
		require.Zero(t, traffic.count("POST /tasks/v1/"+id+"/fail"), "task %d: no fail on its own", i)
		task, err := producer.Get(context.Background(), id)
		require.NoError(t, err)
		require.Equal(t, 1, task.Attempts)
		if failing(i) {
			require.Equal(t, 1, traffic.count("claim fail "+id), "task %d: its failure rode one claim", i)
			require.Equal(t, client.StatusDead, task.Status)
			require.Equal(t, client.DeadNonRetryable, task.DeadReason)
			require.Equal(t, "refused by the handler", task.LastError)
			continue
		}
		require.Equal(t, 1, traffic.count("claim complete "+id), "task %d: its completion rode one claim", i)
		require.Equal(t, client.StatusDone, task.Status, "task %d", i)
		require.JSONEq(t, `{"double":`+strconv.Itoa(2*i)+`}`, string(task.Result))
	}
}

// A report never waits for a claim: with Concurrency 2 and one task in
// hand, the runner's next claim waits on the empty queue (a 10 s long
// poll); the handler's result goes on its own at once, and the task is
// DONE while that claim still waits.
func TestRunnerReportsOnItsOwnWhileItsClaimWaits(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	traffic := &countingTransport{next: spectest.New(t, s.URL).Transport(http.DefaultTransport)}
	producer := newSDK(t, s.URL, nil)
	task, err := producer.Submit(context.Background(), client.SubmitParams{Queue: "own"})
	require.NoError(t, err)
	started, proceed := make(chan struct{}), make(chan struct{})
	stop, _ := startRunner(t, newSDK(t, s.URL, traffic), client.RunnerConfig{
		WorkerID: "own-w", Queues: []string{"own"}, Concurrency: 2, ClaimWait: 10 * time.Second,
	}, func(ctx context.Context, tk client.Task) (any, error) {
		close(started)
		<-proceed
		return "mine", nil
	})
	<-started
	require.Eventually(t, func() bool { return traffic.count("POST /tasks/v1/claim") == 2 }, 30*time.Second, time.Millisecond,
		"the runner's next claim, for its free slot, is under way")
	close(proceed)
	require.Eventually(t, func() bool {
		got, err := producer.Get(context.Background(), task.ID)
		require.NoError(t, err)
		return got.Status == client.StatusDone
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, 1, traffic.count("answered POST /tasks/v1/claim"), "the task is DONE while the second claim still waits")
	require.Equal(t, 1, traffic.count("POST /tasks/v1/"+task.ID+"/complete"), "its complete went on its own")
	require.Zero(t, traffic.count("claim complete "+task.ID))

	require.NoError(t, stop()) // the waiting claim runs out
	require.Equal(t, 2, traffic.count("answered POST /tasks/v1/claim"))
	require.Equal(t, 1, traffic.count("POST /tasks/v1/"+task.ID+"/complete"))
}
