package runtimes

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/binary"
	"github.com/taskmaster/taskmaster/tests/faultproxy"
)

// execWorker is a running `taskmaster worker --exec` process.
type execWorker struct {
	*binary.Process
	t *testing.T
}

// startExecWorker runs `bin worker --url url --id id args...` with env (and
// nothing else of the test's environment but PATH).
func startExecWorker(t *testing.T, bin, url, id string, env []string, args ...string) *execWorker {
	t.Helper()
	p := binary.Start(t, bin, env, append([]string{"worker", "--url", url, "--id", id}, args...)...)
	w := &execWorker{Process: p, t: t}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("worker %s output:\n%s", id, p.Output())
		}
	})
	return w
}

// exited waits up to d for the worker to exit and returns its exit code.
func (w *execWorker) exited(d time.Duration) int {
	w.t.Helper()
	select {
	case <-w.Exited():
		return w.ExitCode()
	case <-time.After(d):
		w.t.Fatalf("the worker did not exit within %s", d)
		return 0
	}
}

// alive reports whether pid is a live process (a zombie is not).
func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state ...: the state follows the last ')'.
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// pids reads the process ids a command wrote to file, one a line, once
// want of them are there.
func pids(t *testing.T, file string, want int) []int {
	t.Helper()
	var out []int
	poll(t, 30*time.Second, "the command to write its process ids", func() bool {
		f, err := os.Open(file)
		if err != nil {
			return false
		}
		defer f.Close()
		out = out[:0]
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if n, err := strconv.Atoi(strings.TrimSpace(sc.Text())); err == nil {
				out = append(out, n)
			}
		}
		return len(out) >= want
	})
	return out
}

// allDead waits until none of pids is alive.
func allDead(t *testing.T, what string, pids []int) {
	t.Helper()
	poll(t, 30*time.Second, what, func() bool {
		for _, p := range pids {
			if alive(p) {
				return false
			}
		}
		return true
	})
}

