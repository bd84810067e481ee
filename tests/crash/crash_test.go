// Package crash_test kills the server process (SIGKILL) in the middle of
// claims under load and checks that no task is lost and none is completed
// twice: the real binary, on real PostgreSQL, with workers that speak the
// lease protocol over HTTP and tolerate the outage.
package crash_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/tests/binary"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

const (
	tasks        = 600
	workers      = 8
	claimLimit   = 10
	kills        = 3
	leaseSeconds = 2
	// Workers beat every 200 ms (a third of the stale threshold) and are
	// declared dead only after 10 s: the outage must not kill them.
	staleThreshold = "0.6"
	beatEvery      = 200 * time.Millisecond
	waitFor        = 90 * time.Second
)

// server is one `taskmaster serve` process.
type server struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// serve starts the binary on addr and waits until it is ready; extra are
// more TASKMASTER_* settings.
func serve(t *testing.T, bin, databaseURL, addr string, extra ...string) *server {
	t.Helper()
	cmd := exec.Command(bin, "serve")
	cmd.Env = []string{
		"PATH=" + os.Getenv("PATH"),
		"TASKMASTER_DATABASE_URL=" + databaseURL,
		"TASKMASTER_HTTP_ADDR=" + addr,
		"TASKMASTER_LOG_LEVEL=warn",
		"TASKMASTER_DB_MAX_CONNS=10",
		"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS=" + staleThreshold,
		"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=10",
		"TASKMASTER_REAPER_INTERVAL_MS=200",
		"TASKMASTER_LEASE_REAPER_INTERVAL_MS=100",
		"TASKMASTER_CLAIM_POLL_INTERVAL_MS=50",
		"TASKMASTER_RETENTION_TTL=0",
	}
	cmd.Env = append(cmd.Env, extra...)
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	require.NoError(t, cmd.Start())
	s := &server{cmd: cmd, out: out}
	t.Cleanup(func() { s.stop(t) })
	deadline := time.Now().Add(waitFor)
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		require.False(t, time.Now().After(deadline), "server not ready: %s", out)
		require.Nil(t, cmd.ProcessState, "server exited: %s", out)
		time.Sleep(20 * time.Millisecond)
	}
}

// kill ends the process with SIGKILL: no shutdown hook runs.
func (s *server) kill(t *testing.T) {
	t.Helper()
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGKILL))
	err := s.cmd.Wait()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit)
	require.Equal(t, syscall.SIGKILL, exit.Sys().(syscall.WaitStatus).Signal())
}

// stop ends the process gracefully, if it still runs.
func (s *server) stop(t *testing.T) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Logf("server stopped: %v\n%s", err, s.out)
		}
	case <-time.After(30 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
		t.Errorf("server did not stop on SIGTERM:\n%s", s.out)
	}
}

// ledger is what the workers saw, to check against the database.
type ledger struct {
	mu sync.Mutex
	// claimed counts, per task, the claims whose response a worker read.
	claimed map[string]int
	// acked is, per task, the "worker/lease" of each complete answered 200.
	acked map[string][]string
	// unsure is, per task, the "worker/lease" of completes sent without a
	// definite answer (the connection broke): they may have been applied.
	unsure map[string]map[string]bool
	// refused is, per task, the "worker/lease" of completes answered 409.
	refused map[string]map[string]bool
	// transportErrors counts requests that failed without an answer;
	// claimErrors those that were claims.
	transportErrors, claimErrors int
	unexpected                   []string
}

func (l *ledger) add(m map[string]map[string]bool, task, key string) {
	if m[task] == nil {
		m[task] = map[string]bool{}
	}
	m[task][key] = true
}

// apiTask is the part of the task object the workers use.
type apiTask struct {
	ID      string          `json:"id"`
	LeaseID string          `json:"lease_id"`
	Queue   string          `json:"queue"`
	Payload json.RawMessage `json:"payload"`
}

type leaseRef struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

