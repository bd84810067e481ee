package postgres

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"
)

// dbFields are the addresses of the fields of the struct at v (a pointer)
// by their db tag, embedded structs included, as sqlx maps them.
func dbFields(v reflect.Value, out map[string]uintptr) {
	e := v.Elem()
	for i := range e.NumField() {
		f := e.Type().Field(i)
		if tag := f.Tag.Get("db"); tag != "" {
			out[tag] = e.Field(i).Addr().Pointer()
		} else if f.Anonymous {
			dbFields(e.Field(i).Addr(), out)
		}
	}
}

func requireFieldsMatch[R any](t *testing.T, fields rowFields[R]) {
	t.Helper()
	var r R
	want := map[string]uintptr{}
	dbFields(reflect.ValueOf(&r), want)
	got := map[string]uintptr{}
	for name, f := range fields {
		got[name] = reflect.ValueOf(f(&r)).Pointer()
	}
	require.Equal(t, want, got)
}

func TestRowFieldsMatchTheDBTags(t *testing.T) {
	t.Parallel()
	requireFieldsMatch(t, taskRowFields)
	requireFieldsMatch(t, taskRowNowFields)
	requireFieldsMatch(t, claimedRowFields)
	requireFieldsMatch(t, completedRowFields)
	requireFieldsMatch(t, workerRowFields)
	requireFieldsMatch(t, workerRowNowFields)
}
