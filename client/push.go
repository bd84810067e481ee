package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"
)

// Push queues (docs/api.md "Push queues"): the server delivers their tasks
// to an HTTP endpoint instead of workers claiming them.

// PushSettings are a push queue's delivery as the server shows it: the
// static headers by name only, the signing secret never (but in the answer
// of the change that created or rotated it, as Secret).
type PushSettings struct {
	URL            string `json:"url"`
	TimeoutSeconds int    `json:"timeout_seconds"`
	// MaxInFlight caps the deliveries in flight across every instance.
	MaxInFlight int      `json:"max_in_flight"`
	HeaderNames []string `json:"header_names"`
	// NonRetryableStatuses dead-letter the task at once.
	NonRetryableStatuses []int `json:"non_retryable_statuses"`
	// SecretRotatedAt is when the signing secret was created or rotated.
	SecretRotatedAt time.Time `json:"secret_rotated_at"`
	// PreviousSecretExpiresAt is until when the secret the last rotation
	// replaced still signs deliveries (nil: none does).
	PreviousSecretExpiresAt *time.Time `json:"previous_secret_expires_at"`
	// Secret is the new signing secret, in the answer of UpdateQueue that
	// created or rotated it only: keep it, it is never shown again.
	Secret string `json:"secret,omitempty"`
}

// PushPatch turns push delivery on (URL required) or changes it: a zero
// field keeps the queue's value (its default when turning push on).
type PushPatch struct {
	URL string
	// TimeoutSeconds bounds one delivery (1-900; default 30).
	TimeoutSeconds int
	// MaxInFlight caps the deliveries in flight (1-10,000; default 10).
	MaxInFlight int
	// Headers replaces the static headers (secret: never shown again);
	// ClearHeaders removes them all.
	Headers      map[string]string
	ClearHeaders bool
	// NonRetryableStatuses replaces the statuses that dead-letter at once;
	// DefaultNonRetryable restores the default (400, 401, 403, 404, 410,
	// 422).
	NonRetryableStatuses []int
	DefaultNonRetryable  bool
	// RotateSecret asks for a new signing secret; the old one keeps
	// signing for SecretOverlap (nil: 24 h; 0: not at all).
	RotateSecret  bool
	SecretOverlap *time.Duration
}

// request is p as the PATCH's push object (nil for nil).
func (p *PushPatch) request() map[string]any {
	if p == nil {
		return nil
	}
	out := map[string]any{}
	if p.URL != "" {
		out["url"] = p.URL
	}
	if p.TimeoutSeconds != 0 {
		out["timeout_seconds"] = p.TimeoutSeconds
	}
	if p.MaxInFlight != 0 {
		out["max_in_flight"] = p.MaxInFlight
	}
	switch {
	case p.ClearHeaders:
		out["headers"] = nil
	case p.Headers != nil:
		out["headers"] = p.Headers
	}
	switch {
	case p.DefaultNonRetryable:
		out["non_retryable_statuses"] = nil
	case p.NonRetryableStatuses != nil:
		out["non_retryable_statuses"] = p.NonRetryableStatuses
	}
	if p.RotateSecret {
		out["rotate_secret"] = true
		if p.SecretOverlap != nil {
			out["secret_overlap_seconds"] = int(p.SecretOverlap.Seconds())
		}
	}
	return out
}

// Deliveries summarize a push queue's recent deliveries, as every
// instance's dispatcher reported them in the last minute.
type Deliveries struct {
	// InFlight are the deliveries in flight, summed over the instances.
	InFlight int `json:"in_flight"`
	// Recent is how many recent deliveries the figures sum up.
	Recent int `json:"recent"`
	// Statuses counts them by answer status ("none": no answer).
	Statuses map[string]int `json:"statuses"`
	// LastStatus is the latest reported delivery's status (nil: none).
	LastStatus *int `json:"last_status"`
	// LatencyMillis holds the percentiles "p50" and "p99".
	LatencyMillis map[string]float64 `json:"latency_ms"`
	AsOf          time.Time          `json:"as_of"`
}

// Headers of a push delivery.
const (
	// HeaderTaskID names the task delivered: delivery is at least once, so
	// an endpoint deduplicates on it.
	HeaderTaskID = "Taskmaster-Task-Id"
	// HeaderAttempt is the delivery's attempt number.
	HeaderAttempt = "Taskmaster-Attempt"
	// HeaderQueue is the task's queue.
	HeaderQueue = "Taskmaster-Queue"
	// HeaderSignature signs the delivery (see VerifySignature).
	HeaderSignature = "Taskmaster-Signature"
)

// DefaultSignatureTolerance is how far a signature's time may be from now.
const DefaultSignatureTolerance = 5 * time.Minute

// Errors of VerifySignature.
var (
	// ErrSignatureMalformed: the header is not t=<unix>,v1=<hex>[,v1=...].
	ErrSignatureMalformed = errors.New("taskmaster: malformed Taskmaster-Signature")
	// ErrSignatureExpired: its time is further than the tolerance from now
	// (a replay, or clocks apart).
	ErrSignatureExpired = errors.New("taskmaster: Taskmaster-Signature outside the tolerance")
	// ErrSignatureMismatch: no v1 matches the secret and the body.
	ErrSignatureMismatch = errors.New("taskmaster: Taskmaster-Signature does not match")
)

// VerifySignature checks a push delivery's Taskmaster-Signature header
// against the raw request body and the queue's secret: the header's time
// must lie within tolerance of now (0: DefaultSignatureTolerance), and one
// of its v1 values must be the hex HMAC-SHA256, keyed with the secret, of
// "<t>.<body>" (while a rotation's overlap lasts the header carries one
// per secret; either secret verifies). Pass the body exactly as received.
func VerifySignature(secret, header string, body []byte, tolerance time.Duration) error {
	if tolerance <= 0 {
		tolerance = DefaultSignatureTolerance
	}
	var (
		ts   string
		sigs []string
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		switch {
		case !ok:
			return ErrSignatureMalformed
		case k == "t":
			ts = v
		case k == "v1":
			sigs = append(sigs, v)
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return ErrSignatureMalformed
	}
	if d := time.Since(time.Unix(t, 0)); d > tolerance || d < -tolerance {
		return ErrSignatureExpired
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts))
	mac.Write([]byte{'.'})
	mac.Write(body)
	want := []byte(hex.EncodeToString(mac.Sum(nil)))
	for _, s := range sigs {
		if hmac.Equal([]byte(s), want) {
			return nil
		}
	}
	return ErrSignatureMismatch
}
