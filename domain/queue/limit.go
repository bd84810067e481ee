package queue

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// Named limits (issue 27): a budget that several queues share. A queue
// names the limits it draws on (Settings.Limits); a claim of the queue then
// takes from each of them as from the queue's own rate limit and
// max_running: tokens from the limit's bucket, and room under its
// max_running, which counts the RUNNING tasks of every queue naming it.

// Bounds of named limits.
const (
	// MaxLimitNameLength is the longest limit name.
	MaxLimitNameLength = 128
	// MaxQueueLimits is the most named limits one queue draws on.
	MaxQueueLimits = 8
)

// LimitNameSet is the set of characters a limit name is made of (those of
// queue names: a name is a URL path segment).
const LimitNameSet = "[A-Za-z0-9._:-]"

var limitNamePattern = regexp.MustCompile(`^` + LimitNameSet + `{1,` + strconv.Itoa(MaxLimitNameLength) + `}$`)

var (
	// ErrLimitNotFound: no named limit has this name.
	ErrLimitNotFound = errors.New("limit not found")
)

// LimitInUseError refuses to delete a named limit that queues still name.
type LimitInUseError struct {
	Name   string
	Queues []string
}

// Error implements error.
func (e *LimitInUseError) Error() string {
	return fmt.Sprintf("limit %s is named by queues %v: remove it from their limits first", e.Name, e.Queues)
}

// ValidLimitName reports whether name may name a limit.
func ValidLimitName(name string) bool { return limitNamePattern.MatchString(name) }

// CheckLimitName adds to v when name, in field, is not a limit name.
func CheckLimitName(v *validation.Errors, field, name string) {
	if !ValidLimitName(name) {
		v.Add(field, fmt.Sprintf("must be 1 to %d characters of %s", MaxLimitNameLength, LimitNameSet))
	}
}

// Limit is a named limit: a token bucket (RateLimit) and a cap on running
// tasks (MaxRunning) that the queues naming it share, across every
// instance. At least one of them is set.
type Limit struct {
	Name       string     `json:"name"`
	RateLimit  *RateLimit `json:"rate_limit,omitempty"`
	MaxRunning *int       `json:"max_running,omitempty"`
}

// LimitParams are a named limit's values as an operator sets them (PUT
// /limits/v1/{name} replaces them all).
type LimitParams struct {
	PerSecond *float64
	// Burst defaults to one second's tokens (PerSecond rounded up, at
	// least 1).
	Burst      *int
	MaxRunning *int
}

// NewLimit validates p and returns the limit it describes.
func NewLimit(name string, p LimitParams) (Limit, error) {
	var v validation.Errors
	CheckLimitName(&v, "name", name)
	l := Limit{Name: name}
	if p.PerSecond == nil && p.MaxRunning == nil {
		v.Add("limit", "set per_second (with burst), max_running, or both")
	}
	if p.Burst != nil && p.PerSecond == nil {
		v.Add("burst", "is a rate limit's: set per_second too")
	}
	if r := p.PerSecond; r != nil {
		if math.IsNaN(*r) || *r <= 0 || *r > MaxRatePerSecond {
			v.Add("per_second", fmt.Sprintf("must be a number above 0 and at most %d", MaxRatePerSecond))
		}
		rl := RateLimit{PerSecond: *r, Burst: DefaultBurst(*r)}
		if p.Burst != nil {
			rl.Burst = *p.Burst
			if rl.Burst < 1 || rl.Burst > MaxLimit {
				v.Add("burst", fmt.Sprintf("must be an integer from 1 to %d", MaxLimit))
			}
		}
		l.RateLimit = &rl
	}
	if m := p.MaxRunning; m != nil {
		if *m < 1 || *m > MaxLimit {
			v.Add("max_running", fmt.Sprintf("must be an integer from 1 to %d", MaxLimit))
		}
		l.MaxRunning = clone(m)
	}
	return l, v.Err()
}

// DefaultBurst is a rate limit's burst when none is given: one second's
// tokens, at least 1.
func DefaultBurst(perSecond float64) int {
	if math.IsNaN(perSecond) {
		return 1
	}
	return int(max(1, math.Min(math.Ceil(perSecond), MaxLimit)))
}

// LimitState is what a claim reads of a named limit under its lock.
type LimitState struct {
	Limit Limit
	// Running counts the RUNNING tasks of every queue naming the limit.
	Running int
	// Bucket is the rate limit's bucket (when RateLimit is set).
	Bucket Bucket
}

// Allowance is how many tasks a claim at now may take under the limit: the
// least of the room under max_running and the bucket's whole tokens; -1
// when the limit sets neither (it never does).
func (st LimitState) Allowance(now time.Time) int {
	return State{Settings: Settings{MaxRunning: st.Limit.MaxRunning, RateLimit: st.Limit.RateLimit},
		Running: st.Running, Bucket: st.Bucket}.Allowance(now)
}

// checkLimits adds to v what is wrong with a queue's list of limit names.
func checkLimits(v *validation.Errors, names []string) {
	if len(names) > MaxQueueLimits {
		v.Add("limits", fmt.Sprintf("must name at most %d limits", MaxQueueLimits))
	}
	for i, n := range names {
		CheckLimitName(v, fmt.Sprintf("limits[%d]", i), n)
		if slices.Contains(names[:i], n) {
			v.Add(fmt.Sprintf("limits[%d]", i), "names "+n+" twice")
		}
	}
}
