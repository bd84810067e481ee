// Package sdks_test holds the Go, Python and TypeScript SDKs to one
// conformance scenario against the real server: a throwaway PostgreSQL
// (pgtest), the real binary (tests/binary), and between them and each SDK a
// fault-injecting proxy (faultproxy_test.go) that also validates every
// exchange against docs/openapi.yaml.
//
// The scenario (each SDK drives it from its own test; the assertions are the
// same in all three, and this package checks the database afterwards the
// same way for all three):
//
//  1. Submit 200 tasks in one batch to the queue TASKMASTER_CONFORMANCE_QUEUE:
//     task 0 "retry" (fails its first attempt, retryable; retry base 0.1 s),
//     1 "dead" (NonRetryable), 2 "snooze" (snoozes 1 s once), 3 "next"
//     (completes and enqueues one "child" task), 4 "cancel" (runs until its
//     context is cancelled), 5-199 "ok" (20 ms of work). Payloads are
//     {"kind": ..., "i": index}.
//  2. Arm the proxy to lose the answer of the next claim that carries tasks.
//  3. Start worker process A (concurrency 4, claim wait 1 s, drain timeout
//     10 s, lease 30 s), which logs "start <id> <attempt>" and "done <id>
//     <attempt>" lines to TASKMASTER_CONFORMANCE_LOG.
//  4. When task 4 is RUNNING, cancel it; wait until it is DEAD.
//  5. When 60 tasks are done, SIGTERM A: it exits 0 and no task of the queue
//     is RUNNING.
//  6. Start worker process B; when every task (201 with the child) is
//     finished, SIGTERM B: it exits 0.
//  7. Assert: "ok" and "child" tasks DONE with one attempt, started and done
//     once each; "retry" DONE after 2 attempts; "dead" DEAD non_retryable;
//     "snooze" DONE with one snooze and one attempt; "next" DONE with its
//     child DONE; "cancel" DEAD cancelled; exactly one claim answer was lost
//     and a claim with the same request id got the same tasks.
package sdks_test

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/tests/binary"
	"github.com/taskmaster/taskmaster/tests/faultproxy"
	"github.com/taskmaster/taskmaster/tests/spectest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// EnvRequireSDKs makes a missing python3 (3.9+) or node (18+) and npm fail
// the SDK tests instead of skipping them (CI sets it).
const EnvRequireSDKs = "TASKMASTER_REQUIRE_SDKS"

const (
	scenarioTasks = 200
	// waitFor bounds each wait of the harness.
	waitFor = 3 * time.Minute
)

// harness is one server, its database, and a fault proxy in front of it.
type harness struct {
	db         *sqlx.DB
	server     *binary.Process
	faults     *faults
	url        string // the fault proxy's: what the SDKs talk to
	openapi    string // docs/openapi.yaml as JSON, for the SDKs' contract checks
	hasRelease bool
}

