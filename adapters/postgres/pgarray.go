package postgres

import (
	"database/sql"
	"database/sql/driver"
	"strconv"
)

// Array parameters with NULL elements, encoded as lib/pq's pq.Array encodes
// a slice of sql.Null* values (the same text, TestNullArraysEncodeAsPQArray)
// but without its reflection and per-element conversions, which took 4% of
// the server's CPU in the batch benchmark (batch inserts and reports send
// 15 such arrays per statement).

// nullTexts is a text[] parameter whose elements may be NULL.
type nullTexts []sql.NullString

// Value implements driver.Valuer.
func (a nullTexts) Value() (driver.Value, error) {
	if a == nil {
		return nil, nil
	}
	n := 2
	for _, v := range a {
		n += len(v.String) + 3
	}
	return string(appendNullArray(make([]byte, 0, n), len(a), func(b []byte, i int) ([]byte, bool) {
		if !a[i].Valid {
			return b, false
		}
		return appendArrayQuoted(b, a[i].String), true
	})), nil
}

// nullInts is an integer array parameter whose elements may be NULL.
type nullInts []sql.NullInt64

// Value implements driver.Valuer.
func (a nullInts) Value() (driver.Value, error) {
	if a == nil {
		return nil, nil
	}
	return string(appendNullArray(make([]byte, 0, 2+6*len(a)), len(a), func(b []byte, i int) ([]byte, bool) {
		return strconv.AppendInt(b, a[i].Int64, 10), a[i].Valid
	})), nil
}

// nullFloats is a float8[] parameter whose elements may be NULL.
type nullFloats []sql.NullFloat64

// Value implements driver.Valuer.
func (a nullFloats) Value() (driver.Value, error) {
	if a == nil {
		return nil, nil
	}
	return string(appendNullArray(make([]byte, 0, 2+6*len(a)), len(a), func(b []byte, i int) ([]byte, bool) {
		return strconv.AppendFloat(b, a[i].Float64, 'f', -1, 64), a[i].Valid
	})), nil
}

// appendNullArray appends the array literal of n elements: elem appends
// element i, or reports false for NULL (what it appended is dropped).
func appendNullArray(b []byte, n int, elem func(b []byte, i int) ([]byte, bool)) []byte {
	b = append(b, '{')
	for i := range n {
		if i > 0 {
			b = append(b, ',')
		}
		mark := len(b)
		var ok bool
		if b, ok = elem(b, i); !ok {
			b = append(b[:mark], "NULL"...)
		}
	}
	return append(b, '}')
}

// appendArrayQuoted appends s as a quoted array element: " and \ are
// escaped with a backslash.
func appendArrayQuoted(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', c)
			start = i + 1
		}
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
