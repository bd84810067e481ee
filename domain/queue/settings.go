// Package queue holds the rules of queue control: the settings an operator
// steers a queue with (pause, a cap on running tasks, a rate limit, a cap per
// group) and how a claim honours them. It knows nothing of storage: the
// adapter reads a queue's settings and its running counts under a lock and
// asks Allowance how many tasks a claim may take.
package queue

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// Bounds of the settings.
const (
	// MaxLimit bounds max_running, max_running_per_group and a rate
	// limit's burst.
	MaxLimit = 1_000_000
	// MaxRatePerSecond bounds a rate limit's per_second.
	MaxRatePerSecond = 1_000_000
	// MaxDefaultTimeoutSeconds bounds default_timeout_seconds (24 h, the
	// longest time limit of a task: task.MaxTimeoutSeconds).
	MaxDefaultTimeoutSeconds = 24 * 60 * 60
)

// RateLimit is a token bucket: claims take one token per task; the bucket
// holds at most Burst tokens and refills at PerSecond tokens a second. Every
// instance takes from the same bucket (it lives in the database).
type RateLimit struct {
	PerSecond float64 `json:"per_second"`
	Burst     int     `json:"burst"`
}

// Settings are a queue's settings. The zero value is a queue nobody
// configured: not paused, no limits.
type Settings struct {
	// Paused: claims hand out nothing from the queue; submissions are
	// accepted and wait.
	Paused bool `json:"paused"`
	// MaxRunning, when set, caps the queue's RUNNING tasks across all
	// workers and instances.
	MaxRunning *int `json:"max_running"`
	// RateLimit, when set, caps the claims per second.
	RateLimit *RateLimit `json:"rate_limit"`
	// MaxRunningPerGroup, when set, caps the RUNNING tasks of each group
	// (group_key) of the queue; tasks without a group are not capped.
	MaxRunningPerGroup *int `json:"max_running_per_group"`
	// RateLimitPerGroup, when set, gives each group (group_key) of the
	// queue a token bucket of its own, shared by every instance; tasks
	// without a group are not limited by it.
	RateLimitPerGroup *RateLimit `json:"rate_limit_per_group"`
	// Limits are the named limits the queue draws on (see Limit), in the
	// order the operator gave them; empty when none.
	Limits []string `json:"limits"`
	// Push, when set, makes the queue a push queue: the instances'
	// dispatchers deliver its tasks to an HTTP endpoint, and workers'
	// claims pass it by.
	Push *Push `json:"push"`
	// DefaultTimeoutSeconds, when set, is the time limit of each attempt
	// of the queue's tasks that have none of their own, from the claim
	// that starts it. It restricts no claim.
	DefaultTimeoutSeconds *int `json:"default_timeout_seconds"`
}

// Limited reports whether claims must count or take tokens under the
// queue's lock: a cap, a rate limit (the queue's or its groups'), a named
// limit or push delivery (whose max_in_flight caps it) is set.
func (s Settings) Limited() bool {
	return s.MaxRunning != nil || s.RateLimit != nil || s.MaxRunningPerGroup != nil ||
		s.RateLimitPerGroup != nil || len(s.Limits) > 0 || s.Push != nil
}

// Restricts reports whether the settings change what claims do at all.
func (s Settings) Restricts() bool { return s.Paused || s.Limited() }

// ClosedTo reports whether a claim hands out nothing of the queue: it is
// paused, or the claim is a push dispatcher's (push) and the queue no push
// queue, or a worker's and the queue a push queue.
func (s Settings) ClosedTo(push bool) bool { return s.Paused || (s.Push != nil) != push }

// GroupLimited reports whether claims must mind each group's running
// tasks or tokens.
func (s Settings) GroupLimited() bool {
	return s.MaxRunningPerGroup != nil || s.RateLimitPerGroup != nil
}

// Clone returns a deep copy of s.
func (s Settings) Clone() Settings {
	s.MaxRunning, s.RateLimit, s.MaxRunningPerGroup = clone(s.MaxRunning), clone(s.RateLimit), clone(s.MaxRunningPerGroup)
	s.RateLimitPerGroup = clone(s.RateLimitPerGroup)
	s.DefaultTimeoutSeconds = clone(s.DefaultTimeoutSeconds)
	s.Limits = slices.Clone(s.Limits)
	s.Push = s.Push.Clone()
	return s
}

