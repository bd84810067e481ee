// Package faultproxy is an HTTP reverse proxy for tests, to stand between a
// worker runtime (the Go Runner, `taskmaster worker --exec`, the Python and
// TypeScript SDKs' runners) and a real Taskmaster server and inject the
// faults of a bad network or a struggling server, on command, for chosen
// routes, for a while or for a number of requests:
//
//   - Unavailable(retryAfter), TooManyRequests(retryAfter): answer 503 or
//     429 with Retry-After and a problem body, without forwarding;
//   - DropAnswers(): forward the request (the server acts on it), then
//     close the connection without answering;
//   - Delay(d): hold the request d before forwarding it;
//   - Hang(): hold the request, unanswered, until the fault is removed (a
//     partition: nothing gets through, nothing comes back), then close the
//     connection;
//   - Refuse(): reset the connection at once (a partition a client sees
//     fail fast).
//
// A fault applies to the requests whose route matches one of its patterns
// (every request without patterns), from the moment it is injected until
// its duration passes, it has hit its count, or it is removed. Faults are
// tried in the order they were injected; the first active one that matches
// applies, and a request no fault matches is forwarded untouched.
//
// Start one on a free port (or Listen on a chosen one), point the runtime
// under test at URL(), and drive faults from the test:
//
//	p := faultproxy.Start(t, server.URL)
//	runner := startWorker(p.URL())                          // a subprocess, say
//	p.Inject(faultproxy.Unavailable(time.Second).On(faultproxy.Complete).For(4 * time.Second))
//	p.Inject(faultproxy.Hang().For(8 * time.Second))         // a partition
//	n := p.Count(faultproxy.Complete, faultproxy.ActionForward) // completes that got through
//
// Every request is logged (Log, Count), so a test can tell what reached the
// server and what the proxy answered itself.
package faultproxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Route patterns of the worker protocol, as "METHOD /path" where a '*'
// stands for one path segment (path.Match).
const (
	Register      = "POST /workers/v1/register"
	Heartbeat     = "POST /workers/v1/*/heartbeat"
	Claim         = "POST /tasks/v1/claim"
	Complete      = "POST /tasks/v1/*/complete"
	Fail          = "POST /tasks/v1/*/fail"
	Extend        = "POST /tasks/v1/*/extend"
	Snooze        = "POST /tasks/v1/*/snooze"
	Release       = "POST /tasks/v1/*/release"
	CompleteBatch = "POST /tasks/v1/complete"
	FailBatch     = "POST /tasks/v1/fail"
	ReleaseBatch  = "POST /tasks/v1/release"
)

// Reports are the routes by which a holder reports on its tasks.
var Reports = []string{Complete, Fail, Snooze, Release, CompleteBatch, FailBatch, ReleaseBatch}

// Action is what the proxy did with a request.
type Action string

// Actions.
const (
	// ActionForward: forwarded, and the server's answer passed on.
	ActionForward Action = "forward"
	// ActionStatus: answered by the proxy with a status (503, 429, ...).
	ActionStatus Action = "status"
	// ActionDrop: forwarded, then the connection closed without an answer.
	ActionDrop Action = "drop"
	// ActionDelay: held, then forwarded.
	ActionDelay Action = "delay"
	// ActionDelayAnswer: forwarded at once, the server's answer held.
	ActionDelayAnswer Action = "delay_answer"
	// ActionHang: held unanswered until the fault ended, then closed.
	ActionHang Action = "hang"
	// ActionRefuse: the connection reset at once.
	ActionRefuse Action = "refuse"
)

// Fault is a fault to inject: build one with Unavailable, TooManyRequests,
// DropAnswers, Delay, Hang or Refuse, narrow it with On, For and Times.
type Fault struct {
	action     Action
	status     int
	retryAfter time.Duration
	delay      time.Duration
	routes     []string
	duration   time.Duration
	count      int
}

// Unavailable answers 503 with Retry-After (whole seconds, rounded up; none
// when 0) and a problem body of type unavailable, without forwarding.
func Unavailable(retryAfter time.Duration) Fault {
	return Status(http.StatusServiceUnavailable, retryAfter)
}

// TooManyRequests answers 429 with Retry-After and a problem body of type
// rate-limited, without forwarding (a throttling key).
func TooManyRequests(retryAfter time.Duration) Fault {
	return Status(http.StatusTooManyRequests, retryAfter)
}