// worker claims and completes tasks over HTTP, tolerating an unreachable
// server: it retries a report without a definite answer with the same lease,
// lists its in-flight tasks in every heartbeat, and drops the tasks the
// heartbeat says it lost.
type worker struct {
	id   string
	base string
	hc   *http.Client
	l    *ledger
	// next, when set, gives the tasks to enqueue with the complete of a
	// task (nil for none).
	next func(apiTask) []map[string]any

	mu       sync.Mutex
	inflight map[string]string // task id -> lease id
	lost     map[leaseRef]bool
}

func (w *worker) post(ctx context.Context, path string, body, out any) (int, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.base+path, bytes.NewReader(b))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return 0, fmt.Errorf("%s: %d %s: %w", path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode, nil
}

func (w *worker) register(ctx context.Context) {
	for ctx.Err() == nil {
		code, err := w.post(ctx, "/workers/v1/register", map[string]any{"id": w.id}, nil)
		if err == nil && code < 300 {
			return
		}
		pause(ctx, 50*time.Millisecond)
	}
}

func (w *worker) heartbeats(ctx context.Context) {
	for pause(ctx, beatEvery) {
		w.mu.Lock()
		refs := make([]leaseRef, 0, len(w.inflight))
		for id, lease := range w.inflight {
			refs = append(refs, leaseRef{ID: id, LeaseID: lease})
		}
		w.mu.Unlock()
		var answer struct {
			Lost []leaseRef `json:"lost"`
		}
		code, err := w.post(ctx, "/workers/v1/"+w.id+"/heartbeat", map[string]any{"tasks": refs}, &answer)
		switch {
		case err != nil:
		case code == http.StatusNotFound || code == http.StatusConflict:
			w.register(ctx)
		case code == http.StatusOK:
			w.mu.Lock()
			for _, r := range answer.Lost {
				w.lost[r] = true
			}
			w.mu.Unlock()
		}
	}
}

func (w *worker) run(ctx context.Context) {
	w.register(ctx)
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		w.heartbeats(ctx)
	}()
	defer func() { <-beats }()
	for ctx.Err() == nil {
		var claimed struct {
			Tasks []apiTask `json:"tasks"`
		}
		code, err := w.post(ctx, "/tasks/v1/claim", map[string]any{
			"worker_id": w.id, "limit": claimLimit, "lease_seconds": leaseSeconds, "wait_ms": 200,
		}, &claimed)
		switch {
		case err != nil:
			if ctx.Err() == nil {
				w.l.mu.Lock()
				w.l.transportErrors++
				w.l.claimErrors++
				w.l.mu.Unlock()
				pause(ctx, 20*time.Millisecond)
			}
			continue
		case code == http.StatusNotFound || code == http.StatusConflict:
			w.register(ctx)
			continue
		case code != http.StatusOK:
			w.unexpected(fmt.Sprintf("claim: %d", code))
			continue
		}
		w.mu.Lock()
		for _, tk := range claimed.Tasks {
			w.inflight[tk.ID] = tk.LeaseID
		}
		w.mu.Unlock()
		w.l.mu.Lock()
		for _, tk := range claimed.Tasks {
			w.l.claimed[tk.ID]++
		}
		w.l.mu.Unlock()
		for _, tk := range claimed.Tasks {
			w.complete(ctx, tk)
		}
	}
}

