package http

import (
	"errors"
	"fmt"
	"math"
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
	b.tokens = min(float64(limit.Burst), b.tokens+now.Sub(b.last).Seconds()*limit.Rate)
	b.last = now
	ok := b.tokens >= 1
	if ok {
		b.tokens--
	}
	tokens := b.tokens
	l.mu.Unlock()

	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(limit.Burst))
	h.Set("RateLimit-Remaining", strconv.Itoa(int(tokens)))
	h.Set("RateLimit-Reset", strconv.Itoa(ceilSeconds((float64(limit.Burst)-tokens)/limit.Rate)))
	if !ok {
		h.Set("Retry-After", strconv.Itoa(max(1, ceilSeconds((1-tokens)/limit.Rate))))
	}
	return ok
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
