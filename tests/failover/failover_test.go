// Package failover_test freezes the leader of every background job (SIGSTOP)
// among three `taskmaster serve` processes on one database, and checks that
// the others take every job over, that the statistics keep up, and that the
// frozen leader, thawed (SIGCONT), commits nothing more and follows.
package failover_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/tests/binary"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// jobs are the background jobs, as named in leader_leases.
var jobs = []string{"heartbeat-reaper", "deadline-reaper", "lease-reaper", "retention", "scheduler"}

const (
	leaseTTL = 2 * time.Second
	interval = 300 * time.Millisecond
	// waitFor bounds every wait: far above what any needs, so that only a
	// real failure reaches it. The figures measured go to the log (and
	// docs/operations.md), not into assertions.
	waitFor = 30 * time.Second
)

func env(databaseURL string) []string {
	ms := strconv.FormatInt(interval.Milliseconds(), 10)
	return []string{
		"TASKMASTER_DATABASE_URL=" + databaseURL,
		"TASKMASTER_LOG_LEVEL=info",
		"TASKMASTER_DB_MAX_CONNS=6",
		"TASKMASTER_LEADER_LEASE_SECONDS=" + strconv.FormatFloat(leaseTTL.Seconds(), 'f', -1, 64),
		"TASKMASTER_REAPER_INTERVAL_MS=" + ms,
		"TASKMASTER_DEADLINE_REAPER_INTERVAL_MS=" + ms,
		"TASKMASTER_LEASE_REAPER_INTERVAL_MS=" + ms,
		"TASKMASTER_RETENTION_INTERVAL_MS=" + ms,
		"TASKMASTER_RETENTION_TTL=10m",
		// Shorter than the lease: a leader frozen inside a transaction
		// holds the lease row (and the outbox consumers' offsets row) at
		// most this long.
		"TASKMASTER_DB_IDLE_IN_TRANSACTION_TIMEOUT_MS=1000",
		"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS=60",
		"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=120",
		"TASKMASTER_OUTBOX_POLL_INTERVAL_MS=50",
		"TASKMASTER_OUTBOX_RETENTION=1h", // the test counts the outbox's events
	}
}

// lease is one row of leader_leases.
type lease struct {
	Job        string    `db:"job"`
	Owner      string    `db:"owner"`
	Term       int64     `db:"term"`
	ExpiresAt  time.Time `db:"expires_at"`
	AcquiredAt time.Time `db:"acquired_at"`
}

// pid is the process id in an owner name (host/pid/random).
func (l lease) pid() int {
	parts := strings.Split(l.Owner, "/")
	if len(parts) < 3 {
		return 0
	}
	pid, _ := strconv.Atoi(parts[len(parts)-2])
	return pid
}

func leases(t *testing.T, db *sqlx.DB) map[string]lease {
	t.Helper()
	var rows []lease
	require.NoError(t, db.Select(&rows, `SELECT job, owner, term, expires_at, acquired_at FROM leader_leases`))
	out := map[string]lease{}
	for _, r := range rows {
		out[r.Job] = r
	}
	return out
}

func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: "+format, append([]any{waitFor}, args...)...)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// api calls p's API and decodes the answer into out (when not nil).
func api(t *testing.T, p *binary.Process, method, path string, body any, want int, out any) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, p.URL+path, rd)
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: waitFor}).Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, want, resp.StatusCode, "%s %s: %s", method, path, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out))
	}
}

type taskJSON struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

func submit(t *testing.T, p *binary.Process, body map[string]any) string {
	t.Helper()
	var tk taskJSON
	api(t, p, http.MethodPost, "/tasks/v1", body, http.StatusCreated, &tk)
	return tk.ID
}

func claim(t *testing.T, p *binary.Process, workerID, queue string) taskJSON {
	t.Helper()
	var resp struct{ Tasks []taskJSON }
	api(t, p, http.MethodPost, "/tasks/v1/claim", map[string]any{"worker_id": workerID, "queue": queue}, http.StatusOK, &resp)
	require.Len(t, resp.Tasks, 1)
	return resp.Tasks[0]
}

// transition is one lifecycle event in the outbox.
type transition struct {
	Type     string `json:"type"`
	TaskID   string `json:"task_id"`
	WorkerID string `json:"worker_id"`
	From     string `json:"from"`
	To       string `json:"to"`
	Reason   string `json:"reason"`
	Attempt  int    `json:"attempt"`
}

