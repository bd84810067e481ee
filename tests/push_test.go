package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	pushadapter "github.com/taskmaster/taskmaster/adapters/push"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// A 2xx completes the task with the answer's JSON as its result. The
// endpoint gets the payload as a JSON POST with the task's id, attempt,
// queue and trace context, and a signature that a receiver written from the documented
// recipe accepts with the secret the PATCH showed once. The attempt shows
// the HTTP status; the queue's detail, its recent deliveries; its GET, no
// secret.
func TestPushDeliveryCompletesWithTheAnswerAsResult(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"sent":true,"id":"m-1"}`)
	})
	_, c := startPush(t, nil)
	p := pushQueue(t, c, "emails", ep.URL+"/hooks/email?token=abc", jsonObj{"headers": jsonObj{"authorization": "Bearer hook-token"}})
	require.True(t, strings.HasPrefix(p.Secret, "tmpush_"), p.Secret)
	require.Equal(t, []string{"Authorization"}, p.HeaderNames)
	require.Equal(t, 30, p.TimeoutSeconds)
	require.Equal(t, 10, p.MaxInFlight)
	require.Equal(t, []int{400, 401, 403, 404, 410, 422}, p.NonRetryableStatuses)

	const traceparent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	tk := c.Submit(jsonObj{"queue": "emails", "payload": jsonObj{"to": "a@example.com"}, "tags": []string{"eu"},
		"traceparent": traceparent, "tracestate": "vendor=1"})
	done := waitStatus(t, c, tk.ID, "DONE", 20*time.Second)
	require.JSONEq(t, `{"sent":true,"id":"m-1"}`, string(done.Result))

	got := ep.deliveries()
	require.Len(t, got, 1)
	d := got[0]
	require.JSONEq(t, `{"to":"a@example.com"}`, string(d.body))
	require.Equal(t, "application/json", d.header.Get("Content-Type"))
	require.Equal(t, tk.ID, d.header.Get("Taskmaster-Task-Id"))
	require.Equal(t, "1", d.header.Get("Taskmaster-Attempt"))
	require.Equal(t, "emails", d.header.Get("Taskmaster-Queue"))
	require.Equal(t, "Bearer hook-token", d.header.Get("Authorization"))
	require.Equal(t, traceparent, d.header.Get("Traceparent"), "the task's trace continues at the endpoint")
	require.Equal(t, "vendor=1", d.header.Get("Tracestate"))
	require.NoError(t, verifySignature(p.Secret, d.header.Get("Taskmaster-Signature"), d.body, time.Now()))
	require.Error(t, verifySignature(p.Secret, d.header.Get("Taskmaster-Signature"), append(d.body, ' '), time.Now()),
		"a changed body fails")
	require.Error(t, verifySignature("tmpush_other", d.header.Get("Taskmaster-Signature"), d.body, time.Now()))

	as := deliveryAttempts(t, c, tk.ID)
	require.Len(t, as, 1)
	require.Equal(t, "completed", *as[0].Outcome)
	require.Equal(t, 201, *as[0].HTTPStatus)
	require.True(t, strings.HasPrefix(as[0].WorkerID, "push:"), as[0].WorkerID)

	r := c.Do(http.MethodGet, "/queues/v1/emails", nil).Expect(t, http.StatusOK, nil)
	require.NotContains(t, string(r.Body), p.Secret)
	require.NotContains(t, string(r.Body), "hook-token")
	var detail struct {
		Settings struct {
			Push *pushJSON `json:"push"`
		} `json:"settings"`
		Deliveries *struct {
			Recent     int            `json:"recent"`
			Statuses   map[string]int `json:"statuses"`
			LastStatus *int           `json:"last_status"`
		} `json:"deliveries"`
	}
	testclient.Poll(t, 10*time.Second, "delivery statistics", func() bool {
		c.Do(http.MethodGet, "/queues/v1/emails", nil).Expect(t, http.StatusOK, &detail)
		return detail.Deliveries != nil && detail.Deliveries.Recent == 1
	})
	require.Equal(t, map[string]int{"201": 1}, detail.Deliveries.Statuses)
	require.Equal(t, 201, *detail.Deliveries.LastStatus)
	require.Empty(t, detail.Settings.Push.Secret)
	require.Equal(t, ep.URL+"/hooks/email?token=abc", detail.Settings.Push.URL)
}

// A 500 is retried with the backoff, then the task is DEAD (exhausted);
// every attempt shows the status and the task the body's excerpt.
func TestPush500IsRetriedThenDead(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, "database down")
	})
	_, c := startPush(t, nil)
	pushQueue(t, c, "flaky", ep.URL, nil)
	tk := c.Submit(jsonObj{"queue": "flaky", "max_attempts": 3, "retry": jsonObj{"base_seconds": 0.1, "max_seconds": 0.2}})
	dead := waitStatus(t, c, tk.ID, "DEAD", 30*time.Second)
	require.Equal(t, "exhausted", dead.Reason())
	require.Equal(t, "HTTP 500: database down", dead.Error())
	require.Len(t, ep.deliveries(), 3)
	for i, d := range ep.deliveries() {
		require.Equal(t, fmt.Sprint(i+1), d.header.Get("Taskmaster-Attempt"))
	}
	as := deliveryAttempts(t, c, tk.ID)
	require.Len(t, as, 3)
	for _, a := range as {
		require.Equal(t, 500, *a.HTTPStatus)
		require.Equal(t, "failed", *a.Outcome)
	}
}

// A 429 with Retry-After holds the task back that long (measured between
// the deliveries), whatever the backoff; then the 200 completes it.
func TestPush429RetryAfterIsRespected(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, n int) {
		if n == 0 {
			w.Header().Set("Retry-After", "2")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		_, _ = io.WriteString(w, `"fine"`)
	})
	_, c := startPush(t, nil)
	pushQueue(t, c, "rated", ep.URL, nil)
	tk := c.Submit(jsonObj{"queue": "rated", "retry": jsonObj{"base_seconds": 0.1, "max_seconds": 0.1}})
	done := waitStatus(t, c, tk.ID, "DONE", 30*time.Second)
	require.JSONEq(t, `"fine"`, string(done.Result))
	got := ep.deliveries()
	require.Len(t, got, 2)
	gap := got[1].at.Sub(got[0].at)
	require.GreaterOrEqual(t, gap, 2*time.Second, "the second delivery came %s after the first", gap)
	as := deliveryAttempts(t, c, tk.ID)
	require.Equal(t, 429, *as[0].HTTPStatus)
	require.Equal(t, 200, *as[1].HTTPStatus)
}

// A 404 is non-retryable: DEAD at once, whatever the attempts left; the
// list is the queue's (here 409 added, 404 kept).
func TestPush404IsNonRetryable(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/conflict" {
			w.WriteHeader(http.StatusConflict)
			return
		}
		http.NotFound(w, r)
	})
	_, c := startPush(t, nil)
	pushQueue(t, c, "gone", ep.URL+"/missing", nil)
	pushQueue(t, c, "conflicts", ep.URL+"/conflict", jsonObj{"non_retryable_statuses": []int{404, 409}})
	tk := c.Submit(jsonObj{"queue": "gone", "max_attempts": 5})
	dead := waitStatus(t, c, tk.ID, "DEAD", 20*time.Second)
	require.Equal(t, "non_retryable", dead.Reason())
	require.True(t, strings.HasPrefix(dead.Error(), "HTTP 404"), dead.Error())
	other := c.Submit(jsonObj{"queue": "conflicts", "max_attempts": 5})
	require.Equal(t, "non_retryable", waitStatus(t, c, other.ID, "DEAD", 20*time.Second).Reason())
	require.Len(t, ep.deliveries(), 2)
}

// An endpoint slower than timeout_seconds fails the attempt (no status)
// and the task is retried.
func TestPushTimeoutFailsTheAttempt(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			<-r.Context().Done() // never answers the first
			return
		}
		_, _ = io.WriteString(w, `{}`)
	})
	_, c := startPush(t, nil)
	pushQueue(t, c, "slow", ep.URL, jsonObj{"timeout_seconds": 1})
	tk := c.Submit(jsonObj{"queue": "slow", "retry": jsonObj{"base_seconds": 0.1, "max_seconds": 0.1}})
	waitStatus(t, c, tk.ID, "DONE", 30*time.Second)
	as := deliveryAttempts(t, c, tk.ID)
	require.Len(t, as, 2)
	require.Nil(t, as[0].HTTPStatus)
	require.Equal(t, "failed", *as[0].Outcome)
	require.Equal(t, "no response within 1s (push.timeout_seconds, or the attempt's time limit)", *as[0].Error)
	require.Equal(t, 200, *as[1].HTTPStatus)
}

// A redirect is not followed: the attempt fails with the 3xx, and the
// redirect's target never hears of the task.
func TestPushFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	target := newEndpoint(t, nil)
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		http.Redirect(w, r, target.URL, http.StatusFound)
	})
	_, c := startPush(t, nil)
	pushQueue(t, c, "moved", ep.URL, nil)
	tk := c.Submit(jsonObj{"queue": "moved", "max_attempts": 1})
	dead := waitStatus(t, c, tk.ID, "DEAD", 20*time.Second)
	require.Contains(t, dead.Error(), "HTTP 302 (redirects are not followed; Location: "+target.URL)
	require.Empty(t, target.deliveries())
	require.Equal(t, 302, *deliveryAttempts(t, c, tk.ID)[0].HTTPStatus)
}

// A host allowed by a pattern that resolves to a private address is
// refused when the dispatcher connects: the endpoint hears nothing, the
// attempt fails saying why. The same name listed exactly may reach it.
func TestPushRefusesAPrivateAddress(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, nil)
	_, port, _ := strings.Cut(strings.TrimPrefix(ep.URL, "http://"), ":")
	resolve := fx.Decorate(func(pushadapter.ResolveFunc) pushadapter.ResolveFunc {
		return func(context.Context, string) ([]netip.Addr, error) { // the test's DNS
			return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
		}
	})
	start := func(hosts string) *testclient.Client {
		s := testserver.StartOn(t, pgtest.NewDatabase(t), func(c *app.Config) {
			pushConfig(c)
			allow, err := push.ParseAllowList(hosts)
			require.NoError(t, err)
			c.Push.AllowedHosts = allow
		}, resolve)
		return testclient.New(t, s.URL)
	}
	c := start("*.push.test")
	pushQueue(t, c, "internal", "http://svc.push.test:"+port+"/", nil)
	tk := c.Submit(jsonObj{"queue": "internal", "max_attempts": 1})
	dead := waitStatus(t, c, tk.ID, "DEAD", 20*time.Second)
	require.Contains(t, dead.Error(), "refused to connect to 127.0.0.1 (svc.push.test): not a public address")
	require.Empty(t, ep.deliveries())

	c = start("svc.push.test")
	pushQueue(t, c, "internal", "http://svc.push.test:"+port+"/", nil)
	tk = c.Submit(jsonObj{"queue": "internal"})
	waitStatus(t, c, tk.ID, "DONE", 20*time.Second)
	require.Len(t, ep.deliveries(), 1)
}

// The allow list is checked when push is turned on (422), and a server
// without one refuses push altogether; bad push settings are 422s naming
// their fields, and change nothing.
func TestPushSettingsAreValidated(t *testing.T) {
	t.Parallel()
	_, c := startPush(t, nil)
	p := c.Do(http.MethodPatch, "/queues/v1/q", jsonObj{"push": jsonObj{"url": "https://evil.example.com/"}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"push.url"}, p.Fields())
	require.Contains(t, p.Errors[0].Message, "TASKMASTER_PUSH_ALLOWED_HOSTS")
	for body, fields := range map[string][]string{
		`{"push": {"timeout_seconds": 5}}`:                                             {"push.url"},
		`{"push": {"url": "http://127.0.0.1/", "timeout_seconds": 901}}`:               {"push.timeout_seconds"},
		`{"push": {"url": "http://127.0.0.1/", "max_in_flight": 0}}`:                   {"push.max_in_flight"},
		`{"push": {"url": "http://127.0.0.1/", "headers": {"Taskmaster-Queue": "x"}}}`: {"push.headers.Taskmaster-Queue"},
		`{"push": {"url": "http://127.0.0.1/", "non_retryable_statuses": [200]}}`:      {"push.non_retryable_statuses[0]"},
		`{"push": {"url": "http://127.0.0.1/", "headers": "x"}}`:                       {"push.headers"},
		`{"push": {"url": 7}}`:                               {"push.url"},
		`{"push": {"url": "http://127.0.0.1/", "bogus": 1}}`: {"push"},
		`{"push": {"rotate_secret": true}}`:                  {"push.url", "push.rotate_secret"},
		`{"limits": ["missing"]}`:                            {"limits[0]"},
		`{"rate_limit_per_group": {"per_second": 0}}`:        {"rate_limit_per_group.per_second"},
	} {
		var raw any
		require.NoError(t, json.Unmarshal([]byte(body), &raw))
		p := c.Do(http.MethodPatch, "/queues/v1/q", raw).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, fields, p.Fields(), body)
	}
	c.Do(http.MethodGet, "/queues/v1/q", nil).Problem(t, http.StatusNotFound, "queue-not-found")

	_, off := startAPI(t, nil) // no TASKMASTER_PUSH_ALLOWED_HOSTS
	p = off.Do(http.MethodPatch, "/queues/v1/q", jsonObj{"push": jsonObj{"url": "http://127.0.0.1/"}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"push"}, p.Fields())
}

// A rotation shows the new secret once; during the overlap deliveries
// carry both signatures, so a receiver holding either accepts them; a
// rotation without overlap drops the old one at once. Changing other
// settings keeps the secret (and shows none).
func TestPushSecretRotationSignsWithBothDuringTheOverlap(t *testing.T) {
	t.Parallel()
	ep := newEndpoint(t, nil)
	_, c := startPush(t, nil)
	first := pushQueue(t, c, "rotating", ep.URL, nil)
	changed := pushQueue(t, c, "rotating", ep.URL, jsonObj{"max_in_flight": 2})
	require.Empty(t, changed.Secret, "the secret is shown when created or rotated only")
	second := pushQueue(t, c, "rotating", ep.URL, jsonObj{"rotate_secret": true, "secret_overlap_seconds": 3600})
	require.NotEmpty(t, second.Secret)
	require.NotEqual(t, first.Secret, second.Secret)
	require.NotNil(t, second.PreviousSecretExpiresAt)

	// Dispatchers read the change within TASKMASTER_PUSH_REFRESH_MS:
	// deliver until one carries the new signatures.
	deliverUntil := func(signatures int) received {
		t.Helper()
		var d received
		testclient.Poll(t, 20*time.Second, fmt.Sprintf("a delivery signed %d times", signatures), func() bool {
			tk := c.Submit(jsonObj{"queue": "rotating"})
			waitStatus(t, c, tk.ID, "DONE", 20*time.Second)
			got := ep.deliveries()
			d = got[len(got)-1]
			return strings.Count(d.header.Get("Taskmaster-Signature"), "v1=") == signatures
		})
		return d
	}
	d := deliverUntil(2)
	sig := d.header.Get("Taskmaster-Signature")
	require.NoError(t, verifySignature(first.Secret, sig, d.body, time.Now()), "a receiver with the old secret")
	require.NoError(t, verifySignature(second.Secret, sig, d.body, time.Now()), "a receiver with the new one")

	third := pushQueue(t, c, "rotating", ep.URL, jsonObj{"rotate_secret": true, "secret_overlap_seconds": 0})
	require.Nil(t, third.PreviousSecretExpiresAt)
	d = deliverUntil(1)
	sig = d.header.Get("Taskmaster-Signature")
	require.NoError(t, verifySignature(third.Secret, sig, d.body, time.Now()))
	require.Error(t, verifySignature(second.Secret, sig, d.body, time.Now()))
}

// max_in_flight holds across three instances delivering 1,000 tasks to a
// slow endpoint: it never serves more at once, nor holds more active
// connections, than max_in_flight; every task is delivered.
func TestPushMaxInFlightHoldsUnderAThousandTasks(t *testing.T) {
	t.Parallel()
	const tasks, inFlight = 1000, 5
	ep := newEndpoint(t, func(w http.ResponseWriter, _ *http.Request, _ int) {
		time.Sleep(10 * time.Millisecond) // a slow endpoint
		_, _ = io.WriteString(w, `{}`)
	})
	dbURL := pgtest.NewDatabase(t)
	servers := []*testserver.Server{testserver.StartOn(t, dbURL, pushConfig), testserver.StartOn(t, dbURL, pushConfig),
		testserver.StartOn(t, dbURL, pushConfig)}
	c := testclient.New(t, servers[0].URL)
	pushQueue(t, c, "bulk", ep.URL, jsonObj{"max_in_flight": inFlight})
	for range tasks / 500 {
		items := make([]any, 500)
		for i := range items {
			items[i] = jsonObj{"queue": "bulk"}
		}
		c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items}).Expect(t, http.StatusCreated, nil)
	}
	testclient.Poll(t, 3*time.Minute, "every task delivered", func() bool {
		var n int
		require.NoError(t, servers[0].DB.Get(&n, `SELECT count(*) FROM tasks WHERE queue = 'bulk' AND status = 'DONE'`))
		return n == tasks
	})
	require.Len(t, ep.deliveries(), tasks, "each once")
	require.LessOrEqual(t, ep.peak.Load(), int64(inFlight), "deliveries served at once")
	require.LessOrEqual(t, ep.peakConn.Load(), int64(inFlight), "active connections")
	require.Positive(t, ep.peak.Load())
	var workers int
	require.NoError(t, servers[0].DB.Get(&workers, `SELECT count(DISTINCT a.worker_id) FROM task_attempts a JOIN tasks t ON t.id = a.task_id WHERE t.queue = 'bulk'`))
	require.Greater(t, workers, 1, "more than one instance delivered")
}

// An operator's cancel of a task being delivered cancels the delivery:
// the task ends DEAD cancelled without waiting for the endpoint.
func TestPushCancelStopsADelivery(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		started <- struct{}{}
		<-r.Context().Done()
	})
	_, c := startPush(t, func(cfg *app.Config) {
		cfg.App.Liveness.StaleAfter = 300 * time.Millisecond // heartbeats every 100 ms
		cfg.App.Liveness.DeadAfter = 30 * time.Second
	})
	pushQueue(t, c, "long", ep.URL, jsonObj{"timeout_seconds": 60})
	tk := c.Submit(jsonObj{"queue": "long"})
	<-started
	c.Do(http.MethodPost, "/tasks/v1/"+tk.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	dead := waitStatus(t, c, tk.ID, "DEAD", 10*time.Second)
	require.Equal(t, "cancelled", dead.Reason())
}

// Turning push off gives the queue back to workers: they claim what the
// dispatchers left.
func TestPushOffGivesTheQueueBackToWorkers(t *testing.T) {
	t.Parallel()
	_, c := startPush(t, nil)
	c.Do(http.MethodPatch, "/queues/v1/jobs", jsonObj{"paused": true}).Expect(t, http.StatusOK, nil)
	pushQueue(t, c, "jobs", "http://127.0.0.1:1/", nil)
	tk := c.Submit(jsonObj{"queue": "jobs"})
	c.Register(jsonObj{"id": "w", "queues": []string{"jobs"}})
	c.Do(http.MethodPatch, "/queues/v1/jobs", jsonObj{"paused": false, "push": nil}).Expect(t, http.StatusOK, nil)
	got := c.Claim(jsonObj{"worker_id": "w", "wait_ms": 2000})
	require.Len(t, got, 1)
	require.Equal(t, tk.ID, got[0].ID)
}

// A stopping instance lets its deliveries finish for
// TASKMASTER_PUSH_DRAIN_SECONDS, then cancels the others and hands their
// tasks back (the attempt given back): another instance delivers them.
func TestPushStoppingInstanceHandsDeliveriesBack(t *testing.T) {
	t.Parallel()
	started := make(chan struct{}, 1)
	ep := newEndpoint(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if n == 0 {
			started <- struct{}{}
			<-r.Context().Done()
			return
		}
		_, _ = io.WriteString(w, `{}`)
	})
	dbURL := pgtest.NewDatabase(t)
	draining := func(c *app.Config) {
		pushConfig(c)
		c.Push.DrainTimeout = 300 * time.Millisecond
	}
	first := testserver.StartOn(t, dbURL, draining)
	c := testclient.New(t, first.URL)
	pushQueue(t, c, "handover", ep.URL, jsonObj{"timeout_seconds": 60})
	tk := c.Submit(jsonObj{"queue": "handover"})
	<-started
	second := testserver.StartOn(t, dbURL, draining)
	first.Stop()
	c = testclient.New(t, second.URL)
	waitStatus(t, c, tk.ID, "DONE", 20*time.Second)
	got := ep.deliveries()
	require.Len(t, got, 2)
	require.Equal(t, []string{"1", "1"}, []string{got[0].header.Get("Taskmaster-Attempt"), got[1].header.Get("Taskmaster-Attempt")},
		"the handed-back attempt was given back")
	as := deliveryAttempts(t, c, tk.ID)
	require.Equal(t, "released", *as[0].Outcome)
	require.Equal(t, "completed", *as[1].Outcome)
}
