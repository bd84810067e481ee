package postgres

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// What PostgreSQL cannot store is the adapter's knowledge: these helpers
// keep such input from reaching a statement, where it would fail as a
// server error although the client sent it.

// storableText reports whether a text column can hold s: valid UTF-8 without
// NUL. A key that fails it names no row, and no row has a name like it.
func storableText(s string) bool {
	return utf8.ValidString(s) && !strings.ContainsRune(s, 0)
}

// CheckJSON implements ports.TaskStore (see JSONStoredSize).
func (s *TaskStore) CheckJSON(raw json.RawMessage) error {
	_, err := JSONStoredSize(raw)
	return err
}
