package outboxe2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// streamMetric reads a series of the event streams' metrics.
func streamMetric(t *testing.T, url, name string, labels map[string]string) float64 {
	t.Helper()
	fams := scrape(t, url+"/metrics")
	m := sample(fams, name, labels)
	require.NotNil(t, m, "%s%v", name, labels)
	if m.GetCounter() != nil {
		return m.GetCounter().GetValue()
	}
	return m.GetGauge().GetValue()
}

// 1,000 clients stream the events of one queue from one instance: each gets
// every event, while the instance reads the outbox once per poll interval
// for all of them (its one reader) and never on behalf of a single stream.
func TestThousandEventStreamsAreServedByOneReader(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastOutbox) // heartbeats every 15 s: 1,000 streams idle quietly
	c := newClient(t, func() string { return s.URL })
	c.hc.Timeout = time.Minute // a busy machine under the race detector
	const streams = 1000
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: streams}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var (
		opened   sync.WaitGroup
		readers  sync.WaitGroup
		received [streams]atomic.Int64
		mu       sync.Mutex
		idsSeen  = map[string]int{}
	)
	for i := range streams {
		opened.Add(1)
		readers.Add(1)
		go func() {
			defer readers.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/events/v1?queue=fanout", nil)
			if !assertNoError(t, err) {
				opened.Done()
				return
			}
			resp, err := hc.Do(req)
			opened.Done()
			if !assertNoError(t, err) {
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Errorf("stream %d: %d", i, resp.StatusCode)
				return
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
					mu.Lock()
					idsSeen[id]++
					mu.Unlock()
				}
				if strings.HasPrefix(sc.Text(), "data: ") {
					received[i].Add(1)
				}
			}
		}()
	}
	opened.Wait()
	require.Equal(t, float64(streams), streamMetric(t, s.URL, "taskmaster_event_streams", nil))
	sharedBefore := streamMetric(t, s.URL, "taskmaster_event_stream_reads_total", map[string]string{"reader": "shared"})
	start := time.Now()
	for range 3 {
		require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "fanout"}, nil))
	}
	require.Eventually(t, func() bool {
		for i := range received {
			if received[i].Load() < 3 {
				return false
			}
		}
		return true
	}, 60*time.Second, 20*time.Millisecond, "every stream gets the 3 events")
	// Read the count before the clock: a read between the two is then
	// within the time it is allowed for.
	shared := streamMetric(t, s.URL, "taskmaster_event_stream_reads_total", map[string]string{"reader": "shared"}) - sharedBefore
	elapsed := time.Since(start)
	polls := elapsed/s.Config.Outbox.PollInterval + 3
	t.Logf("%d streams got 3 events in %v with %.0f reads of the outbox", streams, elapsed, shared)
	require.LessOrEqual(t, shared, float64(polls), "one read per poll interval for all streams")
	require.Zero(t, streamMetric(t, s.URL, "taskmaster_event_stream_reads_total", map[string]string{"reader": "catch_up"}))
	for range 50 { // no stream got more than the 3
		for i := range received {
			require.LessOrEqual(t, received[i].Load(), int64(3))
		}
	}
	mu.Lock()
	require.Len(t, idsSeen, 3)
	for id, n := range idsSeen {
		require.Equal(t, streams, n, id)
	}
	mu.Unlock()
	cancel()
	readers.Wait()
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Error(err)
		return false
	}
	return true
}

// rawStream is an event stream read over a bare TCP connection whose reader
// can stop reading.
type rawStream struct {
	conn net.Conn
	r    *bufio.Reader
}

// openRawStream sends GET /events/v1 over a connection with a small receive
// buffer and reads the response head.
func openRawStream(t *testing.T, base, query string) *rawStream {
	t.Helper()
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
		if err != nil {
			return err
		}
		return serr
	}}
	host := strings.TrimPrefix(base, "http://")
	conn, err := d.Dial("tcp", host)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	_, err = fmt.Fprintf(conn, "GET /events/v1%s HTTP/1.1\r\nHost: %s\r\nAccept: text/event-stream\r\n\r\n", query, host)
	require.NoError(t, err)
	r := bufio.NewReaderSize(conn, 4096)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	return &rawStream{conn: conn, r: bufio.NewReader(resp.Body)}
}

