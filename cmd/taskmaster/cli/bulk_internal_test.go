package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// purgeCLI runs `taskmaster queue purge args...` against url.
func purgeCLI(t *testing.T, url string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := runQueuePurge(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string {
			if k == "TASKMASTER_URL" {
				return url
			}
			return ""
		}})
	return stdout.String(), err
}

// `taskmaster queue purge` counts with --dry-run, removes at once when few
// match, and follows a background purge with --wait.
func TestQueuePurgeCommand(t *testing.T) {
	t.Parallel()
	s := testserver.StartOn(t, pgtest.NewDatabase(t), nil, fx.Decorate(func(c application.BulkConfig) application.BulkConfig {
		c.PurgeSyncLimit = 3
		return c
	}))
	c, err := client.New(s.URL)
	require.NoError(t, err)
	submit := func(queue string, n int) {
		for range n {
			_, err := c.Submit(t.Context(), client.SubmitParams{Queue: queue})
			require.NoError(t, err)
		}
	}
	submit("small", 2)
	submit("large", 5)

	out, err := purgeCLI(t, s.URL, "small", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "2 tasks match (dry run: nothing changed)\n", out)
	out, err = purgeCLI(t, s.URL, "small")
	require.NoError(t, err)
	require.Equal(t, "2 tasks matched, 2 removed, 0 skipped\n", out)
	out, err = purgeCLI(t, s.URL, "--status", "dead", "small")
	require.NoError(t, err)
	require.Equal(t, "0 tasks matched, 0 removed, 0 skipped\n", out)

	out, err = purgeCLI(t, s.URL, "large", "--wait")
	require.NoError(t, err)
	require.Regexp(t, `^purge [0-9a-f-]{36} of queue large: done, 5 of 5 tasks removed\n$`, out)

	_, err = purgeCLI(t, s.URL)
	require.ErrorIs(t, err, ErrUsage)
	_, err = purgeCLI(t, s.URL, "small", "--status", "RUNNING")
	require.Error(t, err)
	require.Contains(t, err.Error(), "status")
}
