package postgres_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
)

// The liveness locks' statement carries the worker ids written into its
// text (it shares a message with the plan settings): whatever an id holds,
// quotes, backslashes, braces, commas, the word NULL, it takes exactly the
// lock of that id, as the reaper computes it from the stored id, and
// nothing runs but the statement.
func TestLivenessLocksTakeTheLockOfEveryIDHoweverWritten(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	ids := pq.StringArray{`plain`, `it's`, `back\slash`, `"quoted"`, `{brace},comma`, `NULL`, `ünï`, ` spaced `,
		`E'x'`, `'); DROP TABLE workers; --`, `\'`, `''`}
	slices.Sort(ids)
	q, err := postgres.LivenessLocksSQL(ids)
	require.NoError(t, err)

	tx, err := db.Beginx()
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.Exec(q)
	require.NoError(t, err)

	var held []string
	require.NoError(t, tx.Select(&held, `
		SELECT id FROM unnest($1::text[]) AS id
		WHERE EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
			AND l.mode = 'ShareLock' AND l.classid::bigint = $2 AND l.objid::bigint = hashtext(id)::bigint & 4294967295)
		ORDER BY id`, ids, postgres.WorkerLivenessLock))
	require.Equal(t, []string(ids), held)
	var locks int
	require.NoError(t, tx.Get(&locks, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()`))
	require.Equal(t, len(ids), locks)
	var n int
	require.NoError(t, tx.Get(&n, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'workers'`))
	require.Equal(t, 1, n)
}

// A claim transaction's settings are the report transaction's and
// enable_sort off: sent after the report's, the difference alone pins the
// claim's.
func TestClaimPlanSettingsAreTheReportsAndNoSort(t *testing.T) {
	t.Parallel()
	split := func(s string) []string {
		var out []string
		for _, part := range strings.Split(s, ";") {
			out = append(out, strings.Join(strings.Fields(part), " "))
		}
		slices.Sort(out)
		return out
	}
	want := append(split(postgres.ReportPlanSettings), split(postgres.ClaimOverReportSettings)...)
	slices.Sort(want)
	require.Equal(t, want, split(postgres.ClaimPlanSettings))
}
