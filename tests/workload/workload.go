// Package workload drives `taskmaster serve` processes with HTTP producers
// and workers through a database outage or failover, and records what the
// clients were told, so that a test can check it against the database:
// every submit answered 2xx exists once, no task was completed twice,
// every task ends DONE, requests during the outage got a 503 problem with
// Retry-After and never a 500, and the event streams and queue statistics
// caught up. tests/outage (a restart) and tests/ha (failovers) use it.
package workload

import (
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
	_ "github.com/lib/pq" // the checks' own connections
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/localpg"
)

// Config sizes a workload.
type Config struct {
	// Queue receives every task.
	Queue string
	// Producers submit PerProducer tasks each, each with an idempotency
	// key; odd producers in batches of BatchSize.
	Producers, PerProducer, BatchSize int
	// WorkersEach workers per instance claim up to ClaimLimit tasks at a
	// time under leases of LeaseSeconds, and heartbeat every BeatEvery.
	WorkersEach, ClaimLimit, LeaseSeconds int
	BeatEvery                             time.Duration
	// Pace is how long clients pause before repeating a request the outage
	// refused (a test's pace, shorter than Retry-After).
	Pace time.Duration
}

// DefaultConfig is the workload tests/outage measured: 600 tasks, 4
// producers, 3 workers per instance.
func DefaultConfig(queue string) Config {
	return Config{
		Queue: queue, Producers: 4, PerProducer: 150, BatchSize: 10,
		WorkersEach: 3, ClaimLimit: 5, LeaseSeconds: 10,
		// A third of the stale threshold the servers run with (1.5 s).
		BeatEvery: 500 * time.Millisecond,
		Pace:      50 * time.Millisecond,
	}
}

// ServeEnv are the settings of `taskmaster serve` processes under a
// workload: the database, short intervals so that every background job acts
// within a test (the lease and heartbeat reapers, deadlines, retention, the
// leadership leases), long polls that look again only when notified (so
// that a woken one proves the notifier works), every event kept for the
// checks. extra settings come after, and so win.
func ServeEnv(databaseURL string, extra ...string) []string {
	return append([]string{
		"TASKMASTER_DATABASE_URL=" + databaseURL,
		"TASKMASTER_DB_MAX_CONNS=8",
		"TASKMASTER_HEARTBEAT_STALE_THRESHOLD_SECONDS=1.5",
		"TASKMASTER_HEARTBEAT_DEAD_THRESHOLD_SECONDS=60",
		"TASKMASTER_REAPER_INTERVAL_MS=200",
		"TASKMASTER_LEASE_REAPER_INTERVAL_MS=100",
		"TASKMASTER_DEADLINE_REAPER_INTERVAL_MS=300",
		"TASKMASTER_RETENTION_INTERVAL_MS=300",
		"TASKMASTER_RETENTION_TTL=1h",
		"TASKMASTER_LEADER_LEASE_SECONDS=2",
		"TASKMASTER_CLAIM_SAFETY_INTERVAL_MS=3600000",
		"TASKMASTER_CLAIM_POLL_INTERVAL_MS=60000",
		"TASKMASTER_OUTBOX_RETENTION=1h",
	}, extra...)
}

// StartDatabase starts a PostgreSQL server of the test's own (a database
// outage or a pooler must not touch the harness's shared server) with an
// empty database "taskmaster", and returns the server, that database's URL
// and a pool on it for the checks; the server stops when the test ends.
func StartDatabase(t *testing.T) (*localpg.Server, string, *sqlx.DB) {
	t.Helper()
	pg, err := localpg.Start(t.Context(), localpg.Config{DataDir: filepath.Join(t.TempDir(), "pg"), Fast: true})
	require.NoError(t, err)
	t.Cleanup(func() { _ = pg.Stop() })
	admin, err := sqlx.Connect("postgres", pg.URL("postgres"))
	require.NoError(t, err)
	_, err = admin.Exec(`CREATE DATABASE taskmaster`)
	require.NoError(t, err)
	require.NoError(t, admin.Close())
	db, err := sqlx.Open("postgres", pg.URL("taskmaster"))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return pg, pg.URL("taskmaster"), db
}

// Tasks is how many tasks the producers submit.
func (c Config) Tasks() int { return c.Producers * c.PerProducer }

// WaitFor bounds each wait for a condition: far above what any needs, so
// that only a failure reaches it.
const WaitFor = 45 * time.Second

