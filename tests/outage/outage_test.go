// Package outage_test restarts PostgreSQL (a fast shutdown, then a start on
// the same data directory and port) while producers and workers talk to two
// `taskmaster serve` processes, and checks what the service promises about
// a database outage: the servers stay up and reconnect by themselves;
// /readyz is 503 during the outage and 200 after; every request during the
// outage gets a 503 problem with Retry-After within a bounded time, never a
// hang or a 500; background jobs, projectors, the notifier and event streams
// resume; every submit answered 2xx ends DONE exactly once; and the queue
// statistics equal the truth recomputed from the tasks table.
//
// It runs its own PostgreSQL server (package localpg): the test harness's
// shared server must not be restarted under other tests.
package outage_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	_ "github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
	"github.com/taskmaster/taskmaster/tests/binary"
)

const (
	queue        = "outage"
	producers    = 4
	perProducer  = 150
	batchSize    = 10 // odd producers submit in batches of this many
	tasks        = producers * perProducer
	workersEach  = 3 // per instance
	claimLimit   = 5
	leaseSeconds = 10
	// beatEvery is a third of the stale threshold the servers run with.
	beatEvery = 500 * time.Millisecond
	// outageAtLeast is how long the database stays down, at the least: the
	// probes run in it, and producers and workers feel it.
	outageAtLeast = 2 * time.Second
	// answerWithin bounds every answer during the outage: no hang.
	answerWithin = 10 * time.Second
	// waitFor bounds each wait for a condition.
	waitFor = 45 * time.Second
	// pace is how long clients pause before repeating a request the outage
	// refused (a test's pace, shorter than Retry-After).
	pace = 50 * time.Millisecond
)

