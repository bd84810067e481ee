// Package backoff holds the retry delay policy: how long a failed task waits
// before it may be claimed again.
package backoff

import (
	"errors"
	"time"
)

// Jitter says how a delay is randomised.
type Jitter string

const (
	// JitterNone waits exactly the delay.
	JitterNone Jitter = "none"
	// JitterFull waits a uniformly random time between zero and the delay
	// ("full jitter"), which spreads the retries of tasks that failed
	// together.
	JitterFull Jitter = "full"
)

// Valid reports whether j is one of the jitters.
func (j Jitter) Valid() bool { return j == JitterNone || j == JitterFull }

// Source returns uniformly random numbers in [0, 1). The domain draws no
// randomness of its own: whoever applies a policy with jitter passes one in
// (a fixed one in tests). It must be safe for concurrent use.
type Source func() float64

// DefaultBase is the delay unit when none is configured.
const DefaultBase = time.Second

// DefaultCap is the longest delay the policy ever returns.
const DefaultCap = 5 * time.Minute

// Policy computes delay(attempts) = min(2^attempts × Base, Cap), where
// attempts counts the claims made so far. With Base 1 s a task waits 2 s after
// its first failed attempt, 4 s after the second, and so on up to Cap.
type Policy struct {
	// Base is the delay unit. Must be positive.
	Base time.Duration
	// Cap bounds the delay. Must be at least Base.
	Cap time.Duration
	// Jitter randomises the delay (empty: JitterNone).
	Jitter Jitter
}

// DefaultPolicy returns the policy with DefaultBase and DefaultCap.
func DefaultPolicy() Policy { return Policy{Base: DefaultBase, Cap: DefaultCap} }

// Validate reports whether the policy can be used.
func (p Policy) Validate() error {
	if p.Base <= 0 {
		return errors.New("backoff base must be positive")
	}
	if p.Cap < p.Base {
		return errors.New("backoff cap must be at least the base")
	}
	if p.Jitter != "" && !p.Jitter.Valid() {
		return errors.New("backoff jitter must be none or full")
	}
	return nil
}

// Wait returns how long to wait after the given number of attempts:
// Delay(attempts), or with JitterFull a uniformly random duration between
// zero and it drawn from rnd. Without a source, full jitter waits the
// whole delay (the longest it may).
func (p Policy) Wait(attempts int, rnd Source) time.Duration {
	d := p.Delay(attempts)
	if p.Jitter != JitterFull || rnd == nil {
		return d
	}
	f := rnd()
	if f < 0 || f >= 1 { // a broken source must not break the bounds
		return d
	}
	return time.Duration(f * float64(d))
}

// Delay returns how long to wait after the given number of attempts.
func (p Policy) Delay(attempts int) time.Duration {
	if attempts < 0 {
		attempts = 0
	}
	d := p.Base
	for i := 0; i < attempts; i++ {
		if d >= p.Cap || d > p.Cap/2 {
			return p.Cap
		}
		d *= 2
	}
	if d > p.Cap {
		return p.Cap
	}
	return d
}
