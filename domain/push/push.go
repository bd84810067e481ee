// Package push holds the rules of push delivery (issue 27): which hosts a
// delivery may reach, how a delivery is signed, and what an endpoint's
// answer does to the task. The settings of a push queue are
// domain/queue's (queue.Push); the dispatcher (application) and the HTTP
// sender (adapters/push) apply these rules. Like the other domain packages
// it does no I/O, and time comes in as an argument.
package push

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Header names of a delivery.
const (
	// HeaderTaskID carries the task's id: an endpoint that may see a task
	// twice (delivery is at least once) deduplicates on it.
	HeaderTaskID = "Taskmaster-Task-Id"
	// HeaderAttempt carries the attempt number (1 for the first).
	HeaderAttempt = "Taskmaster-Attempt"
	// HeaderQueue carries the task's queue.
	HeaderQueue = "Taskmaster-Queue"
	// HeaderSignature carries the signature: t=<unix seconds>,v1=<hex>
	// (a second v1 while a rotated-out secret still signs).
	HeaderSignature = "Taskmaster-Signature"
	// HeaderTraceparent and HeaderTracestate carry the task's W3C trace
	// context, when it has one.
	HeaderTraceparent = "Traceparent"
	HeaderTracestate  = "Tracestate"
)

// MaxRetryAfter bounds how long an endpoint's Retry-After may hold a task
// back: a longer one (or a date further away) waits this long.
const MaxRetryAfter = time.Hour

// Sign is the hex HMAC-SHA256, keyed with the secret's bytes, of the
// signed content "<t>.<body>": what v1 carries.
func Sign(secret string, t int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(strconv.FormatInt(t, 10)))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return hex.EncodeToString(mac.Sum(nil))
}

// Signature is the Taskmaster-Signature value of body sent at t (unix
// seconds): t=<t>, then one v1=<Sign> per secret, the current one first.
func Signature(t int64, body []byte, secrets ...string) string {
	var b strings.Builder
	b.WriteString("t=")
	b.WriteString(strconv.FormatInt(t, 10))
	for _, s := range secrets {
		b.WriteString(",v1=")
		b.WriteString(Sign(s, t, body))
	}
	return b.String()
}

// Verdict is what an endpoint's answer does to the delivered task.
type Verdict struct {
	// Complete: the task is DONE (a 2xx).
	Complete bool
	// Retryable: a failure that is retried while attempts are left (else
	// DEAD non_retryable at once). Meaningless when Complete.
	Retryable bool
	// RetryAfter, when not nil, is how long the retry waits instead of the
	// queue's backoff (a 429 or 503 with Retry-After).
	RetryAfter *time.Duration
}

// Judge decides what a response with status does: a 2xx completes; a
// status the queue lists as non-retryable dead-letters at once; a 429 or
// 503 with a Retry-After (retryAfter, the header's value) is retried after
// that long (at most MaxRetryAfter); anything else is retried with the
// queue's backoff. now is the clock an HTTP-date Retry-After is read
// against.
func Judge(status int, nonRetryable []int, retryAfter string, now time.Time) Verdict {
	switch {
	case status >= 200 && status < 300:
		return Verdict{Complete: true}
	case slices.Contains(nonRetryable, status):
		return Verdict{}
	}
	v := Verdict{Retryable: true}
	if status == 429 || status == 503 {
		if d, ok := ParseRetryAfter(retryAfter, now); ok {
			v.RetryAfter = &d
		}
	}
	return v
}

// httpDates are the formats of an HTTP-date (RFC 9110 5.6.7): the
// preferred one and the two obsolete ones a recipient must accept.
var httpDates = []string{
	"Mon, 02 Jan 2006 15:04:05 GMT",
	"Monday, 02-Jan-06 15:04:05 GMT",
	"Mon Jan _2 15:04:05 2006",
}

// ParseRetryAfter reads a Retry-After value: whole seconds, or an
// HTTP-date (its distance from now; none when past). The delay is at most
// MaxRetryAfter. false when value is neither.
func ParseRetryAfter(value string, now time.Time) (time.Duration, bool) {
	value = strings.TrimSpace(value)
	if value == "" {
		return 0, false
	}
	if n, err := strconv.ParseUint(value, 10, 64); err == nil {
		if n > uint64(MaxRetryAfter/time.Second) {
			return MaxRetryAfter, true
		}
		return time.Duration(n) * time.Second, true
	}
	for _, layout := range httpDates {
		if at, err := time.Parse(layout, value); err == nil {
			return min(max(at.Sub(now), 0), MaxRetryAfter), true
		}
	}
	return 0, false
}