// Status answers code (with Retry-After when retryAfter > 0) and a problem
// body, without forwarding.
func Status(code int, retryAfter time.Duration) Fault {
	return Fault{action: ActionStatus, status: code, retryAfter: retryAfter}
}

// DropAnswers forwards the request and reads the server's whole answer,
// then closes the client's connection without answering: the server acted,
// the client cannot know it.
func DropAnswers() Fault { return Fault{action: ActionDrop} }

// Delay holds each request d before forwarding it.
func Delay(d time.Duration) Fault { return Fault{action: ActionDelay, delay: d} }

// DelayAnswers forwards each request at once, reads the server's whole
// answer, and passes it on d later: the server acted long before the
// client learns of it (a slow network on the way back).
func DelayAnswers(d time.Duration) Fault { return Fault{action: ActionDelayAnswer, delay: d} }

// Hang holds each request unanswered, and forwards nothing, until the fault
// is removed (its duration passes, Remove, Heal) or the client gives up;
// then the connection is closed without an answer. With Times(n), the
// first n requests hang, until then.
func Hang() Fault { return Fault{action: ActionHang} }

// Refuse resets each request's connection at once, without forwarding.
func Refuse() Fault { return Fault{action: ActionRefuse} }

// On limits the fault to requests matching one of routes ("METHOD /path",
// '*' for one segment: the constants of this package); none: every
// request.
func (f Fault) On(routes ...string) Fault {
	f.routes = append([]string(nil), routes...)
	return f
}

// For ends the fault d after it is injected (0: until removed).
func (f Fault) For(d time.Duration) Fault {
	f.duration = d
	return f
}

// Times ends the fault once it applied to n requests (0: no limit).
func (f Fault) Times(n int) Fault {
	f.count = n
	return f
}

// String describes the fault, for logs.
func (f Fault) String() string {
	var b strings.Builder
	b.WriteString(string(f.action))
	switch f.action {
	case ActionStatus:
		fmt.Fprintf(&b, " %d", f.status)
		if f.retryAfter > 0 {
			fmt.Fprintf(&b, " retry-after %s", f.retryAfter)
		}
	case ActionDelay:
		fmt.Fprintf(&b, " %s", f.delay)
	}
	if len(f.routes) > 0 {
		fmt.Fprintf(&b, " on %s", strings.Join(f.routes, ", "))
	}
	if f.duration > 0 {
		fmt.Fprintf(&b, " for %s", f.duration)
	}
	if f.count > 0 {
		fmt.Fprintf(&b, " %d times", f.count)
	}
	return b.String()
}

// Injection is an injected fault.
type Injection struct {
	p     *Proxy
	fault Fault
	ends  time.Time // zero: no duration
	// released is closed when the fault is removed (by Remove, its
	// duration or Heal): the requests it holds (Hang) are let go.
	released chan struct{}
	once     sync.Once
	hits     int // guarded by p.mu
}

// Remove ends the fault now: it applies to no more requests, and those it
// holds (Hang) are let go.
func (in *Injection) Remove() {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	in.removeLocked()
}

func (in *Injection) removeLocked() {
	in.once.Do(func() { close(in.released) })
	in.retireLocked()
	for i, other := range in.p.all {
		if other == in {
			in.p.all = append(in.p.all[:i:i], in.p.all[i+1:]...)
			break
		}
	}
}

// retireLocked stops the fault from applying to more requests (it hit its
// count); the requests it holds stay held until it is removed.
func (in *Injection) retireLocked() {
	for i, other := range in.p.faults {
		if other == in {
			in.p.faults = append(in.p.faults[:i:i], in.p.faults[i+1:]...)
			break
		}
	}
}

// Hits returns how many requests the fault applied to so far.
func (in *Injection) Hits() int {
	in.p.mu.Lock()
	defer in.p.mu.Unlock()
	return in.hits
}

// Removed returns a channel closed when the fault is removed (by Remove,
// its duration, Heal or Close).
func (in *Injection) Removed() <-chan struct{} { return in.released }

// Exchange is one request through the proxy, as logged.
type Exchange struct {
	// At is when the request came in.
	At time.Time
	// Method and Path are the request's.
	Method, Path string
	// Action is what the proxy did.
	Action Action
	// Status is the answer's status (0 when none was sent, or the server
	// could not be reached).
	Status int
}

