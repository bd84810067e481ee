package task

import (
	"fmt"
	"math"
	"time"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Bounds of a task's own retry policy, in seconds.
const (
	// MinRetryBaseSeconds is the smallest base delay (100 ms).
	MinRetryBaseSeconds = 0.1
	// MaxRetryBaseSeconds is the largest base delay (1 h).
	MaxRetryBaseSeconds = 3600
	// MaxRetryMaxSeconds is the largest cap on the delay (7 days).
	MaxRetryMaxSeconds = 7 * 24 * 3600
	// DefaultRetryMaxSeconds is the cap when a policy gives none, unless
	// its base is larger (the cap is then the base).
	DefaultRetryMaxSeconds = 300
)

// RetryParams are a task's own retry policy as submitted: delay(attempts)
// = min(2^attempts × base, max), jittered as asked.
type RetryParams struct {
	// BaseSeconds is the delay unit (required; MinRetryBaseSeconds to
	// MaxRetryBaseSeconds).
	BaseSeconds *float64
	// MaxSeconds caps the delay (at least BaseSeconds, at most
	// MaxRetryMaxSeconds); nil means max(DefaultRetryMaxSeconds,
	// BaseSeconds).
	MaxSeconds *float64
	// Jitter randomises the delay; nil means backoff.JitterNone.
	Jitter *backoff.Jitter
}

// checkRetry adds to v what is wrong with r, in fields under "retry.", and
// fills its defaults.
func checkRetry(v *validation.Errors, r *RetryParams) {
	if r == nil {
		return
	}
	switch b := r.BaseSeconds; {
	case b == nil:
		v.Add("retry.base_seconds", "is required")
	case math.IsNaN(*b) || *b < MinRetryBaseSeconds || *b > MaxRetryBaseSeconds:
		v.Add("retry.base_seconds", fmt.Sprintf("must be between %g and %g seconds", MinRetryBaseSeconds, float64(MaxRetryBaseSeconds)))
	}
	if m := r.MaxSeconds; m != nil {
		switch {
		case math.IsNaN(*m) || *m > MaxRetryMaxSeconds:
			v.Add("retry.max_seconds", fmt.Sprintf("must be at most %d seconds (7 days)", MaxRetryMaxSeconds))
		case r.BaseSeconds != nil && *m < *r.BaseSeconds:
			v.Add("retry.max_seconds", "must be at least base_seconds")
		}
	} else if r.BaseSeconds != nil {
		m := max(DefaultRetryMaxSeconds, *r.BaseSeconds)
		r.MaxSeconds = &m
	}
	if r.Jitter == nil {
		j := backoff.JitterNone
		r.Jitter = &j
	} else if !r.Jitter.Valid() {
		v.Add("retry.jitter", `must be "none" or "full"`)
	}
}

// policy returns the backoff policy of valid params (nil for none).
func (r *RetryParams) policy() *backoff.Policy {
	if r == nil || r.BaseSeconds == nil || r.MaxSeconds == nil || r.Jitter == nil {
		return nil
	}
	return &backoff.Policy{Base: seconds(*r.BaseSeconds), Cap: seconds(*r.MaxSeconds), Jitter: *r.Jitter}
}

// seconds converts seconds to a duration, to the microsecond (storage's
// precision).
func seconds(s float64) time.Duration {
	return time.Duration(math.Round(s*1e6)) * time.Microsecond
}
