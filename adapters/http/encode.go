package http

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// decode reads r's JSON body into dst strictly: unknown fields, wrong types,
// trailing data and malformed JSON are 400; a body over the limit is 413. An
// empty body is accepted when allowEmpty, leaving dst as it is.
func decode(r *http.Request, dst any, allowEmpty bool) error {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return &requestError{kind: kindTooLarge, detail: fmt.Sprintf("the request body exceeds %d bytes", maxErr.Limit)}
		}
		return badRequest("could not read the request body")
	}
	if len(bytes.TrimSpace(body)) == 0 {
		if allowEmpty {
			return nil
		}
		return badRequest("a JSON request body is required")
	}
	if bytes.Equal(bytes.TrimSpace(body), []byte("null")) {
		// Decoding null into a struct would silently do nothing.
		return badRequest("the request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return decodeError(err)
	}
	if dec.More() {
		return badRequest("the request body must hold a single JSON value")
	}
	return nil
}

func decodeError(err error) error {
	var (
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &syntaxErr):
		return badRequest("malformed JSON at byte %d", syntaxErr.Offset)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return badRequest("malformed JSON: unexpected end of input")
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "(body)"
		}
		return &requestError{
			kind:   kindMalformed,
			detail: fmt.Sprintf("field %s must be %s", field, jsonKind(typeErr.Type.String())),
			fields: []validation.FieldError{{Field: field, Message: "must be " + jsonKind(typeErr.Type.String())}},
		}
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		name := strings.Trim(strings.TrimPrefix(err.Error(), "json: unknown field "), `"`)
		return &requestError{
			kind:   kindMalformed,
			detail: fmt.Sprintf("unknown field %q", name),
			fields: []validation.FieldError{{Field: name, Message: "is not a known field"}},
		}
	default:
		// Values that parse as JSON but not as the field's type, such as a
		// malformed time.
		return badRequest("invalid request body: %s", strings.TrimPrefix(err.Error(), "json: "))
	}
}

func jsonKind(goType string) string {
	switch {
	case strings.HasPrefix(goType, "[]"):
		return "an array"
	case strings.Contains(goType, "UUID"):
		return "a UUID string"
	case strings.Contains(goType, "int"), strings.Contains(goType, "float"):
		return "a number"
	case strings.Contains(goType, "string"):
		return "a string"
	case strings.Contains(goType, "bool"):
		return "a boolean"
	case strings.Contains(goType, "Time"):
		return "an RFC 3339 time string"
	default:
		return "an object"
	}
}

// timeValue is an RFC 3339 time in a request. A malformed one fails as a
// type error, so the problem names its field (time.Time's own error does not
// say where it was).
type timeValue struct{ time.Time }

// UnmarshalJSON implements json.Unmarshaler.
func (v *timeValue) UnmarshalJSON(b []byte) error {
	if err := v.Time.UnmarshalJSON(b); err != nil {
		return &json.UnmarshalTypeError{Value: "value " + string(b), Type: reflect.TypeFor[time.Time]()}
	}
	return nil
}

// get returns the time, or nil when the field was absent or null.
func (v *timeValue) get() *time.Time {
	if v == nil {
		return nil
	}
	return &v.Time
}

// uuidValue is a UUID in a request; like timeValue, a malformed one fails as
// a type error naming its field.
type uuidValue struct{ uuid.UUID }

// UnmarshalJSON implements json.Unmarshaler.
func (v *uuidValue) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return &json.UnmarshalTypeError{Value: "value " + string(b), Type: reflect.TypeFor[uuid.UUID]()}
	}
	id, err := uuid.Parse(s)
	if err != nil {
		return &json.UnmarshalTypeError{Value: "string " + s, Type: reflect.TypeFor[uuid.UUID]()}
	}
	v.UUID = id
	return nil
}

// get returns the id, or nil when the field was absent or null.
func (v *uuidValue) get() *uuid.UUID {
	if v == nil {
		return nil
	}
	return &v.UUID
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	writeJSONType(w, status, "application/json", v)
}

func writeJSONType(w http.ResponseWriter, status int, contentType string, v any) {
	w.Header().Set("Content-Type", contentType)
	w.WriteHeader(status)
	switch v := v.(type) {
	case TaskJSON:
		if writeAppended(w, taskBody{&v}) {
			return
		}
	case jsonAppender:
		if writeAppended(w, v) {
			return
		}
	}
	enc := json.NewEncoder(w)
	// JSON for API clients, not for embedding in HTML: escaping <, > and &
	// as \u003c... would make a payload up to six times its stored size,
	// past the response byte cap, which counts stored sizes.
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v) // the client went away; nothing to do
}