// complete reports tk done, retrying while no definite answer comes, unless
// a heartbeat says the task was lost.
func (w *worker) complete(ctx context.Context, tk apiTask) {
	key := w.id + "/" + tk.LeaseID
	defer func() {
		w.mu.Lock()
		delete(w.inflight, tk.ID)
		w.mu.Unlock()
	}()
	for ctx.Err() == nil {
		w.mu.Lock()
		lost := w.lost[leaseRef{ID: tk.ID, LeaseID: tk.LeaseID}]
		w.mu.Unlock()
		if lost {
			return
		}
		var problem struct {
			Type          string `json:"type"`
			CurrentStatus string `json:"current_status"`
		}
		body := map[string]any{"worker_id": w.id, "lease_id": tk.LeaseID, "result": map[string]string{"by": key}}
		if w.next != nil {
			if enqueue := w.next(tk); enqueue != nil {
				body["enqueue"] = enqueue
			}
		}
		code, err := w.post(ctx, "/tasks/v1/"+tk.ID+"/complete", body, &problem)
		w.l.mu.Lock()
		switch {
		case err != nil:
			// Sent without a definite answer: it may have been applied. That
			// holds when the test's own cancel cut the answer off too (it
			// cancels the moment the last task is DONE, which may be before
			// the complete that made it so has read its response).
			w.l.add(w.l.unsure, tk.ID, key)
			if ctx.Err() == nil {
				w.l.transportErrors++
			}
		case code == http.StatusOK:
			w.l.acked[tk.ID] = append(w.l.acked[tk.ID], key)
		case code == http.StatusConflict:
			w.l.add(w.l.refused, tk.ID, key)
		default:
			w.l.unexpected = append(w.l.unexpected, fmt.Sprintf("complete %s: %d %+v", tk.ID, code, problem))
		}
		w.l.mu.Unlock()
		if err == nil {
			return
		}
		pause(ctx, 20*time.Millisecond)
	}
}

func (w *worker) unexpected(s string) {
	w.l.mu.Lock()
	w.l.unexpected = append(w.l.unexpected, s)
	w.l.mu.Unlock()
}

// pause waits d (a worker's pace, not a synchronisation) and reports whether
// ctx is still alive.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func countDone(t *testing.T, db *sqlx.DB) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks WHERE status = 'DONE'`))
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(10 * time.Millisecond)
	}
}

// killDuring kills the server with SIGKILL kills times while the workers
// bring the DONE tasks to want, each time in the middle of the run,
// restarting it on the same database, and waits until want tasks are DONE.
func killDuring(t *testing.T, srv *server, bin, databaseURL, addr string, db *sqlx.DB, want int, extra ...string) {
	t.Helper()
	for k := 1; k <= kills; k++ {
		waitUntil(t, "more tasks done", func() bool { return countDone(t, db) >= k*want/(kills+1) })
		srv.kill(t)
		doneAtKill := countDone(t, db)
		t.Logf("SIGKILL %d with %d of %d tasks done", k, doneAtKill, want)
		require.Less(t, doneAtKill, want, "the kill came in the middle of the run")
		srv = serve(t, bin, databaseURL, addr, extra...)
	}
	waitUntil(t, "every task done", func() bool { return countDone(t, db) == want })
}

func newLedger() *ledger {
	return &ledger{claimed: map[string]int{}, acked: map[string][]string{}, unsure: map[string]map[string]bool{}, refused: map[string]map[string]bool{}}
}

// startWorkers runs the workers against base until the returned stop (also
// a cleanup), which waits for them.
func startWorkers(t *testing.T, base string, l *ledger, next func(apiTask) []map[string]any) (stop func()) {
	t.Helper()
	ctx, stopWorkers := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range workers {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		t.Cleanup(tr.CloseIdleConnections)
		w := &worker{
			id: "crash-w" + strconv.Itoa(i), base: base, l: l, next: next,
			hc:       &http.Client{Transport: tr, Timeout: 10 * time.Second},
			inflight: map[string]string{}, lost: map[leaseRef]bool{},
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.run(ctx)
		}()
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			stopWorkers()
			wg.Wait()
		}
	}
	t.Cleanup(stop)
	return stop
}