// Patch changes some settings and leaves the others. A nil field is left
// alone; a Set field with a nil value clears that limit.
type Patch struct {
	Paused             *bool
	MaxRunning         Optional[int]
	RateLimit          Optional[RateLimit]
	MaxRunningPerGroup Optional[int]
	RateLimitPerGroup  Optional[RateLimit]
	// Limits, when Set, replaces the queue's named limits (a nil Value or
	// an empty list: none).
	Limits Optional[[]string]
	// Push, when Set, turns push delivery off (a nil Value) or on and
	// changes it.
	Push Optional[PushPatch]
	// DefaultTimeoutSeconds applies to the attempts claimed after the
	// change.
	DefaultTimeoutSeconds Optional[int]
}

// Optional is a patch of a nullable setting: Set says the patch names it,
// Value nil clears it.
type Optional[T any] struct {
	Set   bool
	Value *T
}

// Empty reports whether the patch names no setting.
func (p Patch) Empty() bool {
	return p.Paused == nil && !p.MaxRunning.Set && !p.RateLimit.Set && !p.MaxRunningPerGroup.Set &&
		!p.DefaultTimeoutSeconds.Set && !p.RateLimitPerGroup.Set && !p.Limits.Set && !p.Push.Set
}

// Validate checks the values the patch sets, by the API's field names.
func (p Patch) Validate() error {
	var v validation.Errors
	if p.Empty() {
		v.Add("settings", "name at least one of paused, max_running, rate_limit, max_running_per_group, "+
			"default_timeout_seconds, rate_limit_per_group, limits, push")
	}
	limit := func(field string, o Optional[int]) {
		if o.Set && o.Value != nil && (*o.Value < 1 || *o.Value > MaxLimit) {
			v.Add(field, fmt.Sprintf("must be null or an integer from 1 to %d", MaxLimit))
		}
	}
	limit("max_running", p.MaxRunning)
	limit("max_running_per_group", p.MaxRunningPerGroup)
	if t := p.DefaultTimeoutSeconds; t.Set && t.Value != nil && (*t.Value < 1 || *t.Value > MaxDefaultTimeoutSeconds) {
		v.Add("default_timeout_seconds", fmt.Sprintf("must be null or a whole number of seconds from 1 to %d (24 h)", MaxDefaultTimeoutSeconds))
	}
	rate := func(field string, o Optional[RateLimit]) {
		r := o.Value
		if !o.Set || r == nil {
			return
		}
		if math.IsNaN(r.PerSecond) || r.PerSecond <= 0 || r.PerSecond > MaxRatePerSecond {
			v.Add(field+".per_second", fmt.Sprintf("must be a number above 0 and at most %d", MaxRatePerSecond))
		}
		if r.Burst < 1 || r.Burst > MaxLimit {
			v.Add(field+".burst", fmt.Sprintf("must be an integer from 1 to %d", MaxLimit))
		}
	}
	rate("rate_limit", p.RateLimit)
	rate("rate_limit_per_group", p.RateLimitPerGroup)
	if p.Limits.Set && p.Limits.Value != nil {
		checkLimits(&v, *p.Limits.Value)
	}
	if p.Push.Set && p.Push.Value != nil {
		p.Push.Value.validate(&v)
	}
	return v.Err()
}

// Check refuses what the patch cannot do to the queue's settings cur:
// turning push delivery on without a URL, rotating the secret of a queue
// without push delivery.
func (p Patch) Check(cur Settings) error {
	var v validation.Errors
	if p.Push.Set && p.Push.Value != nil {
		p.Push.Value.check(&v, cur.Push)
	}
	return v.Err()
}