// Ledger is what the clients saw, to check against the database.
type Ledger struct {
	mu sync.Mutex
	// down is when the database began to go away, gone when it was
	// certainly gone (stopped, killed), up when it accepted connections
	// again (zero until then).
	down, gone, up time.Time
	// acked is the task id each idempotency key's 2xx answer named, and
	// ackedAt when that answer came, and sentAt when the request it
	// answered was sent.
	acked           map[string]string
	ackedAt, sentAt map[string]time.Time
	// completed is, per task, the "worker/lease" of each complete answered 200.
	completed map[string][]string
	// unsure is, per task, the "worker/lease" of completes sent without a
	// definite answer (a 503: its commit may have been cut off).
	unsure map[string]map[string]bool
	// refused503 counts the 503 answers to requests sent before the
	// database was up again (or within ReconnectGrace after), slowest503
	// is the longest any took; refusedAfter counts those to requests sent
	// later (none: pooled connections the outage left dead must not fail
	// requests).
	refused503, refusedAfter int
	slowest503               time.Duration
	// refusedAfterWhat names the requests refusedAfter counts, with when
	// they were sent and the answer's body.
	refusedAfterWhat []string
	// firstSuccess is how long after up the first request sent after it
	// succeeded; back is when the first request sent after gone succeeded.
	firstSuccess time.Duration
	back         time.Time
	// vanished lists the tasks a worker held whose report was answered 404:
	// the database no longer holds them (a failover lost their submit).
	vanished []string
	// status500 counts the 500 answers; unexpected lists every answer that
	// was neither success nor a 503 problem with Retry-After.
	status500  int
	unexpected []string
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{acked: map[string]string{}, ackedAt: map[string]time.Time{}, sentAt: map[string]time.Time{}, completed: map[string][]string{},
		unsure: map[string]map[string]bool{}}
}

// MarkDown records that the database begins to go away, and returns when.
func (l *Ledger) MarkDown() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.down = time.Now()
	return l.down
}

// MarkGone records that the database is certainly gone (a stop or a kill
// returned): the gap is counted from here.
func (l *Ledger) MarkGone() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gone = time.Now()
	return l.gone
}

// ReconnectGrace is how long after the database is back a request may
// still be refused: a pool whose attempts to connect failed makes the next
// no sooner than postgres.GateMaxDelay (100 ms) after the last failure,
// and refuses the requests that come meanwhile (adapters/postgres
// connectGate); one attempt under way when the database came back may fail
// too. A second covers both on a loaded machine.
const ReconnectGrace = time.Second

// MarkUp records that the database accepts connections again (a restart
// done, a standby promoted), and returns when.
func (l *Ledger) MarkUp() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.up = time.Now()
	return l.up
}