// vmHWM is the peak resident set size of pid, in bytes.
func vmHWM(t *testing.T, pid int) int64 {
	t.Helper()
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			require.NoError(t, err)
			return kb << 10
		}
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// The real `taskmaster worker --exec` binary, built once for these
// subtests, run against a real server (through tests/faultproxy where a
// fault is needed).
func TestExecWorker(t *testing.T) {
	t.Parallel()
	bin := binary.Build(t)

	// Items 1 and 2: a command's result survives a restart of the server
	// (connections refused for 3 s) and throttled reports (429 for 6 s on
	// the claim that carries the result, then on the complete on its own),
	// on the task's last attempt, and the command ran once.
	t.Run("result survives outages and throttling", func(t *testing.T) {
		t.Parallel()
		for _, c := range []struct {
			name  string
			fault faultproxy.Fault
		}{
			{"restart", faultproxy.Refuse().For(3 * time.Second)},
			{"throttled", faultproxy.TooManyRequests(time.Second).On(faultproxy.Claim, faultproxy.Complete).For(6 * time.Second)},
		} {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				s := startServer(t, nil)
				p := faultproxy.Start(t, s.URL)
				direct := sdk(t, s.URL)
				dir := t.TempDir()
				task := submit(t, direct, client.SubmitParams{Queue: "exec-outage", MaxAttempts: 1})
				startExecWorker(t, bin, p.URL(), "exec-outage", nil, "--queue", "exec-outage", "--exec",
					`echo run >> `+dir+`/runs; while [ ! -e `+dir+`/go ]; do sleep 0.02; done; echo '{"ok":true}'`)
				poll(t, 30*time.Second, "the command to start", func() bool {
					_, err := os.Stat(filepath.Join(dir, "runs"))
					return err == nil
				})
				fault := p.Inject(c.fault)
				require.NoError(t, os.WriteFile(filepath.Join(dir, "go"), nil, 0o600))
				poll(t, 60*time.Second, "the task to finish", finished(t, direct, task.ID))
				got := getTask(t, direct, task.ID)
				require.Equal(t, client.StatusDone, got.Status, "dead reason %q, last error %q", got.DeadReason, got.LastError)
				require.JSONEq(t, `{"ok":true}`, string(got.Result))
				runs, err := os.ReadFile(filepath.Join(dir, "runs"))
				require.NoError(t, err)
				require.Equal(t, "run\n", string(runs), "the command ran once")
				require.Greater(t, fault.Hits(), 5)
			})
		}
	})

	// A worker that runs one command at a time reports each result on the
	// claim that asks for its next task (the Go runner does it): three
	// tasks cost no complete request.
	t.Run("results ride the next claim", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		p := faultproxy.Start(t, s.URL)
		direct := sdk(t, s.URL)
		var ids []string
		for i := range 3 {
			ids = append(ids, submit(t, direct, client.SubmitParams{Queue: "exec-fused", Payload: i}).ID)
		}
		startExecWorker(t, bin, p.URL(), "exec-fused", nil, "--queue", "exec-fused", "--exec", `cat`)
		for _, id := range ids {
			poll(t, 60*time.Second, "the tasks to finish", finished(t, direct, id))
		}
		for i, id := range ids {
			got := getTask(t, direct, id)
			require.Equal(t, client.StatusDone, got.Status, "dead reason %q, last error %q", got.DeadReason, got.LastError)
			require.JSONEq(t, strconv.Itoa(i), string(got.Result))
		}
		require.Zero(t, p.Count(faultproxy.Complete, ""), "no complete on its own")
		require.GreaterOrEqual(t, p.Count(faultproxy.Claim, ""), len(ids)+1, "a claim per task, and one for the last task's result")
	})

	// Item 4: SIGTERM drains: a command that outlives --drain-timeout is
	// stopped and its task, on its last attempt, released in one request:
	// PENDING with its attempt given back.
	t.Run("drain releases", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		p := faultproxy.Start(t, s.URL)
		direct := sdk(t, s.URL)
		dir := t.TempDir()
		var ids []string
		for range 2 {
			ids = append(ids, submit(t, direct, client.SubmitParams{Queue: "exec-drain", MaxAttempts: 1}).ID)
		}
		w := startExecWorker(t, bin, p.URL(), "exec-drain", nil, "--queue", "exec-drain", "--concurrency", "2",
			"--drain-timeout", "100ms", "--exec", `echo $$ >> `+dir+`/pids; exec sleep 60`)
		running := pids(t, filepath.Join(dir, "pids"), 2)
		w.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.exited(60*time.Second))
		allDead(t, "the commands to be stopped", running)
		for _, id := range ids {
			got := getTask(t, direct, id)
			require.Equal(t, client.StatusPending, got.Status)
			require.Equal(t, 0, got.Attempts)
			require.Equal(t, []client.AttemptOutcome{client.AttemptReleased}, outcomes(t, direct, id))
		}
		require.Equal(t, 1, p.Count(faultproxy.ReleaseBatch, faultproxy.ActionForward))
		require.Zero(t, p.Count(faultproxy.Fail, ""))
	})

	// Item 5: the outcome is the started process's exit status: a command
	// that exits 0 leaving a child that holds its standard output completes
	// (with what it printed), and the child is stopped with it.
	t.Run("exit status decides, leftovers are reaped", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		dir := t.TempDir()
		task := submit(t, direct, client.SubmitParams{Queue: "exec-leftover", MaxAttempts: 1})
		startExecWorker(t, bin, s.URL, "exec-leftover", nil, "--queue", "exec-leftover", "--exec",
			`sleep 60 & echo $! > `+dir+`/pids; echo '{"done":1}'`)
		poll(t, 60*time.Second, "the task to finish", finished(t, direct, task.ID))
		got := getTask(t, direct, task.ID)
		require.Equal(t, client.StatusDone, got.Status, "dead reason %q, last error %q", got.DeadReason, got.LastError)
		require.JSONEq(t, `{"done":1}`, string(got.Result))
		allDead(t, "the leftover child to be stopped", pids(t, filepath.Join(dir, "pids"), 1))
	})

	// Item 5: commands die with their worker, however it dies: every
	// process of a command's group goes when the worker is killed with
	// SIGKILL.
	t.Run("commands die with a killed worker", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		dir := t.TempDir()
		submit(t, direct, client.SubmitParams{Queue: "exec-kill"})
		w := startExecWorker(t, bin, s.URL, "exec-kill", nil, "--queue", "exec-kill", "--exec",
			`sleep 60 & echo $! >> `+dir+`/pids; sleep 60 | cat & echo $! >> `+dir+`/pids; echo $$ >> `+dir+`/pids; wait`)
		running := pids(t, filepath.Join(dir, "pids"), 3)
		w.Signal(t, syscall.SIGKILL)
		w.exited(30 * time.Second)
		allDead(t, "the commands of a killed worker to die", running)
	})

	// Item 5: SIGHUP (a closed terminal) drains like SIGTERM: the command is
	// stopped, its task released, and the worker exits 0.
	t.Run("SIGHUP drains", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		dir := t.TempDir()
		task := submit(t, direct, client.SubmitParams{Queue: "exec-hup", MaxAttempts: 1})
		w := startExecWorker(t, bin, s.URL, "exec-hup", nil, "--queue", "exec-hup", "--drain-timeout", "100ms", "--exec",
			`echo $$ >> `+dir+`/pids; exec sleep 60`)
		running := pids(t, filepath.Join(dir, "pids"), 1)
		w.Signal(t, syscall.SIGHUP)
		require.Equal(t, 0, w.exited(60*time.Second))
		allDead(t, "the command to be stopped", running)
		got := getTask(t, direct, task.ID)
		require.Equal(t, client.StatusPending, got.Status)
		require.Equal(t, []client.AttemptOutcome{client.AttemptReleased}, outcomes(t, direct, task.ID))
	})

	// Item 5: a second SIGTERM forces the stop: without waiting for the
	// drain timeout (5 minutes here), every command's group is killed, even
	// one that ignores SIGTERM, the tasks are released and the worker exits.
	t.Run("second signal forces the stop", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		dir := t.TempDir()
		task := submit(t, direct, client.SubmitParams{Queue: "exec-force", MaxAttempts: 1})
		w := startExecWorker(t, bin, s.URL, "exec-force", nil, "--queue", "exec-force", "--drain-timeout", "5m", "--exec",
			`trap '' TERM; sleep 300 & echo $! >> `+dir+`/pids; echo $$ >> `+dir+`/pids; wait`)
		running := pids(t, filepath.Join(dir, "pids"), 2)
		w.Signal(t, syscall.SIGTERM)
		poll(t, 30*time.Second, "the worker to start draining", func() bool { return strings.Contains(w.Output(), "draining") })
		w.Signal(t, syscall.SIGTERM)
		require.Equal(t, 0, w.exited(60*time.Second))
		allDead(t, "every process of the command to be killed", running)
		got := getTask(t, direct, task.ID)
		require.Equal(t, client.StatusPending, got.Status)
		require.Equal(t, []client.AttemptOutcome{client.AttemptReleased}, outcomes(t, direct, task.ID))
	})

	// Item 6: partitioned from the server for longer than the lease (4 s),
	// the worker stops the command before the task can start elsewhere,
	// and reports nothing for it.
	t.Run("lost lease stops the command", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, func(c *app.Config) { c.App.DefaultLeaseSeconds = 4 })
		p := faultproxy.Start(t, s.URL)
		direct := sdk(t, s.URL)
		dir := t.TempDir()
		task := submit(t, direct, client.SubmitParams{Queue: "exec-partition"})
		startExecWorker(t, bin, p.URL(), "exec-partition", nil, "--queue", "exec-partition", "--exec",
			`echo $$ >> `+dir+`/pids; exec sleep 60`)
		running := pids(t, filepath.Join(dir, "pids"), 1)
		partition := p.Inject(faultproxy.Hang().For(12 * time.Second))
		taken := claimAsOther(t, direct, "exec-partition")
		require.Equal(t, task.ID, taken.ID)
		require.False(t, alive(running[0]), "the partitioned worker's command still ran when the task went to another worker")
		partition.Remove()
		require.Zero(t, p.Count(faultproxy.Complete, faultproxy.ActionForward))
		require.Zero(t, p.Count(faultproxy.Fail, faultproxy.ActionForward))
	})

	// Item 3: whatever a command prints, the worker's memory stays bounded:
	// 256 MiB of output fail the task with the documented error, and the
	// worker's peak resident size stays far below it.
	t.Run("bounded output", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		task := submit(t, direct, client.SubmitParams{Queue: "exec-flood"})
		w := startExecWorker(t, bin, s.URL, "exec-flood", nil, "--queue", "exec-flood", "--exec", `head -c 268435456 /dev/zero`)
		poll(t, 60*time.Second, "the task to finish", finished(t, direct, task.ID))
		got := getTask(t, direct, task.ID)
		require.Equal(t, client.StatusDead, got.Status)
		require.Equal(t, client.DeadNonRetryable, got.DeadReason)
		require.Equal(t, "command output exceeds 1048576 bytes", got.LastError)
		require.Less(t, vmHWM(t, w.Pid()), int64(128<<20), "peak resident size of the worker")
	})

	// Item 8: the worker's credentials stay with the worker: its API key
	// and database URL are not in a command's environment, unless passed
	// with --pass-env; the rest of its environment is.
	t.Run("credentials withheld", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		env := []string{"TASKMASTER_API_KEY=tmk_secret", "TASKMASTER_DATABASE_URL=postgres://secret@db/x", "WORKER_OTHER=kept"}
		script := `printf '{"key":"%s","db":"%s","other":"%s"}' "${TASKMASTER_API_KEY-unset}" "${TASKMASTER_DATABASE_URL-unset}" "${WORKER_OTHER-unset}"`
		withheld := submit(t, direct, client.SubmitParams{Queue: "exec-env"})
		passed := submit(t, direct, client.SubmitParams{Queue: "exec-env-pass"})
		startExecWorker(t, bin, s.URL, "exec-env", env, "--queue", "exec-env", "--exec", script)
		startExecWorker(t, bin, s.URL, "exec-env-pass", env, "--queue", "exec-env-pass", "--pass-env", "TASKMASTER_API_KEY", "--exec", script)
		for _, id := range []string{withheld.ID, passed.ID} {
			poll(t, 60*time.Second, "the task to finish", finished(t, direct, id))
		}
		require.JSONEq(t, `{"key":"unset","db":"unset","other":"kept"}`, string(getTask(t, direct, withheld.ID).Result))
		require.JSONEq(t, `{"key":"tmk_secret","db":"unset","other":"kept"}`, string(getTask(t, direct, passed.ID).Result))
	})

	// Item 9: any output is a result: output that is no storable text (a
	// NUL byte, invalid UTF-8) is stored base64-encoded under
	// "stdout_base64"; JSON that PostgreSQL cannot hold is stored as text.
	t.Run("any output is a result", func(t *testing.T) {
		t.Parallel()
		s := startServer(t, nil)
		direct := sdk(t, s.URL)
		cases := []struct {
			script string
			want   any
		}{
			{`printf 'a\000b'`, map[string]any{"stdout_base64": base64.StdEncoding.EncodeToString([]byte("a\x00b"))}},
			{`printf '\377\376 latin-1 caf\351'`, map[string]any{"stdout_base64": base64.StdEncoding.EncodeToString([]byte("\xff\xfe latin-1 caf\xe9"))}},
			{`printf '{"s":"\\u0000"}'`, `{"s":"\u0000"}`},
			{`printf 'caf\303\251\n'`, "café"},
		}
		ids := make([]string, len(cases))
		for i, c := range cases {
			queue := fmt.Sprintf("exec-out-%d", i)
			ids[i] = submit(t, direct, client.SubmitParams{Queue: queue, MaxAttempts: 1}).ID
			startExecWorker(t, bin, s.URL, queue, nil, "--queue", queue, "--exec", c.script)
		}
		for i, c := range cases {
			poll(t, 60*time.Second, "the task to finish", finished(t, direct, ids[i]))
			got := getTask(t, direct, ids[i])
			require.Equal(t, client.StatusDone, got.Status, "%s: dead reason %q, last error %q", c.script, got.DeadReason, got.LastError)
			var res any
			require.NoError(t, json.Unmarshal(got.Result, &res))
			require.Equal(t, c.want, res, c.script)
		}
	})
}
