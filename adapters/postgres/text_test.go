package postgres_test

import (
	"errors"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// textCases are strings at the edges of what PostgreSQL's text holds: the
// seeds of the differential fuzz target, and the table of its test.
var textCases = []string{
	"", "a", "é", "😀", "\u2028", "\uFFFD", "\uFFFF", "\x7f", "\x01\x1f", "tab\there",
	"\x00", "a\x00b", "\xff", "\xfe\xff", "\xc3", "\xc3(", "\xe2\x82", "\xed\xa0\x80", "\xed\xbf\xbf",
	"\xf4\x90\x80\x80", "\xc0\xaf", "\xf8\x88\x80\x80\x80", "ok\xff", "\xef\xbb\xbf",
}

// TestTextAgreesWithPostgreSQL checks validation.Text against the real
// database's text: it accepts exactly what SELECT $1::text accepts.
func TestTextAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for _, s := range textCases {
		compareWithText(t, db, s)
	}
}

func FuzzTextAgreesWithPostgreSQL(f *testing.F) {
	for _, s := range textCases {
		f.Add(s)
	}
	db := pgtest.NewDB(f)
	f.Fuzz(func(t *testing.T, s string) {
		compareWithText(t, db, s)
	})
}

// compareWithText requires validation.Text and PostgreSQL to agree on s.
func compareWithText(t testing.TB, db *sqlx.DB, s string) {
	t.Helper()
	var n int
	pgErr := db.Get(&n, `SELECT octet_length($1::text)`, s)
	var pqErr *pq.Error
	if pgErr != nil && !(errors.As(pgErr, &pqErr) && pqErr.Code.Class() == "22") {
		t.Fatalf("%q: PostgreSQL failed otherwise than refusing the text: %v", s, pgErr)
	}
	switch ok := validation.Text(s); {
	case ok && pgErr != nil:
		t.Fatalf("%q: validation.Text accepts what PostgreSQL refuses: %v", s, pgErr)
	case !ok && pgErr == nil:
		t.Fatalf("%q: validation.Text refuses what PostgreSQL accepts", s)
	case ok && n != len(s):
		t.Fatalf("%q: PostgreSQL stored %d bytes of %d", s, n, len(s))
	}
}
