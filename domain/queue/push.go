package queue

import (
	"fmt"
	"maps"
	"net/textproto"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// Bounds and defaults of a queue's push delivery (issue 27).
const (
	// MinPushTimeoutSeconds and MaxPushTimeoutSeconds bound push.timeout_seconds.
	MinPushTimeoutSeconds = 1
	MaxPushTimeoutSeconds = 900
	// DefaultPushTimeoutSeconds is push.timeout_seconds when a patch turning
	// push on names none.
	DefaultPushTimeoutSeconds = 30
	// MinPushMaxInFlight and MaxPushMaxInFlight bound push.max_in_flight.
	MinPushMaxInFlight = 1
	MaxPushMaxInFlight = 10_000
	// DefaultPushMaxInFlight is push.max_in_flight when a patch turning push
	// on names none.
	DefaultPushMaxInFlight = 10
	// MaxPushURLLength is the longest push.url.
	MaxPushURLLength = 2048
	// MaxPushHeaders is the most static headers a push queue sends.
	MaxPushHeaders = 32
	// MaxPushHeaderValueLength is the longest static header value, in bytes.
	MaxPushHeaderValueLength = 4096
	// DefaultSecretOverlapSeconds is how long a rotated-out signing secret
	// keeps signing deliveries, next to the new one, unless the rotation
	// says otherwise (24 h).
	DefaultSecretOverlapSeconds = 24 * 60 * 60
	// MaxSecretOverlapSeconds bounds push.secret_overlap_seconds (7 days).
	MaxSecretOverlapSeconds = 7 * 24 * 60 * 60
)

// DefaultNonRetryableStatuses are the response statuses that dead-letter a
// push delivery at once (push.non_retryable_statuses unless set): the
// endpoint said the request itself is wrong, and sending it again will not
// change that.
func DefaultNonRetryableStatuses() []int { return []int{400, 401, 403, 404, 410, 422} }

// Push is a push queue's delivery: instead of workers claiming its tasks,
// every instance's dispatcher claims them and POSTs each payload to URL.
// Only the dispatchers claim from a push queue; workers' claims pass it by.
// The signing secret and the static header values are secrets: they travel
// only sealed (Sealed), never in an API answer (but the secret once, in the
// answer of the change that created it) nor in an event.
type Push struct {
	// URL is the endpoint (http or https, allowed by the server's
	// TASKMASTER_PUSH_ALLOWED_HOSTS).
	URL string `json:"url"`
	// TimeoutSeconds bounds one delivery, response body included.
	TimeoutSeconds int `json:"timeout_seconds"`
	// MaxInFlight caps the queue's deliveries in flight, across every
	// instance: it caps the queue's RUNNING tasks like max_running.
	MaxInFlight int `json:"max_in_flight"`
	// HeaderNames are the names of the static headers each delivery
	// carries (their values are secret), canonical, sorted.
	HeaderNames []string `json:"header_names"`
	// NonRetryableStatuses are the response statuses that dead-letter the
	// task at once (non_retryable), sorted.
	NonRetryableStatuses []int `json:"non_retryable_statuses"`
	// SecretRotatedAt is when the signing secret was created or last
	// rotated.
	SecretRotatedAt time.Time `json:"secret_rotated_at"`
	// PreviousSecretExpiresAt, when set, is until when the secret the last
	// rotation replaced still signs deliveries, next to the new one.
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at,omitempty"`
	// Sealed are the secrets as stored (see Sealer in ports); never
	// encoded.
	Sealed PushSealed `json:"-"`
}

// PushSealed are a push queue's secrets, sealed by the application before
// storage sees them.
type PushSealed struct {
	// Secret is the signing secret.
	Secret string
	// PreviousSecret is the secret the last rotation replaced (empty when
	// none, or when the rotation kept no overlap).
	PreviousSecret string
	// Headers are the static headers, a JSON object of name to value
	// (empty when none).
	Headers string
}

// Clone returns a deep copy of p (nil for nil).
func (p *Push) Clone() *Push {
	if p == nil {
		return nil
	}
	c := *p
	c.HeaderNames = slices.Clone(p.HeaderNames)
	c.NonRetryableStatuses = slices.Clone(p.NonRetryableStatuses)
	if p.PreviousSecretExpiresAt != nil {
		at := *p.PreviousSecretExpiresAt
		c.PreviousSecretExpiresAt = &at
	}
	return &c
}

// NonRetryable reports whether a response with status dead-letters the
// task at once.
func (p *Push) NonRetryable(status int) bool {
	return slices.Contains(p.NonRetryableStatuses, status)
}

// Host is the host (and port, when the URL names one) deliveries go to.
func (p *Push) Host() string {
	u, err := url.Parse(p.URL)
	if err != nil {
		return ""
	}
	return u.Host
}

// RotateSecret makes sealed the signing secret from now. The secret it
// replaces keeps signing deliveries next to the new one until now+overlap
// (not at all when overlap is 0 or the queue had none).
func (p *Push) RotateSecret(sealed string, overlap time.Duration, now time.Time) {
	p.Sealed.PreviousSecret, p.PreviousSecretExpiresAt = "", nil
	if p.Sealed.Secret != "" && overlap > 0 {
		until := now.Add(overlap)
		p.Sealed.PreviousSecret, p.PreviousSecretExpiresAt = p.Sealed.Secret, &until
	}
	p.Sealed.Secret = sealed
	p.SecretRotatedAt = now
}

// ForgetExpiredSecret drops the previous secret once its overlap is over
// at now.
func (p *Push) ForgetExpiredSecret(now time.Time) {
	if p.PreviousSecretExpiresAt != nil && !p.PreviousSecretExpiresAt.After(now) {
		p.Sealed.PreviousSecret, p.PreviousSecretExpiresAt = "", nil
	}
}

// PushPatch changes a queue's push delivery; a nil field keeps what the
// queue has (or the default, when the patch turns push on).
type PushPatch struct {
	URL            *string
	TimeoutSeconds *int
	MaxInFlight    *int
	// Headers, when Set, replaces the static headers (a nil Value: none).
	Headers Optional[map[string]string]
	// NonRetryableStatuses, when Set, replaces the list (a nil Value: the
	// default list; an empty one: none).
	NonRetryableStatuses Optional[[]int]
	// RotateSecret asks for a new signing secret.
	RotateSecret bool
	// SecretOverlapSeconds is how long the replaced secret keeps signing
	// (RotateSecret only; nil: DefaultSecretOverlapSeconds).
	SecretOverlapSeconds *int
}

// Overlap is how long a rotation keeps the replaced secret.
func (p PushPatch) Overlap() time.Duration {
	s := DefaultSecretOverlapSeconds
	if p.SecretOverlapSeconds != nil {
		s = *p.SecretOverlapSeconds
	}
	return time.Duration(s) * time.Second
}

// reservedHeader reports whether a static header may not be named: the
// delivery's own headers and those of the connection.
func reservedHeader(canonical string) bool {
	switch canonical {
	case "Content-Type", "Content-Length", "Content-Encoding", "Host", "Connection", "Transfer-Encoding",
		"Te", "Trailer", "Upgrade", "Keep-Alive", "Proxy-Connection", "Expect", "Traceparent", "Tracestate":
		return true
	}
	return strings.HasPrefix(canonical, "Taskmaster-")
}

// validHeaderName reports whether name is an HTTP field name (RFC 9110
// token).
func validHeaderName(name string) bool {
	if name == "" {
		return false
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// validHeaderValue reports whether value may be sent as a field value: no
// control characters but tab.
func validHeaderValue(value string) bool {
	for i := 0; i < len(value); i++ {
		if c := value[i]; (c < 0x20 && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// CheckPushURL adds to v (as field) when raw is not a URL push delivery can
// use: absolute http or https, with a host, no user information (send
// credentials as headers), no fragment, at most MaxPushURLLength bytes.
// Which hosts are allowed is the server's configuration (push.AllowList).
func CheckPushURL(v *validation.Errors, field, raw string) {
	if len(raw) > MaxPushURLLength {
		v.Add(field, fmt.Sprintf("must be at most %d bytes", MaxPushURLLength))
		return
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.Opaque != "":
		v.Add(field, "must be an absolute http:// or https:// URL with a host")
	case u.User != nil:
		v.Add(field, "must not carry user information: send credentials in push.headers")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		v.Add(field, "must not have a fragment")
	}
}

// validate checks the values the push patch sets, fields prefixed "push.".
func (p PushPatch) validate(v *validation.Errors) {
	if p.URL != nil {
		CheckPushURL(v, "push.url", *p.URL)
	}
	if t := p.TimeoutSeconds; t != nil && (*t < MinPushTimeoutSeconds || *t > MaxPushTimeoutSeconds) {
		v.Add("push.timeout_seconds", fmt.Sprintf("must be an integer from %d to %d", MinPushTimeoutSeconds, MaxPushTimeoutSeconds))
	}
	if m := p.MaxInFlight; m != nil && (*m < MinPushMaxInFlight || *m > MaxPushMaxInFlight) {
		v.Add("push.max_in_flight", fmt.Sprintf("must be an integer from %d to %d", MinPushMaxInFlight, MaxPushMaxInFlight))
	}
	if h := p.Headers.Value; p.Headers.Set && h != nil {
		if len(*h) > MaxPushHeaders {
			v.Add("push.headers", fmt.Sprintf("must name at most %d headers", MaxPushHeaders))
		}
		seen := map[string]string{}
		for _, name := range slices.Sorted(maps.Keys(*h)) {
			field := "push.headers." + name
			canonical := textproto.CanonicalMIMEHeaderKey(name)
			switch {
			case !validHeaderName(name):
				v.Add(field, "is not an HTTP header name")
			case reservedHeader(canonical):
				v.Add(field, "is set by the delivery itself and may not be overridden")
			case seen[canonical] != "":
				v.Add(field, "names the same header as "+seen[canonical])
			}
			seen[canonical] = name
			value := (*h)[name]
			if len(value) > MaxPushHeaderValueLength || !validHeaderValue(value) {
				v.Add(field, fmt.Sprintf("must be at most %d bytes without control characters", MaxPushHeaderValueLength))
			}
		}
	}
	if s := p.NonRetryableStatuses.Value; p.NonRetryableStatuses.Set && s != nil {
		for i, code := range *s {
			if code < 100 || code > 599 || (code >= 200 && code < 300) {
				v.Add(fmt.Sprintf("push.non_retryable_statuses[%d]", i), "must be an HTTP status from 100 to 599, not 2xx")
			}
		}
	}
	if o := p.SecretOverlapSeconds; o != nil {
		switch {
		case !p.RotateSecret:
			v.Add("push.secret_overlap_seconds", "is only used with rotate_secret")
		case *o < 0 || *o > MaxSecretOverlapSeconds:
			v.Add("push.secret_overlap_seconds", fmt.Sprintf("must be an integer from 0 to %d (7 days)", MaxSecretOverlapSeconds))
		}
	}
}

// check refuses what the push patch cannot do to cur: turning push on
// without a URL, rotating the secret of a queue that has no push.
func (p PushPatch) check(v *validation.Errors, cur *Push) {
	if cur != nil {
		return
	}
	if p.URL == nil {
		v.Add("push.url", "is required to turn push delivery on")
	}
	if p.RotateSecret {
		v.Add("push.rotate_secret", "the queue has no push delivery (its secret is created with it)")
	}
}

// apply returns cur with the patch's plain fields applied (the defaults
// when cur is nil). Secrets (a new or rotated one, the sealed headers) are
// the caller's: it seals them.
func (p PushPatch) apply(cur *Push) *Push {
	out := cur.Clone()
	if out == nil {
		out = &Push{TimeoutSeconds: DefaultPushTimeoutSeconds, MaxInFlight: DefaultPushMaxInFlight,
			HeaderNames: []string{}, NonRetryableStatuses: DefaultNonRetryableStatuses()}
	}
	if p.URL != nil {
		out.URL = *p.URL
	}
	if p.TimeoutSeconds != nil {
		out.TimeoutSeconds = *p.TimeoutSeconds
	}
	if p.MaxInFlight != nil {
		out.MaxInFlight = *p.MaxInFlight
	}
	if p.Headers.Set {
		out.HeaderNames = []string{}
		if h := p.Headers.Value; h != nil {
			for name := range *h {
				out.HeaderNames = append(out.HeaderNames, textproto.CanonicalMIMEHeaderKey(name))
			}
		}
		slices.Sort(out.HeaderNames)
	}
	if p.NonRetryableStatuses.Set {
		if s := p.NonRetryableStatuses.Value; s != nil {
			out.NonRetryableStatuses = slices.Compact(slices.Sorted(slices.Values(*s)))
			if out.NonRetryableStatuses == nil {
				out.NonRetryableStatuses = []int{}
			}
		} else {
			out.NonRetryableStatuses = DefaultNonRetryableStatuses()
		}
	}
	return out
}

// CanonicalHeaders returns h keyed by canonical header names.
func CanonicalHeaders(h map[string]string) map[string]string {
	out := make(map[string]string, len(h))
	for k, v := range h {
		out[textproto.CanonicalMIMEHeaderKey(k)] = v
	}
	return out
}
