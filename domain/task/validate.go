package task

import (
	"encoding/json"
	"fmt"
	"math"
	"time"
	"unicode/utf8"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// ValidateSubmit checks a submission and fills its defaults (max_attempts
// when absent, de-duplicated tags): an explicit value is checked, never
// replaced. It returns a *validation.Error listing every offending
// field, or nil.
func ValidateSubmit(p *SubmitParams) error {
	var v validation.Errors
	validateSubmit(p, &v)
	return v.Err()
}

// QueueNameSet is the set of characters a queue name is made of: queue
// names become Prometheus label values and URL path segments, so no '/',
// whitespace, control or non-ASCII characters.
const QueueNameSet = "[A-Za-z0-9._:-]"

// ValidQueue reports whether name is a queue name: 1 to MaxQueueLength
// characters of QueueNameSet. (Checked by hand: every task of a batch
// submit checks its queue, and the regular expression it replaces took a
// twentieth of the server's CPU in the batch benchmark.)
func ValidQueue(name string) bool {
	if len(name) == 0 || len(name) > MaxQueueLength {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '-':
		default:
			return false
		}
	}
	return true
}

// CheckQueue adds to v when the queue name in field is not one.
func CheckQueue(v *validation.Errors, field, name string) {
	if !ValidQueue(name) {
		v.Add(field, fmt.Sprintf("must be 1 to %d characters of %s", MaxQueueLength, QueueNameSet))
	}
}

func validateSubmit(p *SubmitParams, v *validation.Errors) {
	CheckQueue(v, "queue", p.Queue)
	if p.MaxAttempts == nil {
		n := DefaultMaxAttempts
		p.MaxAttempts = &n
	} else if *p.MaxAttempts < 1 || *p.MaxAttempts > MaxMaxAttempts {
		v.Add("max_attempts", fmt.Sprintf("must be between 1 and %d", MaxMaxAttempts))
	}
	if p.Priority < math.MinInt32 || p.Priority > math.MaxInt32 {
		v.Add("priority", "must fit in a 32-bit signed integer")
	}
	if len(p.Tags) > MaxTags {
		v.Add("tags", fmt.Sprintf("must have at most %d tags", MaxTags))
	}
	seen := make(map[string]bool, len(p.Tags))
	tags := make([]string, 0, len(p.Tags))
	for i, tag := range p.Tags {
		n := utf8.RuneCountInString(tag)
		if n < 1 || n > MaxTagLength || !validText(tag) {
			v.Add(fmt.Sprintf("tags[%d]", i), fmt.Sprintf("must be 1 to %d printable characters", MaxTagLength))
			continue
		}
		if !seen[tag] {
			seen[tag] = true
			tags = append(tags, tag)
		}
	}
	p.Tags = tags
	if len(p.IdempotencyKey) > MaxIdempotencyKeyLength || !validText(p.IdempotencyKey) {
		v.Add("idempotency_key", fmt.Sprintf("must be at most %d printable bytes", MaxIdempotencyKeyLength))
	}
	if k := p.GroupKey; k != nil && (utf8.RuneCountInString(*k) < 1 || utf8.RuneCountInString(*k) > MaxGroupKeyLength || !validText(*k)) {
		v.Add("group_key", fmt.Sprintf("must be 1 to %d printable characters (no control characters)", MaxGroupKeyLength))
	}
	if k := p.UniqueKey; k != nil && (len(*k) < 1 || len(*k) > MaxUniqueKeyLength || !validText(*k)) {
		v.Add("unique_key", fmt.Sprintf("must be 1 to %d bytes of printable UTF-8 (no control characters)", MaxUniqueKeyLength))
	}
	checkRetry(v, p.Retry)
	checkWindows(v, p)
	if p.TimeoutSeconds != nil {
		CheckTimeoutSeconds(v, "timeout_seconds", *p.TimeoutSeconds)
	}
	CheckMetadata(v, "metadata", p.Metadata)
	CheckTrace(v, "", p.Trace)
	checkTime(v, "run_at", p.RunAt)
	checkTime(v, "deadline", p.Deadline)
	if p.Deadline != nil && p.RunAt != nil && !p.Deadline.After(*p.RunAt) {
		v.Add("deadline", "must be after run_at")
	}
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		v.Add("payload", "must be valid JSON")
	}
}

// The range of times a task keeps: what every response can carry (RFC 3339
// has four-digit years; responses are in UTC, so an offset can carry a time
// past them) and what storage keeps exactly (microseconds: anything later
// than LatestTime would round to the year 10000).
var (
	EarliestTime = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)
	LatestTime   = time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC)
)

func checkTime(v *validation.Errors, field string, t *time.Time) {
	if t != nil && (t.Before(EarliestTime) || t.After(LatestTime)) {
		v.Add(field, "must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z")
	}
}

// MaxRequestIDLength is the longest claim request id.
const MaxRequestIDLength = 128

// RequestIDSet is the set of characters of a claim request id: printable
// ASCII without the space (UUIDs, ULIDs, base64 all fit).
const RequestIDSet = "[!-~]"

// ValidRequestID reports whether id is a claim request id: 1 to
// MaxRequestIDLength characters of RequestIDSet (checked by hand, as
// ValidQueue).
func ValidRequestID(id string) bool {
	if len(id) == 0 || len(id) > MaxRequestIDLength {
		return false
	}
	for i := 0; i < len(id); i++ {
		if id[i] < '!' || id[i] > '~' {
			return false
		}
	}
	return true
}

// CheckRequestID adds to v when the request id in field is not one.
func CheckRequestID(v *validation.Errors, field, id string) {
	if !ValidRequestID(id) {
		v.Add(field, fmt.Sprintf("must be 1 to %d printable ASCII characters other than space (%s)", MaxRequestIDLength, RequestIDSet))
	}
}

func validText(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}
