package faultproxy_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/faultproxy"
)

// backend is the server behind the proxy: it answers every request with
// its route and notes when each arrived.
type backend struct {
	mu      sync.Mutex
	arrived map[string][]time.Time
}

func startBackend(t *testing.T) (*backend, *httptest.Server) {
	t.Helper()
	b := &backend{arrived: map[string][]time.Time{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.arrived[r.Method+" "+r.URL.Path] = append(b.arrived[r.Method+" "+r.URL.Path], time.Now())
		b.mu.Unlock()
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("X-Backend", "yes")
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"route":"`+r.Method+" "+r.URL.Path+`","query":"`+r.URL.RawQuery+`"}`)
	}))
	t.Cleanup(srv.Close)
	return b, srv
}

func (b *backend) count(route string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.arrived[route])
}

func (b *backend) first(route string) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.arrived[route][0]
}

func setup(t *testing.T) (*backend, *faultproxy.Proxy, *http.Client) {
	t.Helper()
	b, srv := startBackend(t)
	p := faultproxy.Start(t, srv.URL)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{}}
	t.Cleanup(hc.CloseIdleConnections)
	return b, p, hc
}

func post(hc *http.Client, url string) (*http.Response, []byte, error) {
	resp, err := hc.Post(url, "application/json", strings.NewReader(`{}`))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp, body, err
}

func TestForwardsWhatNoFaultMatches(t *testing.T) {
	t.Parallel()
	b, p, hc := setup(t)
	p.Inject(faultproxy.Unavailable(time.Second).On(faultproxy.Complete))
	resp, body, err := post(hc, p.URL()+"/tasks/v1/claim?x=1")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "yes", resp.Header.Get("X-Backend"))
	require.JSONEq(t, `{"route":"POST /tasks/v1/claim","query":"x=1"}`, string(body))
	require.Equal(t, 1, b.count("POST /tasks/v1/claim"))
	require.Equal(t, []faultproxy.Exchange{{At: p.Log()[0].At, Method: "POST", Path: "/tasks/v1/claim", Action: faultproxy.ActionForward, Status: 200}}, p.Log())
}

// A status fault answers for its routes, without forwarding, with
// Retry-After and a problem body, until its duration passes.
func TestStatusFaultAnswersItsRoutesForItsDuration(t *testing.T) {
	t.Parallel()
	b, p, hc := setup(t)
	in := p.Inject(faultproxy.Unavailable(1500*time.Millisecond).On(faultproxy.Complete, faultproxy.Fail).For(time.Second))
	resp, body, err := post(hc, p.URL()+"/tasks/v1/abc/complete")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Equal(t, "2", resp.Header.Get("Retry-After"), "whole seconds, rounded up")
	require.Equal(t, "application/problem+json", resp.Header.Get("Content-Type"))
	var problem struct {
		Type   string `json:"type"`
		Status int    `json:"status"`
	}
	require.NoError(t, json.Unmarshal(body, &problem))
	require.Equal(t, "urn:problem-type:taskmaster:unavailable", problem.Type)
	require.Equal(t, 503, problem.Status)
	resp, _, err = post(hc, p.URL()+"/tasks/v1/abc/fail")
	require.NoError(t, err)
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	resp, _, err = post(hc, p.URL()+"/tasks/v1/complete") // the batch route is another route
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 0, b.count("POST /tasks/v1/abc/complete"))
	require.Equal(t, 2, in.Hits())

	<-in.Removed()
	resp, _, err = post(hc, p.URL()+"/tasks/v1/abc/complete")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "forwarded once the fault is over")
	require.Equal(t, 2, p.Count(faultproxy.Complete, ""))
	require.Equal(t, 1, p.Count(faultproxy.Complete, faultproxy.ActionStatus))
}

// A fault with a count applies that many times; a 429 says rate-limited.
func TestTimesLimitsAFault(t *testing.T) {
	t.Parallel()
	_, p, hc := setup(t)
	p.Inject(faultproxy.TooManyRequests(time.Second).Times(2))
	var codes []int
	for range 3 {
		resp, body, err := post(hc, p.URL()+"/workers/v1/w/heartbeat")
		require.NoError(t, err)
		codes = append(codes, resp.StatusCode)
		if resp.StatusCode == http.StatusTooManyRequests {
			require.Contains(t, string(body), "rate-limited")
			require.Equal(t, "1", resp.Header.Get("Retry-After"))
		}
	}
	require.Equal(t, []int{429, 429, 200}, codes)
}

// A dropped answer reaches the server, which acts on it; the client gets
// no answer.
func TestDropAnswersForwardsThenCloses(t *testing.T) {
	t.Parallel()
	b, p, hc := setup(t)
	p.Inject(faultproxy.DropAnswers().On(faultproxy.Claim).Times(1))
	_, _, err := post(hc, p.URL()+"/tasks/v1/claim")
	require.Error(t, err)
	require.Equal(t, 1, b.count("POST /tasks/v1/claim"), "the server got the request")
	require.Equal(t, faultproxy.ActionDrop, p.Log()[0].Action)
	resp, _, err := post(hc, p.URL()+"/tasks/v1/claim")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

// A delayed request reaches the server no sooner than its delay.
func TestDelayHoldsThenForwards(t *testing.T) {
	t.Parallel()
	b, p, hc := setup(t)
	p.Inject(faultproxy.Delay(300 * time.Millisecond))
	sent := time.Now()
	resp, _, err := post(hc, p.URL()+"/tasks/v1/claim")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.GreaterOrEqual(t, b.first("POST /tasks/v1/claim").Sub(sent), 300*time.Millisecond)
}

// A hung request forwards nothing and is answered by nothing; when the
// fault is removed its connection closes.
func TestHangHoldsUntilRemoved(t *testing.T) {
	t.Parallel()
	b, p, hc := setup(t)
	in := p.Inject(faultproxy.Hang())
	errc := make(chan error, 1)
	go func() {
		_, _, err := post(hc, p.URL()+"/tasks/v1/claim")
		errc <- err
	}()
	require.Eventually(t, func() bool { return in.Hits() == 1 }, 10*time.Second, 5*time.Millisecond)
	select {
	case err := <-errc:
		t.Fatalf("answered during the partition: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	in.Remove()
	select {
	case err := <-errc:
		require.Error(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("the hung request was not let go")
	}
	require.Equal(t, 0, b.count("POST /tasks/v1/claim"))
}

// A refused request's connection is reset at once.
func TestRefuseResets(t *testing.T) {
	t.Parallel()
	b, p, hc := setup(t)
	p.Inject(faultproxy.Refuse())
	_, _, err := post(hc, p.URL()+"/tasks/v1/claim")
	require.Error(t, err)
	require.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF) || strings.Contains(err.Error(), "EOF"), "%v", err)
	require.Equal(t, 0, b.count("POST /tasks/v1/claim"))
	p.Heal()
	resp, _, err := post(hc, p.URL()+"/tasks/v1/claim")
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
}