// AckedCount is how many submits were answered 2xx.
func (l *Ledger) AckedCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// AckedSince returns the idempotency keys of the submits acknowledged at
// or after since.
func (l *Ledger) AckedSince(since time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for k, at := range l.ackedAt {
		if !at.Before(since) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// AckedSentSince returns the idempotency keys of the submits acknowledged
// whose request was sent at or after since: each was committed after it.
func (l *Ledger) AckedSentSince(since time.Time) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var keys []string
	for k, at := range l.sentAt {
		if !at.Before(since) {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// SomeAcked returns the id of some acknowledged task (a nil uuid when none).
func (l *Ledger) SomeAcked() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, id := range l.acked {
		return id
	}
	return "00000000-0000-0000-0000-000000000000"
}

// Unexpected returns the answers that were neither success nor a 503
// problem with Retry-After, so far.
func (l *Ledger) Unexpected() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.unexpected)
}

// Fail records something unexpected.
func (l *Ledger) Fail(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.unexpected = append(l.unexpected, fmt.Sprintf(format, args...))
}

// Figures are what the ledger counted through the outage.
type Figures struct {
	// Refused503 are the 503 answers to requests sent before the database
	// was back; Slowest503 the longest any took to come.
	Refused503 int
	Slowest503 time.Duration
	// RefusedAfter are 503 answers to requests sent after the database was
	// back, with what they were.
	RefusedAfter     int
	RefusedAfterWhat []string
	// Status500 are the 500 answers.
	Status500 int
	// FirstSuccess is how long after the database was back the first
	// request sent after it succeeded.
	FirstSuccess time.Duration
	// Gap is how long clients were refused: from the database being gone
	// (MarkGone) to the first success of a request sent after that.
	Gap time.Duration
	// Vanished are the tasks a worker held whose report was answered 404
	// (the database no longer holds them).
	Vanished []string
	// Unexpected are the answers that were neither success nor a 503
	// problem with Retry-After.
	Unexpected []string
}

// Figures returns what the ledger counted.
func (l *Ledger) Figures() Figures {
	l.mu.Lock()
	defer l.mu.Unlock()
	f := Figures{Refused503: l.refused503, Slowest503: l.slowest503, RefusedAfter: l.refusedAfter,
		RefusedAfterWhat: slices.Clone(l.refusedAfterWhat), Status500: l.status500, FirstSuccess: l.firstSuccess,
		Vanished: slices.Clone(l.vanished), Unexpected: slices.Clone(l.unexpected)}
	if !l.back.IsZero() {
		f.Gap = l.back.Sub(l.gone)
	}
	return f
}

// answered classifies one answer: it reports whether the request should be
// repeated (a 503 problem with Retry-After, or a transport error, which is
// recorded as unexpected: the servers stay up), and records anything that is
// neither that nor one of the statuses ok.
func (l *Ledger) answered(what string, code int, header http.Header, body []byte, err error, sent time.Time, ok ...int) (again bool) {
	switch {
	case err != nil:
		l.Fail("%s: no answer: %v", what, err)
		return true
	case code == http.StatusServiceUnavailable:
		var problem struct{ Type string }
		_ = json.Unmarshal(body, &problem)
		if header.Get("Retry-After") == "" || !strings.HasPrefix(problem.Type, "urn:problem-type:taskmaster:") {
			l.Fail("%s: 503 without Retry-After or problem: %s", what, body)
		}
		elapsed := time.Since(sent)
		l.mu.Lock()
		switch {
		case l.down.IsZero():
			l.unexpected = append(l.unexpected, fmt.Sprintf("%s: 503 before the outage: %s", what, body))
		case l.up.IsZero() || sent.Before(l.up.Add(ReconnectGrace)):
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
		if !l.gone.IsZero() && !sent.Before(l.gone) && l.back.IsZero() {
			l.back = time.Now()
		}
		l.mu.Unlock()
		return false
	default:
		if code == http.StatusInternalServerError {
			l.mu.Lock()
			l.status500++
			l.mu.Unlock()
		}
		l.Fail("%s: %d %s", what, code, body)
		return false
	}
}

// Run is the producers and workers of a workload.
type Run struct {
	stop    context.CancelFunc
	wg      sync.WaitGroup
	stopped sync.Once
}

// Start runs cfg's producers and workers against the instances (base URLs),
// producers and workers spread over them in turn, until Stop.
func Start(ctx context.Context, hc *http.Client, cfg Config, instances []string, l *Ledger) *Run {
	ctx, cancel := context.WithCancel(ctx)
	r := &Run{stop: cancel}
	for i := range cfg.Producers {
		p := &producer{hc: hc, cfg: cfg, base: instances[i%len(instances)], id: i, l: l}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			p.run(ctx)
		}()
	}
	for i := range len(instances) * cfg.WorkersEach {
		w := &worker{hc: hc, cfg: cfg, base: instances[i%len(instances)], id: "w" + strconv.Itoa(i), l: l,
			inflight: map[string]string{}, lost: map[leaseRef]bool{}}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			w.run(ctx)
		}()
	}
	return r
}

// Stop ends the producers and workers and waits for them; calling it again
// does nothing.
func (r *Run) Stop() {
	r.stopped.Do(func() {
		r.stop()
		r.wg.Wait()
	})
}

// producer submits PerProducer tasks, each with an idempotency key, singly
// or in batches, repeating each request until it gets a definite answer.
type producer struct {
	hc   *http.Client
	cfg  Config
	base string
	id   int
	l    *Ledger
}