func TestDatabaseRestartUnderLoad(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	pg, err := localpg.Start(ctx, localpg.Config{DataDir: filepath.Join(t.TempDir(), "pg"), Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	admin, err := sqlx.Connect("postgres", pg.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(`CREATE DATABASE taskmaster`)
	require.NoError(t, err)
	require.NoError(t, admin.Close())
	databaseURL := pg.URL("taskmaster")
	db, err := sqlx.Open("postgres", databaseURL)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })

	bin := binary.Build(t)
	var instances []*binary.Process
	for range 2 {
		instances = append(instances, binary.Serve(t, bin,
			"TASKMASTER_DATABASE_URL="+databaseURL,
			"TASKMASTER_DB_MAX_CONNS=8",
			"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS=1.5",
			"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=60",
			"TASKMASTER_REAPER_INTERVAL_MS=200",
			"TASKMASTER_LEASE_REAPER_INTERVAL_MS=100",
			// Long polls wake only on notifications (or their own
			// deadline): the notifier must come back after the restart.
			"TASKMASTER_CLAIM_POLL_INTERVAL_MS=60000",
			"TASKMASTER_OUTBOX_RETENTION=1h", // keep every event for the checks
			"TASKMASTER_RETENTION_TTL=0",
		))
	}
	hc := &http.Client{Timeout: 40 * time.Second}
	l := newLedger()

	// An event stream that resumes with Last-Event-ID whenever it ends.
	stream := &eventStream{hc: hc, url: instances[0].URL + "/events/v1?queue=" + queue + "&type=task.completed", l: l,
		connected: make(chan struct{}), seen: map[string]int{}}
	var bg sync.WaitGroup
	bg.Add(1)
	go func() {
		defer bg.Done()
		stream.run(ctx)
	}()
	select {
	case <-stream.connected:
	case <-time.After(waitFor):
		require.FailNow(t, "the event stream did not open")
	}

	// The owner of a long poll after the restart, registered long before it.
	wake := &waker{hc: hc, instance: instances[0].URL, other: instances[1].URL, l: l}
	wake.register(t)

	workCtx, stopWork := context.WithCancel(ctx)
	var work sync.WaitGroup
	for i := range producers {
		p := &producer{hc: hc, base: instances[i%2].URL, id: i, l: l}
		work.Add(1)
		go func() {
			defer work.Done()
			p.run(workCtx)
		}()
	}
	for i := range 2 * workersEach {
		w := &worker{hc: hc, base: instances[i%2].URL, id: "w" + strconv.Itoa(i), l: l,
			inflight: map[string]string{}, lost: map[leaseRef]bool{}}
		work.Add(1)
		go func() {
			defer work.Done()
			w.run(workCtx)
		}()
	}
	stopped := false
	stop := func() {
		if !stopped {
			stopped = true
			stopWork()
			work.Wait()
		}
	}
	t.Cleanup(stop)

	// The outage, in the middle of the run.
	waitUntil(t, "a third of the tasks submitted and some done", func() bool {
		return l.ackedCount() >= tasks/3 && countStatus(t, db, queue, "DONE") >= 20
	})
	stoppedAt := l.markDown()
	require.NoError(t, pg.Stop(), "fast shutdown")
	t.Logf("database stopped (fast shutdown) in %v with %d of %d submits acknowledged", time.Since(stoppedAt).Round(time.Millisecond), l.ackedCount(), tasks)

	for _, in := range instances {
		waitUntil(t, "/readyz 503", func() bool {
			code, _, _ := get(hc, in.URL+"/readyz")
			return code == http.StatusServiceUnavailable
		})
	}
	t.Logf("/readyz said 503 on every instance %v after the stop began", time.Since(stoppedAt).Round(time.Millisecond))
	for _, in := range instances {
		probeOutage(t, hc, in.URL, l)
	}
	for time.Since(stoppedAt) < outageAtLeast {
		time.Sleep(pace) // the outage's length, not a synchronisation
	}

	restartAt := time.Now()
	pg, err = pg.StartAgain(ctx) // the Cleanup above stops this one
	require.NoError(t, err)
	started := l.markUp()
	t.Logf("database down for %v; start took %v", started.Sub(stoppedAt).Round(time.Millisecond), started.Sub(restartAt).Round(time.Millisecond))
	for _, in := range instances {
		waitUntil(t, "/readyz 200", func() bool {
			code, _, _ := get(hc, in.URL+"/readyz")
			return code == http.StatusOK
		})
	}
	t.Logf("/readyz said 200 on every instance %v after the database accepted connections", time.Since(started).Round(time.Millisecond))

	// The notifier: each instance listens again, and a long poll wakes on a
	// task submitted through the other instance (claims poll only every
	// minute here).
	waitUntil(t, "every instance listening again", func() bool {
		var n int
		require.NoError(t, db.Get(&n, `SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND application_name = $1`,
			postgres.NotifierApplicationName))
		return n == len(instances)
	})
	var touched time.Time
	require.NoError(t, db.Get(&touched, `SELECT last_heartbeat_at FROM workers WHERE id = 'waker'`))
	wakeStart := time.Now()
	wakeAnswer := wake.longPoll(ctx)
	// The claim's first transaction refreshes the worker's sign of life
	// (registered seconds ago): after it, the claim subscribes and waits.
	waitUntil(t, "the long poll's first attempt", func() bool {
		var at time.Time
		require.NoError(t, db.Get(&at, `SELECT last_heartbeat_at FROM workers WHERE id = 'waker'`))
		return at.After(touched)
	})
	submitted := wake.submit(t)
	select {
	case got := <-wakeAnswer:
		require.Equal(t, []string{submitted}, got, "the long poll got the task submitted after it began; %v", l.unexpectedSoFar())
	case <-time.After(waitFor):
		require.FailNow(t, "the long poll was not woken")
	}
	require.Less(t, time.Since(wakeStart), 15*time.Second, "woken by the notification, not by its 20 s deadline")

	// Background jobs: the lease reaper takes back a task whose lease runs
	// out after the restart, and the heartbeat reaper finds its silent
	// holder STALE.
	ghostTask := wake.ghost(t)
	waitUntil(t, "the lease reaper requeued the ghost's task", func() bool {
		var status string
		require.NoError(t, db.Get(&status, `SELECT status FROM tasks WHERE id = $1`, ghostTask))
		return status == "PENDING"
	})
	waitUntil(t, "the heartbeat reaper found the ghost STALE", func() bool {
		var status string
		require.NoError(t, db.Get(&status, `SELECT status FROM workers WHERE id = 'ghost'`))
		return status == "STALE"
	})

	waitUntil(t, "every submit acknowledged", func() bool { return l.ackedCount() == tasks })
	waitUntil(t, "every task done", func() bool { return countStatus(t, db, queue, "DONE") == tasks })
	t.Logf("all %d tasks done %v after the restart", tasks, time.Since(started).Round(time.Millisecond))
	stop()
	waitUntil(t, "the event stream caught up", func() bool { return stream.count() >= tasks })

	// The statistics equal the truth, on every instance.
	for _, in := range instances {
		waitUntil(t, "statistics equal the tasks table on "+in.URL, func() bool { return statsMatch(t, hc, db, in.URL) })
	}
	t.Logf("statistics equal the tasks table %v after the restart", time.Since(started).Round(time.Millisecond))

	cancel() // ends the event stream
	bg.Wait()

	// Nothing but the checks touches the ledger and the stream from here on.
	require.Empty(t, l.unexpected, "answers that are neither success nor a 503 problem with Retry-After")
	require.Positive(t, l.refused503, "the clients felt the outage")
	require.Less(t, l.slowest503, answerWithin, "no request hung on the dead database")
	require.Zero(t, l.refusedAfter, "requests sent after the database was back were refused: %v", l.refusedAfterWhat)
	t.Logf("%d requests answered 503 during the outage, the slowest in %v; the first request after the restart succeeded %v after it",
		l.refused503, l.slowest503.Round(time.Millisecond), l.firstSuccess.Round(time.Millisecond))

	// Every acknowledged submit ends DONE, completed once.
	var rows []struct {
		ID     string `db:"id"`
		Key    string `db:"key"`
		Status string `db:"status"`
		By     string `db:"by"`
	}
	require.NoError(t, db.Select(&rows, `SELECT id::text, idempotency_key AS key, status, result->>'by' AS by FROM tasks WHERE queue = $1`, queue))
	require.Len(t, rows, tasks, "one task per idempotency key, none lost")
	for _, r := range rows {
		require.Equal(t, l.acked[r.Key], r.ID, "key %s: the acknowledged task is the stored one", r.Key)
		require.Equal(t, "DONE", r.Status, "task %s", r.ID)
		acked := l.completed[r.ID]
		require.LessOrEqual(t, len(acked), 1, "task %s completed twice: %v", r.ID, acked)
		if len(acked) == 1 {
			require.Equal(t, acked[0], r.By, "task %s: the stored result is the acknowledged complete's", r.ID)
		} else {
			require.True(t, l.unsure[r.ID][r.By], "task %s: DONE by %q, which no worker was told of and none sent unanswered", r.ID, r.By)
		}
	}
	var doubles []string
	require.NoError(t, db.Select(&doubles, `
		SELECT e->>'task_id' FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.completed' GROUP BY 1 HAVING count(*) > 1`))
	require.Empty(t, doubles, "tasks completed twice in the outbox")

	// The event stream resumed across the outage without loss or repeats.
	require.Len(t, stream.seen, tasks, "every completion streamed")
	for _, r := range rows {
		require.Equal(t, 1, stream.seen[r.ID], "task %s: task.completed streamed %d times", r.ID, stream.seen[r.ID])
	}
	require.Positive(t, stream.resumed, "the stream ended in the outage and resumed")
	t.Logf("the event stream resumed %d times and delivered each of the %d completions once", stream.resumed, tasks)
}

// probeOutage sends one request of every kind to an instance while the
// database is down: each must answer within answerWithin with a 503 problem
// that carries Retry-After.
func probeOutage(t *testing.T, hc *http.Client, base string, l *ledger) {
	t.Helper()
	someTask := l.someAcked()
	probes := []struct{ method, path, body string }{
		{http.MethodPost, "/tasks/v1", `{"queue":"probe","payload":1}`},
		{http.MethodPost, "/tasks/v1/batch", `{"tasks":[{"queue":"probe","payload":1}]}`},
		{http.MethodGet, "/tasks/v1/" + someTask, ""},
		{http.MethodGet, "/tasks/v1?queue=" + queue, ""},
		{http.MethodPost, "/tasks/v1/claim", `{"worker_id":"w0","limit":1}`},
		{http.MethodPost, "/tasks/v1/" + someTask + "/retry", ""},
		{http.MethodPost, "/workers/v1/register", `{"id":"probe"}`},
		{http.MethodPost, "/workers/v1/w0/heartbeat", ""},
		{http.MethodGet, "/workers/v1", ""},
		{http.MethodGet, "/queues/v1", ""},
		{http.MethodGet, "/events/v1", ""},
		{http.MethodGet, "/readyz", ""},
	}
	for _, p := range probes {
		start := time.Now()
		code, header, body, err := do(context.Background(), hc, p.method, base+p.path, p.body)
		elapsed := time.Since(start)
		require.NoError(t, err, "%s %s", p.method, p.path)
		require.Less(t, elapsed, answerWithin, "%s %s", p.method, p.path)
		require.Equal(t, http.StatusServiceUnavailable, code, "%s %s: %s", p.method, p.path, body)
		require.Equal(t, "application/problem+json", header.Get("Content-Type"))
		require.Equal(t, "2", header.Get("Retry-After"), "%s %s", p.method, p.path)
		var problem struct {
			Type   string `json:"type"`
			Status int    `json:"status"`
		}
		require.NoError(t, json.Unmarshal(body, &problem))
		require.Equal(t, "urn:problem-type:taskmaster:unavailable", problem.Type, "%s %s", p.method, p.path)
		require.Equal(t, http.StatusServiceUnavailable, problem.Status)
	}
	code, _, _ := get(hc, base+"/healthz")
	require.Equal(t, http.StatusOK, code, "the process is alive through the outage")
}

// ledger is what the clients saw, to check against the database.
type ledger struct {
	mu sync.Mutex
	// down is when the database began to stop, up when it accepted
	// connections again (zero until then).
	down, up time.Time
	// acked is the task id each idempotency key's 2xx answer named.
	acked map[string]string
	// completed is, per task, the "worker/lease" of each complete answered 200.
	completed map[string][]string
	// unsure is, per task, the "worker/lease" of completes sent without a
	// definite answer (a 503: its commit may have been cut off).
	unsure map[string]map[string]bool
	// refused503 counts the 503 answers to requests sent before the
	// database was up again, slowest503 is the longest any took;
	// refusedAfter counts those to requests sent after it (none: pooled
	// connections the restart left dead must not fail requests).
	refused503, refusedAfter int
	slowest503               time.Duration
	// refusedAfterWhat names the requests refusedAfter counts, with when
	// they were sent and the answer's body.
	refusedAfterWhat []string
	// firstSuccess is how long after up the first request sent after it
	// succeeded.
	firstSuccess time.Duration
	unexpected   []string
}

func newLedger() *ledger {
	return &ledger{acked: map[string]string{}, completed: map[string][]string{}, unsure: map[string]map[string]bool{}}
}

// markDown records that the database begins to stop, and returns when.
func (l *ledger) markDown() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = time.Now()
	return l.down
}