// submit posts tasks as one batch.
func submit(t *testing.T, base string, batch []map[string]any) {
	t.Helper()
	body, err := json.Marshal(map[string]any{"tasks": batch})
	require.NoError(t, err)
	resp, err := http.Post(base+"/tasks/v1/batch", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	_ = resp.Body.Close()
	require.Equal(t, http.StatusCreated, resp.StatusCode)
}

func TestSIGKILLMidClaimsLosesNoTaskAndCompletesNoneTwice(t *testing.T) {
	t.Parallel()
	bin := binary.Build(t)
	databaseURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	srv := serve(t, bin, databaseURL, addr)
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	base := "http://" + addr
	batch := make([]map[string]any, tasks)
	for i := range batch {
		batch[i] = map[string]any{"queue": "crash", "payload": i, "max_attempts": 20}
	}
	submit(t, base, batch)

	l := newLedger()
	stop := startWorkers(t, base, l, nil)

	// Kill the server while the workers are busy claiming and completing,
	// restart it on the same database, several times.
	killDuring(t, srv, bin, databaseURL, addr, db, tasks)
	stop()

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.unexpected)
	require.Positive(t, l.transportErrors, "the workers felt the kill")

	var rows []struct {
		ID       string `db:"id"`
		Status   string `db:"status"`
		Attempts int    `db:"attempts"`
		By       string `db:"by"`
	}
	require.NoError(t, db.Select(&rows, `SELECT id::text, status, attempts, result->>'by' AS by FROM tasks`))
	require.Len(t, rows, tasks, "no task vanished")
	lostResponses, retried := 0, 0
	for _, r := range rows {
		require.Equal(t, "DONE", r.Status, "task %s", r.ID)
		// Completed once: at most one complete was ever accepted, and the
		// stored result is that complete's (or, when its answer was lost in
		// the outage, one sent without a definite answer). A refused
		// complete never left its result.
		acked := l.acked[r.ID]
		require.LessOrEqual(t, len(acked), 1, "task %s completed twice: %v", r.ID, acked)
		if len(acked) == 1 {
			require.Equal(t, acked[0], r.By, "task %s: the stored result is the accepted complete's", r.ID)
		} else {
			require.True(t, l.unsure[r.ID][r.By], "task %s: DONE by %q, which no worker was told of and none sent unanswered", r.ID, r.By)
		}
		require.False(t, l.refused[r.ID][r.By] && !l.unsure[r.ID][r.By], "task %s: the stored result is a refused complete's", r.ID)
		// Attempts: every claim counts one; the claims no worker saw are
		// those whose response the outage swallowed.
		require.GreaterOrEqual(t, r.Attempts, l.claimed[r.ID], "task %s", r.ID)
		lostResponses += r.Attempts - l.claimed[r.ID]
		if r.Attempts > 1 {
			retried++
		}
	}
	require.LessOrEqual(t, lostResponses, l.claimErrors*claimLimit,
		"attempts beyond the claims the workers saw are only the claims cut off by the outage")
	t.Logf("%d tasks were claimed more than once, %d claim responses were lost, %d requests failed in the outages",
		retried, lostResponses, l.transportErrors)

	// The outbox holds at most one completion per task (the outbox janitor
	// may have deleted consumed rows, so fewer is fine).
	var doubles []string
	require.NoError(t, db.Select(&doubles, `
		SELECT e->>'task_id' FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.completed' GROUP BY 1 HAVING count(*) > 1`))
	require.Empty(t, doubles, "tasks completed twice in the outbox")
}

