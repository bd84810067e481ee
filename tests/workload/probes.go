package workload

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// AnswerWithin bounds every answer during an outage: no hang.
const AnswerWithin = 10 * time.Second

// ProbeUnavailable sends one request of every kind to an instance while the
// database is unavailable: each must answer within AnswerWithin with a 503
// problem that carries Retry-After; /healthz stays 200.
func ProbeUnavailable(t *testing.T, hc *http.Client, base, queue string, l *Ledger) {
	t.Helper()
	someTask := l.SomeAcked()
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
		code, header, body, err := Do(context.Background(), hc, p.method, base+p.path, p.body)
		elapsed := time.Since(start)
		require.NoError(t, err, "%s %s", p.method, p.path)
		require.Less(t, elapsed, AnswerWithin, "%s %s", p.method, p.path)
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
	code, _, _ := Get(hc, base+"/healthz")
	require.Equal(t, http.StatusOK, code, "the process is alive through the outage")
}

// Waker owns the queue "wake" (a long poll woken by a task submitted while
// it waits) and a ghost worker that claims once and then goes silent.
type Waker struct {
	HC              *http.Client
	Instance, Other string
	L               *Ledger
}

// Register registers the long poll's worker, "waker".
func (k *Waker) Register(t *testing.T) {
	t.Helper()
	code, _, data, err := PostJSON(context.Background(), k.HC, k.Instance+"/workers/v1/register", map[string]any{"id": "waker", "queues": []string{"wake"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
}

// LongPoll starts a claim on Instance that waits up to wait on the empty
// queue "wake" and returns where its task ids will come.
func (k *Waker) LongPoll(ctx context.Context, wait time.Duration) <-chan []string {
	out := make(chan []string, 1)
	go func() {
		code, _, data, err := PostJSON(ctx, k.HC, k.Instance+"/tasks/v1/claim", map[string]any{"worker_id": "waker", "limit": 1, "wait_ms": wait.Milliseconds()})
		var claimed struct{ Tasks []leaseRef }
		if err != nil || code != http.StatusOK {
			k.L.Fail("the long poll: %d %s %v", code, data, err)
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

// Submit puts one task on "wake" through Other, and returns its id.
func (k *Waker) Submit(t *testing.T) string {
	t.Helper()
	code, _, data, err := PostJSON(context.Background(), k.HC, k.Other+"/tasks/v1", map[string]any{"queue": "wake", "payload": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
	return SubmittedIDs(data, 1)[0]
}

// Ghost registers a worker that claims a task on "ghost" under a one-second
// lease and is never heard of again; it returns the task's id.
func (k *Waker) Ghost(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	code, _, data, err := PostJSON(ctx, k.HC, k.Other+"/workers/v1/register", map[string]any{"id": "ghost", "queues": []string{"ghost"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
	code, _, data, err = PostJSON(ctx, k.HC, k.Other+"/tasks/v1", map[string]any{"queue": "ghost", "payload": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", data)
	id := SubmittedIDs(data, 1)[0]
	code, _, data, err = PostJSON(ctx, k.HC, k.Other+"/tasks/v1/claim", map[string]any{"worker_id": "ghost", "lease_seconds": 1})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", data)
	require.Contains(t, string(data), id)
	return id
}

// EventStream reads GET /events/v1 and, whenever the stream ends, opens it
// again with Last-Event-ID, counting each task.completed it sees per task.
type EventStream struct {
	hc        *http.Client
	url       string
	l         *Ledger
	connected chan struct{} // closed when the first stream is open

	mu      sync.Mutex
	lastID  string
	seen    map[string]int
	resumed int
	lost    int
}

// NewEventStream returns a stream of url's events; Run reads it.
func NewEventStream(hc *http.Client, url string, l *Ledger) *EventStream {
	return &EventStream{hc: hc, url: url, l: l, connected: make(chan struct{}), seen: map[string]int{}}
}

// Connected is closed once the first stream is open.
func (s *EventStream) Connected() <-chan struct{} { return s.connected }

// Run reads the stream, resuming it whenever it ends, until ctx ends.
func (s *EventStream) Run(ctx context.Context) {
	first := true
	for ctx.Err() == nil {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url, nil)
		if err != nil {
			s.l.Fail("event stream request: %v", err)
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
			Pause(ctx, 50*time.Millisecond)
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

// Count is how many tasks' completions the stream has seen.
func (s *EventStream) Count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

// Seen returns, per task, how many times its task.completed came.
func (s *EventStream) Seen() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.seen))
	for k, v := range s.seen {
		out[k] = v
	}
	return out
}

// LostNotices is how many stream.events_lost notices the stream got.
func (s *EventStream) LostNotices() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lost
}

// Resumed is how many times the stream was opened again after it ended.
func (s *EventStream) Resumed() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumed
}

func (s *EventStream) read(body io.Reader) {
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
			if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &e) != nil {
				continue
			}
			s.mu.Lock()
			switch e.Type {
			case "task.completed":
				s.seen[e.TaskID]++
			case "stream.events_lost":
				s.lost++
			}
			s.mu.Unlock()
		}
	}
}

// RequireEveryCompletionOnce asserts that the stream delivered the
// task.completed of each of the queue's DONE tasks exactly once, and none
// of a task the database does not hold as DONE.
func (s *EventStream) RequireEveryCompletionOnce(t *testing.T, done []string) {
	t.Helper()
	seen := s.Seen()
	require.Zero(t, s.LostNotices(), "stream.events_lost notices")
	require.Len(t, seen, len(done), "every completion streamed, nothing else")
	for _, id := range done {
		require.Equal(t, 1, seen[id], "task %s: task.completed streamed %d times", id, seen[id])
	}
}