// markUp records that the database accepts connections again, and returns
// when.
func (l *ledger) markUp() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = time.Now()
	return l.up
}

func (l *ledger) ackedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

func (l *ledger) someAcked() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.acked {
		return id
	}
	return "00000000-0000-0000-0000-000000000000"
}

func (l *ledger) unexpectedSoFar() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.unexpected)
}

func (l *ledger) fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unexpected = append(l.unexpected, fmt.Sprintf(format, args...))
}

// answered classifies one answer: it reports whether the request should be
// repeated (a 503 problem with Retry-After, or a transport error, which is
// recorded as unexpected: the servers stay up), and records anything that is
// neither that nor one of the statuses ok.
func (l *ledger) answered(what string, code int, header http.Header, body []byte, err error, sent time.Time, ok ...int) (again bool) {
	switch {
	case err != nil:
		l.fail("%s: no answer: %v", what, err)
		return true
	case code == http.StatusServiceUnavailable:
		var problem struct{ Type string }
		_ = json.Unmarshal(body, &problem)
		if header.Get("Retry-After") == "" || !strings.HasPrefix(problem.Type, "urn:problem-type:taskmaster:") {
			l.fail("%s: 503 without Retry-After or problem: %s", what, body)
		}
		elapsed := time.Since(sent)
		l.mu.Lock()
		switch {
		case l.down.IsZero():
			l.unexpected = append(l.unexpected, fmt.Sprintf("%s: 503 before the outage: %s", what, body))
		case l.up.IsZero() || sent.Before(l.up):
			l.refused503++
			l.slowest503 = max(l.slowest503, elapsed)
		default:
			l.refusedAfter++
			l.refusedAfterWhat = append(l.refusedAfterWhat, fmt.Sprintf("%s sent %v after up: %s", what, sent.Sub(l.up).Round(time.Millisecond), body))
		}
		l.mu.Unlock()
		return true
	case slices.Contains(ok, code):
		l.mu.Lock()
		if !l.up.IsZero() && !sent.Before(l.up) && l.firstSuccess == 0 {
			l.firstSuccess = time.Since(l.up)
		}
		l.mu.Unlock()
		return false
	default:
		l.fail("%s: %d %s", what, code, body)
		return false
	}
}

