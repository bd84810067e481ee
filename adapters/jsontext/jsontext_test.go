package jsontext

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// encode is what encoding/json writes for v, without the newline.
func encode(t testing.TB, v any, escapeHTML bool) string {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(escapeHTML)
	require.NoError(t, enc.Encode(v))
	return strings.TrimSuffix(buf.String(), "\n")
}

var stringCases = []string{"", "plain", `quote " and \ backslash`, "<script>&amp;</script>", "tab\tnew\nline\r\b\f",
	"\x00\x01\x1f\x7f", "é ü 日本", "\u2028 and \u2029", "bad \xff\xfe utf-8", "\xe2\x80", "emoji 🙂"}

func TestAppendStringMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, s := range stringCases {
		for _, html := range []bool{false, true} {
			require.Equal(t, encode(t, s, html), string(AppendString(nil, s, html)), "%q, HTML escaping %v", s, html)
		}
	}
}

func FuzzAppendString(f *testing.F) {
	for _, s := range stringCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, html := range []bool{false, true} {
			if got, want := string(AppendString(nil, s, html)), encode(t, s, html); got != want {
				t.Fatalf("%q (HTML escaping %v): got %s, encoding/json writes %s", s, html, got, want)
			}
		}
	})
}

var floatCases = []float64{0, 1, -1, 0.5, 1.0 / 3, 123456789.125, 1e-6, 9.99999e-7, 1e-7, 1.5e-9, 1e20, 1e21, 1.2345e22,
	-1e-300, math.MaxFloat64, math.SmallestNonzeroFloat64, 0.000123, 42.000001}

func TestAppendFloatMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, f := range floatCases {
		require.True(t, FloatOK(f))
		require.Equal(t, encode(t, f, true), string(AppendFloat(nil, f)), "%v", f)
	}
	for _, f := range []float64{math.NaN(), math.Inf(1), math.Inf(-1)} {
		require.False(t, FloatOK(f))
		_, err := json.Marshal(f)
		require.Error(t, err, "encoding/json refuses it too")
	}
}

func FuzzAppendFloat(f *testing.F) {
	for _, v := range floatCases {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v float64) {
		if !FloatOK(v) {
			return
		}
		if got, want := string(AppendFloat(nil, v)), encode(t, v, true); got != want {
			t.Fatalf("%v: got %s, encoding/json writes %s", v, got, want)
		}
	})
}

func TestAppendTimeMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	for _, tm := range []time.Time{time.Date(2026, 11, 26, 15, 4, 5, 123456000, time.UTC), time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", 3600)),
		time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC), time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)} {
		require.True(t, TimeOK(tm))
		require.Equal(t, encode(t, tm, true), string(AppendTime(nil, tm)))
	}
	tm := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	require.False(t, TimeOK(tm))
	_, err := json.Marshal(tm)
	require.Error(t, err, "encoding/json refuses it too")
}
