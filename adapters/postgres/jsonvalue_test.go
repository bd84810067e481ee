package postgres_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// jsonCases are JSON texts at the edges of what jsonb accepts: the seeds of
// the differential fuzz target, and the table of its test.
var jsonCases = []string{
	// Valid, with their renderings' quirks.
	`null`, `true`, `false`, `0`, `-0`, `-0.0`, `1`, `-1`, `0.5`, `1.50`, `1E+2`, `1e-0`, `123456789e-3`,
	`""`, `"a"`, `"\/"`, `"\""`, `"\\"`, `"\b\f\n\r\t"`, `"\u0001\u001f\u007f"`, `"\u00e9"`, `"é"`,
	`"\ud83d\ude00"`, `"😀"`, `"\uFFFF"`, `"\u2028"`, " \t\n\r[1]\r\n\t ",
	`[]`, `{}`, `[1,2,{"b":[]}]`, `{"a":1,"a":22}`, `{"a":1,"b":{"a":[1,{"a":2}]},"a":{"x":"y"}}`,
	`{"\u0061":1,"a":2}`, `{"é":1,"\u00e9":2}`, `[[[[[[[[[[]]]]]]]]]]`, `{"": ""}`,
	// numeric's range: 131072 digits before the point, 16383 after.
	`1e131071`, `9.9e131071`, `-1e131071`, `0.00001e131076`, `1e-16383`, `0e-16383`, `0e1000000`,
	`0e1073741822`, `1.5e-16382`, `1e-0000000000000000000016383`,
	// Not storable.
	`1e131072`, `10e131071`, `1e1000000`, `-1e-1000000`, `1e-16384`, `1.5e-16383`, `0.0e-16383`,
	`0e-1000000`, `0e1073741823`, `0e-1073741823`, `1e99999999999999999999`, `[0e-16384]`,
	`"\u0000"`, `{"\u0000": 1}`, `"a\u0000b"`, `"\ud800"`, `"\udc00"`, `"\ude00\ud83d"`, `"a\ud800"`,
	`"\ud800\u0041"`, `"\ud800\ud800\udc00"`, `"\ud800x"`, `"\ud800\n"`, `{"k": ["\udfff"]}`,
	// Not JSON.
	``, ` `, `01`, `1.`, `.5`, `+1`, `1e`, `-`, `--1`, `1e+`, `[1,]`, `{"a"}`, `{"a":1,}`, `[1 2]`,
	`truex`, `nul`, `"unterminated`, `"\x"`, `"\u12"`, `"\u12G4"`, "\"tab\there\"", `{1:2}`, `[`, `]`,
	"\"\xff\"", "\xef\xbb\xbf1", "1\x00", `'a'`, `NaN`, `Infinity`, `1 1`,
}

// TestJSONStoredSizeAgreesWithPostgreSQL checks JSONStoredSize against
// SELECT $1::jsonb on the real database: it accepts exactly what jsonb
// accepts, and its length is the rendering's.
func TestJSONStoredSizeAgreesWithPostgreSQL(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	for _, raw := range jsonCases {
		compareWithJSONB(t, db, []byte(raw))
	}
	// Long values, built rather than listed.
	for _, raw := range []string{
		"1" + strings.Repeat("0", 131071), "1" + strings.Repeat("0", 131072),
		"0." + strings.Repeat("0", 16382) + "1", "0." + strings.Repeat("0", 16383) + "1",
		"0." + strings.Repeat("0", 16383), "0." + strings.Repeat("0", 16384),
		strings.Repeat("[", 300) + strings.Repeat("]", 300),
		`{"a":` + strings.Repeat(`{"a":`, 400) + "1" + strings.Repeat("}", 401),
		`"` + strings.Repeat(`\u0001\"é\ud83d\ude00`, 1000) + `"`,
	} {
		compareWithJSONB(t, db, []byte(raw))
	}
}