// producer submits perProducer tasks, each with an idempotency key, singly
// or in batches, repeating each request until it gets a definite answer.
type producer struct {
	hc   *http.Client
	base string
	id   int
	l    *ledger
}

func (p *producer) run(ctx context.Context) {
	for j := 0; j < perProducer && ctx.Err() == nil; {
		n := 1
		if p.id%2 == 1 {
			n = min(batchSize, perProducer-j)
		}
		keys := make([]string, n)
		items := make([]map[string]any, n)
		for k := range n {
			keys[k] = fmt.Sprintf("p%d-%d", p.id, j+k)
			items[k] = map[string]any{"queue": queue, "payload": j + k, "max_attempts": 20, "idempotency_key": keys[k]}
		}
		path, body := "/tasks/v1", any(items[0])
		if n > 1 {
			path, body = "/tasks/v1/batch", map[string]any{"tasks": items}
		}
		for ctx.Err() == nil {
			start := time.Now()
			code, header, data, err := postJSON(ctx, p.hc, p.base+path, body)
			if ctx.Err() != nil {
				return
			}
			if p.l.answered("submit "+keys[0], code, header, data, err, start, http.StatusOK, http.StatusCreated) {
				pause(ctx, pace)
				continue
			}
			if code < 300 {
				ids := submittedIDs(data, n)
				p.l.mu.Lock()
				for k, key := range keys {
					p.l.acked[key] = ids[k]
				}
				p.l.mu.Unlock()
			}
			break
		}
		j += n
		pause(ctx, 10*time.Millisecond) // a producer's pace
	}
}

