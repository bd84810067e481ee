package http

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

// RateLimit is a token bucket: Rate requests per second on average, Burst
// at once. A zero Rate is no limit.
type RateLimit struct {
	Rate  float64
	Burst int
}

// Unlimited reports whether the limit lets everything through.
func (l RateLimit) Unlimited() bool { return l.Rate == 0 }

// Validate reports whether the limit can be used.
func (l RateLimit) Validate() error {
	if l.Rate < 0 || math.IsNaN(l.Rate) || math.IsInf(l.Rate, 0) || l.Burst < 0 || (l.Rate > 0 && l.Burst < 1) {
		return errors.New("a rate limit is a positive rate with a burst of at least 1, or off")
	}
	return nil
}

// String is the limit as configured: "rate,burst" or "off".
func (l RateLimit) String() string {
	if l.Unlimited() {
		return "off"
	}
	return strconv.FormatFloat(l.Rate, 'f', -1, 64) + "," + strconv.Itoa(l.Burst)
}

// RateLimits are the limits of keys by scope. A key holding several scopes
// gets the most generous of their limits.
type RateLimits map[apikey.Scope]RateLimit

// DefaultRateLimits are generous enough for the scope's normal use: a fleet
// of workers sharing one work key, a producer submitting one task per
// request, dashboards polling.
func DefaultRateLimits() RateLimits {
	return RateLimits{
		apikey.ScopeAdmin:   {Rate: 100, Burst: 200},
		apikey.ScopeProduce: {Rate: 1000, Burst: 2000},
		apikey.ScopeWork:    {Rate: 2000, Burst: 4000},
		apikey.ScopeRead:    {Rate: 100, Burst: 200},
	}
}

// of returns the limit of a key: the most generous among its scopes' (no
// limit when one of them has none).
func (ls RateLimits) of(k *apikey.Key) RateLimit {
	var out RateLimit
	for _, s := range k.Snapshot().Scopes {
		l := ls[s]
		if l.Unlimited() {
			return RateLimit{}
		}
		out.Rate, out.Burst = max(out.Rate, l.Rate), max(out.Burst, l.Burst)
	}
	return out
}

// limiter holds one token bucket per key. Buckets live in this process: an
// instance admits up to its own limit, so a key's allowance across N
// instances behind a load balancer is up to N times the limit.
type limiter struct {
	limits RateLimits
	now    func() time.Time

	mu      sync.Mutex
	buckets map[uuid.UUID]*bucket
}

type bucket struct {
	limit  RateLimit
	tokens float64
	last   time.Time
}

func newLimiter(limits RateLimits) *limiter {
	return &limiter{limits: limits, now: time.Now, buckets: map[uuid.UUID]*bucket{}}
}

// take takes a token from b at now (limit l), refilled since its last
// use; it returns whether there was one, and the tokens left.
func (b *bucket) take(l RateLimit, now time.Time) (bool, float64) {
	b.refill(l, now)
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	}
	return ok, b.tokens
}

// refill adds the tokens earned since b's last use, up to the burst.
func (b *bucket) refill(l RateLimit, now time.Time) {
	b.tokens = min(float64(l.Burst), b.tokens+now.Sub(b.last).Seconds()*l.Rate)
	b.last = now
}

// retryAfter is how many whole seconds until a bucket holding tokens has
// one again (at least 1).
func retryAfterSeconds(l RateLimit, tokens float64) int {
	return max(1, ceilSeconds((1-tokens)/l.Rate))
}

// admit takes a token from key's bucket and writes the RateLimit header
// fields of draft-ietf-httpapi-ratelimit-headers (the separate fields of
// its earlier drafts): RateLimit-Limit (the burst), RateLimit-Remaining
// (whole tokens left) and RateLimit-Reset (seconds until the bucket is
// full again). When the bucket is empty it also writes Retry-After
// (seconds until a token is back) and returns false.
func (l *limiter) admit(w http.ResponseWriter, key *apikey.Key) bool {
	limit := l.limits.of(key)
	if limit.Unlimited() {
		return true
	}
	now := l.now()
	l.mu.Lock()
	b := l.buckets[key.ID()]
	if b == nil || b.limit != limit {
		b = &bucket{limit: limit, tokens: float64(limit.Burst), last: now}
		l.buckets[key.ID()] = b
	}
	ok, tokens := b.take(limit, now)
	l.mu.Unlock()

	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(limit.Burst))
	h.Set("RateLimit-Remaining", strconv.Itoa(int(tokens)))
	h.Set("RateLimit-Reset", strconv.Itoa(ceilSeconds((float64(limit.Burst)-tokens)/limit.Rate)))
	if !ok {
		h.Set("Retry-After", strconv.Itoa(retryAfterSeconds(limit, tokens)))
	}
	return ok
}

// DefaultClientRateLimit is ServerConfig.ClientRateLimit unless configured:
// a client address may fail to authenticate, or log in to the dashboard,
// twice a second on average, 20 times at once.
var DefaultClientRateLimit = RateLimit{Rate: 2, Burst: 20}