func outbox(t *testing.T, db *sqlx.DB) []transition {
	t.Helper()
	var rows [][]byte
	require.NoError(t, db.Select(&rows, `
		SELECT e::text FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		ORDER BY m."offset"`))
	out := make([]transition, len(rows))
	for i, r := range rows {
		require.NoError(t, json.Unmarshal(r, &out[i]))
	}
	return out
}

// happened returns the events of the given type about the task (or, for
// worker events, the worker).
func happened(events []transition, typ, id string) []transition {
	var out []transition
	for _, e := range events {
		if e.Type == typ && (e.TaskID == id || (e.TaskID == "" && e.WorkerID == id)) {
			out = append(out, e)
		}
	}
	return out
}

// projectedMatchesTruth reports whether p's GET /queues/v1 counts equal the
// tasks table's for queues.
func projectedMatchesTruth(t *testing.T, db *sqlx.DB, p *binary.Process, queues []string) bool {
	t.Helper()
	var truth []struct {
		Queue  string `db:"queue"`
		Status string `db:"status"`
		N      int64  `db:"n"`
	}
	require.NoError(t, db.Select(&truth, `SELECT queue, status, count(*) AS n FROM tasks GROUP BY queue, status`))
	want := map[string]int64{}
	for _, r := range truth {
		want[r.Queue+"/"+r.Status] = r.N
	}
	var resp struct {
		Queues []struct {
			Queue                        string
			Pending, Running, Done, Dead int64
		}
	}
	api(t, p, http.MethodGet, "/queues/v1", nil, http.StatusOK, &resp)
	got := map[string]int64{}
	for _, q := range resp.Queues {
		for status, n := range map[string]int64{"PENDING": q.Pending, "RUNNING": q.Running, "DONE": q.Done, "DEAD": q.Dead} {
			got[q.Queue+"/"+status] = n
		}
	}
	for _, q := range queues {
		for _, status := range []string{"PENDING", "RUNNING", "DONE", "DEAD"} {
			if got[q+"/"+status] != want[q+"/"+status] {
				return false
			}
		}
	}
	return true
}

