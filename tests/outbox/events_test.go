package outboxe2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// sseBlock is one dispatched block of an event stream.
type sseBlock struct {
	id    string // "" when the block set none
	data  string
	event event.Event // decoded data, when it is an event
}

// sseStream is a minimal Server-Sent Events client.
type sseStream struct {
	t      *testing.T
	resp   *http.Response
	cancel context.CancelFunc
	blocks chan sseBlock
	done   chan error
	// lastID is the id a browser would send when reconnecting: the last id
	// field seen, in any block.
	lastID string
}

func openStream(t *testing.T, url, lastEventID string) *sseStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	s := &sseStream{t: t, resp: resp, cancel: cancel, blocks: make(chan sseBlock, 1000), done: make(chan error, 1), lastID: lastEventID}
	go s.read()
	t.Cleanup(s.close)
	return s
}

func (s *sseStream) read() {
	sc := bufio.NewScanner(s.resp.Body)
	var b sseBlock
	var data []string
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			b.data = strings.Join(data, "\n")
			s.blocks <- b
			b, data = sseBlock{}, nil
		case strings.HasPrefix(line, ":"):
		case strings.HasPrefix(line, "id: "):
			b.id = strings.TrimPrefix(line, "id: ")
		case strings.HasPrefix(line, "data: "):
			data = append(data, strings.TrimPrefix(line, "data: "))
		}
	}
	err := sc.Err()
	if err == nil {
		err = io.EOF
	}
	s.done <- err
	close(s.blocks)
}

// next returns the next block with data (remembering every id on the way),
// or fails after the deadline.
func (s *sseStream) next(timeout time.Duration) (sseBlock, bool) {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case b, ok := <-s.blocks:
			if !ok {
				return sseBlock{}, false
			}
			if b.id != "" {
				s.lastID = b.id
			}
			if b.data == "" {
				continue
			}
			require.NoError(s.t, json.Unmarshal([]byte(b.data), &b.event), b.data)
			return b, true
		case <-deadline:
			s.t.Fatalf("no event within %v", timeout)
		}
	}
}

// nextID waits for a block that carries an id.
func (s *sseStream) nextID(timeout time.Duration) string {
	s.t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case b, ok := <-s.blocks:
			require.True(s.t, ok, "the stream ended")
			if b.id != "" {
				s.lastID = b.id
				return b.id
			}
		case <-deadline:
			s.t.Fatalf("no id within %v", timeout)
		}
	}
}

func (s *sseStream) close() {
	s.cancel()
	_ = s.resp.Body.Close()
}

func sseConfig(c *app.Config) {
	fastOutbox(c)
	c.HTTP.EventsHeartbeat = 100 * time.Millisecond
}

func TestEventStreamResumesWithLastEventIDWithoutLossOrDuplicates(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, sseConfig)
	c := newClient(t, func() string { return s.URL })
	c.mustCall("POST", "/workers/v1/register", map[string]any{"id": "w", "queues": []string{"b"}}, nil)

	stream := openStream(t, s.URL+"/events/v1?queue=a", "")
	submit := func(n int) {
		for i := range n {
			for _, q := range []string{"a", "b"} {
				require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1", map[string]any{"queue": q, "payload": map[string]int{"i": i}}, nil))
			}
		}
	}
	submit(10)
	var got []sseBlock
	for len(got) < 5 {
		b, ok := stream.next(30 * time.Second)
		require.True(t, ok)
		got = append(got, b)
	}
	stream.close() // the client goes away mid-stream

	// Meanwhile: more submissions and a batch claim (one outbox message with
	// several events, of which the client will resume in the middle only if
	// it disconnected there; here it resumes after its last event).
	submit(10)
	var claimed claimResponse
	c.mustCall("POST", "/tasks/v1/claim", map[string]any{"worker_id": "w", "queue": "a", "limit": 7}, &claimed)
	require.Len(t, claimed.Tasks, 7)
	c.mustCall("POST", "/tasks/v1/"+claimed.Tasks[0].ID+"/complete", map[string]any{"worker_id": "w", "lease_id": claimed.Tasks[0].LeaseID}, nil)

	var want []event.Event
	for _, e := range outboxEvents(t, s.DB) {
		if e.Queue == "a" {
			want = append(want, e)
		}
	}
	require.Len(t, want, 20+7+1)

	resumed := openStream(t, s.URL+"/events/v1?queue=a", stream.lastID)
	for len(got) < len(want) {
		b, ok := resumed.next(30 * time.Second)
		require.True(t, ok)
		got = append(got, b)
	}
	seen := map[string]bool{}
	for i, b := range got {
		require.False(t, seen[b.id], "duplicate id %s", b.id)
		seen[b.id] = true
		require.Equal(t, want[i].Type, b.event.Type, "event %d", i)
		require.Equal(t, want[i].TaskID, b.event.TaskID, "event %d", i)
	}
	select {
	case b := <-resumed.blocks:
		require.Empty(t, b.data, "nothing beyond the queue's events")
	case <-time.After(300 * time.Millisecond):
	}

	// The disconnected stream's handler ended: its request was observed.
	require.Eventually(t, func() bool {
		fams := scrape(t, s.URL+"/metrics")
		m := sample(fams, "taskmaster_http_request_duration_seconds", map[string]string{"route": "/events/v1", "method": "GET", "status": "200"})
		return m != nil && m.GetHistogram().GetSampleCount() == 1
	}, 10*time.Second, 20*time.Millisecond)
}