func submittedIDs(data []byte, n int) []string {
	var one struct{ ID string }
	var batch struct{ Tasks []struct{ ID string } }
	ids := make([]string, n)
	if n == 1 {
		_ = json.Unmarshal(data, &one)
		ids[0] = one.ID
		return ids
	}
	_ = json.Unmarshal(data, &batch)
	for i := range min(n, len(batch.Tasks)) {
		ids[i] = batch.Tasks[i].ID
	}
	return ids
}

type leaseRef struct {
	ID      string `json:"id"`
	LeaseID string `json:"lease_id"`
}

// worker claims and completes tasks over HTTP, tolerating the outage: it
// repeats a report without a definite answer with the same lease, lists its
// in-flight tasks in every heartbeat, and drops the tasks the heartbeat says
// it lost.
type worker struct {
	hc   *http.Client
	base string
	id   string
	l    *ledger

	mu       sync.Mutex
	inflight map[string]string // task id -> lease id
	lost     map[leaseRef]bool
}

func (w *worker) register(ctx context.Context) {
	for ctx.Err() == nil {
		start := time.Now()
		code, header, data, err := postJSON(ctx, w.hc, w.base+"/workers/v1/register", map[string]any{"id": w.id, "queues": []string{queue}})
		if ctx.Err() != nil || !w.l.answered("register", code, header, data, err, start, http.StatusOK, http.StatusCreated) {
			return
		}
		pause(ctx, pace)
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
		start := time.Now()
		code, header, data, err := postJSON(ctx, w.hc, w.base+"/workers/v1/"+w.id+"/heartbeat", map[string]any{"tasks": refs})
		if ctx.Err() != nil || w.l.answered("heartbeat", code, header, data, err, start, http.StatusOK) || code != http.StatusOK {
			continue
		}
		var answer struct{ Lost []leaseRef }
		_ = json.Unmarshal(data, &answer)
		w.mu.Lock()
		for _, r := range answer.Lost {
			w.lost[r] = true
		}
		w.mu.Unlock()
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
		start := time.Now()
		code, header, data, err := postJSON(ctx, w.hc, w.base+"/tasks/v1/claim", map[string]any{
			"worker_id": w.id, "limit": claimLimit, "lease_seconds": leaseSeconds, "wait_ms": 1000,
		})
		if ctx.Err() != nil {
			return
		}
		if w.l.answered("claim", code, header, data, err, start, http.StatusOK) {
			pause(ctx, pace)
			continue
		}
		var claimed struct{ Tasks []leaseRef }
		_ = json.Unmarshal(data, &claimed)
		w.mu.Lock()
		for _, tk := range claimed.Tasks {
			w.inflight[tk.ID] = tk.LeaseID
		}
		w.mu.Unlock()
		for _, tk := range claimed.Tasks {
			w.complete(ctx, tk)
		}
	}
}