// Apply returns s with the patch applied (s itself is not changed). Of
// push delivery it applies the plain fields; the secrets (created with it,
// rotated, the static headers' values) are sealed by the caller.
func (p Patch) Apply(s Settings) Settings {
	s = s.Clone()
	if p.Paused != nil {
		s.Paused = *p.Paused
	}
	if p.MaxRunning.Set {
		s.MaxRunning = clone(p.MaxRunning.Value)
	}
	if p.RateLimit.Set {
		s.RateLimit = clone(p.RateLimit.Value)
	}
	if p.MaxRunningPerGroup.Set {
		s.MaxRunningPerGroup = clone(p.MaxRunningPerGroup.Value)
	}
	if p.RateLimitPerGroup.Set {
		s.RateLimitPerGroup = clone(p.RateLimitPerGroup.Value)
	}
	if p.Limits.Set {
		s.Limits = nil
		if p.Limits.Value != nil && len(*p.Limits.Value) > 0 {
			s.Limits = slices.Clone(*p.Limits.Value)
		}
	}
	if p.Push.Set {
		if p.Push.Value != nil {
			s.Push = p.Push.Value.apply(s.Push)
		} else {
			s.Push = nil
		}
	}
	if p.DefaultTimeoutSeconds.Set {
		s.DefaultTimeoutSeconds = clone(p.DefaultTimeoutSeconds.Value)
	}
	return s
}

func clone[T any](v *T) *T {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

// Bucket is a rate limit's token bucket: Tokens at At. A bucket never used
// (zero At) is full.
type Bucket struct {
	Tokens float64
	At     time.Time
}

// Level is how many tokens the bucket holds at now under limit r: refilled
// at r.PerSecond since At, at most r.Burst. A clock that went back refills
// nothing.
func (b Bucket) Level(r RateLimit, now time.Time) float64 {
	if b.At.IsZero() {
		return float64(r.Burst)
	}
	elapsed := max(now.Sub(b.At).Seconds(), 0)
	return math.Min(float64(r.Burst), b.Tokens+elapsed*r.PerSecond)
}

// Take returns the bucket after n tokens were taken at now.
func (b Bucket) Take(r RateLimit, now time.Time, n int) Bucket {
	return Bucket{Tokens: b.Level(r, now) - float64(n), At: now}
}

// State is what a claim reads of a limited queue under its lock.
type State struct {
	Settings Settings
	// Running is the queue's RUNNING tasks.
	Running int
	// Bucket is the rate limit's bucket (when RateLimit is set).
	Bucket Bucket
}

// Allowance is how many tasks a claim at now may take from the queue:
// nothing when paused, else the least of the room under max_running (and
// under a push queue's max_in_flight) and the whole tokens in the bucket;
// -1 when nothing limits it. Named limits and each group's limits are the
// claim's to apply on top (LimitState, GroupRoom, GroupTokens).
func (st State) Allowance(now time.Time) int {
	s := st.Settings
	if s.Paused {
		return 0
	}
	allow := -1
	if s.MaxRunning != nil {
		allow = max(*s.MaxRunning-st.Running, 0)
	}
	if s.Push != nil {
		// Every RUNNING task of a push queue is a delivery in flight.
		if room := max(s.Push.MaxInFlight-st.Running, 0); allow < 0 || room < allow {
			allow = room
		}
	}
	if s.RateLimit != nil {
		tokens := int(math.Floor(st.Bucket.Level(*s.RateLimit, now)))
		if allow < 0 || tokens < allow {
			allow = max(tokens, 0)
		}
	}
	return allow
}

// GroupRoom is how many more tasks of a group with running RUNNING tasks a
// claim may take under the per-group cap; -1 when uncapped.
func (s Settings) GroupRoom(running int) int {
	if s.MaxRunningPerGroup == nil {
		return -1
	}
	return max(*s.MaxRunningPerGroup-running, 0)
}

// GroupAllowance is how many more tasks of a group a claim at now may
// take: the least of the room under the per-group cap (the group has
// running RUNNING tasks) and the whole tokens of the group's bucket b under
// rate_limit_per_group; -1 when neither is set.
func (s Settings) GroupAllowance(running int, b Bucket, now time.Time) int {
	allow := s.GroupRoom(running)
	if r := s.RateLimitPerGroup; r != nil {
		tokens := max(int(math.Floor(b.Level(*r, now))), 0)
		if allow < 0 || tokens < allow {
			allow = tokens
		}
	}
	return allow
}