// The policy limits refuse what PostgreSQL might accept.
func TestJSONStoredSizePolicyLimits(t *testing.T) {
	t.Parallel()
	deep := strings.Repeat("[", postgres.MaxJSONDepth+1) + strings.Repeat("]", postgres.MaxJSONDepth+1)
	_, err := postgres.JSONStoredSize([]byte(deep))
	require.ErrorContains(t, err, "levels deep")
	n, err := postgres.JSONStoredSize([]byte(deep[1 : len(deep)-1]))
	require.NoError(t, err)
	require.Equal(t, int64(2*postgres.MaxJSONDepth), n)

	// 300 numbers of 131,072 digits written out in full: 39 MB of JSON,
	// 39 MB stored.
	big := "[" + strings.TrimSuffix(strings.Repeat("1"+strings.Repeat("0", 131071)+",", 300), ",") + "]"
	_, err = postgres.JSONStoredSize([]byte(big))
	require.ErrorContains(t, err, "once stored")
}

// A number whose stored form is more than MaxNumberGrowth bytes longer than
// its text is refused, naming it; every float64, in any notation, fits, and
// so does a long number written out.
func TestJSONStoredSizeRefusesNumbersThatGrowFar(t *testing.T) {
	t.Parallel()
	for _, raw := range []string{`1e131071`, `[1, {"a": -9.9e410}]`, `1e-410`, `{"k": [0.5e412]}`} {
		_, err := postgres.JSONStoredSize([]byte(raw))
		var growth *postgres.NumberGrowthError
		require.ErrorAs(t, err, &growth, raw)
		require.Greater(t, growth.Stored-growth.Written, int64(postgres.MaxNumberGrowth))
		require.Contains(t, err.Error(), growth.Number)
	}
	_, err := postgres.JSONStoredSize([]byte(`1e131071`))
	require.ErrorContains(t, err, "1e131071 is 8 bytes written and 131072 stored")
	for _, raw := range []string{`1.7976931348623157e308`, `-1.7976931348623157e308`, `5e-324`, `4.9406564584124654e-324`,
		`2.2250738585072014e-308`, `1e400`, `1e-397`, "1" + strings.Repeat("0", 100000), `0e1000000`, `[1e300, 1e300, 1e300]`} {
		n, err := postgres.JSONStoredSize([]byte(raw))
		require.NoError(t, err, raw)
		require.Positive(t, n)
	}
}

func FuzzJSONStoredSizeAgreesWithPostgreSQL(f *testing.F) {
	for _, raw := range jsonCases {
		f.Add([]byte(raw))
	}
	db := pgtest.NewDB(f)
	f.Fuzz(func(t *testing.T, raw []byte) {
		compareWithJSONB(t, db, raw)
	})
}

// compareWithJSONB requires the mirror of jsonb's rule (JSONRenderedSize:
// JSONStoredSize without its size policies) and PostgreSQL to agree on raw,
// and JSONStoredSize to accept what the mirror accepts, or to refuse it
// for a size policy only. Values deeper than the depth policy are not sent:
// PostgreSQL may accept them.
func compareWithJSONB(t testing.TB, db *sqlx.DB, raw []byte) {
	t.Helper()
	n, goErr := postgres.JSONRenderedSize(raw)
	if goErr != nil && strings.Contains(goErr.Error(), "levels deep") {
		return
	}
	if stored, err := postgres.JSONStoredSize(raw); goErr != nil {
		require.Error(t, err, "%q: the policy accepts what the mirror refuses", raw)
	} else if err == nil {
		require.Equal(t, n, stored, "%q", raw)
	} else {
		var growth *postgres.NumberGrowthError
		require.True(t, errors.As(err, &growth) || strings.Contains(err.Error(), "once stored"),
			"%q: refused for %v, not a size policy", raw, err)
	}
	var pgLen int64
	pgErr := db.Get(&pgLen, `SELECT octet_length($1::jsonb::text)`, string(raw))
	var pqErr *pq.Error
	if pgErr != nil && !(errors.As(pgErr, &pqErr) && pqErr.Code.Class() == "22") {
		t.Fatalf("%q: PostgreSQL failed otherwise than refusing the value: %v", raw, pgErr)
	}
	switch {
	case goErr == nil && pgErr != nil:
		t.Fatalf("%q: JSONStoredSize accepts (%d bytes) what jsonb refuses: %v", raw, n, pgErr)
	case goErr != nil && pgErr == nil:
		t.Fatalf("%q: JSONStoredSize refuses (%v) what jsonb accepts", raw, goErr)
	case goErr == nil && n != pgLen:
		t.Fatalf("%q: JSONStoredSize says %d bytes, jsonb renders %d", raw, n, pgLen)
	}
}