func TestFrozenLeaderIsReplacedAndCommitsNothingOnceThawed(t *testing.T) {
	t.Parallel()
	databaseURL := pgtest.NewDatabase(t)
	db, err := sqlx.Connect("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	bin := binary.Build(t)

	// The first instance leads every job; the two others follow.
	frozen := binary.Serve(t, bin, env(databaseURL)...)
	eventually(t, func() bool {
		ls := leases(t, db)
		for _, job := range jobs {
			if ls[job].pid() != frozen.Pid() {
				return false
			}
		}
		return true
	}, "the first instance leads every job")
	others := []*binary.Process{binary.Serve(t, bin, env(databaseURL)...), binary.Serve(t, bin, env(databaseURL)...)}
	live := others[0]
	before := leases(t, db)
	for _, job := range jobs {
		require.Equal(t, frozen.Pid(), before[job].pid(), "%s: the first instance still leads", job)
	}

	// Freeze it, wherever it is: between cycles or inside a transaction.
	frozen.Signal(t, syscall.SIGSTOP)
	var frozenAt time.Time
	require.NoError(t, db.Get(&frozenAt, `SELECT now()`))
	expiring := leases(t, db)

	// Work that each job must do, all due at once, through a live instance:
	// a dead worker's task (heartbeat reaper), a lease that ran out (lease
	// reaper), a deadline that passed (deadline reaper), a task finished
	// long ago (retention).
	for _, id := range []string{"doomed", "alive"} {
		api(t, live, http.MethodPost, "/workers/v1/register", map[string]any{"id": id}, http.StatusCreated, nil)
	}
	orphan := submit(t, live, map[string]any{"queue": "qa"})
	claim(t, live, "doomed", "qa")
	expired := submit(t, live, map[string]any{"queue": "qb"})
	claim(t, live, "alive", "qb")
	overdue := submit(t, live, map[string]any{"queue": "qc", "deadline": time.Now().Add(time.Hour)})
	old := submit(t, live, map[string]any{"queue": "qd"})
	held := claim(t, live, "alive", "qd")
	api(t, live, http.MethodPost, "/tasks/v1/"+old+"/complete",
		map[string]any{"worker_id": "alive", "lease_id": held.LeaseID, "result": 1}, http.StatusOK, nil)
	for _, stmt := range []string{
		`UPDATE workers SET last_heartbeat_at = now() - interval '1 hour' WHERE id = 'doomed'`,
		`UPDATE tasks SET lease_expires_at = now() WHERE id = '` + expired + `'`,
		`UPDATE tasks SET deadline = now() WHERE id = '` + overdue + `'`,
		`UPDATE tasks SET finished_at = now() - interval '1 hour' WHERE id = '` + old + `'`,
	} {
		_, err := db.Exec(stmt)
		require.NoError(t, err, stmt)
	}

	// Another instance takes every job over, in the next term, and does it.
	var after map[string]lease
	eventually(t, func() bool {
		after = leases(t, db)
		for _, job := range jobs {
			if after[job].Term != before[job].Term+1 {
				return false
			}
		}
		return true
	}, "every job changes hands")
	for _, job := range jobs {
		l := after[job]
		require.Contains(t, []int{others[0].Pid(), others[1].Pid()}, l.pid(), job)
		t.Logf("%-16s taken over %5d ms after the freeze, %4d ms after the lease expired (TTL %s, tick %s)",
			job, l.AcquiredAt.Sub(frozenAt).Milliseconds(), l.AcquiredAt.Sub(expiring[job].ExpiresAt).Milliseconds(), leaseTTL, interval)
	}
	var events []transition
	eventually(t, func() bool {
		events = outbox(t, db)
		return len(happened(events, "task.requeued", orphan)) > 0 && len(happened(events, "task.requeued", expired)) > 0 &&
			len(happened(events, "task.dead_lettered", overdue)) > 0 && len(happened(events, "task.cleaned", old)) > 0
	}, "every job's work is done")
	var doneAt time.Time
	require.NoError(t, db.Get(&doneAt, `SELECT now()`))
	t.Logf("every job's work done %d ms after the freeze", doneAt.Sub(frozenAt).Milliseconds())
	require.Equal(t, "worker_dead", happened(events, "task.requeued", orphan)[0].Reason)
	require.Equal(t, "lease_expired", happened(events, "task.requeued", expired)[0].Reason)
	require.Equal(t, "deadline", happened(events, "task.dead_lettered", overdue)[0].Reason)
	require.Len(t, happened(events, "worker.died", "doomed"), 1)

	// The statistics keep up, whatever the frozen instance held.
	queues := []string{"qa", "qb", "qc", "qd", "qe"}
	eventually(t, func() bool { return projectedMatchesTruth(t, db, live, queues) }, "GET /queues/v1 equals the tasks table")

	// Thawed, the former leader finds every term over and follows.
	frozen.Signal(t, syscall.SIGCONT)
	thawed := time.Now()
	eventually(t, func() bool {
		lost := map[string]bool{}
		for _, e := range frozen.Logged("lost leadership") {
			lost[fmt.Sprint(e["job"])] = true
		}
		for _, job := range jobs {
			if !lost[job] {
				return false
			}
		}
		return true
	}, "the thawed instance steps down from every job:\n%s", frozen.Output())
	t.Logf("the thawed instance stepped down from every job within %d ms", time.Since(thawed).Milliseconds())
	api(t, frozen, http.MethodGet, "/readyz", nil, http.StatusOK, nil)

	// The jobs go on, under their new leaders, once each.
	late := submit(t, frozen, map[string]any{"queue": "qe", "deadline": time.Now().Add(time.Hour)})
	_, err = db.Exec(`UPDATE tasks SET deadline = now() WHERE id = $1`, late)
	require.NoError(t, err)
	eventually(t, func() bool { return len(happened(outbox(t, db), "task.dead_lettered", late)) > 0 }, "the deadline reaper still works")
	for job, l := range leases(t, db) {
		require.Equal(t, after[job].Owner, l.Owner, "%s stays with the instance that took it over", job)
		require.Equal(t, after[job].Term, l.Term, job)
	}
	eventually(t, func() bool { return projectedMatchesTruth(t, db, frozen, queues) }, "the thawed instance's GET /queues/v1 equals the tasks table")

	// No transition happened twice.
	seen := map[transition]int{}
	for _, e := range outbox(t, db) {
		seen[e]++
	}
	for e, n := range seen {
		require.Equal(t, 1, n, "%+v recorded %d times", e, n)
	}
	for _, e := range []struct{ typ, id string }{
		{"task.requeued", orphan}, {"task.requeued", expired}, {"task.dead_lettered", overdue},
		{"task.cleaned", old}, {"task.dead_lettered", late}, {"worker.died", "doomed"},
	} {
		require.Len(t, happened(outbox(t, db), e.typ, e.id), 1, "%s %s", e.typ, e.id)
	}
}
