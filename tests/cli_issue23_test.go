package tests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// `taskmaster submit --wait`, `get --wait`, --timeout and --metadata.
func TestCLIWaitsTimeLimitsAndMetadata(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	url := s.URL
	c := newSDK(t, url, nil)
	ctx := t.Context()

	task := cliSubmit(t, url, "--queue", "cli23", "--timeout", "90s", "--metadata", "tenant=acme", "--metadata", "req=r-1")
	require.Equal(t, 90, task.TimeoutSeconds)
	require.Equal(t, map[string]string{"tenant": "acme", "req": "r-1"}, task.Metadata)
	out := mustCLI(t, url, "get", task.ID)
	require.Regexp(t, `Metadata\s+req=r-1, tenant=acme`, out)
	require.Regexp(t, `Time limit\s+1m30s`, out)

	// get --wait: the task as it is when the wait ends, or once finished.
	start := time.Now()
	out = mustCLI(t, url, "get", task.ID, "--wait", "300ms", "--json")
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	var got client.Task
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, client.StatusPending, got.Status)

	_, err := c.Register(ctx, client.RegisterParams{ID: "w"})
	require.NoError(t, err)
	go func() {
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			tasks, err := c.Claim(ctx, client.ClaimParams{WorkerID: "w", Queue: "cli23-wait", Wait: time.Second})
			if err == nil && len(tasks) == 1 {
				_, _ = c.Complete(ctx, tasks[0].ID, client.CompleteParams{WorkerID: "w", LeaseID: tasks[0].LeaseID, Result: 42})
				return
			}
		}
	}()
	out = mustCLI(t, url, "submit", "--queue", "cli23-wait", "--wait", "30s", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, client.StatusDone, got.Status)
	require.JSONEq(t, `42`, string(got.Result))
	out = mustCLI(t, url, "get", got.ID, "--wait", "30s")
	require.Regexp(t, `Status\s+DONE`, out)

	for _, args := range [][]string{
		{"submit", "--queue", "q", "--timeout", "1500ms"},
		{"submit", "--queue", "q", "--metadata", "novalue"},
		{"submit", "--queue", "q", "--metadata", "k=1", "--metadata", "k=2"},
		{"submit", "--queue", "q", "--wait", "-1s"},
	} {
		_, err := runCLI(t, context.Background(), url, "", args...)
		require.Error(t, err, strings.Join(args, " "))
	}
	_, err = runCLI(t, context.Background(), url, "", "submit", "--queue", "q", "--metadata", "a b=c")
	require.True(t, client.IsValidation(err), "%v", err)
}
