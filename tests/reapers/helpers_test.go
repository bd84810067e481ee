// Package reapers_test checks the background jobs end to end: the real fx
// application over HTTP on real PostgreSQL, with sub-second thresholds and
// intervals set through configuration. Tests poll with deadlines; none
// sleeps to synchronise.
package reapers_test

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// TestMain runs more tests at once than the default (GOMAXPROCS): these
// tests spend their time waiting for reaper cycles, not computing. An
// explicit -test.parallel wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		_ = flag.Set("test.parallel", "4")
	}
	pgtest.Main(m)
}

// The fast settings: STALE after 0.3 s, DEAD after 0.8 s, every reaper every
// 100 ms (the lease reaper too).
const (
	staleAfter = 300 * time.Millisecond
	deadAfter  = 800 * time.Millisecond
	interval   = 100 * time.Millisecond
)

// deadlineMargin is how far ahead a test sets a task's deadline that must
// pass on its own. The server refuses a deadline that is not after its now()
// when the submit arrives, so the margin covers the submit's whole trip on
// a loaded machine, not just a reaper interval.
const deadlineMargin = 2 * time.Second

// dueSoon returns a deadline that passes deadlineMargin from now. Compute it
// for each submit, right before it: a deadline computed once before many
// submits may already have passed when a late one arrives.
func dueSoon() time.Time { return time.Now().Add(deadlineMargin) }

// waitFor bounds every poll: far above what any wait needs, so that only a
// real failure reaches it.
const waitFor = 20 * time.Second

// fast sets sub-second thresholds and intervals; retention stays off unless
// a test turns it on.
func fast(cfg *app.Config) {
	cfg.App.Liveness.StaleAfter = staleAfter
	cfg.App.Liveness.DeadAfter = deadAfter
	cfg.ReaperInterval = interval
	cfg.DeadlineReaperInterval = interval
	cfg.LeaseReaperInterval = interval
	cfg.RetentionInterval = interval
	cfg.RetentionTTL = 0
}

// instance is a running server and its background jobs.
type instance struct {
	*testserver.Server
	reapers *app.Reapers
}

func start(t *testing.T, databaseURL string, mutate func(*app.Config), extra ...fx.Option) *instance {
	t.Helper()
	var r *app.Reapers
	s := testserver.StartOn(t, databaseURL, func(cfg *app.Config) {
		fast(cfg)
		if mutate != nil {
			mutate(cfg)
		}
	}, append(extra, fx.Populate(&r))...)
	return &instance{Server: s, reapers: r}
}

// call sends a JSON request and returns the status and body.
func (s *instance) call(t *testing.T, method, path string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, s.URL+path, rd)
	require.NoError(t, err)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, out
}

// expect sends a request, requires the status and decodes the body into out
// (when not nil).
func (s *instance) expect(t *testing.T, method, path string, body any, status int, out any) {
	t.Helper()
	got, b := s.call(t, method, path, body)
	require.Equal(t, status, got, "%s %s: %s", method, path, b)
	if out != nil {
		require.NoError(t, json.Unmarshal(b, out), "%s %s: %s", method, path, b)
	}
}

func (s *instance) register(t *testing.T, id string) {
	t.Helper()
	s.expect(t, http.MethodPost, "/workers/v1/register", map[string]any{"id": id}, http.StatusCreated, nil)
}

func (s *instance) submit(t *testing.T, body map[string]any) httpadapter.TaskJSON {
	t.Helper()
	var tk httpadapter.TaskJSON
	s.expect(t, http.MethodPost, "/tasks/v1", body, http.StatusCreated, &tk)
	return tk
}

func (s *instance) claim(t *testing.T, workerID, queue string, limit int) []httpadapter.TaskJSON {
	t.Helper()
	var resp struct {
		Tasks []httpadapter.TaskJSON `json:"tasks"`
	}
	s.expect(t, http.MethodPost, "/tasks/v1/claim", map[string]any{"worker_id": workerID, "queue": queue, "limit": limit}, http.StatusOK, &resp)
	return resp.Tasks
}

func (s *instance) task(t *testing.T, id string) httpadapter.TaskJSON {
	t.Helper()
	var tk httpadapter.TaskJSON
	s.expect(t, http.MethodGet, "/tasks/v1/"+id, nil, http.StatusOK, &tk)
	return tk
}

func (s *instance) worker(t *testing.T, id string) httpadapter.WorkerJSON {
	t.Helper()
	var resp struct {
		Workers []httpadapter.WorkerJSON `json:"workers"`
	}
	s.expect(t, http.MethodGet, "/workers/v1", nil, http.StatusOK, &resp)
	for _, w := range resp.Workers {
		if w.ID == id {
			return w
		}
	}
	require.Failf(t, "worker not listed", "worker %s", id)
	return httpadapter.WorkerJSON{}
}

// eventually polls cond every 10 ms until it holds, failing after waitFor.
// cond runs on the test's goroutine, so it may use require.
func eventually(t *testing.T, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: "+format, append([]any{waitFor}, args...)...)
		}
		<-tick.C
	}
}

func (s *instance) waitWorker(t *testing.T, id, status string) httpadapter.WorkerJSON {
	t.Helper()
	var w httpadapter.WorkerJSON
	eventually(t, func() bool { w = s.worker(t, id); return w.Status == status }, "worker %s becomes %s", id, status)
	return w
}

func (s *instance) waitTask(t *testing.T, id, status string) httpadapter.TaskJSON {
	t.Helper()
	var tk httpadapter.TaskJSON
	eventually(t, func() bool { tk = s.task(t, id); return tk.Status == status }, "task %s becomes %s", id, status)
	return tk
}

// outboxEvent is one lifecycle event in the outbox and the message (the
// transaction) that carried it.
type outboxEvent struct {
	event.Event
	Message int64
}

// outbox returns the events of the given types in the order they were
// appended.
func outbox(t *testing.T, db *sqlx.DB, types ...event.Type) []outboxEvent {
	t.Helper()
	names := make([]string, len(types))
	for i, typ := range types {
		names[i] = string(typ)
	}
	var rows []struct {
		Offset int64  `db:"offset"`
		Event  []byte `db:"event"`
	}
	require.NoError(t, db.Select(&rows, `
		SELECT m."offset", e::text AS event
		FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = ANY($1) ORDER BY m."offset"`, names))
	out := make([]outboxEvent, len(rows))
	for i, r := range rows {
		require.NoError(t, json.Unmarshal(r.Event, &out[i].Event))
		out[i].Message = r.Offset
	}
	return out
}

// about filters events to those of one task or worker.
func about(events []outboxEvent, id string) []outboxEvent {
	var out []outboxEvent
	for _, e := range events {
		if e.TaskID == id || (e.TaskID == "" && e.WorkerID == id) {
			out = append(out, e)
		}
	}
	return out
}

// transitions renders events as "type from>to reason" for compact asserts.
func transitions(events []outboxEvent) []string {
	out := make([]string, len(events))
	for i, e := range events {
		out[i] = fmt.Sprintf("%s %s>%s %s", e.Type, e.From, e.To, e.Reason)
	}
	return out
}