// A pipeline of three stages: each stage-1 task's complete enqueues one
// stage-2 task, whose complete enqueues one stage-3 task, while the server
// is killed with SIGKILL several times. The completion and the next stage's
// task commit together or not at all, so when every task is DONE each stage
// holds exactly one task per task of the stage before: none lost (a
// completion without its next stage) and none duplicated (a retried
// complete, or the complete of a holder whose lease was taken back,
// enqueuing again).
func TestSIGKILLMidPipelineLosesNoStageAndDuplicatesNone(t *testing.T) {
	t.Parallel()
	const perStage = tasks / 3
	bin := binary.Build(t)
	databaseURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	srv := serve(t, bin, databaseURL, addr)
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	base := "http://" + addr
	batch := make([]map[string]any, perStage)
	for i := range batch {
		batch[i] = map[string]any{"queue": "stage-1", "payload": map[string]any{"n": i}, "max_attempts": 20}
	}
	submit(t, base, batch)
	next := func(tk apiTask) []map[string]any {
		queue := map[string]string{"stage-1": "stage-2", "stage-2": "stage-3"}[tk.Queue]
		if queue == "" {
			return nil
		}
		return []map[string]any{{"queue": queue, "payload": map[string]any{"from": tk.ID}, "max_attempts": 20}}
	}
	l := newLedger()
	stop := startWorkers(t, base, l, next)

	const all = 3 * perStage
	killDuring(t, srv, bin, databaseURL, addr, db, all)
	stop()

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.unexpected)
	require.Positive(t, l.transportErrors, "the workers felt the kill")

	var rows []struct {
		ID     string `db:"id"`
		Queue  string `db:"queue"`
		Status string `db:"status"`
		From   string `db:"from"`
	}
	require.NoError(t, db.Select(&rows, `SELECT id::text, queue, status, coalesce(payload->>'from', '') AS from FROM tasks`))
	require.Len(t, rows, all, "each stage holds one task per task of the stage before, no more")
	byID := map[string]string{}
	for _, r := range rows {
		byID[r.ID] = r.Queue
	}
	children := map[string]int{}
	perQueue := map[string]int{}
	for _, r := range rows {
		require.Equal(t, "DONE", r.Status, "task %s", r.ID)
		perQueue[r.Queue]++
		if r.Queue == "stage-1" {
			continue
		}
		want := map[string]string{"stage-2": "stage-1", "stage-3": "stage-2"}[r.Queue]
		require.Equal(t, want, byID[r.From], "task %s of %s comes from a task of %s", r.ID, r.Queue, want)
		children[r.From]++
	}
	require.Equal(t, map[string]int{"stage-1": perStage, "stage-2": perStage, "stage-3": perStage}, perQueue)
	for _, r := range rows {
		if r.Queue != "stage-3" {
			require.Equal(t, 1, children[r.ID], "task %s of %s enqueued exactly one next task", r.ID, r.Queue)
		}
	}
}

