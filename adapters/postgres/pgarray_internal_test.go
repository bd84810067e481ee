package postgres

import (
	"database/sql"
	"math"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"
)

func TestNullArraysEncodeAsPQArray(t *testing.T) {
	t.Parallel()
	texts := [][]sql.NullString{nil, {}, {{}}, {{Valid: true}}, {
		{String: "plain", Valid: true}, {}, {String: `q"uo\te\\"`, Valid: true}, {String: "NULL", Valid: true},
		{String: "{a,b} é ✓ \n\t", Valid: true}, {String: "ignored", Valid: false}, {String: `{"json": [1, "x"]}`, Valid: true},
	}}
	for _, a := range texts {
		want, err := pq.Array(a).Value()
		require.NoError(t, err)
		got, err := nullTexts(a).Value()
		require.NoError(t, err)
		require.Equal(t, want, got, "%q", a)
	}
	ints := [][]sql.NullInt64{nil, {}, {{}}, {{Int64: 0, Valid: true}, {Int64: -5, Valid: true}, {Int64: 7}, {Int64: math.MaxInt64, Valid: true}, {Int64: math.MinInt64, Valid: true}}}
	for _, a := range ints {
		want, err := pq.Array(a).Value()
		require.NoError(t, err)
		got, err := nullInts(a).Value()
		require.NoError(t, err)
		require.Equal(t, want, got, "%v", a)
	}
	floats := [][]sql.NullFloat64{nil, {}, {{}}, {{Float64: 0.1, Valid: true}, {Float64: 1e21, Valid: true}, {Float64: 1e-7, Valid: true}, {Float64: 3}, {Float64: -2.5, Valid: true}, {Float64: 30, Valid: true}}}
	for _, a := range floats {
		want, err := pq.Array(a).Value()
		require.NoError(t, err)
		got, err := nullFloats(a).Value()
		require.NoError(t, err)
		require.Equal(t, want, got, "%v", a)
	}
}
