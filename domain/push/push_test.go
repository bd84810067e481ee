package push_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/push"
)

// The signature is the hex HMAC-SHA256 of "<t>.<body>" keyed with the
// secret's bytes, one v1 per secret, the current one first.
func TestSignatureIsHMACOfTimeDotBody(t *testing.T) {
	t.Parallel()
	body := []byte(`{"to":"a@example.com"}`)
	mac := hmac.New(sha256.New, []byte("tmpush_new"))
	mac.Write([]byte("1700000000." + string(body)))
	want := hex.EncodeToString(mac.Sum(nil))
	require.Equal(t, want, push.Sign("tmpush_new", 1700000000, body))
	require.Equal(t, "t=1700000000,v1="+want, push.Signature(1700000000, body, "tmpush_new"))
	two := push.Signature(1700000000, body, "tmpush_new", "tmpush_old")
	require.Equal(t, "t=1700000000,v1="+want+",v1="+push.Sign("tmpush_old", 1700000000, body), two)
	require.NotEqual(t, want, push.Sign("tmpush_new", 1700000001, body), "the time is signed")
}

func TestJudge(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	def := []int{400, 401, 403, 404, 410, 422}
	d := func(s int) *time.Duration { v := time.Duration(s) * time.Second; return &v }
	cases := []struct {
		name       string
		status     int
		retryAfter string
		want       push.Verdict
	}{
		{"200 completes", 200, "", push.Verdict{Complete: true}},
		{"204 completes", 204, "", push.Verdict{Complete: true}},
		{"500 retries with backoff", 500, "", push.Verdict{Retryable: true}},
		{"500 ignores Retry-After", 500, "30", push.Verdict{Retryable: true}},
		{"404 is non-retryable", 404, "", push.Verdict{}},
		{"410 is non-retryable", 410, "", push.Verdict{}},
		{"302 retries (redirects are not followed)", 302, "", push.Verdict{Retryable: true}},
		{"429 with seconds", 429, "7", push.Verdict{Retryable: true, RetryAfter: d(7)}},
		{"503 with a date", 503, "Fri, 02 Jan 2026 03:05:05 GMT", push.Verdict{Retryable: true, RetryAfter: d(60)}},
		{"503 with a past date", 503, "Fri, 02 Jan 2026 03:00:00 GMT", push.Verdict{Retryable: true, RetryAfter: d(0)}},
		{"429 without Retry-After", 429, "", push.Verdict{Retryable: true}},
		{"429 with garbage", 429, "soon", push.Verdict{Retryable: true}},
		{"429 capped at an hour", 429, "86400", push.Verdict{Retryable: true, RetryAfter: d(3600)}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, push.Judge(c.status, def, c.retryAfter, now), c.name)
	}
	require.Equal(t, push.Verdict{}, push.Judge(429, []int{429}, "5", now), "a listed 429 dead-letters")
	require.Equal(t, push.Verdict{Retryable: true}, push.Judge(404, nil, "", now), "an empty list retries everything")
}

func TestParseRetryAfterFormats(t *testing.T) {
	t.Parallel()
	now := time.Date(1994, 11, 6, 8, 49, 0, 0, time.UTC)
	for value, want := range map[string]time.Duration{
		"0":                              0,
		" 120 ":                          2 * time.Minute,
		"Sun, 06 Nov 1994 08:49:37 GMT":  37 * time.Second, // RFC 9110's three forms
		"Sunday, 06-Nov-94 08:49:37 GMT": 37 * time.Second,
		"Sun Nov  6 08:49:37 1994":       37 * time.Second,
	} {
		got, ok := push.ParseRetryAfter(value, now)
		require.True(t, ok, value)
		require.Equal(t, want, got, value)
	}
	for _, bad := range []string{"", "-1", "1.5", "tomorrow"} {
		_, ok := push.ParseRetryAfter(bad, now)
		require.False(t, ok, bad)
	}
}

func TestAllowList(t *testing.T) {
	t.Parallel()
	a, err := push.ParseAllowList("hooks.example.com, *.example.org,127.0.0.1 ,[::1], Internal.Svc")
	require.NoError(t, err)
	require.Equal(t, "hooks.example.com,*.example.org,127.0.0.1,::1,internal.svc", a.String())
	for host, want := range map[string]bool{
		"hooks.example.com":  true,
		"HOOKS.example.com.": true,
		"other.example.com":  false,
		"a.example.org":      true,
		"a.b.example.org":    true,
		"example.org":        false, // a pattern needs a label before the suffix
		"badexample.org":     false,
		"127.0.0.1":          true,
		"127.0.0.2":          false, // an address is allowed only as itself
		"::1":                true,
		"[::1]":              true,
		"::ffff:127.0.0.1":   true, // the same address, mapped
		"internal.svc":       true,
		"":                   false,
	} {
		require.Equal(t, want, a.Allows(host), host)
	}
	pub := netip.MustParseAddr("93.184.216.34")
	private := netip.MustParseAddr("10.1.2.3")
	require.True(t, a.AllowsAddress("a.example.org", pub), "a public address is fine for a pattern's host")
	require.False(t, a.AllowsAddress("a.example.org", private), "a private one is not")
	require.True(t, a.AllowsAddress("internal.svc", private), "an exactly listed name may resolve to a private address")
	require.True(t, a.AllowsAddress("localhost", netip.MustParseAddr("127.0.0.1")), "so may any name resolving to a listed address")
	require.False(t, a.AllowsAddress("a.example.org", netip.MustParseAddr("127.0.0.2")))

	for _, bad := range []string{"*", "a.*.com", "*example.com", "exa!mple", "ex/ample"} {
		_, err := push.ParseAllowList(bad)
		require.Error(t, err, bad)
	}
	empty, err := push.ParseAllowList(" , ")
	require.NoError(t, err)
	require.True(t, empty.Empty())
	require.False(t, empty.Allows("127.0.0.1"))
}

func TestPublic(t *testing.T) {
	t.Parallel()
	for addr, want := range map[string]bool{
		"93.184.216.34":        true,
		"2606:2800:220:1::248": true,
		"10.0.0.1":             false,
		"172.16.5.4":           false,
		"192.168.1.1":          false,
		"127.0.0.1":            false,
		"169.254.169.254":      false, // cloud metadata
		"100.64.0.1":           false,
		"0.0.0.0":              false,
		"255.255.255.255":      false,
		"224.0.0.1":            false,
		"::1":                  false,
		"fe80::1":              false,
		"fc00::1":              false,
		"::ffff:10.0.0.1":      false,
		"64:ff9b::a00:1":       false,
		"::":                   false,
		"198.18.0.1":           false,
		"2001:db8::1":          false,
		"::ffff:93.184.216.34": true,
	} {
		require.Equal(t, want, push.Public(netip.MustParseAddr(addr)), addr)
	}
}