// maxClientBuckets bounds the client addresses whose buckets are kept:
// beyond it, buckets that have refilled (as good as none) are dropped.
const maxClientBuckets = 10000

// clientLimiter holds a token bucket per client address for the attempts
// that cost a lookup without a working credential: an API request whose
// token (or a dashboard request whose session) names nothing usable, and
// every dashboard login. Buckets live in this process, like keys'.
type clientLimiter struct {
	limit RateLimit
	now   func() time.Time

	mu      sync.Mutex
	buckets map[string]*bucket
}

func newClientLimiter(limit RateLimit) *clientLimiter {
	return &clientLimiter{limit: limit, now: time.Now, buckets: map[string]*bucket{}}
}

// clientAddr is the address a request came from (its connection's peer,
// without the port): behind a proxy, the proxy's.
func clientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// take takes an attempt of r's client; when there is none left it returns
// false and the seconds until there is.
func (c *clientLimiter) take(r *http.Request) (bool, int) {
	if c.limit.Unlimited() {
		return true, 0
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	addr := clientAddr(r)
	b := c.buckets[addr]
	if b == nil {
		c.sweep(now)
		b = &bucket{limit: c.limit, tokens: float64(c.limit.Burst), last: now}
		c.buckets[addr] = b
	}
	ok, tokens := b.take(c.limit, now)
	if ok {
		return true, 0
	}
	return false, retryAfterSeconds(c.limit, tokens)
}

// spent reports whether r's client has no attempt left now, without
// taking one, and the seconds until it has.
func (c *clientLimiter) spent(r *http.Request) (bool, int) {
	if c.limit.Unlimited() {
		return false, 0
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.buckets[clientAddr(r)]
	if b == nil {
		return false, 0
	}
	b.refill(c.limit, now)
	if b.tokens >= 1 {
		return false, 0
	}
	return true, retryAfterSeconds(c.limit, b.tokens)
}

// sweep drops, once maxClientBuckets are kept, the buckets that have
// refilled: a full bucket is as good as none. c.mu is held.
func (c *clientLimiter) sweep(now time.Time) {
	if len(c.buckets) < maxClientBuckets {
		return
	}
	for addr, b := range c.buckets {
		if b.tokens+now.Sub(b.last).Seconds()*c.limit.Rate >= float64(c.limit.Burst) {
			delete(c.buckets, addr)
		}
	}
}

// Limits are an instance's request limits, shared by the API and the
// dashboard (which adapters/ui reaches through ui.Limits): a token bucket
// per API key (its requests and its dashboard sessions' page loads and
// actions) and one per client address (attempts without a working
// credential, and dashboard logins).
type Limits struct {
	keys    *limiter
	clients *clientLimiter
}

// NewLimits returns the limits of keys by scope and of client addresses.
func NewLimits(keys RateLimits, client RateLimit) *Limits {
	return &Limits{keys: newLimiter(keys), clients: newClientLimiter(client)}
}

// Key takes a request of key from its bucket, writing the RateLimit header
// fields, and Retry-After when it returns false (refused).
func (l *Limits) Key(w http.ResponseWriter, key *apikey.Key) bool { return l.keys.admit(w, key) }

// Client takes an attempt of r's client address; when it returns false
// (refused) it has written Retry-After.
func (l *Limits) Client(w http.ResponseWriter, r *http.Request) bool {
	ok, after := l.clients.take(r)
	if !ok {
		w.Header().Set("Retry-After", strconv.Itoa(after))
	}
	return ok
}

// ChargeClient takes an attempt of r's client address, if one is left:
// the request failed to authenticate.
func (l *Limits) ChargeClient(r *http.Request) { l.clients.take(r) }

// ClientSpent reports whether r's client address has no attempt left;
// when it returns true it has written Retry-After.
func (l *Limits) ClientSpent(w http.ResponseWriter, r *http.Request) bool {
	spent, after := l.clients.spent(r)
	if spent {
		w.Header().Set("Retry-After", strconv.Itoa(after))
	}
	return spent
}

func ceilSeconds(s float64) int { return int(math.Ceil(s - 1e-9)) }

// ParseRateLimit reads "rate,burst" (requests per second, bucket size) or
// "off".
func ParseRateLimit(v string) (RateLimit, error) {
	if v == "off" || v == "0" {
		return RateLimit{}, nil
	}
	var l RateLimit
	rate, burst, ok := strings.Cut(v, ",")
	if !ok {
		return l, fmt.Errorf("must be RATE,BURST (requests per second, bucket size) or off")
	}
	var err error
	if l.Rate, err = strconv.ParseFloat(strings.TrimSpace(rate), 64); err != nil || l.Rate <= 0 {
		return l, fmt.Errorf("rate must be a positive number of requests per second")
	}
	if l.Burst, err = strconv.Atoi(strings.TrimSpace(burst)); err != nil || l.Burst < 1 {
		return l, fmt.Errorf("burst must be a whole number of at least 1")
	}
	return l, l.Validate()
}