// complete reports tk done, repeating while no definite answer comes, unless
// a heartbeat says the task was lost.
func (w *worker) complete(ctx context.Context, tk leaseRef) {
	key := w.id + "/" + tk.LeaseID
	defer func() {
		w.mu.Lock()
		delete(w.inflight, tk.ID)
		w.mu.Unlock()
	}()
	for ctx.Err() == nil {
		w.mu.Lock()
		lost := w.lost[tk]
		w.mu.Unlock()
		if lost {
			return
		}
		start := time.Now()
		code, header, data, err := postJSON(ctx, w.hc, w.base+"/tasks/v1/"+tk.ID+"/complete", map[string]any{
			"worker_id": w.id, "lease_id": tk.LeaseID, "result": map[string]string{"by": key},
		})
		cutOff := ctx.Err() != nil // the test's own stop cut the answer off: it may have been applied
		again := cutOff || w.l.answered("complete", code, header, data, err, start, http.StatusOK, http.StatusConflict)
		w.l.mu.Lock()
		switch {
		case again:
			if w.l.unsure[tk.ID] == nil {
				w.l.unsure[tk.ID] = map[string]bool{}
			}
			w.l.unsure[tk.ID][key] = true
		case code == http.StatusOK:
			w.l.completed[tk.ID] = append(w.l.completed[tk.ID], key)
		}
		w.l.mu.Unlock()
		if !again || cutOff {
			return
		}
		pause(ctx, pace)
	}
}

// waker owns the queue "wake" (a long poll after the restart) and a ghost
// worker that claims once and then goes silent.
type waker struct {
	hc              *http.Client
	instance, other string
	l               *ledger
}