// Route returns "METHOD /path".
func (e Exchange) Route() string { return e.Method + " " + e.Path }

// Proxy is a running fault-injecting proxy.
type Proxy struct {
	target *url.URL
	ln     net.Listener
	srv    *http.Server
	rp     *httputil.ReverseProxy
	done   chan struct{}

	mu     sync.Mutex
	faults []*Injection // those that apply to new requests, in order
	all    []*Injection // every injection not yet removed by Heal
	log    []Exchange
}

// Start runs a proxy to target (a base URL such as http://127.0.0.1:8080)
// on a free loopback port, stopped when the test ends.
func Start(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := Listen("127.0.0.1:0", target)
	if err != nil {
		t.Fatalf("faultproxy: %v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Listen runs a proxy to target on addr ("127.0.0.1:0": a free port). Close
// stops it.
func Listen(addr, target string) (*Proxy, error) {
	u, err := url.Parse(target)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("target %q must be an http(s) base URL", target)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	p := &Proxy{target: u, ln: ln, done: make(chan struct{})}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	p.rp = &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(u)
			r.Out.Host = r.In.Host
		},
		Transport:     &dropper{next: transport},
		FlushInterval: -1, // event streams pass through as they come
		ErrorHandler:  p.proxyError,
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		defer close(p.done)
		_ = p.srv.Serve(ln)
	}()
	return p, nil
}

// URL is the proxy's base URL: give it to the runtime under test.
func (p *Proxy) URL() string { return "http://" + p.ln.Addr().String() }

// Addr is the proxy's listening address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Close ends every fault (letting held requests go), stops listening and
// closes every connection.
func (p *Proxy) Close() error {
	p.Heal()
	err := p.srv.Close()
	<-p.done
	return err
}

// Inject starts f now and returns its handle.
func (p *Proxy) Inject(f Fault) *Injection {
	in := &Injection{p: p, fault: f, released: make(chan struct{})}
	if f.duration > 0 {
		in.ends = time.Now().Add(f.duration)
		time.AfterFunc(f.duration, in.Remove)
	}
	p.mu.Lock()
	p.faults = append(p.faults, in)
	p.all = append(p.all, in)
	p.mu.Unlock()
	return in
}

// Heal removes every fault, those that hit their counts included: held
// requests are let go.
func (p *Proxy) Heal() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.all) > 0 {
		p.all[0].removeLocked()
	}
}

// Log returns every request so far, in arrival order.
func (p *Proxy) Log() []Exchange {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Exchange(nil), p.log...)
}

// Count returns how many requests matching route (a pattern as for On;
// "" for any) the proxy handled with action ("" for any).
func (p *Proxy) Count(route string, action Action) int {
	n := 0
	for _, e := range p.Log() {
		if (route == "" || matches(route, e.Method, e.Path)) && (action == "" || e.Action == action) {
			n++
		}
	}
	return n
}

// match returns the fault that applies to r, counting the hit, or nil.
func (p *Proxy) match(r *http.Request) *Injection {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for _, in := range p.faults {
		if !in.ends.IsZero() && !now.Before(in.ends) {
			continue // its timer is about to remove it
		}
		if len(in.fault.routes) > 0 && !matchesAny(in.fault.routes, r.Method, r.URL.Path) {
			continue
		}
		in.hits++
		if in.fault.count > 0 && in.hits >= in.fault.count {
			in.retireLocked()
		}
		return in
	}
	return nil
}

func matchesAny(routes []string, method, p string) bool {
	for _, route := range routes {
		if matches(route, method, p) {
			return true
		}
	}
	return false
}

func matches(route, method, p string) bool {
	m, pattern, ok := strings.Cut(route, " ")
	if !ok {
		m, pattern = "", route
	}
	if m != "" && m != method {
		return false
	}
	ok, err := path.Match(pattern, p)
	return err == nil && ok
}

// record logs one exchange and returns its index, for the status to be
// filled in when known.
func (p *Proxy) record(r *http.Request, a Action) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log = append(p.log, Exchange{At: time.Now(), Method: r.Method, Path: r.URL.Path, Action: a})
	return len(p.log) - 1
}

func (p *Proxy) setStatus(i, status int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.log[i].Status = status
}

