package queue

// Loosens reports whether moving from before to after may let claims take
// more from the queue than they could: it was resumed, or a cap or a rate
// limit was raised or cleared. A changed rate limit counts, since its
// bucket starts full. Claims waiting for work should then look again.
func Loosens(before, after Settings) bool {
	if before.Paused && !after.Paused {
		return true
	}
	raised := func(b, a *int) bool { return b != nil && (a == nil || *a > *b) }
	if raised(before.MaxRunning, after.MaxRunning) || raised(before.MaxRunningPerGroup, after.MaxRunningPerGroup) {
		return true
	}
	return before.RateLimit != nil && RateLimitChanged(before, after)
}

// RateLimitChanged reports whether the rate limit differs between before
// and after (set, cleared or changed): its bucket then starts anew, full.
func RateLimitChanged(before, after Settings) bool {
	b, a := before.RateLimit, after.RateLimit
	if b == nil || a == nil {
		return (b == nil) != (a == nil)
	}
	return *b != *a
}
