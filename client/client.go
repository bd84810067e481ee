// Package client is the Go SDK of Taskmaster: a small HTTP client for
// producers (Submit, Get, List, Retry, Cancel), operators (Drain), the
// worker protocol (Register, Heartbeat and HeartbeatTasks, Claim, Complete,
// Fail, Extend, Snooze, Release), and a Runner that turns a handler function into a
// well-behaved worker speaking the lease protocol.
//
// It depends on the standard library only, so any service can import it.
//
//	c, err := client.New("http://127.0.0.1:8080")
//	t, err := c.Submit(ctx, client.SubmitParams{Queue: "emails", Payload: map[string]any{"to": "a@example.com"}})
//
// Errors the server reports come back as *Problem (RFC 9457); use
// errors.As, or helpers such as IsLeaseLost and IsNotFound.
package client

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// DefaultURL is where a local `taskmaster serve` listens.
const DefaultURL = "http://127.0.0.1:8080"

// HeaderCorrelationID carries a request's correlation id both ways.
const HeaderCorrelationID = "X-Correlation-Id"

// RetryPolicy bounds the retries of one call. Transport errors, 5xx, 429
// (after its Retry-After) and, for calls safe to repeat, 408 answers are
// retried with jittered exponential backoff; other 4xx answers never are (a
// 409 lease-lost in particular is final). A Runner's reports retry for as
// long as RunnerConfig.ReportTimeout instead of MaxAttempts times.
type RetryPolicy struct {
	// MaxAttempts is the most tries of one call, the first included (1
	// disables retries).
	MaxAttempts int
	// BaseDelay is the delay before the first retry; it doubles per retry.
	BaseDelay time.Duration
	// MaxDelay caps one delay.
	MaxDelay time.Duration
}

// DefaultRetryPolicy returns the defaults: 5 tries, 100 ms doubling to at
// most 5 s (about 1.5 s of waiting in all), each delay jittered down to half.
func DefaultRetryPolicy() RetryPolicy {
	return RetryPolicy{MaxAttempts: 5, BaseDelay: 100 * time.Millisecond, MaxDelay: 5 * time.Second}
}

// Validate reports whether the policy can be used.
func (p RetryPolicy) Validate() error {
	switch {
	case p.MaxAttempts < 1:
		return errors.New("retry policy: MaxAttempts must be at least 1")
	case p.BaseDelay < 0 || p.MaxDelay < p.BaseDelay:
		return errors.New("retry policy: need 0 <= BaseDelay <= MaxDelay")
	}
	return nil
}

// delay is the wait before retry number n (1-based): min(base*2^(n-1),
// max), jittered uniformly into [d/2, d].
func (p RetryPolicy) delay(n int) time.Duration {
	d := p.MaxDelay
	if n-1 < 32 {
		if exp := p.BaseDelay << (n - 1); exp > 0 && exp < d {
			d = exp
		}
	}
	if d <= 0 {
		return 0
	}
	return d/2 + mrand.N(d/2+1)
}

// Client talks to one Taskmaster server. It is safe for concurrent use.
type Client struct {
	base      *url.URL
	hc        *http.Client
	retry     RetryPolicy
	userAgent string
	apiKey    string // sent as a bearer token when not empty (auth.go)
	headers   []HeaderFunc
}

// Option configures a Client.
type Option func(*Client)

// WithHTTPClient uses hc for every request (timeouts, transport, proxies).
// The default is a client with a 60 s timeout. A long-poll claim
// (ClaimParams.Wait) may take its wait plus hc.Timeout.
func WithHTTPClient(hc *http.Client) Option { return func(c *Client) { c.hc = hc } }

// WithRetryPolicy replaces DefaultRetryPolicy.
func WithRetryPolicy(p RetryPolicy) Option { return func(c *Client) { c.retry = p } }

// HeaderFunc sets headers of a request from the context of its call.
type HeaderFunc func(ctx context.Context, h http.Header)

// WithHeaders makes every request carry the headers f sets from its
// call's context: clientotel.Propagation sets the W3C trace context
// (traceparent, tracestate) of ctx's OpenTelemetry span, so that the
// tasks a call creates keep the caller's trace.
func WithHeaders(f HeaderFunc) Option { return func(c *Client) { c.headers = append(c.headers, f) } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *Client) { c.userAgent = ua } }

// New returns a client for the server at baseURL, e.g.
// http://127.0.0.1:8080 (DefaultURL when empty).
func New(baseURL string, opts ...Option) (*Client, error) {
	if baseURL == "" {
		baseURL = DefaultURL
	}
	u, err := url.Parse(strings.TrimRight(baseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("taskmaster client: base URL %q must be http(s)://host[:port][/prefix]", baseURL)
	}
	c := &Client{
		base:      u,
		hc:        &http.Client{Timeout: 60 * time.Second},
		retry:     DefaultRetryPolicy(),
		userAgent: "taskmaster-go-client/1",
	}
	for _, o := range opts {
		o(c)
	}
	if c.hc == nil {
		return nil, errors.New("taskmaster client: nil http client")
	}
	if err := c.retry.Validate(); err != nil {
		return nil, fmt.Errorf("taskmaster client: %w", err)
	}
	return c, nil
}

// BaseURL returns the server's base URL.
func (c *Client) BaseURL() string { return c.base.String() }

type correlationKey struct{}

// WithCorrelationID makes the calls made with ctx carry id as their
// X-Correlation-Id (1-128 of [A-Za-z0-9._:/=+-]). Without it, each call gets
// a fresh id, kept across its retries.
func WithCorrelationID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, correlationKey{}, id)
}

