package tests

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
)

// `taskmaster retry` and `cancel` take an id (one task) or filter flags
// (every task they match, with --dry-run to count them), never both.
func TestCLIBulkRetryAndCancel(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1"})
	a := deadTask(t, c, "cli-bulk", "w1", "disk full")
	b := deadTask(t, c, "cli-bulk", "w1", "disk full")
	single := deadTask(t, c, "cli-bulk", "w1", "timeout")

	var res client.BulkResult
	out := mustCLI(t, s.URL, "retry", "--queue", "cli-bulk", "--status", "dead", "--reason", "exhausted",
		"--error-contains", "DISK", "--created-after", "-1h", "--dry-run", "--json")
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.EqualValues(t, 2, res.Matched)
	require.True(t, res.DryRun)
	require.Equal(t, "DEAD", c.Get(a.ID).Status)

	out = mustCLI(t, s.URL, "retry", "--queue", "cli-bulk", "--error-contains", "disk")
	require.Equal(t, "2 tasks matched, 2 retried, 0 skipped\n", out)
	require.Equal(t, "PENDING", c.Get(a.ID).Status)
	require.Equal(t, "PENDING", c.Get(b.ID).Status)
	require.Equal(t, "DEAD", c.Get(single.ID).Status)

	out = mustCLI(t, s.URL, "retry", single.ID, "--json") // one task by id, as before
	require.Contains(t, out, `"status": "PENDING"`)

	// `taskmaster queue purge` reaches the purge from the queue command.
	out = mustCLI(t, s.URL, "queue", "purge", "cli-bulk", "--dry-run")
	require.Contains(t, out, "3 tasks match")

	out = mustCLI(t, s.URL, "cancel", "--queue", "cli-bulk", "--dry-run")
	require.Equal(t, "3 tasks match (dry run: nothing changed)\n", out)
	out = mustCLI(t, s.URL, "cancel", "--queue", "cli-bulk", "--status", "PENDING")
	require.Equal(t, "3 tasks matched, 3 cancelled, 0 skipped\n", out)
	require.Equal(t, "cancelled", c.Get(a.ID).Reason())

	for _, args := range [][]string{
		{"retry"}, {"cancel", "--dry-run"}, {"retry", a.ID, "--queue", "cli-bulk"}, {"cancel", a.ID, b.ID},
		{"retry", "--queue", "q", "--created-before", "yesterday"},
	} {
		_, err := runCLI(t, context.Background(), s.URL, "", args...)
		require.ErrorIs(t, err, cli.ErrUsage, "%v", args)
	}
	_, err := runCLI(t, context.Background(), s.URL, "", "retry", "--queue", "cli-bulk", "--status", "PENDING")
	require.Error(t, err)
	require.Contains(t, err.Error(), "status")
}