// A task spawns 1,000 children while it runs and completes with a join
// that depends on all of them and on itself; eight workers complete the
// children (and the join) while the server is killed with SIGKILL several
// times. The join is released exactly once (one task.unblocked: the outbox
// keeps every message here), only once every child is DONE, and reads
// every parent's result; nothing is lost or completed twice.
func TestSIGKILLMidFanOutReleasesTheJoinOnce(t *testing.T) {
	t.Parallel()
	const children = 1000
	bin := binary.Build(t)
	databaseURL := pgtest.NewDatabase(t)
	addr := freeAddr(t)
	keep := "TASKMASTER_OUTBOX_RETENTION=24h"
	srv := serve(t, bin, databaseURL, addr, keep)
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	// The spawner: claim the root, spawn the children, complete with the
	// join.
	base := "http://" + addr
	sp := &worker{id: "spawner", base: base, hc: http.DefaultClient}
	ctx := t.Context()
	submit(t, base, []map[string]any{{"queue": "fanout", "payload": "root"}})
	sp.register(ctx)
	var claimed struct {
		Tasks []apiTask `json:"tasks"`
	}
	code, err := sp.post(ctx, "/tasks/v1/claim", map[string]any{"worker_id": "spawner", "queue": "fanout", "lease_seconds": 600}, &claimed)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, claimed.Tasks, 1)
	root := claimed.Tasks[0]
	items := make([]map[string]any, children)
	for i := range items {
		items[i] = map[string]any{"queue": "kids", "payload": i, "max_attempts": 20}
	}
	var spawned struct {
		Tasks []apiTask `json:"tasks"`
	}
	code, err = sp.post(ctx, "/tasks/v1/"+root.ID+"/spawn", map[string]any{"worker_id": "spawner", "lease_id": root.LeaseID, "tasks": items}, &spawned)
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code)
	require.Len(t, spawned.Tasks, children)
	deps := make([]string, 0, children+1)
	for _, k := range spawned.Tasks {
		deps = append(deps, k.ID)
	}
	deps = append(deps, root.ID)
	var done struct {
		Enqueued []apiTask `json:"enqueued"`
	}
	code, err = sp.post(ctx, "/tasks/v1/"+root.ID+"/complete", map[string]any{"worker_id": "spawner", "lease_id": root.LeaseID, "result": "spawned",
		"enqueue": []map[string]any{{"queue": "join", "depends_on": deps, "max_attempts": 20}}}, &done)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)
	require.Len(t, done.Enqueued, 1)
	join := done.Enqueued[0].ID

	l := newLedger()
	stop := startWorkers(t, base, l, nil)
	killDuring(t, srv, bin, databaseURL, addr, db, children+2, keep)
	stop()

	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.unexpected)
	require.Positive(t, l.transportErrors, "the workers felt the kill")
	var unblocked, completed int
	require.NoError(t, db.Get(&unblocked, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'task_id' = $1 AND e->>'type' = 'task.unblocked'`, join))
	require.Equal(t, 1, unblocked, "the join was released exactly once")
	require.NoError(t, db.Get(&completed, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'task_id' = $1 AND e->>'type' = 'task.completed'`, join))
	require.Equal(t, 1, completed, "the join completed once")
	var row struct {
		Status   string    `db:"status"`
		Blockers int       `db:"blockers"`
		Claimed  time.Time `db:"claimed_at"`
		LastKid  time.Time `db:"last_kid"`
		Parents  int       `db:"parents"`
		Done     int       `db:"done"`
		Workflow string    `db:"workflow_id"`
	}
	require.NoError(t, db.Get(&row, `
		SELECT j.status, j.blockers, j.claimed_at, j.workflow_id::text,
			(SELECT max(p.finished_at) FROM task_dependencies d JOIN tasks p ON p.id = d.parent_id WHERE d.child_id = j.id) AS last_kid,
			(SELECT count(*) FROM task_dependencies d WHERE d.child_id = j.id) AS parents,
			(SELECT count(*) FROM task_dependencies d JOIN tasks p ON p.id = d.parent_id WHERE d.child_id = j.id AND p.status = 'DONE' AND p.result IS NOT NULL) AS done
		FROM tasks j WHERE j.id = $1`, join))
	require.Equal(t, "DONE", row.Status)
	require.Zero(t, row.Blockers)
	require.Equal(t, children+1, row.Parents)
	require.Equal(t, children+1, row.Done, "every parent DONE, each with its result")
	// The join ran only after its last parent finished. Not by their
	// timestamps: a task's times are its transaction's start (now()), and
	// a claim transaction that began before the last completion's and
	// claimed once that one committed carries the earlier time. By the
	// outbox: a transaction's events take their offsets before it commits,
	// and the join's claim could see it PENDING only after the last
	// completion committed, so its claim event's offset is the larger.
	var lastParentDone, joinClaimed int64
	require.NoError(t, db.Get(&lastParentDone, `
		SELECT max(m."offset") FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.completed' AND (e->>'task_id')::uuid IN (SELECT parent_id FROM task_dependencies WHERE child_id = $1)`, join))
	require.NoError(t, db.Get(&joinClaimed, `
		SELECT min(m."offset") FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.claimed' AND e->>'task_id' = $1`, join))
	require.Greater(t, joinClaimed, lastParentDone, "the join was claimed only after its last parent's completion committed")
	require.WithinDuration(t, row.LastKid, row.Claimed, time.Minute, "and its times say so, to a transaction's length")
	require.Equal(t, root.ID, row.Workflow)
	var doubles []string
	require.NoError(t, db.Select(&doubles, `
		SELECT e->>'task_id' FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.completed' GROUP BY 1 HAVING count(*) > 1`))
	require.Empty(t, doubles, "tasks completed twice in the outbox")
	require.Equal(t, children+2, countDone(t, db))
}