func correlationID(ctx context.Context) string {
	if id, ok := ctx.Value(correlationKey{}).(string); ok && id != "" {
		return id
	}
	var b [12]byte
	_, _ = crand.Read(b[:]) // never fails (Go 1.24+)
	return "tmc-" + hex.EncodeToString(b[:])
}

type persistentKey struct{}

// withPersistentRetry makes the calls made with ctx retry what they may
// retry until ctx ends, instead of RetryPolicy.MaxAttempts times, and honour
// Retry-After in full (not capped at MaxDelay): a Runner's reports, which
// must outlive an outage or a throttling key, ReportTimeout bounding them.
// A wait that would pass ctx's deadline ends the call at once with the
// last error.
func withPersistentRetry(ctx context.Context) context.Context {
	return context.WithValue(ctx, persistentKey{}, true)
}

type triesKey struct{}

// withTries makes the call made with ctx count its tries into *n.
func withTries(ctx context.Context, n *int) context.Context {
	return context.WithValue(ctx, triesKey{}, n)
}

// minPersistentDelay is the shortest wait between the tries of a persistent
// call, whatever the policy says (a BaseDelay of 0 must not make a report
// spin against an unavailable server).
const minPersistentDelay = 50 * time.Millisecond

// retryMode says when a call may be sent again.
type retryMode int

const (
	// retrySafe: repeating the call cannot do harm (reads, fenced or
	// idempotent writes); transport errors and 5xx are retried.
	retrySafe retryMode = iota
	// retryUnsent: repeating could duplicate work (a submission without an
	// idempotency key); retried only when the request surely did not reach
	// the server (a failed dial) or the server said 503.
	retryUnsent
)

// call is one API call.
type call struct {
	method string
	path   string
	query  url.Values
	body   any // marshalled to JSON when not nil
	out    any // decoded from a 2xx JSON body when not nil
	mode   retryMode
	wait   time.Duration // how long the server may hold the answer back (a long poll)
}

// do runs c.call with retries and returns the final status code.
func (c *Client) do(ctx context.Context, k call) (int, error) {
	var body []byte
	if k.body != nil {
		b, err := json.Marshal(k.body)
		if err != nil {
			return 0, fmt.Errorf("taskmaster: encode request: %w", err)
		}
		body = b
	}
	u := *c.base
	u.Path = c.base.Path + k.path
	u.RawPath = ""
	if len(k.query) > 0 {
		u.RawQuery = k.query.Encode()
	}
	target := u.String()
	cid := correlationID(ctx)
	persistent := ctx.Value(persistentKey{}) != nil
	tries, _ := ctx.Value(triesKey{}).(*int)

	for attempt := 1; ; attempt++ {
		if tries != nil {
			*tries = attempt
		}
		status, retryAfter, err := c.once(ctx, k, target, body, cid)
		if err == nil {
			return status, nil
		}
		if !c.retryable(ctx, k.mode, status, err) || (!persistent && attempt >= c.retry.MaxAttempts) {
			return status, err
		}
		wait := max(c.retry.delay(attempt), min(retryAfter, c.retry.MaxDelay))
		if persistent {
			wait = max(c.retry.delay(attempt), retryAfter, minPersistentDelay)
			if deadline, ok := ctx.Deadline(); ok && time.Until(deadline) < wait {
				return status, err
			}
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return status, err
		case <-t.C:
		}
	}
}

func (c *Client) retryable(ctx context.Context, mode retryMode, status int, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	if status == 0 { // no response: a transport error
		if mode == retrySafe {
			return true
		}
		var opErr *net.OpError
		return errors.As(err, &opErr) && opErr.Op == "dial"
	}
	if status == http.StatusTooManyRequests {
		return true // refused before doing anything: resend after Retry-After
	}
	if status == http.StatusRequestTimeout {
		return mode == retrySafe // the server (or a proxy) gave up waiting for the request
	}
	if mode == retryUnsent {
		return status == http.StatusServiceUnavailable
	}
	return status >= 500
}

// once sends one request. It returns the status (0 when no response came),
// the server's Retry-After hint, and an error for anything but a 2xx.
func (c *Client) once(ctx context.Context, k call, target string, body []byte, cid string) (int, time.Duration, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	hc := c.hc
	if k.wait > 0 && hc.Timeout > 0 {
		// The client's timeout bounds the exchange, not the server's wait:
		// this try gets both, as a deadline on its own context.
		lp := *hc
		lp.Timeout = 0
		hc = &lp
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, k.wait+c.hc.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, k.method, target, rd)
	if err != nil {
		return 0, 0, fmt.Errorf("taskmaster: %w", err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	req.Header.Set("User-Agent", c.userAgent)
	req.Header.Set(HeaderCorrelationID, cid)
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	for _, h := range c.headers {
		h(ctx, req.Header)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, 0, fmt.Errorf("taskmaster: %s %s: %w", k.method, k.path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		if k.out == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			return resp.StatusCode, 0, nil
		}
		if err := json.NewDecoder(resp.Body).Decode(k.out); err != nil {
			// A cut-off body is a transport failure: retry it like one.
			return 0, 0, fmt.Errorf("taskmaster: %s %s: decode response: %w", k.method, k.path, err)
		}
		return resp.StatusCode, 0, nil
	}
	p := decodeProblem(resp)
	if p.CorrelationID == "" {
		p.CorrelationID = resp.Header.Get(HeaderCorrelationID)
	}
	if p.Instance == "" {
		p.Instance = k.path
	}
	return resp.StatusCode, retryAfter(resp.Header.Get("Retry-After")), p
}

func retryAfter(v string) time.Duration {
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return 0
}