// ServeHTTP applies the first matching fault to r, or forwards it.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in := p.match(r)
	if in == nil {
		p.forward(w, r, p.record(r, ActionForward))
		return
	}
	f := in.fault
	i := p.record(r, f.action)
	switch f.action {
	case ActionStatus:
		writeProblem(w, f.status, f.retryAfter)
		p.setStatus(i, f.status)
	case ActionDrop:
		p.forward(w, r.WithContext(context.WithValue(r.Context(), dropKey{}, true)), i)
	case ActionDelayAnswer:
		p.forward(w, r.WithContext(context.WithValue(r.Context(), delayAnswerKey{}, f.delay)), i)
	case ActionDelay:
		t := time.NewTimer(f.delay)
		defer t.Stop()
		select {
		case <-t.C:
			p.forward(w, r, i)
		case <-r.Context().Done():
		}
	case ActionHang:
		select {
		case <-in.released:
		case <-r.Context().Done():
		}
		closeConn(w, false)
	case ActionRefuse:
		closeConn(w, true)
	}
}

func (p *Proxy) forward(w http.ResponseWriter, r *http.Request, i int) {
	// The status is logged as soon as it is written, before the body: a
	// client that has read the whole answer finds it in the log.
	p.rp.ServeHTTP(&statusWriter{ResponseWriter: w, seen: func(status int) { p.setStatus(i, status) }}, r)
}

// proxyError handles a failed forward: a dropped answer closes the
// connection; a server that cannot be reached is a 502.
func (p *Proxy) proxyError(w http.ResponseWriter, r *http.Request, err error) {
	if errors.Is(err, errDropped) {
		closeConn(w, false)
		return
	}
	if r.Context().Err() != nil {
		return // the client went away
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusBadGateway)
	_, _ = io.WriteString(w, "faultproxy: "+err.Error())
}

type dropKey struct{}

// delayAnswerKey carries how long the transport holds the answer.
type delayAnswerKey struct{}

var errDropped = errors.New("faultproxy: answer dropped")

// dropper is the proxy's transport: for a request whose answer is to be
// dropped it reads the server's whole answer (so the server finishes), then
// fails, which makes the proxy close the client's connection.
type dropper struct{ next http.RoundTripper }

func (d *dropper) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := d.next.RoundTrip(r)
	if hold, ok := r.Context().Value(delayAnswerKey{}).(time.Duration); ok && err == nil {
		body, rerr := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if rerr != nil {
			return nil, rerr
		}
		t := time.NewTimer(hold)
		defer t.Stop()
		select {
		case <-t.C:
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
		resp.Body = io.NopCloser(bytes.NewReader(body))
		return resp, nil
	}
	if err != nil || r.Context().Value(dropKey{}) == nil {
		return resp, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return nil, errDropped
}

// statusWriter notes the status passed on to the client.
type statusWriter struct {
	http.ResponseWriter
	status int
	// seen, when not nil, is told the status once, when it is written.
	seen func(status int)
}

func (s *statusWriter) setStatus(code int) {
	if s.status == 0 {
		s.status = code
		if s.seen != nil {
			s.seen(code)
		}
	}
}

func (s *statusWriter) WriteHeader(code int) {
	s.setStatus(code)
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	s.setStatus(http.StatusOK)
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// closeConn closes the request's connection without an answer; reset
// closes it with a TCP reset instead of a FIN.
func closeConn(w http.ResponseWriter, reset bool) {
	conn, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler) // HTTP/2: abort the stream
	}
	if tcp, ok := conn.(*net.TCPConn); ok && reset {
		_ = tcp.SetLinger(0)
	}
	_ = conn.Close()
}

// writeProblem answers status as the server would: an RFC 9457 problem,
// with Retry-After in whole seconds.
func writeProblem(w http.ResponseWriter, status int, retryAfter time.Duration) {
	slug, title := "unavailable", "Service unavailable"
	if status == http.StatusTooManyRequests {
		slug, title = "rate-limited", "Too many requests"
	} else if status != http.StatusServiceUnavailable {
		slug, title = "injected", http.StatusText(status)
	}
	if retryAfter > 0 {
		secs := (retryAfter + time.Second - 1) / time.Second
		w.Header().Set("Retry-After", strconv.FormatInt(int64(secs), 10))
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"type":"urn:problem-type:taskmaster:%s","title":%q,"status":%d,"detail":"injected by faultproxy"}`, slug, title, status)
}