// AllowList is the hosts deliveries may reach
// (TASKMASTER_PUSH_ALLOWED_HOSTS): exact host names or IP addresses, and
// "*.suffix" patterns that match any name ending in ".suffix" (not suffix
// itself). Names compare without case. An empty list allows nothing: push
// delivery is off.
//
// A host allowed by a pattern must resolve to public addresses: private,
// loopback, link-local and other non-public addresses are refused after
// DNS resolution, when the connection is made, unless the URL's host is
// listed exactly (a name, or the address itself): see AllowsAddress.
type AllowList struct {
	entries  []string
	exact    map[string]bool
	suffixes []string
}

// ParseAllowList reads a list separated by commas or whitespace.
func ParseAllowList(s string) (AllowList, error) {
	a := AllowList{exact: map[string]bool{}}
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' }) {
		e = strings.ToLower(e)
		switch {
		case strings.HasPrefix(e, "*."):
			suffix := e[1:] // ".example.com"
			if !validName(suffix[1:]) {
				return AllowList{}, fmt.Errorf("%q: a pattern is *. followed by a host name", e)
			}
			a.suffixes = append(a.suffixes, suffix)
		case strings.Contains(e, "*"):
			return AllowList{}, fmt.Errorf("%q: only a leading *. is a pattern", e)
		default:
			if ip, err := netip.ParseAddr(strings.Trim(e, "[]")); err == nil {
				e = ip.Unmap().String()
			} else if !validName(e) {
				return AllowList{}, fmt.Errorf("%q is neither a host name nor an IP address", e)
			}
			a.exact[e] = true
		}
		a.entries = append(a.entries, e)
	}
	return a, nil
}

// validName reports whether s looks like a DNS host name: dot-separated
// labels of letters, digits, '-' and '_'.
func validName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return true
}

// Empty reports whether the list allows nothing.
func (a AllowList) Empty() bool { return len(a.entries) == 0 }

// String is the list as configured (normalized).
func (a AllowList) String() string { return strings.Join(a.entries, ",") }

// normalize is host as the list compares it: lower case, an IP address
// in its canonical form.
func normalize(host string) string {
	host = strings.ToLower(strings.TrimSuffix(strings.Trim(host, "[]"), "."))
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return host
}

// Allows reports whether a delivery may go to host (a URL's host name or
// IP address, without port).
func (a AllowList) Allows(host string) bool {
	host = normalize(host)
	if host == "" {
		return false
	}
	if a.exact[host] {
		return true
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return false // an address must be listed as itself
	}
	for _, s := range a.suffixes {
		if strings.HasSuffix(host, s) {
			return true
		}
	}
	return false
}

// Listed reports whether host (a name or an address) is listed exactly,
// which lets it reach non-public addresses.
func (a AllowList) Listed(host string) bool { return a.exact[normalize(host)] }

// AllowsAddress reports whether a delivery to host may connect to ip,
// one of the addresses host resolved to: a public address always; any
// other only when host or ip itself is listed exactly.
func (a AllowList) AllowsAddress(host string, ip netip.Addr) bool {
	return Public(ip) || a.Listed(host) || a.exact[ip.Unmap().String()]
}

// nonPublic are the ranges no delivery reaches unless listed exactly,
// besides what netip classifies (loopback, private, link-local,
// multicast, unspecified).
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // documentation
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: may embed any IPv4 address
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("100::/64"),        // discard
	netip.MustParsePrefix("2002::/16"),       // 6to4: may embed any IPv4 address
}

// Public reports whether ip is a public unicast address.
func Public(ip netip.Addr) bool {
	ip = ip.Unmap()
	if !ip.IsValid() || !ip.IsGlobalUnicast() || ip.IsPrivate() || ip.IsLoopback() || ip.IsLinkLocalUnicast() {
		return false
	}
	for _, p := range nonPublic {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}
