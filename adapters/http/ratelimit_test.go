package http

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/apikey"
)

func keyWith(scopes ...apikey.Scope) *apikey.Key {
	return apikey.Restore(apikey.Snapshot{ID: uuid.New(), Scopes: scopes})
}

func TestTokenBucket(t *testing.T) {
	t.Parallel()
	l := newLimiter(RateLimits{apikey.ScopeRead: {Rate: 2, Burst: 3}, apikey.ScopeWork: {Rate: 10, Burst: 1}})
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	l.now = func() time.Time { return now }
	reader := keyWith(apikey.ScopeRead)
	admit := func() (bool, map[string]string) {
		w := httptest.NewRecorder()
		ok := l.admit(w, reader)
		h := map[string]string{}
		for _, name := range []string{"RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset", "Retry-After"} {
			h[name] = w.Header().Get(name)
		}
		return ok, h
	}
	for i, remaining := range []string{"2", "1", "0"} {
		ok, h := admit()
		require.True(t, ok, "request %d is within the burst", i)
		require.Equal(t, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": remaining,
			"RateLimit-Reset": map[string]string{"2": "1", "1": "1", "0": "2"}[remaining], "Retry-After": ""}, h)
	}
	ok, h := admit()
	require.False(t, ok, "the burst is spent")
	require.Equal(t, "1", h["Retry-After"], "a token is back in half a second: rounded up")
	require.Equal(t, "0", h["RateLimit-Remaining"])

	now = now.Add(500 * time.Millisecond) // 2 per second: one token back
	ok, _ = admit()
	require.True(t, ok)
	ok, _ = admit()
	require.False(t, ok)

	now = now.Add(time.Hour) // a full bucket, not more
	for range 3 {
		ok, _ = admit()
		require.True(t, ok)
	}
	ok, _ = admit()
	require.False(t, ok)

	// Keys have buckets of their own; several scopes take the most generous.
	both := keyWith(apikey.ScopeRead, apikey.ScopeWork)
	require.Equal(t, RateLimit{Rate: 10, Burst: 3}, l.limits.of(both))
	w := httptest.NewRecorder()
	require.True(t, l.admit(w, keyWith(apikey.ScopeRead)), "another key's bucket is full")
	// A scope without a limit lifts it.
	open := newLimiter(RateLimits{apikey.ScopeAdmin: {}})
	w = httptest.NewRecorder()
	require.True(t, open.admit(w, keyWith(apikey.ScopeAdmin)))
	require.Empty(t, w.Header().Get("RateLimit-Limit"))
}

func TestParseRateLimit(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]RateLimit{"off": {}, "0": {}, "50,100": {Rate: 50, Burst: 100}, "0.5, 1": {Rate: 0.5, Burst: 1}} {
		got, err := ParseRateLimit(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
		again, err := ParseRateLimit(got.String())
		require.NoError(t, err)
		require.Equal(t, got, again, "String parses back")
	}
	for _, in := range []string{"", "50", "50,0", "-1,5", "x,5", "5,y", "NaN,5", "Inf,5"} {
		_, err := ParseRateLimit(in)
		require.Error(t, err, in)
	}
}