// A client that stops reading is dropped once the instance has held its
// share of pages, with a last message naming the last event it was sent;
// resuming from there gets exactly the events after it. Memory stays
// bounded: the instance holds nothing more for it.
func TestSlowEventStreamClientIsDroppedAndToldWhereToResume(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) {
		sseConfig(c)
		c.Outbox.StreamBuffer = 2
		c.Outbox.StreamHistory = 2
		// The instance drops the stream long before a blocked write to it
		// would time out and end it, however slow the machine.
		c.HTTP.EventsWriteTimeout = 5 * time.Minute
	})
	c := newClient(t, func() string { return s.URL })
	c.hc.Timeout = time.Minute // batches under the race detector on a busy machine
	slow := openRawStream(t, s.URL, "?queue=flood")
	keeper := openRawStream(t, s.URL, "?queue=elsewhere") // a stream with nothing to read stays

	// Flood the slow stream's queue until the instance drops it: the
	// kernel's socket buffers take a few MB first.
	items := make([]map[string]any, 1000)
	for i := range items {
		items[i] = map[string]any{"queue": "flood"}
	}
	dropped := func() float64 { return streamMetric(t, s.URL, "taskmaster_event_streams_dropped_total", nil) }
	for i := 0; dropped() == 0; i++ {
		require.Less(t, i, 200, "the slow stream was never dropped")
		require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1/batch", map[string]any{"tasks": items}, nil))
	}
	require.Equal(t, 1.0, streamMetric(t, s.URL, "taskmaster_event_streams", nil), "the keeper is still open")

	// The slow client reads on: the stream ends with where to resume.
	var lastID, notice string
	events := 0
	for {
		line, err := slow.r.ReadString('\n')
		if err != nil {
			break
		}
		line = strings.TrimRight(line, "\n")
		if id, ok := strings.CutPrefix(line, "id: "); ok {
			lastID = id
		}
		if data, ok := strings.CutPrefix(line, "data: "); ok {
			if strings.Contains(data, `"stream.dropped"`) {
				notice = data
			} else {
				events++
			}
		}
	}
	require.NotEmpty(t, notice, "the stream ends with a stream.dropped message")
	var dropNotice struct {
		Type        string `json:"type"`
		LastEventID string `json:"last_event_id"`
	}
	require.NoError(t, json.Unmarshal([]byte(notice), &dropNotice))
	require.NoError(t, spectest.New(t, s.URL).CheckSchema("StreamDropped", []byte(notice)), "as docs/openapi.yaml describes it")
	require.Equal(t, lastID, dropNotice.LastEventID, "it names the last event sent")
	require.Positive(t, events)

	// Resuming from it gives the rest: every flood event exactly once.
	var total int
	for _, e := range outboxEvents(t, s.DB) {
		if e.Queue == "flood" {
			total++
		}
	}
	resumed := openStream(t, s.URL+"/events/v1?queue=flood", dropNotice.LastEventID)
	for rest := total - events; rest > 0; rest-- {
		b, ok := resumed.next(30 * time.Second)
		require.True(t, ok)
		require.Equal(t, "flood", b.event.Queue)
	}
	select {
	case b := <-resumed.blocks:
		require.Empty(t, b.data, "nothing beyond the flood's events")
	case <-time.After(300 * time.Millisecond):
	}
	_ = keeper
}

// An instance serves at most TASKMASTER_EVENTS_MAX_STREAMS streams: beyond,
// 503 too-many-streams with Retry-After; a stream that ends frees its place.
func TestEventStreamsBeyondTheCapAreRefusedWithRetryAfter(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) {
		sseConfig(c)
		c.Outbox.MaxStreams = 2
	})
	first := openStream(t, s.URL+"/events/v1", "")
	openStream(t, s.URL+"/events/v1", "")
	resp, err := http.Get(s.URL + "/events/v1")
	require.NoError(t, err)
	body := readAll(t, resp)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "5", resp.Header.Get("Retry-After"))
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var p struct {
		Type string `json:"type"`
	}
	require.NoError(t, json.Unmarshal(body, &p))
	require.Equal(t, "urn:problem-type:taskmaster:too-many-streams", p.Type)
	require.Equal(t, 1.0, streamMetric(t, s.URL, "taskmaster_event_streams_refused_total", nil))

	first.close()
	require.Eventually(t, func() bool {
		resp, err := http.Get(s.URL + "/events/v1")
		require.NoError(t, err)
		defer resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond, "a closed stream frees its place")
	require.Equal(t, outbox.DefaultConfig().MaxStreams, app.DefaultConfig().Outbox.MaxStreams)
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	var b strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		b.WriteString(sc.Text())
	}
	return []byte(b.String())
}
