package queue

import "slices"

// Loosens reports whether moving from before to after may let claims take
// more from the queue than they could: it was resumed, a cap or a rate
// limit was raised or cleared, a named limit was dropped, or push delivery
// was turned off (workers may claim its tasks again) or its max_in_flight
// raised. A changed rate limit counts, since its bucket starts full (so do
// the groups' buckets). Claims waiting for work should then look again.
func Loosens(before, after Settings) bool {
	if before.Paused && !after.Paused {
		return true
	}
	raised := func(b, a *int) bool { return b != nil && (a == nil || *a > *b) }
	if raised(before.MaxRunning, after.MaxRunning) || raised(before.MaxRunningPerGroup, after.MaxRunningPerGroup) {
		return true
	}
	if before.Push != nil && (after.Push == nil || after.Push.MaxInFlight > before.Push.MaxInFlight) {
		return true
	}
	for _, name := range before.Limits {
		if !slices.Contains(after.Limits, name) {
			return true
		}
	}
	return (before.RateLimit != nil && RateLimitChanged(before, after)) ||
		(before.RateLimitPerGroup != nil && GroupRateLimitChanged(before, after))
}

// RateLimitChanged reports whether the rate limit differs between before
// and after (set, cleared or changed): its bucket then starts anew, full.
func RateLimitChanged(before, after Settings) bool {
	return RateChanged(before.RateLimit, after.RateLimit)
}

// GroupRateLimitChanged reports whether rate_limit_per_group differs
// between before and after: every group's bucket then starts anew, full.
func GroupRateLimitChanged(before, after Settings) bool {
	return RateChanged(before.RateLimitPerGroup, after.RateLimitPerGroup)
}

// RateChanged reports whether a rate limit differs between b and a (set,
// cleared or changed).
func RateChanged(b, a *RateLimit) bool {
	if b == nil || a == nil {
		return (b == nil) != (a == nil)
	}
	return *b != *a
}

// LimitLoosens reports whether claims of the queues naming a named limit
// may take more after it changed from before to after: its cap raised or
// cleared, its rate changed (the bucket starts full).
func LimitLoosens(before, after Limit) bool {
	b, a := before.MaxRunning, after.MaxRunning
	return (b != nil && (a == nil || *a > *b)) || (before.RateLimit != nil && RateChanged(before.RateLimit, after.RateLimit))
}
