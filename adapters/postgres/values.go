package postgres

import (
	"errors"
	"strings"
	"unicode/utf8"

	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// What PostgreSQL cannot store is the adapter's knowledge: these helpers
// keep such input from reaching a statement, where it would fail as a
// server error although the client sent it.

// storableText reports whether a text column can hold s: valid UTF-8 without
// NUL. A key that fails it names no row, and no row has a name like it.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// jsonValueError translates PostgreSQL's refusal of a client's JSON value
// (valid JSON that jsonb cannot hold: a \u0000 escape, an unpaired
// surrogate, a number beyond numeric's range; all SQLSTATE class 22) into a
// validation error on field. Other errors pass unchanged.
func jsonValueError(err error, field string) error {
	var pqErr *pq.Error
	if !errors.As(err, &pqErr) || pqErr.Code.Class() != "22" {
		return err
	}
	var v validation.Errors
	v.Add(field, `cannot be stored: JSON strings must not contain \u0000 or unpaired surrogates, and numbers must be within PostgreSQL's numeric range`)
	return v.Err()
}
