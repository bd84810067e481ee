package task

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
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

func validateSubmit(p *SubmitParams, v *validation.Errors) {
	switch {
	case strings.TrimSpace(p.Queue) == "":
		v.Add("queue", "is required")
	case utf8.RuneCountInString(p.Queue) > MaxQueueLength:
		v.Add("queue", fmt.Sprintf("must be at most %d characters", MaxQueueLength))
	case !validText(p.Queue):
		v.Add("queue", "must not contain control characters")
	}
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
	if p.Deadline != nil && p.RunAt != nil && !p.Deadline.After(*p.RunAt) {
		v.Add("deadline", "must be after run_at")
	}
	if len(p.Payload) > 0 && !json.Valid(p.Payload) {
		v.Add("payload", "must be valid JSON")
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