func TestEventStreamFiltersByTypeAndReplaysFromAnID(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, sseConfig)
	c := newClient(t, func() string { return s.URL })
	knownWorkload(t, c)
	var want []event.Event
	for _, e := range outboxEvents(t, s.DB) {
		if e.Type == event.TaskCompleted || strings.HasPrefix(string(e.Type), "worker.") {
			want = append(want, e)
		}
	}
	require.Len(t, want, 4)
	stream := openStream(t, s.URL+"/events/v1?type=task.completed&type=worker.*", "0-0-0")
	for i, w := range want {
		b, ok := stream.next(30 * time.Second)
		require.True(t, ok)
		require.Equal(t, w.Type, b.event.Type, "event %d", i)
		require.Equal(t, w.TaskID, b.event.TaskID, "event %d", i)
		require.Equal(t, w.WorkerID, b.event.WorkerID, "event %d", i)
	}
}

// A stream whose filter matches nothing still moves its client's position
// forward, with the ids of its heartbeats.
func TestEventStreamHeartbeatsCarryTheFilteredPosition(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, sseConfig)
	c := newClient(t, func() string { return s.URL })
	stream := openStream(t, s.URL+"/events/v1?queue=nobody", "")
	c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "q"}, nil)
	c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "q"}, nil)
	var last string
	require.NoError(t, s.DB.Get(&last, `
		SELECT transaction_id::text || '-' || "offset" || '-0' FROM watermill_taskmaster_events
		ORDER BY transaction_id DESC, "offset" DESC LIMIT 1`))
	deadline := time.Now().Add(30 * time.Second)
	for stream.lastID != last {
		require.True(t, time.Now().Before(deadline), "heartbeat ids never reached %s (at %s)", last, stream.lastID)
		stream.nextID(30 * time.Second)
	}
}

func TestEventStreamRejectsAnUnknownLastEventID(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, sseConfig)
	req, err := http.NewRequest(http.MethodGet, s.URL+"/events/v1", nil)
	require.NoError(t, err)
	req.Header.Set("Last-Event-ID", "not-an-id")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	resp2, err := http.Get(s.URL + "/events/v1?queue=")
	require.NoError(t, err)
	defer resp2.Body.Close()
	require.Equal(t, http.StatusUnprocessableEntity, resp2.StatusCode)
}

// The janitor deleted events the client had not seen: the stream says so,
// then goes on with what is left.
func TestEventStreamReportsEventsLostToTheJanitor(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) {
		sseConfig(c)
		c.Outbox.Retention = 0
		c.Outbox.JanitorInterval = 20 * time.Millisecond
	})
	c := newClient(t, func() string { return s.URL })
	for range 3 {
		c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "q"}, nil)
	}
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM watermill_taskmaster_events`))
		return n == 0
	}, 30*time.Second, 20*time.Millisecond, "the janitor deletes what both projectors consumed")
	stream := openStream(t, s.URL+"/events/v1", "0-0-0")
	b, ok := stream.next(30 * time.Second)
	require.True(t, ok)
	var notice struct {
		Type        string `json:"type"`
		After       string `json:"after"`
		LostThrough string `json:"lost_through"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.data), &notice))
	spec := spectest.New(t, s.URL)
	require.NoError(t, spec.CheckSchema("StreamEventsLost", []byte(b.data)), "as docs/openapi.yaml describes it")
	require.Empty(t, b.id, "the notice has no id")
	require.Equal(t, "stream.events_lost", notice.Type)
	require.Equal(t, "0-0-0", notice.After)
	require.NotEmpty(t, notice.LostThrough)
	// A consumer group that stays where the projections are now keeps the
	// janitor from deleting the next event before the stream reads it.
	_, err := s.DB.Exec(`INSERT INTO watermill_offsets_taskmaster_events (consumer_group, offset_acked, last_processed_transaction_id)
		SELECT 'hold', offset_acked, last_processed_transaction_id FROM watermill_offsets_taskmaster_events
		WHERE consumer_group = 'projections'`)
	require.NoError(t, err)
	c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "q"}, nil)
	b, ok = stream.next(30 * time.Second)
	require.True(t, ok)
	require.Equal(t, event.TaskSubmitted, b.event.Type, "the stream goes on")
	require.NoError(t, spec.CheckSchema("LifecycleEvent", []byte(b.data)))
}

func TestEventStreamEndsWhenTheServerStops(t *testing.T) {
	t.Parallel()
	// A server that waited for open streams would wait out its whole
	// shutdown timeout: make that far longer than the bound below, so that
	// the bound can leave a loaded machine room.
	s := testserver.Start(t, func(c *app.Config) {
		sseConfig(c)
		c.HTTP.ShutdownTimeout = 30 * time.Second
	})
	stream := openStream(t, s.URL+"/events/v1", "")
	select { // the retry block: the stream is up
	case _, ok := <-stream.blocks:
		require.True(t, ok)
	case <-time.After(10 * time.Second):
		t.Fatal("the stream sent nothing")
	}
	start := time.Now()
	s.Stop()
	require.Less(t, time.Since(start), 10*time.Second, "Stop does not wait for the stream to time out")
	select {
	case err := <-stream.done:
		require.True(t, errors.Is(err, io.EOF) || err != nil, fmt.Sprint(err))
	case <-time.After(10 * time.Second):
		t.Fatal("the stream is still open")
	}
}