func start(t *testing.T) *harness {
	t.Helper()
	databaseURL := pgtest.NewDatabase(t)
	db, err := sqlx.Connect("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	srv := binary.Serve(t, binary.Build(t),
		"TASKMASTER_DATABASE_URL="+databaseURL,
		"TASKMASTER_LOG_LEVEL=info", // binary.Serve reads the listening address from the info log
		"TASKMASTER_DB_MAX_CONNS=8",
		// The server's heartbeat interval (a third of this) is also the
		// grace a claim's answer has to arrive before a heartbeat that does
		// not list its tasks may take them back as orphaned: 5 s, so that a
		// loaded machine's slow answers are not taken for lost ones (at
		// 500 ms, and even 1.5 s, the whole suite's load on two cores
		// orphaned tasks whose answers were merely slow, and they ran
		// twice). The SDKs' workers beat every second all the same
		// (their own heartbeat interval setting): cancels and lease
		// renewals need no more.
		"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS=15",
		"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=30",
		"TASKMASTER_LEASE_REAPER_INTERVAL_MS=200",
		"TASKMASTER_REAPER_INTERVAL_MS=500",
		"TASKMASTER_OUTBOX_POLL_INTERVAL_MS=50",
	)
	f := startFaults(t, srv.URL)

	spec, err := json.Marshal(spectest.Load(t))
	require.NoError(t, err)
	specFile := filepath.Join(t.TempDir(), "openapi.json")
	require.NoError(t, os.WriteFile(specFile, spec, 0o600))

	// Does the server hand tasks back without spending an attempt (issue
	// 29's release call)? A route it lacks is a not-found problem; a task
	// it lacks is task-not-found.
	resp, err := http.Post(srv.URL+"/tasks/v1/00000000-0000-7000-8000-000000000000/release", "application/json",
		strings.NewReader(`{"worker_id":"probe","lease_id":"00000000-0000-7000-8000-000000000000"}`))
	require.NoError(t, err)
	var prob struct {
		Type string `json:"type"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&prob)
	_ = resp.Body.Close()
	return &harness{db: db, server: srv, faults: f, url: f.proxy.URL(), openapi: specFile,
		hasRelease: prob.Type != client.ProblemNotFound && resp.StatusCode != http.StatusMethodNotAllowed}
}

// env is what an SDK's tests get.
func (h *harness) env(queue string) []string {
	release := "0"
	if h.hasRelease {
		release = "1"
	}
	return append(os.Environ(),
		"TASKMASTER_URL="+h.url,
		"TASKMASTER_FAULTS_URL="+h.faults.control.URL,
		"TASKMASTER_CONFORMANCE_QUEUE="+queue,
		"TASKMASTER_OPENAPI_JSON="+h.openapi,
		"TASKMASTER_SERVER_HAS_RELEASE="+release,
	)
}

func requireSDKs() bool { return os.Getenv(EnvRequireSDKs) == "1" }

func missing(t *testing.T, format string, args ...any) {
	t.Helper()
	if requireSDKs() {
		t.Fatalf(format+" (%s=1)", append(args, EnvRequireSDKs)...)
	}
	t.Skipf(format+" (set %s=1 to fail instead)", append(args, EnvRequireSDKs)...)
}

// repoRoot is the module's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// run runs a command in dir with env, streaming its output into the test
// log, and fails the test when it fails.
func run(t *testing.T, dir string, env []string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	t.Logf("%s %s:\n%s", name, strings.Join(args, " "), out)
	require.NoError(t, err, "%s %s failed", name, strings.Join(args, " "))
}

func TestPythonSDK(t *testing.T) {
	t.Parallel()
	python, err := exec.LookPath("python3")
	if err != nil {
		missing(t, "python3 is not installed")
	}
	out, err := exec.Command(python, "-c", "import sys; print(sys.version_info >= (3, 9))").Output()
	if err != nil || strings.TrimSpace(string(out)) != "True" {
		missing(t, "python3 is older than 3.9")
	}
	h := start(t)
	queue := "conformance-py"
	run(t, filepath.Join(repoRoot(t), "client", "python"), h.env(queue), python, "-m", "unittest", "discover", "-v", "-s", "tests", "-t", ".")
	h.verify(t, queue)
}

func TestTypeScriptSDK(t *testing.T) {
	t.Parallel()
	node, err := exec.LookPath("node")
	if err != nil {
		missing(t, "node is not installed")
	}
	out, err := exec.Command(node, "-p", "Number(process.versions.node.split('.')[0]) >= 18").Output()
	if err != nil || strings.TrimSpace(string(out)) != "true" {
		missing(t, "node is older than 18")
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		missing(t, "npm is not installed")
	}
	dir := filepath.Join(repoRoot(t), "client", "typescript")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "typescript")); err != nil {
		run(t, dir, os.Environ(), npm, "ci", "--no-audit", "--no-fund")
	}
	h := start(t)
	queue := "conformance-ts"
	run(t, dir, h.env(queue), npm, "test")
	h.verify(t, queue)
}

// TestGoConformance runs the scenario with the Go SDK: this test is the
// producer, tests/sdks/goworker the worker.
func TestGoConformance(t *testing.T) {
	t.Parallel()
	h := start(t)
	queue := "conformance-go"
	bin := filepath.Join(t.TempDir(), "goworker")
	gocmd, err := exec.LookPath("go")
	if err != nil {
		gocmd = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	args := []string{"build", "-o", bin}
	if binary.RaceEnabled {
		args = append(args, "-race")
	}
	run(t, repoRoot(t), os.Environ(), gocmd, append(args, "./tests/sdks/goworker")...)

	ctx := context.Background()
	c, err := client.New(h.url)
	require.NoError(t, err)
	kinds := make([]client.SubmitParams, scenarioTasks)
	for i := range kinds {
		kind := "ok"
		if i < 5 {
			kind = []string{"retry", "dead", "snooze", "next", "cancel"}[i]
		}
		kinds[i] = client.SubmitParams{Queue: queue, Payload: map[string]any{"kind": kind, "i": i},
			Retry: &client.Backoff{Base: 100 * time.Millisecond}}
	}
	tasks, _, err := c.SubmitBatch(ctx, kinds)
	require.NoError(t, err)
	h.arm(t, "lose-claim-answers", `{"count":1}`)

	logPath := filepath.Join(t.TempDir(), "conformance.log")
	workerEnv := append(os.Environ(), "TASKMASTER_URL="+h.url, "TASKMASTER_CONFORMANCE_QUEUE="+queue,
		"TASKMASTER_CONFORMANCE_LOG="+logPath)
	a := startWorker(t, bin, append(workerEnv, "TASKMASTER_CONFORMANCE_WORKER=conformance-go-a"))

	cancelled := tasks[4].ID
	eventually(t, func() bool {
		tk, err := c.Get(ctx, cancelled)
		require.NoError(t, err)
		return tk.Status == client.StatusRunning
	}, "the cancel task runs")
	_, err = c.Cancel(ctx, cancelled)
	require.NoError(t, err)
	eventually(t, func() bool {
		tk, err := c.Get(ctx, cancelled)
		require.NoError(t, err)
		return tk.Status == client.StatusDead
	}, "the cancelled task is DEAD")

	eventually(t, func() bool { return countLines(t, logPath, "done") >= 60 }, "60 tasks done")
	a.stop(t)
	page, err := c.List(ctx, client.ListParams{Queue: queue, Status: client.StatusRunning})
	require.NoError(t, err)
	require.Empty(t, page.Tasks, "a drained worker leaves no task RUNNING")

	b := startWorker(t, bin, append(workerEnv, "TASKMASTER_CONFORMANCE_WORKER=conformance-go-b"))
	eventually(t, func() bool {
		var unfinished int
		require.NoError(t, h.db.Get(&unfinished, `SELECT count(*) FROM tasks WHERE queue = $1 AND status NOT IN ('DONE', 'DEAD')`, queue))
		var all int
		require.NoError(t, h.db.Get(&all, `SELECT count(*) FROM tasks WHERE queue = $1`, queue))
		return all == scenarioTasks+1 && unfinished == 0
	}, "every task finished")
	b.stop(t)

	// The scenario's own assertions, as the Python and TypeScript tests make them.
	lines := readLines(t, logPath)
	for _, tk := range tasks[5:] {
		require.Equal(t, 1, lines["start "+tk.ID], "task %s started once", tk.ID)
		require.Equal(t, 1, lines["done "+tk.ID], "task %s done once", tk.ID)
	}
	h.verify(t, queue)
}

// worker is a running worker process.
type worker struct {
	cmd  *exec.Cmd
	done chan error
	out  *strings.Builder
}

func startWorker(t *testing.T, bin string, env []string) *worker {
	t.Helper()
	cmd := exec.Command(bin)
	cmd.Env = env
	out := &strings.Builder{}
	cmd.Stdout, cmd.Stderr = &syncWriter{w: out}, &syncWriter{w: out}
	require.NoError(t, cmd.Start())
	w := &worker{cmd: cmd, done: make(chan error, 1), out: out}
	go func() { w.done <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
		}
	})
	return w
}

// stop sends SIGTERM and requires a clean exit within the drain.
func (w *worker) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, w.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-w.done:
		require.NoError(t, err, "the worker exits 0 after SIGTERM:\n%s", w.out)
	case <-time.After(30 * time.Second):
		t.Fatalf("the worker did not stop within 30 s of SIGTERM:\n%s", w.out)
	}
}

type syncWriter struct {
	mu sync.Mutex
	w  *strings.Builder
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (h *harness) arm(t *testing.T, fault, body string) {
	t.Helper()
	resp, err := http.Post(h.faults.control.URL+"/"+fault, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
}

func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting: %s", what)
		time.Sleep(50 * time.Millisecond)
	}
}

// readLines counts the log's lines by their first two fields ("done <id>").
func readLines(t *testing.T, path string) map[string]int {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	require.NoError(t, err)
	defer f.Close()
	out := map[string]int{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 {
			out[fields[0]+" "+fields[1]]++
			out[fields[0]]++
		}
	}
	require.NoError(t, sc.Err())
	return out
}

func countLines(t *testing.T, path, what string) int { return readLines(t, path)[what] }

// verify checks, from the database and the proxy's log, what the scenario
// must leave behind, identically for every SDK.
func (h *harness) verify(t *testing.T, queue string) {
	t.Helper()
	type row struct {
		ID         string  `db:"id"`
		Kind       string  `db:"kind"`
		Status     string  `db:"status"`
		DeadReason *string `db:"dead_reason"`
		Attempts   int     `db:"attempts"`
		Snoozes    int     `db:"snoozes"`
		Outcomes   string  `db:"outcomes"`
	}
	var rows []row
	require.NoError(t, h.db.Select(&rows, `
		SELECT t.id, t.payload->>'kind' AS kind, t.status, t.dead_reason, t.attempts, t.snoozes,
		       coalesce((SELECT string_agg(a.outcome, ',' ORDER BY a.seq) FROM task_attempts a WHERE a.task_id = t.id), '') AS outcomes
		FROM tasks t WHERE t.queue = $1`, queue))
	require.Len(t, rows, scenarioTasks+1, "the scenario's tasks and the enqueued child")
	want := map[string]struct{ status, reason, outcomes string }{
		"ok":     {"DONE", "", "completed"},
		"child":  {"DONE", "", "completed"},
		"next":   {"DONE", "", "completed"},
		"retry":  {"DONE", "", "failed,completed"},
		"dead":   {"DEAD", "non_retryable", "failed"},
		"snooze": {"DONE", "", "snoozed,completed"},
		"cancel": {"DEAD", "cancelled", "cancelled"},
	}
	seen := map[string]int{}
	for _, r := range rows {
		w, ok := want[r.Kind]
		require.True(t, ok, "task %s has kind %q", r.ID, r.Kind)
		seen[r.Kind]++
		reason := ""
		if r.DeadReason != nil {
			reason = *r.DeadReason
		}
		require.Equal(t, w.status, r.Status, "%s task %s", r.Kind, r.ID)
		require.Equal(t, w.reason, reason, "%s task %s", r.Kind, r.ID)
		require.Equal(t, w.outcomes, r.Outcomes, "%s task %s: its attempts, none lost, none done twice", r.Kind, r.ID)
	}
	require.Equal(t, scenarioTasks-5, seen["ok"])
	for _, k := range []string{"child", "next", "retry", "dead", "snooze", "cancel"} {
		require.Equal(t, 1, seen[k], "one %s task", k)
	}

	require.Equal(t, 1, h.faults.proxy.Count(faultproxy.Claim, faultproxy.ActionDrop), "one claim answer was dropped")
	claims, _ := h.faults.log()
	var lost []claimRecord
	for _, c := range claims {
		if c.Lost && strings.HasPrefix(c.WorkerID, "conformance") {
			lost = append(lost, c)
		}
	}
	require.Len(t, lost, 1, "exactly one claim answer was lost")
	retried := slices.IndexFunc(claims, func(c claimRecord) bool {
		return !c.Lost && c.RequestID == lost[0].RequestID && slices.Equal(sorted(c.TaskIDs), sorted(lost[0].TaskIDs))
	})
	require.GreaterOrEqual(t, retried, 0, "the claim whose answer was lost was sent again with its request id and got the same tasks: %+v", lost[0])
}

func sorted(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