func (k *waker) register(t *testing.T) {
	t.Helper()
	code, _, data, err := postJSON(context.Background(), k.hc, k.instance+"/workers/v1/register", map[string]any{"id": "waker", "queues": []string{"wake"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
}

// longPoll starts a claim that waits up to 20 s on the empty queue "wake"
// and returns where its task ids will come.
func (k *waker) longPoll(ctx context.Context) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		code, _, data, err := postJSON(ctx, k.hc, k.instance+"/tasks/v1/claim", map[string]any{"worker_id": "waker", "limit": 1, "wait_ms": 20000})
		var claimed struct{ Tasks []leaseRef }
		if err != nil || code != http.StatusOK {
			k.l.fail("the long poll: %d %s %v", code, data, err)
		}
		_ = json.Unmarshal(data, &claimed)
		ids := []string{}
		for _, tk := range claimed.Tasks {
			ids = append(ids, tk.ID)
		}
		out <- ids
	}()
	return out
}

// submit puts one task on "wake" through the other instance.
func (k *waker) submit(t *testing.T) string {
	t.Helper()
	code, _, data, err := postJSON(context.Background(), k.hc, k.other+"/tasks/v1", map[string]any{"queue": "wake", "payload": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
	return submittedIDs(data, 1)[0]
}

// ghost registers a worker that claims a task on "ghost" under a one-second
// lease and is never heard of again; it returns the task's id.
func (k *waker) ghost(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	code, _, data, err := postJSON(ctx, k.hc, k.other+"/workers/v1/register", map[string]any{"id": "ghost", "queues": []string{"ghost"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
	code, _, data, err = postJSON(ctx, k.hc, k.other+"/tasks/v1", map[string]any{"queue": "ghost", "payload": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
	id := submittedIDs(data, 1)[0]
	code, _, data, err = postJSON(ctx, k.hc, k.other+"/tasks/v1/claim", map[string]any{"worker_id": "ghost", "lease_seconds": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", data)
	require.Contains(t, string(data), id)
	return id
}

// eventStream reads GET /events/v1 and, whenever the stream ends, opens it
// again with Last-Event-ID, counting each task.completed it sees per task.
type eventStream struct {
	hc        *http.Client
	url       string
	l         *ledger
	connected chan struct{} // closed when the first stream is open

	mu      sync.Mutex
	lastID  string
	seen    map[string]int
	resumed int
}

func (s *eventStream) run(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
		if err != nil {
			s.l.fail("event stream request: %v", err)
			return
		}
		s.mu.Lock()
		if s.lastID != "" {
			req.Header.Set("Last-Event-ID", s.lastID)
		}
		s.mu.Unlock()
		start := time.Now()
		resp, err := (&http.Client{}).Do(req) // no timeout: the stream lasts
		if ctx.Err() != nil {
			return
		}
		if err != nil || resp.StatusCode != http.StatusOK {
			var body []byte
			var header http.Header
			code := 0
			if err == nil {
				body, _ = io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				code, header = resp.StatusCode, resp.Header
			}
			s.l.answered("event stream", code, header, body, err, start)
			pause(ctx, pace)
			continue
		}
		if first {
			close(s.connected)
			first = false
		} else {
			s.mu.Lock()
			s.resumed++
			s.mu.Unlock()
		}
		s.read(resp.Body)
		_ = resp.Body.Close()
	}
}

// count is how many tasks' completions the stream has seen.
func (s *eventStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *eventStream) read(body io.Reader) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "id: "):
			s.mu.Lock()
			s.lastID = strings.TrimPrefix(line, "id: ")
			s.mu.Unlock()
		case strings.HasPrefix(line, "data: "):
			var e struct {
				Type   string `json:"type"`
				TaskID string `json:"task_id"`
			}
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e) == nil && e.Type == "task.completed" {
				s.mu.Lock()
				s.seen[e.TaskID]++
				s.mu.Unlock()
			}
		}
	}
}

// statsMatch reports whether GET /queues/v1 on base shows, for the queue,
// the counts and totals recomputed from the tasks table.
func statsMatch(t *testing.T, hc *http.Client, db *sqlx.DB, base string) bool {
	t.Helper()
	var truth struct {
		Pending int64 `db:"pending"`
		Running int64 `db:"running"`
		Done    int64 `db:"done"`
		Dead    int64 `db:"dead"`
		Total   int64 `db:"total"`
	}
	require.NoError(t, db.Get(&truth, `
		SELECT count(*) FILTER (WHERE status = 'PENDING') AS pending, count(*) FILTER (WHERE status = 'RUNNING') AS running,
		       count(*) FILTER (WHERE status = 'DONE') AS done, count(*) FILTER (WHERE status = 'DEAD') AS dead, count(*) AS total
		FROM tasks WHERE queue = $1`, queue))
	code, body, err := get(hc, base+"/queues/v1")
	if err != nil || code != http.StatusOK {
		return false
	}
	var out struct {
		Queues []struct {
			Queue                        string
			Pending, Running, Done, Dead int64
			Totals                       struct{ Submitted, Completed int64 }
		}
	}
	require.NoError(t, json.Unmarshal(body, &out))
	for _, q := range out.Queues {
		if q.Queue == queue {
			return q.Pending == truth.Pending && q.Running == truth.Running && q.Done == truth.Done && q.Dead == truth.Dead &&
				q.Totals.Submitted == truth.Total && q.Totals.Completed == truth.Done
		}
	}
	return false
}

func countStatus(t *testing.T, db *sqlx.DB, q, status string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = $2`, q, status))
	return n
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond) // the pace of the poll
	}
}

// pause waits d (a client's pace, not a synchronisation) and reports
// whether ctx is still alive.
func pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

func postJSON(ctx context.Context, hc *http.Client, url string, body any) (int, http.Header, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, nil, err
	}
	return do(ctx, hc, http.MethodPost, url, string(b))
}

func get(hc *http.Client, url string) (int, []byte, error) {
	code, _, body, err := do(context.Background(), hc, http.MethodGet, url, "")
	return code, body, err
}

func do(ctx context.Context, hc *http.Client, method, url, body string) (int, http.Header, []byte, error) {
	var rd io.Reader
	if body != "" {
		rd = bytes.NewBufferString(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, data, err
}
