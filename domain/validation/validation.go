// Package validation reports input that breaks a domain rule, field by field,
// without knowing how the input arrived.
package validation

import (
	"sort"
	"strings"
	"unicode/utf8"
)

// FieldError is one offending field and what is wrong with it.
type FieldError struct {
	// Field is the input field's name as the client wrote it (snake_case), or
	// a path such as "tags[3]" or "items[2].queue".
	Field string `json:"field"`
	// Message says what is wrong, for a human.
	Message string `json:"message"`
}

// Error is a set of field errors. Transports map it to 422.
type Error struct {
	// Fields lists every offending field.
	Fields []FieldError
}

// Error implements error.
func (e *Error) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = f.Field + ": " + f.Message
	}
	return "invalid input: " + strings.Join(parts, "; ")
}

// Errors collects field errors; the zero value is ready to use.
type Errors struct {
	fields []FieldError
}

// Add records that field is wrong.
func (v *Errors) Add(field, message string) {
	v.fields = append(v.fields, FieldError{Field: field, Message: message})
}

// Merge adds other's fields, each prefixed with prefix (for batch items).
func (v *Errors) Merge(prefix string, err *Error) {
	for _, f := range err.Fields {
		v.Add(prefix+f.Field, f.Message)
	}
}

// Err returns nil when nothing was added, else an *Error.
func (v *Errors) Err() error {
	if len(v.fields) == 0 {
		return nil
	}
	return &Error{Fields: v.fields}
}

// Text reports whether s is text every layer can carry and store: valid
// UTF-8 without NUL. PostgreSQL's text (in a UTF8 database) holds exactly
// such strings, and refuses any other with an error; the postgres adapter's
// differential fuzz target (FuzzTextAgreesWithPostgreSQL) checks the two
// agree.
func Text(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// TextMessage is what a field that is not Text is told.
const TextMessage = "must be valid UTF-8 text without NUL characters"

// CheckValues adds a field error for every value of values (query
// parameters or form fields, by name) that is not Text, named by its
// parameter, and for every name that is not Text, in name order.
func (v *Errors) CheckValues(values map[string][]string) {
	names := make([]string, 0, len(values))
	for name := range values {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		vs := values[name]
		field := name
		if !Text(name) {
			field = strings.ToValidUTF8(strings.ReplaceAll(name, "\x00", "\uFFFD"), "\uFFFD")
			v.Add(field, "the parameter's name "+TextMessage)
			continue
		}
		for _, s := range vs {
			if !Text(s) {
				v.Add(field, TextMessage)
				break
			}
		}
	}
}
