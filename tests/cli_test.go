package tests

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// runCLI runs one taskmaster command against url and returns its output.
func runCLI(t *testing.T, ctx context.Context, url string, stdin string, args ...string) (string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	err := cli.Run(ctx, args, cli.IO{
		Stdin: strings.NewReader(stdin), Stdout: &stdout, Stderr: &stderr,
		Getenv: func(k string) string {
			if k == "TASKMASTER_URL" {
				return url
			}
			return ""
		},
	})
	if err != nil {
		t.Logf("taskmaster %s: %v\nstderr:\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String(), err
}

func mustCLI(t *testing.T, url string, args ...string) string {
	t.Helper()
	out, err := runCLI(t, context.Background(), url, "", args...)
	require.NoError(t, err)
	return out
}

// startCLIWorker runs `taskmaster worker args...` until stop is called.
func startCLIWorker(t *testing.T, url string, args ...string) (stop func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := runCLI(t, ctx, url, "", append([]string{"worker"}, args...)...)
		done <- err
	}()
	return stopper(t, cancel, done, "taskmaster worker")
}

// cliSubmit submits through the CLI and returns the task it printed.
func cliSubmit(t *testing.T, url string, args ...string) client.Task {
	t.Helper()
	var task client.Task
	out := mustCLI(t, url, append([]string{"submit", "--json"}, args...)...)
	require.NoError(t, json.Unmarshal([]byte(out), &task), out)
	return task
}

// The script the worker runs: it branches on the payload.
const cliScript = `payload=$(cat)
case "$payload" in
  *fatal*) echo "cannot handle this" >&2; exit 4 ;;
  *broken*) echo "it broke on attempt $TASKMASTER_ATTEMPT" >&2; exit 3 ;;
  *tempfail*) if [ "$TASKMASTER_ATTEMPT" = 1 ]; then echo "try later" >&2; exit 75; fi; echo recovered ;;
  *text*) echo "plain words" ;;
  *) printf '{"echo":%s,"task":"%s","queue":"%s"}\n' "$payload" "$TASKMASTER_TASK_ID" "$TASKMASTER_QUEUE" ;;
esac`

// `taskmaster worker --exec` turns a shell script into a worker: exit 0
// completes with its output (JSON when it parses, else a string), other
// exits fail (retried, then DEAD; straight to DEAD for a listed code).
func TestCLIWorkerExec(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.Backoff.Base = 5 * time.Millisecond })
	url := s.URL

	jsonTasks := []client.Task{
		cliSubmit(t, url, "--queue", "cli", "--payload", `{"n":1}`),
		cliSubmit(t, url, "--queue", "cli", "--payload", `{"n":2}`, "--priority", "3"),
		cliSubmit(t, url, "--queue", "cli", "--payload", "[1,2,3]"),
	}
	text := cliSubmit(t, url, "--queue", "cli", "--payload", `"text please"`)
	tempfail := cliSubmit(t, url, "--queue", "cli", "--payload", `{"mode":"tempfail"}`)
	broken := cliSubmit(t, url, "--queue", "cli", "--payload", `{"mode":"broken"}`, "--max-attempts", "2")
	fatal := cliSubmit(t, url, "--queue", "cli", "--payload", `{"mode":"fatal"}`)
	fromStdin, err := runCLI(t, context.Background(), url, `{"n":4}`, "submit", "--queue", "cli", "--payload", "@-", "--json")
	require.NoError(t, err)
	var stdinTask client.Task
	require.NoError(t, json.Unmarshal([]byte(fromStdin), &stdinTask))
	jsonTasks = append(jsonTasks, stdinTask)

	stop := startCLIWorker(t, url, "--queue", "cli", "--exec", cliScript,
		"--concurrency", "4", "--non-retryable-exit", "4", "--drain-timeout", "5s", "--id", "cli-worker")
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = 'cli' AND status IN ('DONE', 'DEAD')`) == 8
	}, 60*time.Second, 20*time.Millisecond)
	require.NoError(t, stop())

	c := newSDK(t, url, nil)
	get := func(id string) *client.Task {
		task, err := c.Get(context.Background(), id)
		require.NoError(t, err)
		return task
	}
	for _, submitted := range jsonTasks {
		got := get(submitted.ID)
		require.Equal(t, client.StatusDone, got.Status)
		require.Equal(t, 1, got.Attempts)
		var res struct {
			Echo  json.RawMessage
			Task  string
			Queue string
		}
		require.NoError(t, json.Unmarshal(got.Result, &res), string(got.Result))
		require.JSONEq(t, string(submitted.Payload), string(res.Echo), "the script saw the payload on stdin")
		require.Equal(t, submitted.ID, res.Task)
		require.Equal(t, "cli", res.Queue)
	}
	got := get(text.ID)
	require.Equal(t, client.StatusDone, got.Status)
	require.JSONEq(t, `"plain words"`, string(got.Result), "output that is not JSON becomes a string")

	got = get(tempfail.ID)
	require.Equal(t, client.StatusDone, got.Status)
	require.Equal(t, 2, got.Attempts, "exit 75 is retried")
	require.Contains(t, got.LastError, "exit status 75: try later")
	require.JSONEq(t, `"recovered"`, string(got.Result))

	got = get(broken.ID)
	require.Equal(t, client.StatusDead, got.Status)
	require.Equal(t, client.DeadExhausted, got.DeadReason)
	require.Equal(t, 2, got.Attempts, "retried, then DEAD")
	require.Equal(t, "exit status 3: it broke on attempt 2", got.LastError)

	got = get(fatal.ID)
	require.Equal(t, client.StatusDead, got.Status)
	require.Equal(t, client.DeadNonRetryable, got.DeadReason)
	require.Equal(t, 1, got.Attempts)
	require.Equal(t, "exit status 4: cannot handle this", got.LastError)

	// The read-only commands, as tables and as JSON.
	out := mustCLI(t, url, "get", broken.ID)
	require.Contains(t, out, "DEAD (exhausted)")
	require.Contains(t, out, "it broke on attempt 2")
	out = mustCLI(t, url, "list", "--queue", "cli", "--status", "dead")
	require.Contains(t, out, "ID")
	require.Contains(t, out, broken.ID)
	require.Contains(t, out, fatal.ID)
	require.NotContains(t, out, text.ID)
	out = mustCLI(t, url, "list", "--queue", "cli", "--limit", "2")
	require.Contains(t, out, "more: taskmaster list --cursor ")
	var page struct {
		Tasks      []client.Task `json:"tasks"`
		NextCursor *string       `json:"next_cursor"`
	}
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, url, "list", "--queue", "cli", "--json")), &page))
	require.Len(t, page.Tasks, 8)
	require.Nil(t, page.NextCursor)
	// The statistics lag the tasks by about one outbox poll: wait for them.
	wantQueues := []client.Queue{{Queue: "cli", Done: 6, Dead: 2, ActiveWorkers: 1}}
	sdkQueuesEventually(t, c, func(qs []client.Queue) bool { return reflect.DeepEqual(wantQueues, queueCounts(qs)) })
	var queues struct{ Queues []client.Queue }
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, url, "queues", "--json")), &queues))
	require.Equal(t, wantQueues, queueCounts(queues.Queues))
	require.Equal(t, int64(8), queues.Queues[0].Totals.Submitted, "--json prints every field")
	out = mustCLI(t, url, "queues")
	require.Regexp(t, `cli\s+0\s+0\s+6\s+2\s+0\s+1\s+-\s+\d+\.\d`, out)
	require.Regexp(t, `(?m)^statistics as of \d{4}-\d\d-\d\dT`, out)
	out = mustCLI(t, url, "workers")
	require.Regexp(t, `cli-worker\s+ACTIVE\s+cli`, out)
	out = mustCLI(t, url, "drain", "cli-worker")
	require.Contains(t, out, "cli-worker ACTIVE (draining)")
	require.Regexp(t, `cli-worker\s+ACTIVE \(draining\)\s+cli`, mustCLI(t, url, "workers"))
	_, err = runCLI(t, context.Background(), url, "", "drain", "nobody")
	require.True(t, client.IsWorkerNotFound(err), "%v", err)

	// Operator commands.
	out = mustCLI(t, url, "retry", fatal.ID, "--json")
	require.Contains(t, out, `"status": "PENDING"`)
	out = mustCLI(t, url, "cancel", fatal.ID)
	require.Contains(t, out, "DEAD (cancelled)")
	_, err = runCLI(t, context.Background(), url, "", "cancel", fatal.ID)
	require.True(t, client.IsInvalidTransition(err), "%v", err)
	require.NotContains(t, err.Error(), "taskmaster: ", "the binary adds the prefix")
	_, err = runCLI(t, context.Background(), url, "", "get", uuid.NewString())
	require.True(t, client.IsNotFound(err))
}

// On shutdown the worker stops a command that outlives the drain timeout
// and its task is released: requeued without spending its attempt.
func TestCLIWorkerDrainsOnShutdown(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	task := cliSubmit(t, s.URL, "--queue", "slow")
	stop := startCLIWorker(t, s.URL, "--queue", "slow", "--exec", "sleep 60", "--drain-timeout", "100ms")
	require.Eventually(t, func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE id = $1 AND status = 'RUNNING'`, task.ID) == 1
	}, 30*time.Second, 10*time.Millisecond)
	begin := time.Now()
	require.NoError(t, stop())
	require.Less(t, time.Since(begin), 15*time.Second)
	got, err := newSDK(t, s.URL, nil).Get(context.Background(), task.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, got.Status, "requeued, not lost")
	require.Equal(t, 0, got.Attempts, "released: the attempt was given back")
	attempts, err := newSDK(t, s.URL, nil).Attempts(context.Background(), task.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, client.AttemptReleased, attempts[0].Outcome)
}

func TestCLIUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"submit"},
		{"submit", "--queue", "q", "--payload", "{not json"},
		{"submit", "--queue", "q", "--run-at", "tomorrow"},
		{"get"},
		{"get", "a", "b"},
		{"workers", "extra"},
		{"worker", "--queue", "q"},
		{"list", "--bogus"},
		{"nope"},
	} {
		_, err := runCLI(t, context.Background(), "http://127.0.0.1:1", "", args...)
		require.ErrorIs(t, err, cli.ErrUsage, "%v", args)
	}
}
