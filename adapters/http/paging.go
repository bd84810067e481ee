package http

import (
	"net/url"
	"strconv"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// The paging parameters every listing shares: limit and cursor. An empty
// parameter (limit=) is the same as an absent one; a limit that is not an
// integer, or a cursor this API did not return, is a field error (422).

// pageLimitOf reads limit: nil when absent.
func pageLimitOf(values url.Values, v *validation.Errors) *int {
	raw := values.Get("limit")
	if raw == "" {
		return nil
	}
	n, err := strconv.Atoi(raw)
	if err != nil {
		v.Add("limit", "must be an integer")
	}
	return &n
}

// pageCursorOf reads cursor with the listing's decode: nil when absent.
func pageCursorOf[T any](values url.Values, v *validation.Errors, decode func(string) (T, error)) *T {
	raw := values.Get("cursor")
	if raw == "" {
		return nil
	}
	after, err := decode(raw)
	if err != nil {
		v.Add("cursor", "is not a cursor this API returned")
	}
	return &after
}
