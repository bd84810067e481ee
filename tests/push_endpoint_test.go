package tests

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// received is one delivery an endpoint got.
type received struct {
	header http.Header
	body   []byte
	at     time.Time
}

// endpoint is an HTTP endpoint a test starts for push queues: it records
// every delivery, counts the deliveries it serves at once, and answers
// with handle (200 and {"ok":true} when nil), given the delivery's index.
type endpoint struct {
	*httptest.Server
	mu       sync.Mutex
	got      []received
	handle   func(w http.ResponseWriter, r *http.Request, n int)
	inFlight atomic.Int64
	peak     atomic.Int64
	active   atomic.Int64 // connections in StateActive
	peakConn atomic.Int64
}

func newEndpoint(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) *endpoint {
	t.Helper()
	e := &endpoint{handle: handle}
	e.Server = httptest.NewUnstartedServer(http.HandlerFunc(e.serve))
	states := sync.Map{}
	e.Config.ConnState = func(c net.Conn, s http.ConnState) {
		prev, _ := states.Swap(c, s)
		if prev == http.StateActive {
			e.active.Add(-1)
		}
		if s == http.StateActive {
			raise(&e.peakConn, e.active.Add(1))
		}
	}
	e.Start()
	t.Cleanup(e.Close)
	return e
}

func raise(peak *atomic.Int64, v int64) {
	for {
		p := peak.Load()
		if v <= p || peak.CompareAndSwap(p, v) {
			return
		}
	}
}

func (e *endpoint) serve(w http.ResponseWriter, r *http.Request) {
	raise(&e.peak, e.inFlight.Add(1))
	defer e.inFlight.Add(-1)
	body, _ := io.ReadAll(r.Body)
	e.mu.Lock()
	n := len(e.got)
	e.got = append(e.got, received{header: r.Header.Clone(), body: body, at: time.Now()})
	e.mu.Unlock()
	if e.handle == nil {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"ok":true}`)
		return
	}
	e.handle(w, r, n)
}

// deliveries returns what the endpoint got so far.
func (e *endpoint) deliveries() []received {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]received(nil), e.got...)
}

// pushConfig lets an instance deliver to the test's endpoints (on
// 127.0.0.1) promptly: push queues read every 50 ms, waiting claims polling
// every 50 ms, deliveries' leases one second past their timeout; secrets
// sealed with a test key.
func pushConfig(c *app.Config) {
	allow, err := push.ParseAllowList("127.0.0.1")
	if err != nil {
		panic(err)
	}
	c.Push.AllowedHosts = allow
	c.Push.SecretKeys = [][]byte{[]byte("0123456789abcdef0123456789abcdef")} // sealed at rest
	c.Push.Refresh = 50 * time.Millisecond
	c.Push.LeaseMargin = time.Second
	c.App.ClaimPollInterval = 50 * time.Millisecond
}

// startPush starts an instance with pushConfig (then mutate).
func startPush(t *testing.T, mutate func(*app.Config)) (*testserver.Server, *testclient.Client) {
	t.Helper()
	return startAPI(t, func(c *app.Config) {
		pushConfig(c)
		if mutate != nil {
			mutate(c)
		}
	})
}

// pushQueue makes queue a push queue delivering to url (push settings
// merged over {"url": url}) and returns the answer's push object, with its
// secret.
func pushQueue(t *testing.T, c *testclient.Client, queue, url string, settings jsonObj) pushJSON {
	t.Helper()
	p := jsonObj{"url": url}
	for k, v := range settings {
		p[k] = v
	}
	var out struct {
		Push *pushJSON `json:"push"`
	}
	c.Do(http.MethodPatch, "/queues/v1/"+queue, jsonObj{"push": p}).Expect(t, http.StatusOK, &out)
	require.NotNil(t, out.Push)
	return *out.Push
}

// pushJSON is the push object of the contract.
type pushJSON struct {
	URL                     string     `json:"url"`
	TimeoutSeconds          int        `json:"timeout_seconds"`
	MaxInFlight             int        `json:"max_in_flight"`
	HeaderNames             []string   `json:"header_names"`
	NonRetryableStatuses    []int      `json:"non_retryable_statuses"`
	SecretRotatedAt         time.Time  `json:"secret_rotated_at"`
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	Secret                  string     `json:"secret"`
}

// attemptJSON is one attempt of GET /tasks/v1/{id}/attempts.
type attemptJSON struct {
	Attempt    int     `json:"attempt"`
	WorkerID   string  `json:"worker_id"`
	Outcome    *string `json:"outcome"`
	Error      *string `json:"error"`
	HTTPStatus *int    `json:"http_status"`
}

func deliveryAttempts(t *testing.T, c *testclient.Client, id string) []attemptJSON {
	t.Helper()
	var out struct {
		Attempts []attemptJSON `json:"attempts"`
	}
	c.Do(http.MethodGet, "/tasks/v1/"+id+"/attempts", nil).Expect(t, http.StatusOK, &out)
	return out.Attempts
}

// waitStatus polls the task until it is in status.
func waitStatus(t *testing.T, c *testclient.Client, id, status string, timeout time.Duration) testclient.Task {
	t.Helper()
	var tk testclient.Task
	testclient.Poll(t, timeout, "task "+id+" "+status, func() bool {
		tk = c.Get(id)
		return tk.Status == status
	})
	return tk
}

// verifySignature is the receiver's check, written from the documented
// recipe (docs/api.md "Verifying a delivery"): split the header on commas
// into t= and every v1=; refuse a t more than five minutes from now;
// compute the hex HMAC-SHA256, keyed with the secret, of t, a dot and the
// raw body; accept when any v1 equals it.
func verifySignature(secret, header string, body []byte, now time.Time) error {
	var ts string
	var sigs []string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "t":
			ts = v
		case "v1":
			sigs = append(sigs, v)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || math.Abs(float64(now.Unix()-t)) > 300 {
		return errors.New("stale or missing timestamp")
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "." + string(body)))
	want := hex.EncodeToString(mac.Sum(nil))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), []byte(want)) {
			return nil
		}
	}
	return errors.New("no signature matches")
}
