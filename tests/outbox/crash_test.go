package outboxe2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// child is `taskmaster serve` running as a separate process (this test
// binary in child mode), so that it can be killed with SIGKILL.
type child struct {
	cmd  *exec.Cmd
	addr string
	done chan struct{}
}

// logTail keeps the last lines the children wrote, for failure reports.
type logTail struct {
	mu    sync.Mutex
	lines []string
}

func (l *logTail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
	if len(l.lines) > 200 {
		l.lines = l.lines[len(l.lines)-200:]
	}
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func startChild(t *testing.T, databaseURL string, logs *logTail) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(),
		childEnv+"=serve",
		"TASKMASTER_DATABASE_URL="+databaseURL,
		"TASKMASTER_HTTP_ADDR=127.0.0.1:0",
		"TASKMASTER_DB_MAX_CONNS=8",
		"TASKMASTER_LOG_LEVEL=info",
		"TASKMASTER_LOG_FORMAT=json",
		"TASKMASTER_OUTBOX_POLL_INTERVAL_MS=20",
		"TASKMASTER_OUTBOX_RETENTION=1h", // the test counts the outbox's events
	)
	stderr, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = cmd.Stdout
	require.NoError(t, cmd.Start())
	c := &child{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			logs.add(line)
			var entry struct {
				Msg  string `json:"msg"`
				Addr string `json:"addr"`
			}
			if json.Unmarshal([]byte(line), &entry) == nil && entry.Msg == "http server listening" {
				select {
				case addr <- entry.Addr:
				default:
				}
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() { c.kill() })
	select {
	case c.addr = <-addr:
	case <-c.done:
		t.Fatalf("the service exited while starting:\n%s", logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("the service did not start:\n%s", logs)
	}
	return c
}

// startKillable starts `taskmaster serve` as a child process on a fresh
// database, and returns the database, a connection to it, the children's
// log and the current child (tests replace it after a kill).
func startKillable(t *testing.T) (string, *sqlx.DB, *logTail, *atomic.Pointer[child]) {
	t.Helper()
	databaseURL := pgtest.NewDatabase(t)
	db, err := sqlx.Connect("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	logs := &logTail{}
	current := &atomic.Pointer[child]{}
	current.Store(startChild(t, databaseURL, logs))
	return databaseURL, db, logs, current
}

// kill sends SIGKILL and waits for the process to be gone.
func (c *child) kill() {
	_ = c.cmd.Process.Kill()
	<-c.done
}

// opStats counts a workload's requests: those answered with success, and
// those whose outcome is unknown (the server died during them).
type opStats struct {
	mu      sync.Mutex
	ok      map[string]int64
	unknown map[string]int64
	// failed counts the answers 500 and above: none is expected.
	failed map[string]int64
	total  atomic.Int64
}

func (s *opStats) record(op string, status int, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case err != nil:
		s.unknown[op]++
	case status >= 200 && status < 300:
		s.ok[op]++
	case status >= 500:
		s.failed[op]++
	}
	s.total.Add(1)
}

// randomWorker drives random transitions as one worker until stop: submit,
// submit a small graph of dependencies, claim, complete (sometimes
// enqueuing a task), fail (retryable or not), retry a dead task, cancel a
// pending or blocked one: so BLOCKED tasks, unblocking and failure
// cascades are in the mix. Requests that find the server down are retried later; refused
// transitions (409) are part of the mix.
func randomWorker(t *testing.T, c *client, id string, seed uint64, stats *opStats, stop <-chan struct{}) {
	rng := rand.New(rand.NewPCG(seed, seed))
	var held []taskJSON
	var dead, submitted []string
	for {
		select {
		case <-stop:
			return
		default:
		}
		var (
			op     string
			status int
			err    error
		)
		switch p := rng.IntN(100); {
		case p < 22:
			op = "submit"
			var tk taskJSON
			status, err = c.call("POST", "/tasks/v1", map[string]any{
				"queue": fmt.Sprintf("q%d", rng.IntN(3)), "max_attempts": 1 + rng.IntN(3),
			}, &tk)
			if status == http.StatusCreated {
				submitted = append(submitted, tk.ID)
			}
		case p < 30:
			// A small graph: a root, two tasks after it and one after
			// both, and maybe after a task submitted earlier (in any
			// state by now): BLOCKED, unblocked, or dead dependency_failed.
			op = "graph"
			after := []string{"a"}
			if len(submitted) > 0 {
				after = append(after, submitted[rng.IntN(len(submitted))])
			}
			item := func(ref string, deps ...string) map[string]any {
				return map[string]any{"queue": fmt.Sprintf("q%d", rng.IntN(3)), "max_attempts": 1 + rng.IntN(3), "ref": ref, "depends_on": deps}
			}
			var resp struct {
				Tasks []taskJSON `json:"tasks"`
			}
			status, err = c.call("POST", "/tasks/v1/batch", map[string]any{"tasks": []map[string]any{
				item("a"), item("b", after...), item("c", "a"), item("d", "b", "c"),
			}}, &resp)
			for _, tk := range resp.Tasks {
				submitted = append(submitted, tk.ID)
			}
		case p < 50:
			op = "claim"
			var resp claimResponse
			status, err = c.call("POST", "/tasks/v1/claim", map[string]any{"worker_id": id, "limit": 1 + rng.IntN(4)}, &resp)
			held = append(held, resp.Tasks...)
		case p < 70 && len(held) > 0:
			op = "complete"
			tk := held[0]
			held = held[1:]
			body := map[string]any{"worker_id": id, "lease_id": tk.LeaseID}
			if rng.IntN(3) == 0 {
				op = "complete+enqueue" // the next stage, in the completion's transaction
				body["enqueue"] = []map[string]any{{"queue": fmt.Sprintf("q%d", rng.IntN(3))}}
			}
			status, err = c.call("POST", "/tasks/v1/"+tk.ID+"/complete", body, nil)
		case p < 85 && len(held) > 0:
			op = "fail"
			tk := held[0]
			held = held[1:]
			var after taskJSON
			status, err = c.call("POST", "/tasks/v1/"+tk.ID+"/fail", map[string]any{
				"worker_id": id, "lease_id": tk.LeaseID, "error": "random", "retryable": rng.IntN(10) < 7,
			}, &after)
			if after.Status == "DEAD" {
				dead = append(dead, after.ID)
			}
		case p < 92 && len(dead) > 0:
			op = "retry"
			status, err = c.call("POST", "/tasks/v1/"+dead[0]+"/retry", nil, nil)
			dead = dead[1:]
		case p < 100 && len(submitted) > 0:
			op = "cancel"
			i := rng.IntN(len(submitted))
			status, err = c.call("POST", "/tasks/v1/"+submitted[i]+"/cancel", nil, nil)
			submitted = append(submitted[:i], submitted[i+1:]...)
		default:
			continue
		}
		stats.record(op, status, err)
		if err != nil {
			time.Sleep(20 * time.Millisecond) // the server is down: back off, not a synchronisation
		}
	}
}

// randomWorkload runs one randomWorker per base URL, each as its own
// registered worker, until finish.
type randomWorkload struct {
	stats *opStats
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startRandomWorkload(t *testing.T, bases ...func() string) *randomWorkload {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	t.Logf("workload seed %d", seed)
	w := &randomWorkload{stats: &opStats{ok: map[string]int64{}, unknown: map[string]int64{}, failed: map[string]int64{}}, stop: make(chan struct{})}
	for i, base := range bases {
		c := newClient(t, base)
		id := fmt.Sprintf("w%d", i)
		c.mustCall("POST", "/workers/v1/register", map[string]any{"id": id}, nil)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			randomWorker(t, c, id, seed+uint64(i), w.stats, w.stop)
		}()
	}
	return w
}

// waitOps polls until the workload has made n requests.
func (w *randomWorkload) waitOps(t *testing.T, n int64) {
	t.Helper()
	require.Eventually(t, func() bool { return w.stats.total.Load() >= n }, 120*time.Second, 5*time.Millisecond)
}

// finish stops the workers and waits for them.
func (w *randomWorkload) finish(t *testing.T) {
	close(w.stop)
	w.wg.Wait()
	t.Logf("requests: ok %v, unknown outcome %v, 5xx %v", w.stats.ok, w.stats.unknown, w.stats.failed)
	require.Empty(t, w.stats.failed, "no request may end in a server error")
}

// A random mixed workload runs against the service while it is killed with
// SIGKILL twice and restarted. Once the projections catch up, the statistics
// equal the tasks table and the totals equal the outbox's events.
func TestProjectionsSurviveKillsMidStream(t *testing.T) {
	t.Parallel()
	databaseURL, db, logs, current := startKillable(t)
	base := func() string { return "http://" + current.Load().addr }
	c := newClient(t, base)
	load := startRandomWorkload(t, base, base, base, base)
	for round := 1; round <= 2; round++ {
		load.waitOps(t, int64(round)*200)
		current.Load().kill()
		current.Store(startChild(t, databaseURL, logs))
	}
	load.waitOps(t, 600)
	load.finish(t)
	stats := load.stats

	waitCaughtUp(t, db)
	require.Equal(t, truthCounts(t, db), projectedCounts(t, db), "queue_status_counts equal the tasks table\n%s", logs)
	require.Equal(t,
		queryCounts(t, db, `SELECT status, count(*) FROM workers GROUP BY status`),
		queryCounts(t, db, `SELECT status, count FROM worker_status_counts WHERE count <> 0`))

	events := outboxEvents(t, db)
	want := expectedCounters(events)
	require.Equal(t, want, queryCounts(t, db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`),
		"metric counters equal the outbox's events")
	wantTasks := map[string]int64{}
	perKind := map[string]int64{}
	for k, n := range want {
		if strings.HasPrefix(k, "tasks_") {
			wantTasks[k] = n
			kind, _, _ := strings.Cut(k, "/")
			perKind[kind] += n
		}
	}
	require.Equal(t, wantTasks, queryCounts(t, db, `SELECT kind || '/' || queue || '/' || reason, count FROM queue_totals`),
		"queue totals equal the outbox's events")

	// Every task has its submission event, and the totals agree with what
	// the workload saw succeed (plus, at most, what it could not know).
	var tasks int64
	require.NoError(t, db.Get(&tasks, `SELECT count(*) FROM tasks`))
	require.Equal(t, tasks, perKind["tasks_submitted"])
	for kind, ops := range map[string]map[string]int64{
		"tasks_submitted": {"submit": 1, "graph": 4, "complete+enqueue": 1},
		"tasks_completed": {"complete": 1, "complete+enqueue": 1},
	} {
		var least, most int64
		for op, n := range ops {
			least += n * stats.ok[op]
			most += n * (stats.ok[op] + stats.unknown[op])
		}
		require.GreaterOrEqual(t, perKind[kind], least, kind)
		require.LessOrEqual(t, perKind[kind], most, kind)
	}
	require.Positive(t, perKind["tasks_requeued"])
	require.Positive(t, perKind["tasks_dead_lettered"])
	require.Positive(t, stats.ok["graph"])

	// The restarted service serves the same through the API.
	var resp struct {
		Queues []queueJSON `json:"queues"`
	}
	c.mustCall("GET", "/queues/v1", nil, &resp)
	api := map[string]int64{}
	for _, q := range resp.Queues {
		for status, n := range map[string]int64{"PENDING": q.Pending, "RUNNING": q.Running, "DONE": q.Done, "DEAD": q.Dead, "BLOCKED": q.Blocked} {
			if n != 0 {
				api[q.Queue+"/"+status] = n
			}
		}
		require.Equal(t, want["tasks_submitted/"+q.Queue+"/"], q.Totals.Submitted, q.Queue)
	}
	require.Equal(t, truthCounts(t, db), api)
}

// applyingSQL finds the projector's statement running: the one statement
// that applies a batch to every table and advances the positions.
const applyingSQL = `
SELECT count(*) FROM pg_stat_activity
WHERE datname = current_database() AND state = 'active' AND pid <> pg_backend_pid()
	AND position('INSERT INTO projector_positions' IN query) > 0`

// The real binary is killed with SIGKILL while its projector applies a large
// batch (caught in pg_stat_activity running the batch's statement; a round
// whose batch still committed before the kill landed does not count). The
// batch is not committed; after a restart it is applied once: the statistics
// equal the tasks table and the totals the outbox's events.
func TestKillingTheProjectorMidBatchAppliesItOnceAfterRestart(t *testing.T) {
	t.Parallel()
	databaseURL, db, logs, current := startKillable(t)
	c := newClient(t, func() string { return "http://" + current.Load().addr })
	c.mustCall("POST", "/workers/v1/register", map[string]any{"id": "w"}, nil)

	caught, rounds := 0, 0
	for ; rounds < 8 && caught == 0; rounds++ {
		round := rounds
		// A backlog the projector sees at once: held back by an open
		// transaction (outbox consumers read only below the oldest one).
		blocker, err := db.Beginx()
		require.NoError(t, err)
		_, err = blocker.Exec(`SELECT pg_current_xact_id()`)
		require.NoError(t, err)
		for b := range 30 {
			items := make([]map[string]any, 500)
			for i := range items {
				items[i] = map[string]any{"queue": fmt.Sprintf("q%d-%d", round, (b*500+i)%300)}
			}
			require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1/batch", map[string]any{"tasks": items}, nil))
		}
		var claimed claimResponse
		c.mustCall("POST", "/tasks/v1/claim", map[string]any{"worker_id": "w", "limit": 1000}, &claimed)
		require.NotEmpty(t, claimed.Tasks)
		var last struct {
			TX     string `db:"tx"`
			Offset int64  `db:"offset"`
		}
		require.NoError(t, db.Get(&last, `SELECT transaction_id::text AS tx, "offset" FROM watermill_taskmaster_events
			ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`))
		consumed := func() bool {
			var done bool
			require.NoError(t, db.Get(&done, `SELECT (last_processed_transaction_id, offset_acked) >= ($1::xid8, $2::bigint)
				FROM watermill_offsets_taskmaster_events WHERE consumer_group = $3`, last.TX, last.Offset, outbox.ProjectionsGroup))
			return done
		}
		require.NoError(t, blocker.Commit())

		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			var applying int
			require.NoError(t, db.Get(&applying, applyingSQL))
			if applying > 0 {
				current.Load().kill()
				caught++
				break
			}
			if consumed() {
				break // applied before the poll saw it: try again with another backlog
			}
		}
		if caught == 0 {
			continue
		}
		// The killed transaction commits nothing: its backend ends when it
		// finds the client gone, and the group's offset stays behind.
		require.Eventually(t, func() bool {
			var applying int
			require.NoError(t, db.Get(&applying, applyingSQL))
			return applying == 0
		}, 30*time.Second, 5*time.Millisecond)
		// Read before the restart, whose projector would apply the batch.
		committed := consumed()
		current.Store(startChild(t, databaseURL, logs))
		if committed {
			// The statement ended and the projector's COMMIT reached the
			// database between the poll that saw it and the kill: the batch
			// was applied whole before the kill, which caught nothing. Try
			// again with another backlog (the counts below still hold).
			caught--
			t.Logf("round %d: the batch committed before the kill landed", round)
		}
	}
	require.Positive(t, caught, "the projector was never caught applying a batch")
	t.Logf("killed the projector applying a batch (backlog %d)", rounds)

	waitCaughtUp(t, db)
	require.Equal(t, truthCounts(t, db), projectedCounts(t, db), "queue_status_counts equal the tasks table\n%s", logs)
	require.Equal(t, expectedCounters(outboxEvents(t, db)),
		queryCounts(t, db, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`),
		"metric counters equal the outbox's events")
}
