package postgres

import (
	"database/sql"
	"encoding/json"

	"github.com/taskmaster/taskmaster/domain/validation"
)

// What PostgreSQL cannot store is the adapter's knowledge: these helpers
// keep such input from reaching a statement, where it would fail as a
// server error although the client sent it.

// storableText reports whether a text column can hold s: valid UTF-8 without
// NUL (validation.Text; FuzzTextAgreesWithPostgreSQL checks it against the
// database). A key that fails it names no row, and no row has a name like
// it.
func storableText(s string) bool { return validation.Text(s) }

// StoredJSONSize implements ports.TaskStore (see JSONStoredSize).
func (s *TaskStore) StoredJSONSize(raw json.RawMessage) (int64, error) {
	return JSONStoredSize(raw)
}

// jsonBytes is the length of the text PostgreSQL renders for a JSON value
// about to be written (payload_bytes, result_bytes), NULL for no value.
func jsonBytes(raw json.RawMessage) (sql.NullInt64, error) {
	if len(raw) == 0 {
		return sql.NullInt64{}, nil
	}
	n, err := JSONStoredSize(raw)
	if err != nil {
		return sql.NullInt64{}, err
	}
	return sql.NullInt64{Int64: n, Valid: true}, nil
}