func (p *producer) run(ctx context.Context) {
	for j := 0; j < p.cfg.PerProducer && ctx.Err() == nil; {
		n := 1
		if p.id%2 == 1 {
			n = min(p.cfg.BatchSize, p.cfg.PerProducer-j)
		}
		keys := make([]string, n)
		items := make([]map[string]any, n)
		for k := range n {
			keys[k] = fmt.Sprintf("p%d-%d", p.id, j+k)
			items[k] = map[string]any{"queue": p.cfg.Queue, "payload": j + k, "max_attempts": 20, "idempotency_key": keys[k]}
		}
		path, body := "/tasks/v1", any(items[0])
		if n > 1 {
			path, body = "/tasks/v1/batch", map[string]any{"tasks": items}
		}
		for ctx.Err() == nil {
			start := time.Now()
			code, header, data, err := PostJSON(ctx, p.hc, p.base+path, body)
			if ctx.Err() != nil {
				return
			}
			if p.l.answered("submit "+keys[0], code, header, data, err, start, http.StatusOK, http.StatusCreated) {
				Pause(ctx, p.cfg.Pace)
				continue
			}
			if code < 300 {
				ids := SubmittedIDs(data, n)
				now := time.Now()
				p.l.mu.Lock()
				for k, key := range keys {
					p.l.acked[key] = ids[k]
					p.l.ackedAt[key] = now
					p.l.sentAt[key] = start
				}
				p.l.mu.Unlock()
			}
			break
		}
		j += n
		Pause(ctx, 10*time.Millisecond) // a producer's pace
	}
}

// SubmittedIDs returns the task ids of a submit's answer (one task, or a
// batch of n).
func SubmittedIDs(data []byte, n int) []string {
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
	cfg  Config
	base string
	id   string
	l    *Ledger

	mu       sync.Mutex
	inflight map[string]string // task id -> lease id
	lost     map[leaseRef]bool
}

func (w *worker) register(ctx context.Context) {
	for ctx.Err() == nil {
		start := time.Now()
		code, header, data, err := PostJSON(ctx, w.hc, w.base+"/workers/v1/register", map[string]any{"id": w.id, "queues": []string{w.cfg.Queue}})
		if ctx.Err() != nil || !w.l.answered("register", code, header, data, err, start, http.StatusOK, http.StatusCreated) {
			return
		}
		Pause(ctx, w.cfg.Pace)
	}
}

