package push_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	pushadapter "github.com/taskmaster/taskmaster/adapters/push"
	"github.com/taskmaster/taskmaster/domain/push"
	"github.com/taskmaster/taskmaster/ports"
)

func allow(t *testing.T, hosts string) push.AllowList {
	t.Helper()
	a, err := push.ParseAllowList(hosts)
	require.NoError(t, err)
	return a
}

// resolveTo resolves every name to ip, as a test's own DNS.
func resolveTo(ip string) pushadapter.ResolveFunc {
	return func(context.Context, string) ([]netip.Addr, error) {
		return []netip.Addr{netip.MustParseAddr(ip)}, nil
	}
}

func port(t *testing.T, srv *httptest.Server) string {
	t.Helper()
	_, p, err := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	require.NoError(t, err)
	return p
}

// A delivery is a POST of the body with the given headers, JSON typed; the
// answer's status, Retry-After and body (capped) come back.
func TestSendPostsAndReadsTheAnswer(t *testing.T) {
	t.Parallel()
	var got struct {
		method, contentType, agent, custom string
		body                               string
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got.method, got.contentType, got.agent, got.custom, got.body = r.Method, r.Header.Get("Content-Type"),
			r.Header.Get("User-Agent"), r.Header.Get("X-Custom"), string(b)
		w.Header().Set("Retry-After", "3")
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = io.WriteString(w, strings.Repeat("x", 5000))
	}))
	defer srv.Close()
	s := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "127.0.0.1"), MaxResponseBytes: 1024})
	resp := s.Send(t.Context(), ports.Delivery{URL: srv.URL + "/hook", Timeout: 5 * time.Second, Body: []byte(`{"a":1}`),
		Header: map[string]string{"X-Custom": "v"}})
	require.NoError(t, resp.Err)
	require.Equal(t, http.StatusTooManyRequests, resp.Status)
	require.Equal(t, "3", resp.RetryAfter)
	require.Len(t, resp.Body, 1024)
	require.True(t, resp.Truncated)
	require.Positive(t, resp.Latency)
	require.Equal(t, "POST", got.method)
	require.Equal(t, "application/json", got.contentType)
	require.Equal(t, pushadapter.UserAgent, got.agent)
	require.Equal(t, "v", got.custom)
	require.Equal(t, `{"a":1}`, got.body)
}

// A redirect is the answer: it is not followed.
func TestSendFollowsNoRedirect(t *testing.T) {
	t.Parallel()
	var followed atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Store(true)
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	}))
	defer srv.Close()
	s := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "127.0.0.1")})
	resp := s.Send(t.Context(), ports.Delivery{URL: srv.URL + "/hook", Timeout: 5 * time.Second, Body: []byte(`1`)})
	require.NoError(t, resp.Err)
	require.Equal(t, http.StatusTemporaryRedirect, resp.Status)
	require.Equal(t, "/elsewhere", resp.Location)
	require.False(t, followed.Load())
}

// An endpoint slower than the timeout gives a timed-out delivery.
func TestSendTimesOut(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body) // the server notices a client that left once the body is read
		<-r.Context().Done()
	}))
	defer srv.Close()
	s := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "127.0.0.1")})
	resp := s.Send(t.Context(), ports.Delivery{URL: srv.URL, Timeout: 200 * time.Millisecond, Body: []byte(`1`)})
	require.True(t, resp.TimedOut, "%v", resp.Err)
	require.Zero(t, resp.Status)
	require.NotContains(t, resp.Err.Error(), srv.URL, "the URL (its query may hold a token) is left out")

	// Cancelled by the caller: no timeout.
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	resp = s.Send(ctx, ports.Delivery{URL: srv.URL, Timeout: 5 * time.Second, Body: []byte(`1`)})
	require.Error(t, resp.Err)
	require.False(t, resp.TimedOut)
}

// A name a pattern allows must resolve to a public address: one resolving
// to loopback is refused when the connection is made, unless the name (or
// the address) is listed exactly. A host the list does not allow is
// refused before any resolution.
func TestSendRefusesPrivateAddresses(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { hits.Add(1) }))
	defer srv.Close()
	url := "http://svc.push.test:" + port(t, srv) + "/hook"

	pattern := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "*.push.test"), Resolve: resolveTo("127.0.0.1")})
	resp := pattern.Send(t.Context(), ports.Delivery{URL: url, Timeout: 5 * time.Second, Body: []byte(`1`)})
	var refused *pushadapter.RefusedError
	require.ErrorAs(t, resp.Err, &refused, "%v", resp.Err)
	require.Equal(t, "127.0.0.1", refused.Addr.String())
	require.Contains(t, resp.Err.Error(), "not a public address")

	mapped := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "*.push.test"), Resolve: resolveTo("::ffff:127.0.0.1")})
	require.ErrorAs(t, mapped.Send(t.Context(), ports.Delivery{URL: url, Timeout: 5 * time.Second}).Err, &refused)
	require.Zero(t, hits.Load())

	exact := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "svc.push.test"), Resolve: resolveTo("127.0.0.1")})
	resp = exact.Send(t.Context(), ports.Delivery{URL: url, Timeout: 5 * time.Second, Body: []byte(`1`)})
	require.NoError(t, resp.Err)
	require.Equal(t, http.StatusOK, resp.Status)
	require.EqualValues(t, 1, hits.Load())

	other := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "*.example.com"),
		Resolve: func(context.Context, string) ([]netip.Addr, error) {
			return nil, errors.New("resolved a host that is not allowed")
		}})
	resp = other.Send(t.Context(), ports.Delivery{URL: url, Timeout: 5 * time.Second})
	require.ErrorAs(t, resp.Err, &refused)
	require.False(t, refused.Addr.IsValid())
}

// A connection refused is an error without a status.
func TestSendConnectionRefused(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	s := pushadapter.NewSender(pushadapter.SenderConfig{Allow: allow(t, "127.0.0.1")})
	resp := s.Send(t.Context(), ports.Delivery{URL: "http://" + addr + "/", Timeout: 5 * time.Second})
	require.Error(t, resp.Err)
	require.False(t, resp.TimedOut)
	require.Zero(t, resp.Status)
}
