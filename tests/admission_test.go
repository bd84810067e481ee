package tests

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// holdRequest sends the headers of a POST whose body announces
// contentLength bytes and sends only its first byte: the server admits the
// request and its handler waits for the rest. The returned function closes
// the connection, which ends the request (the test's cleanup does too).
func holdRequest(t *testing.T, base, path string, contentLength int) (release func()) {
	t.Helper()
	u, err := url.Parse(base)
	require.NoError(t, err)
	conn, err := net.Dial("tcp", u.Host)
	require.NoError(t, err)
	_, err = fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{",
		path, u.Host, contentLength)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return func() { _ = conn.Close() }
}

// inFlight reads what the requests being served hold of the admission caps,
// from GET /metrics (never refused, and not counted).
func inFlight(t *testing.T, c *testclient.Client) (requests, claims, bodyBytes int) {
	t.Helper()
	r := c.Do(http.MethodGet, "/metrics", nil)
	require.Equal(t, http.StatusOK, r.Status)
	for _, line := range strings.Split(string(r.Body), "\n") {
		name, value, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.Atoi(value)
		if err != nil {
			continue
		}
		switch name {
		case `taskmaster_http_requests_in_flight{class="requests"}`:
			requests = n
		case `taskmaster_http_requests_in_flight{class="claims"}`:
			claims = n
		case "taskmaster_http_request_body_bytes_in_flight":
			bodyBytes = n
		}
	}
	return requests, claims, bodyBytes
}

// refusedAsOverloaded requires r to be the 503 problem of a full instance,
// with Retry-After.
func refusedAsOverloaded(t *testing.T, r *testclient.Response) {
	t.Helper()
	r.Problem(t, http.StatusServiceUnavailable, "overloaded")
	require.Equal(t, "1", r.Header.Get("Retry-After"), "%s", r)
}

// Beyond TASKMASTER_MAX_INFLIGHT_REQUESTS a request is refused at once with
// 503 and Retry-After, before it does anything; claims and the operational
// endpoints are counted apart; capacity comes back when a request ends.
func TestAdmissionRefusesRequestsBeyondTheCapAndChangesNothing(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, func(cfg *app.Config) { cfg.HTTP.MaxInFlightRequests = 1 })
	release := holdRequest(t, s.URL, "/tasks/v1", 200)
	testclient.Poll(t, 30*time.Second, "the held request to take the only place", func() bool {
		requests, _, _ := inFlight(t, c)
		return requests == 1
	})

	refusedAsOverloaded(t, c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "payload": 1}))
	refusedAsOverloaded(t, c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "q"}}}))
	refusedAsOverloaded(t, c.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w"}))
	for _, path := range []string{"/healthz", "/readyz", "/metrics", "/openapi.yaml"} {
		require.Equal(t, http.StatusOK, c.Do(http.MethodGet, path, nil).Status, "%s is never refused", path)
	}
	c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "nobody"}).
		Problem(t, http.StatusNotFound, "worker-not-found") // claims have their own cap
	require.Zero(t, countRows(t, s, `SELECT count(*) FROM tasks`), "a refused submit stores nothing")
	require.Zero(t, countRows(t, s, `SELECT count(*) FROM workers`), "a refused register stores nothing")

	release()
	testclient.Poll(t, 30*time.Second, "the place to come back", func() bool {
		requests, _, _ := inFlight(t, c)
		return requests == 0
	})
	c.Submit(jsonObj{"queue": "q", "payload": 1})
	require.Equal(t, 1, countRows(t, s, `SELECT count(*) FROM tasks`))
}