func (w *worker) heartbeats(ctx context.Context) {
	for Pause(ctx, w.cfg.BeatEvery) {
		w.mu.Lock()
		refs := make([]leaseRef, 0, len(w.inflight))
		for id, lease := range w.inflight {
			refs = append(refs, leaseRef{ID: id, LeaseID: lease})
		}
		w.mu.Unlock()
		start := time.Now()
		code, header, data, err := PostJSON(ctx, w.hc, w.base+"/workers/v1/"+w.id+"/heartbeat", map[string]any{"tasks": refs})
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
		code, header, data, err := PostJSON(ctx, w.hc, w.base+"/tasks/v1/claim", map[string]any{
			"worker_id": w.id, "limit": w.cfg.ClaimLimit, "lease_seconds": w.cfg.LeaseSeconds, "wait_ms": 1000,
		})
		if ctx.Err() != nil {
			return
		}
		if w.l.answered("claim", code, header, data, err, start, http.StatusOK) {
			Pause(ctx, w.cfg.Pace)
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
		code, header, data, err := PostJSON(ctx, w.hc, w.base+"/tasks/v1/"+tk.ID+"/complete", map[string]any{
			"worker_id": w.id, "lease_id": tk.LeaseID, "result": map[string]string{"by": key},
		})
		cutOff := ctx.Err() != nil // the test's own stop cut the answer off: it may have been applied
		again := cutOff || w.l.answered("complete", code, header, data, err, start, http.StatusOK, http.StatusConflict, http.StatusNotFound)
		w.l.mu.Lock()
		switch {
		case !again && code == http.StatusNotFound:
			w.l.vanished = append(w.l.vanished, tk.ID)
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
		Pause(ctx, w.cfg.Pace)
	}
}

// Outcome is the database's truth set against the ledger at the end of a
// run.
type Outcome struct {
	// Tasks are the tasks of the queue in the database; NotDone those of
	// them not DONE.
	Tasks, NotDone int
	// Acknowledged are the submits answered 2xx; Lost those of them whose
	// task the database does not hold (or holds under another id).
	Acknowledged int
	Lost         []string
	// Doubles are tasks with two task.completed events in the outbox.
	Doubles []string
	// CompletedTwice are tasks whose completion was acknowledged twice to
	// workers (the second time after the first was lost).
	CompletedTwice []string
	// ForeignResult are DONE tasks whose stored result is no worker's
	// acknowledged or unanswered complete.
	ForeignResult []string
}

// Check compares the database with the ledger.
func Check(t *testing.T, db *sqlx.DB, cfg Config, l *Ledger) Outcome {
	t.Helper()
	var rows []struct {
		ID     string `db:"id"`
		Key    string `db:"key"`
		Status string `db:"status"`
		By     string `db:"by"`
	}
	require.NoError(t, db.Select(&rows, `
		SELECT id::text, idempotency_key AS key, status, coalesce(result->>'by', '') AS by FROM tasks WHERE queue = $1`, cfg.Queue))
	l.mu.Lock()
	defer l.mu.Unlock()
	o := Outcome{Tasks: len(rows), Acknowledged: len(l.acked)}
	stored := map[string]string{}
	for _, r := range rows {
		stored[r.Key] = r.ID
		if r.Status != "DONE" {
			o.NotDone++
			continue
		}
		acked := l.completed[r.ID]
		if len(acked) > 1 {
			o.CompletedTwice = append(o.CompletedTwice, r.ID)
		}
		if len(acked) > 0 && !slices.Contains(acked, r.By) || len(acked) == 0 && !l.unsure[r.ID][r.By] {
			o.ForeignResult = append(o.ForeignResult, r.ID)
		}
	}
	for key, id := range l.acked {
		if stored[key] != id {
			o.Lost = append(o.Lost, key)
		}
	}
	slices.Sort(o.Lost)
	require.NoError(t, db.Select(&o.Doubles, `
		SELECT e->>'task_id' FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.completed' AND e->>'queue' = $1 GROUP BY 1 HAVING count(*) > 1`, cfg.Queue))
	return o
}

// RequireNothingLost asserts what a restart or a failover to a synchronous
// standby promises: every acknowledged submit stored once under the id its
// answer named, every task DONE by the complete acknowledged to its worker
// (or one sent without an answer), none completed twice.
func (o Outcome) RequireNothingLost(t *testing.T, cfg Config) {
	t.Helper()
	require.Equal(t, cfg.Tasks(), o.Acknowledged, "every submit acknowledged")
	require.Empty(t, o.Lost, "acknowledged submits the database does not hold")
	require.Equal(t, cfg.Tasks(), o.Tasks, "one task per idempotency key")
	require.Zero(t, o.NotDone, "every task DONE")
	require.Empty(t, o.Doubles, "tasks completed twice in the outbox")
	require.Empty(t, o.CompletedTwice, "tasks whose completion was acknowledged twice")
	require.Empty(t, o.ForeignResult, "DONE by a complete no worker sent")
}

// StatsMatch reports whether GET /queues/v1 on base shows, for the queue,
// the counts and totals recomputed from the tasks table.
func StatsMatch(t *testing.T, hc *http.Client, db *sqlx.DB, base, queue string) bool {
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
	code, body, err := Get(hc, base+"/queues/v1")
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

// CountStatus counts the queue's tasks in status.
func CountStatus(t *testing.T, db *sqlx.DB, queue, status string) int {
	t.Helper()
	var n int
	require.NoError(t, db.Get(&n, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = $2`, queue, status))
	return n
}

// WaitUntil polls cond until it holds, failing the test after WaitFor.
func WaitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(WaitFor)
	for !cond() {
		require.False(t, time.Now().After(deadline), "timed out waiting for %s", what)
		time.Sleep(20 * time.Millisecond) // the pace of the poll
	}
}

// Pause waits d (a client's pace, not a synchronisation) and reports
// whether ctx is still alive.
func Pause(ctx context.Context, d time.Duration) bool {
	select {
	case <-ctx.Done():
		return false
	case <-time.After(d):
		return true
	}
}

// PostJSON posts body as JSON and returns the answer.
func PostJSON(ctx context.Context, hc *http.Client, url string, body any) (int, http.Header, []byte, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, nil, nil, err
	}
	return Do(ctx, hc, http.MethodPost, url, string(b))
}

// Get returns the status and body of a GET.
func Get(hc *http.Client, url string) (int, []byte, error) {
	code, _, body, err := Do(context.Background(), hc, http.MethodGet, url, "")
	return code, body, err
}

// Do sends one request and returns the whole answer.
func Do(ctx context.Context, hc *http.Client, method, url, body string) (int, http.Header, []byte, error) {
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
