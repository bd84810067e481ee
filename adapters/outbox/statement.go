package outbox

import (
	"strconv"
	"strings"
	"time"

	"github.com/lib/pq"
)

// statement builds one SQL statement out of common table expressions, with
// its arguments numbered as they are added. The projections write all their
// tables with one statement per batch: a statement is applied entirely or not
// at all, even if the subscriber's transaction ends while it runs
// (watermill-sql commits a batch when its ack deadline passes, whether or not
// the handler is done).
type statement struct {
	b      strings.Builder
	args   []any
	ctes   int
	result []string
}

// arg adds an argument and returns its placeholder.
func (s *statement) arg(v any) string {
	s.args = append(s.args, v)
	return "$" + strconv.Itoa(len(s.args))
}

// with adds the common table expression body and returns its name.
func (s *statement) with(body string) string {
	name := "w" + strconv.Itoa(s.ctes)
	if s.ctes == 0 {
		s.b.WriteString("WITH ")
	} else {
		s.b.WriteString(",\n")
	}
	s.ctes++
	s.b.WriteString(name + " AS (\n" + body + "\n)")
	return name
}

// returning makes the statement return how many rows the expression name
// returned, as the next column of its one result row.
func (s *statement) returning(name string) {
	s.result = append(s.result, "(SELECT count(*) FROM "+name+")")
}

// empty reports whether nothing was added.
func (s *statement) empty() bool { return s.ctes == 0 }

// sql returns the statement's text.
func (s *statement) sql() string {
	if len(s.result) == 0 {
		return s.b.String() + "\nSELECT 1"
	}
	return s.b.String() + "\nSELECT " + strings.Join(s.result, ", ")
}

// column is one column of rows to insert: an array argument and its SQL
// array type.
type column struct {
	array any
	typ   string
}

func texts(v []string) column    { return column{pq.StringArray(v), "text[]"} }
func bigints(v []int64) column   { return column{pq.Int64Array(v), "bigint[]"} }
func float8s(v []float64) column { return column{pq.Float64Array(v), "float8[]"} }
func ints(v []int) column {
	out := make(pq.Int64Array, len(v))
	for i, n := range v {
		out[i] = int64(n)
	}
	return column{out, "integer[]"}
}

func timestamps(v []time.Time) column {
	out := make(pq.StringArray, len(v))
	for i, t := range v {
		out[i] = t.Format(time.RFC3339Nano)
	}
	return column{out, "timestamptz[]"}
}

// insert adds an expression that inserts rows given column by column:
//
//	<into>
//	SELECT * FROM unnest(<columns>) [WHERE EXISTS (SELECT FROM <guard>)]
//	<conflict>
//
// into is the INSERT INTO clause with the table name written out (so that
// searching the code for "INSERT INTO <table>" finds its writer), conflict
// the ON CONFLICT clause (or ""), guard the name of an expression that must
// return a row for anything to be written ("" for none). It does nothing
// when there are no rows.
func (s *statement) insert(into, conflict, guard string, rows int, columns ...column) {
	if rows == 0 {
		return
	}
	params := make([]string, len(columns))
	for i, c := range columns {
		params[i] = s.arg(c.array) + "::" + c.typ
	}
	body := into + "\nSELECT * FROM unnest(" + strings.Join(params, ", ") + ")"
	if guard != "" {
		body += " WHERE EXISTS (SELECT FROM " + guard + ")"
	}
	if conflict != "" {
		body += "\n" + conflict
	}
	s.with(body)
}

// deltas accumulates additions to the rows of one table, so that each row
// is written once per statement (ON CONFLICT cannot touch a row twice), in
// the order the keys first appeared.
type deltas[K comparable, V int64 | float64] struct {
	order []K
	sum   map[K]V
}

func (d *deltas[K, V]) add(k K, v V) {
	if d.sum == nil {
		d.sum = map[K]V{}
	}
	if _, ok := d.sum[k]; !ok {
		d.order = append(d.order, k)
	}
	d.sum[k] += v
}

// each calls fn with every non-zero delta and returns how many there were.
func (d *deltas[K, V]) each(fn func(k K, v V)) int {
	n := 0
	for _, k := range d.order {
		if v := d.sum[k]; v != 0 {
			fn(k, v)
			n++
		}
	}
	return n
}
