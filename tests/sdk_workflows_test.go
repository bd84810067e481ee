package tests

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The Go SDK speaks workflows: a Runner handler fans out with Task.Spawn
// and returns a Next whose join depends on the children (and on itself,
// under ignore); the join's handler reads every parent; the run is read,
// cancelled and retried; replays, debounce and throttle.
func TestSDKWorkflows(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, nil)
	ctx := t.Context()
	q := "sdkwf-" + uuid.NewString()[:8]
	sums := make(chan int, 1)
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{q, q + "-kid", q + "-join"}, Concurrency: 4},
		func(ctx context.Context, tk client.Task) (any, error) {
			switch tk.Queue {
			case q:
				items := make([]client.SubmitParams, 20)
				for i := range items {
					items[i] = client.SubmitParams{Queue: q + "-kid", Payload: i}
				}
				kids, err := tk.Spawn(ctx, items...)
				if err != nil {
					return nil, err
				}
				join := client.SubmitParams{Queue: q + "-join", Dependencies: []client.Dependency{client.AfterTask(tk.ID, client.OnFailureIgnore)}}
				for _, k := range kids {
					join.DependsOn = append(join.DependsOn, k.ID)
				}
				return client.Next{Result: "fanned out", Enqueue: []client.SubmitParams{join}}, nil
			case q + "-kid":
				var n int
				if err := tk.DecodePayload(&n); err != nil {
					return nil, err
				}
				return n * n, nil
			default:
				parents, err := c.Parents(ctx, tk.ID)
				if err != nil {
					return nil, err
				}
				sum := 0
				for _, p := range parents[:len(parents)-1] {
					var v int
					if err := json.Unmarshal(p.Result, &v); err != nil {
						return nil, err
					}
					sum += v
				}
				sums <- sum
				return sum, nil
			}
		})
	root, err := c.Submit(ctx, client.SubmitParams{Queue: q})
	require.NoError(t, err)
	select {
	case sum := <-sums:
		require.Equal(t, 2470, sum, "the sum of the squares of 0..19")
	case <-time.After(2 * time.Minute):
		t.Fatal("the join did not run")
	}
	var run *client.Workflow
	require.Eventually(t, func() bool {
		run, err = c.Workflow(ctx, root.ID, 5, "")
		return err == nil && run.Finished
	}, time.Minute, 10*time.Millisecond)
	require.EqualValues(t, 22, run.Total)
	require.EqualValues(t, 22, run.StatusCounts[client.StatusDone])
	require.Len(t, run.Tasks, 5)
	require.Equal(t, root.ID, run.Tasks[0].ID)
	require.NotEmpty(t, run.NextCursor)
	next, err := c.Workflow(ctx, root.ID, 5, run.NextCursor)
	require.NoError(t, err)
	require.Equal(t, root.ID, next.Tasks[0].WorkflowID)
	page, err := c.List(ctx, client.ListParams{WorkflowID: root.ID, Limit: 100})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 22)
	_, err = c.Workflow(ctx, uuid.NewString(), 0, "")
	require.True(t, client.IsWorkflowNotFound(err), "%v", err)

	// Replays, alone and in bulk, with the runner stopped: it would run
	// the replay of the root (and fan out again) before it is replayed
	// in turn.
	require.NoError(t, stop())
	replay, err := c.Replay(ctx, root.ID, client.ReplayParams{Payload: "again", Metadata: map[string]string{}})
	require.NoError(t, err)
	require.Equal(t, root.ID, replay.ReplayOf)
	require.JSONEq(t, `"again"`, string(replay.Payload))
	bulk, err := c.BulkReplay(ctx, client.TaskFilter{Queue: q + "-kid"}, true)
	require.NoError(t, err)
	require.EqualValues(t, 20, bulk.Matched)
	_, err = c.Replay(ctx, replay.ID, client.ReplayParams{})
	require.True(t, client.IsInvalidTransition(err), "%v", err)

	// A run that fails, retried; then cancelled.
	wq := q + "-wf"
	ts, _, err := c.SubmitBatch(ctx, []client.SubmitParams{
		{Queue: wq, Ref: "a", MaxAttempts: 1},
		{Queue: wq, Dependencies: []client.Dependency{client.AfterRef("a", client.OnFailureSkip)}},
	})
	require.NoError(t, err)
	_, err = c.Register(ctx, client.RegisterParams{ID: "sdkwf"})
	require.NoError(t, err)
	held, err := c.Claim(ctx, client.ClaimParams{WorkerID: "sdkwf", Queue: wq})
	require.NoError(t, err)
	require.Len(t, held, 1)
	_, err = c.Fail(ctx, held[0].ID, client.FailParams{WorkerID: "sdkwf", LeaseID: held[0].LeaseID, NonRetryable: true})
	require.NoError(t, err)
	skipped, err := c.Get(ctx, ts[1].ID)
	require.NoError(t, err)
	require.Equal(t, client.DeadDependencySkipped, skipped.DeadReason)
	res, err := c.RetryWorkflow(ctx, ts[0].ID)
	require.NoError(t, err)
	require.Equal(t, client.WorkflowResult{ID: ts[0].ID, Matched: 2, Changed: 2, Blocked: 1}, *res)
	held, err = c.Claim(ctx, client.ClaimParams{WorkerID: "sdkwf", Queue: wq})
	require.NoError(t, err)
	require.Len(t, held, 1)
	_, _, err = c.SubmitBatchToWorkflow(ctx, ts[0].ID, []client.SubmitParams{{Queue: wq + "-more"}})
	require.NoError(t, err)
	res, err = c.CancelWorkflow(ctx, ts[0].ID)
	require.NoError(t, err)
	require.EqualValues(t, 3, res.Changed, "the RUNNING one asked to stop, the BLOCKED and the added one cancelled")
	_, _, err = c.Spawn(ctx, held[0].ID, client.SpawnParams{WorkerID: "sdkwf", LeaseID: held[0].LeaseID,
		Tasks: []client.SubmitParams{{Queue: wq}}})
	require.True(t, client.IsCancelRequested(err), "%v", err)

	// Debounce and throttle.
	dq := q + "-deb"
	first, err := c.Submit(ctx, client.SubmitParams{Queue: dq, UniqueKey: "d", Payload: 1, Debounce: 30 * time.Second, DebounceMax: time.Minute})
	require.NoError(t, err)
	second, err := c.Submit(ctx, client.SubmitParams{Queue: dq, UniqueKey: "d", Payload: 2, Debounce: 1500 * time.Millisecond})
	require.NoError(t, err)
	require.Equal(t, first.ID, second.ID)
	require.JSONEq(t, `2`, string(second.Payload))
	require.Equal(t, first.CreatedAt.Add(time.Minute), *second.DebounceUntil)
	th, err := c.Submit(ctx, client.SubmitParams{Queue: dq, UniqueKey: "t", Throttle: time.Minute})
	require.NoError(t, err)
	require.Equal(t, th.ID, th.WorkflowID)
	_, err = c.Submit(ctx, client.SubmitParams{Queue: dq, Throttle: time.Minute})
	require.True(t, client.IsValidation(err), "%v", err)
	_, _, err = c.SubmitBatch(ctx, []client.SubmitParams{{Queue: dq, Dependencies: []client.Dependency{{OnFailure: client.OnFailureSkip}}}})
	require.ErrorContains(t, err, "names a Ref or an ID")
}
