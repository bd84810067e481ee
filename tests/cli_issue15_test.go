package tests

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// `taskmaster schedule create|list|get|pause|resume|delete`, and submit's
// --unique-key and --retry-* flags.
func TestCLISchedulesAndSubmitFlags(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastScheduler)
	url := s.URL

	out := mustCLI(t, url, "schedule", "create", "--name", "cli-beat", "--cron", "@every 1s", "--queue", "cli-ticks",
		"--payload", `{"n":1}`, "--overlap", "allow", "--unique-key", "beat", "--retry-base", "500ms", "--json")
	var sc client.Schedule
	require.NoError(t, json.Unmarshal([]byte(out), &sc), out)
	require.Equal(t, "cli-beat", sc.Name)
	require.Equal(t, client.OverlapAllow, sc.Overlap)
	require.Equal(t, "beat", sc.Task.UniqueKey)
	require.Equal(t, 500*time.Millisecond, sc.Task.Retry.Base)

	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'cli-ticks'`) >= 1
	}, 30*time.Second, 10*time.Millisecond, "the schedule ticks")
	out = mustCLI(t, url, "schedule", "list")
	require.Regexp(t, `cli-beat\s+@every 1s\s+UTC\s+cli-ticks\s+allow\s+active`, out)
	out = mustCLI(t, url, "schedule", "pause", "cli-beat")
	require.Regexp(t, `cli-beat\s+.*\s+paused\s+-\s+`, out, "no next run while paused")
	out = mustCLI(t, url, "schedule", "resume", "cli-beat", "--json")
	require.Contains(t, out, `"paused": false`)
	require.Contains(t, mustCLI(t, url, "schedule", "get", "cli-beat"), "cli-beat")
	require.Contains(t, mustCLI(t, url, "schedule", "delete", "cli-beat"), "deleted schedule cli-beat")
	_, err := runCLI(t, context.Background(), url, "", "schedule", "get", "cli-beat")
	require.True(t, client.IsScheduleNotFound(err), "%v", err)
	_, err = runCLI(t, context.Background(), url, "", "schedule", "create", "--name", "bad", "--cron", "nope", "--queue", "q")
	require.True(t, client.IsValidation(err), "%v", err)

	task := cliSubmit(t, url, "--queue", "cli-u", "--unique-key", "only-one", "--retry-base", "2s", "--retry-max", "1m", "--retry-jitter", "full")
	require.Equal(t, "only-one", task.UniqueKey)
	require.Equal(t, &client.Backoff{Base: 2 * time.Second, Max: time.Minute, Jitter: client.JitterFull}, task.Retry)
	again := cliSubmit(t, url, "--queue", "cli-u", "--unique-key", "only-one")
	require.Equal(t, task.ID, again.ID)
	require.Contains(t, mustCLI(t, url, "get", task.ID), "only-one")

	for _, args := range [][]string{
		{"schedule"}, {"schedule", "create", "--name", "x"}, {"schedule", "get"}, {"schedule", "frobnicate"},
		{"submit", "--queue", "q", "--retry-max", "1m"},
	} {
		_, err := runCLI(t, context.Background(), url, "", args...)
		require.ErrorIs(t, err, cli.ErrUsage, "%v", args)
	}
}

// `taskmaster worker --exec`: exit 99 (--snooze-exit) with a number of
// seconds on stdout snoozes the task without spending an attempt; output
// that is no such number fails it (retryable).
func TestCLIWorkerSnoozeExit(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	url := s.URL
	const script = `payload=$(cat)
case "$payload" in
  *later*) if [ ! -e "$MARK" ]; then touch "$MARK"; echo 1; exit 99; fi; echo "attempt $TASKMASTER_ATTEMPT" ;;
  *garbled*) echo soon; exit 99 ;;
esac`
	later := cliSubmit(t, url, "--queue", "cli-snooze", "--payload", `"later"`, "--max-attempts", "1")
	garbled := cliSubmit(t, url, "--queue", "cli-snooze", "--payload", `"garbled"`, "--max-attempts", "1")
	mark := t.TempDir() + "/snoozed"
	stop := startCLIWorker(t, url, "--queue", "cli-snooze", "--exec", "MARK="+mark+"; "+script, "--concurrency", "2")
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'cli-snooze' AND status IN ('DONE', 'DEAD')`) == 2
	}, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())

	c := newSDK(t, url, nil)
	got, err := c.Get(context.Background(), later.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, got.Status)
	require.Equal(t, 1, got.Snoozes)
	require.Equal(t, 1, got.Attempts)
	require.JSONEq(t, `"attempt 1"`, string(got.Result), "the attempt after the snooze is still the first")

	got, err = c.Get(context.Background(), garbled.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDead, got.Status)
	require.True(t, strings.Contains(got.LastError, "not a whole number of seconds"), got.LastError)

	_, err = runCLI(t, context.Background(), url, "", "worker", "--exec", "true", "--snooze-exit", "75")
	require.ErrorIs(t, err, cli.ErrUsage)
}
