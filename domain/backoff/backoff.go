// Package backoff holds the retry delay policy: how long a failed task waits
// before it may be claimed again.
package backoff

import (
	"errors"
	"time"
)

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
	return nil
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
