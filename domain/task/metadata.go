package task

import (
	"fmt"
	"maps"
	"regexp"
	"sort"
	"strconv"
	"unicode/utf8"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// Metadata is free-form data a producer attaches to a task (a tenant, a
// request id): string values by key. It never changes after submission; it
// is shown on every view of the task, carried by its lifecycle events, and
// tasks can be listed and bulk-changed by it (Filter.Metadata).

// Limits of a task's metadata.
const (
	// MaxMetadataKeys is the most keys a task's metadata holds.
	MaxMetadataKeys = 32
	// MaxMetadataKeyLength is the longest key, in characters.
	MaxMetadataKeyLength = 64
	// MaxMetadataValueLength is the longest value, in characters.
	MaxMetadataValueLength = 512
	// MetadataKeySet is the set of characters a key is made of: keys
	// appear in query parameters (metadata.<key>=<value>).
	MetadataKeySet = "[A-Za-z0-9_.-]"
)

var metadataKeyPattern = regexp.MustCompile(`^` + MetadataKeySet + `{1,` + strconv.Itoa(MaxMetadataKeyLength) + `}$`)

// ValidMetadataKey reports whether k is a metadata key: 1 to
// MaxMetadataKeyLength characters of MetadataKeySet.
func ValidMetadataKey(k string) bool { return metadataKeyPattern.MatchString(k) }

// ValidMetadataValue reports whether s is a metadata value: at most
// MaxMetadataValueLength printable characters (no control characters).
func ValidMetadataValue(s string) bool {
	return utf8.RuneCountInString(s) <= MaxMetadataValueLength && validText(s)
}

// CheckMetadata adds to v, under field, what is wrong with m: too many
// keys, a key that is not one, a value too long or with control
// characters. Keys are checked in sorted order, so the errors come in a
// stable order.
func CheckMetadata(v *validation.Errors, field string, m map[string]string) {
	if len(m) > MaxMetadataKeys {
		v.Add(field, fmt.Sprintf("must have at most %d keys", MaxMetadataKeys))
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !ValidMetadataKey(k) {
			v.Add(field, fmt.Sprintf("key %q must be 1 to %d characters of %s", k, MaxMetadataKeyLength, MetadataKeySet))
			continue
		}
		if !ValidMetadataValue(m[k]) {
			v.Add(field+"."+k, fmt.Sprintf("must be at most %d printable characters (no control characters)", MaxMetadataValueLength))
		}
	}
}

// cloneMetadata copies m; an empty map is nil (no metadata).
func cloneMetadata(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return maps.Clone(m)
}

// HasMetadata reports whether the task's metadata holds every pair of m.
func (t *Task) HasMetadata(m map[string]string) bool {
	for k, want := range m {
		if got, ok := t.s.Metadata[k]; !ok || got != want {
			return false
		}
	}
	return true
}
