package tests

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// `taskmaster workflow show|cancel|retry`, `taskmaster replay` (one task,
// or by filter), `list --workflow`, and submit's --workflow, --debounce
// and --throttle.
func TestCLIWorkflows(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	url := s.URL
	c := newSDK(t, url, nil)
	ctx := t.Context()

	root := cliSubmit(t, url, "--queue", "cli-wf", "--max-attempts", "1")
	joined := cliSubmit(t, url, "--queue", "cli-wf-more", "--workflow", root.ID)
	require.Equal(t, root.ID, joined.WorkflowID)
	out := mustCLI(t, url, "workflow", "show", root.ID)
	require.Contains(t, out, "Workflow "+root.ID+": 2 tasks, running")
	require.Regexp(t, `PENDING 2\s+BLOCKED 0`, out)
	require.Contains(t, mustCLI(t, url, "list", "--workflow", root.ID), joined.ID)
	var w client.Workflow
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, url, "workflow", "show", root.ID, "--limit", "1", "--json")), &w))
	require.Len(t, w.Tasks, 1)
	require.NotEmpty(t, w.NextCursor)

	// Fail the root; the run's retry runs it again.
	_, err := c.Register(ctx, client.RegisterParams{ID: "cli-wf-w"})
	require.NoError(t, err)
	held, err := c.Claim(ctx, client.ClaimParams{WorkerID: "cli-wf-w", Queue: "cli-wf"})
	require.NoError(t, err)
	require.Len(t, held, 1)
	_, err = c.Fail(ctx, root.ID, client.FailParams{WorkerID: "cli-wf-w", LeaseID: held[0].LeaseID, Error: "boom"})
	require.NoError(t, err)
	require.Contains(t, mustCLI(t, url, "workflow", "retry", root.ID), "1 tasks matched, 1 retried, 0 skipped (0 wait for their parents again)")
	require.Contains(t, mustCLI(t, url, "workflow", "cancel", root.ID), "2 tasks matched, 2 cancelled or asked to stop, 0 skipped")
	_, err = runCLI(t, context.Background(), url, "", "workflow", "show", "01a2e7a1-0000-7000-8000-000000000000")
	require.True(t, client.IsWorkflowNotFound(err), "%v", err)

	// Replays.
	out = mustCLI(t, url, "replay", root.ID, "--payload", `{"again":true}`, "--priority", "4", "--json")
	var rep client.Task
	require.NoError(t, json.Unmarshal([]byte(out), &rep), out)
	require.Equal(t, root.ID, rep.ReplayOf)
	require.Equal(t, 4, rep.Priority)
	require.Contains(t, mustCLI(t, url, "get", rep.ID), "Replay of")
	require.Contains(t, mustCLI(t, url, "replay", "--workflow", root.ID, "--status", "DEAD", "--dry-run"), "2 tasks match (dry run: nothing changed)")
	require.Contains(t, mustCLI(t, url, "replay", "--workflow", root.ID), "2 tasks matched, 2 replayed, 0 skipped")
	_, err = runCLI(t, context.Background(), url, "", "replay", rep.ID)
	require.True(t, client.IsInvalidTransition(err), "%v", err)

	// Debounce and throttle.
	first := cliSubmit(t, url, "--queue", "cli-deb", "--unique-key", "d", "--payload", "1", "--debounce", "1m")
	second := cliSubmit(t, url, "--queue", "cli-deb", "--unique-key", "d", "--payload", "2", "--debounce", "1m")
	require.Equal(t, first.ID, second.ID)
	require.JSONEq(t, "2", string(second.Payload))
	require.Equal(t, first.CreatedAt.Add(10*time.Minute), *second.DebounceUntil)
	throttled := cliSubmit(t, url, "--queue", "cli-deb", "--unique-key", "t", "--throttle", "1h")
	require.Equal(t, throttled.ID, throttled.WorkflowID)
	for _, args := range [][]string{{"workflow"}, {"workflow", "show"}, {"workflow", "frobnicate", "x"}, {"replay"}, {"replay", "x", "--queue", "q"}} {
		_, err := runCLI(t, context.Background(), url, "", args...)
		require.Error(t, err, "%v", args)
	}
}