// Claims, long polls included, have a cap of their own: a long poll does not
// take a place from other requests, and a claim beyond the cap is refused
// without claiming anything.
func TestAdmissionCountsClaimsApart(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) {
		cfg.HTTP.MaxInFlightClaims = 1
		cfg.HTTP.MaxInFlightRequests = 1
	})
	c.Register(jsonObj{"id": "poller", "queues": []string{"polled"}})
	c.Register(jsonObj{"id": "other", "queues": []string{"other"}})

	type answer struct {
		r   *testclient.Response
		err error
	}
	polled := make(chan answer, 1)
	go func() {
		r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "poller", "wait_ms": 30000}, nil)
		polled <- answer{r, err}
	}()
	testclient.Poll(t, 30*time.Second, "the long poll to take the only claim place", func() bool {
		_, claims, _ := inFlight(t, c)
		return claims == 1
	})

	waiting := c.Submit(jsonObj{"queue": "other", "payload": 1}) // the long poll holds no request place
	refusedAsOverloaded(t, c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "other", "limit": 10}))
	got := c.Get(waiting.ID)
	require.Equal(t, "PENDING", got.Status, "a refused claim claims nothing")
	require.Zero(t, got.Attempts)

	wanted := c.Submit(jsonObj{"queue": "polled", "payload": 2}) // wakes the long poll
	select {
	case a := <-polled:
		require.NoError(t, a.err)
		var out struct{ Tasks []testclient.Task }
		a.r.Expect(t, http.StatusOK, &out)
		require.Len(t, out.Tasks, 1)
		require.Equal(t, wanted.ID, out.Tasks[0].ID)
	case <-time.After(30 * time.Second):
		require.FailNow(t, "the long poll did not return")
	}
	testclient.Poll(t, 30*time.Second, "the claim place to come back", func() bool {
		_, claims, _ := inFlight(t, c)
		return claims == 0
	})
	claimed := c.Claim(jsonObj{"worker_id": "other"})
	require.Len(t, claimed, 1)
	require.Equal(t, waiting.ID, claimed[0].ID)
}

// The request bodies served at once may buffer at most
// TASKMASTER_MAX_INFLIGHT_BODY_BYTES: a request whose announced body (or,
// unannounced, the route's whole limit) does not fit is refused with 503 and
// Retry-After before a byte of it is read; smaller ones still fit.
func TestAdmissionCapsBufferedBodyBytes(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, func(cfg *app.Config) {
		cfg.HTTP.MaxBodyBytes, cfg.HTTP.MaxBatchBodyBytes = 1024, 1024
		cfg.HTTP.MaxInFlightBodyBytes = 1500
	})
	body := func(queue string, size int) string {
		b := fmt.Sprintf(`{"queue":%q,"payload":"%%s"}`, queue)
		return fmt.Sprintf(b, strings.Repeat("x", size-len(b)+2))
	}
	release := holdRequest(t, s.URL, "/tasks/v1", 1000)
	testclient.Poll(t, 30*time.Second, "the held body to take 1000 of the 1500 bytes", func() bool {
		_, _, bodyBytes := inFlight(t, c)
		return bodyBytes == 1000
	})

	big := body("q", 600)
	require.Len(t, big, 600)
	refusedAsOverloaded(t, c.Do(http.MethodPost, "/tasks/v1", big))
	// A chunked body announces no length: it reserves the route's limit.
	req, err := http.NewRequest(http.MethodPost, s.URL+"/tasks/v1", struct{ io.Reader }{strings.NewReader(body("q", 100))})
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	refusedAsOverloaded(t, &testclient.Response{Method: http.MethodPost, Path: "/tasks/v1", Status: resp.StatusCode, Header: resp.Header, Body: data})
	require.Zero(t, countRows(t, s, `SELECT count(*) FROM tasks`), "refused submits store nothing")

	c.Submit(body("q", 300)) // 1000 + 300 fit
	release()
	testclient.Poll(t, 30*time.Second, "the held bytes to come back", func() bool {
		_, _, bodyBytes := inFlight(t, c)
		return bodyBytes == 0
	})
	c.Submit(big)
	require.Equal(t, 2, countRows(t, s, `SELECT count(*) FROM tasks`))
}
