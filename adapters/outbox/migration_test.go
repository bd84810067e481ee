package outbox

import (
	"context"
	"io/fs"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/migrations"
)

// applyMigrations runs the migration files whose names pass keep, in order,
// on conn.
func applyMigrations(t *testing.T, ctx context.Context, conn *sqlx.Conn, keep func(name string) bool) {
	t.Helper()
	names, err := fs.Glob(migrations.FS, "*.sql")
	require.NoError(t, err)
	sort.Strings(names)
	for _, name := range names {
		if !keep(name) {
			continue
		}
		sql, err := fs.ReadFile(migrations.FS, name)
		require.NoError(t, err)
		_, err = conn.ExecContext(ctx, string(sql))
		require.NoError(t, err, name)
	}
}

// Migration 0006 on a database the previous version ran: one consumer group
// for both projections, starting at the slower of the old two (each
// projection keeps its position), the old groups gone (they would pin the
// outbox), and created_at a timestamptz holding the same instants, read in
// the zone they were written in.
func TestMigrationToOneConsumerGroupAndTimestamptz(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db, err := sqlx.Open("postgres", pgtest.NewEmptyDatabase(t))
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	conn, err := db.Connx(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, `SET TimeZone = 'Europe/Paris'`)
	require.NoError(t, err)
	applyMigrations(t, ctx, conn, func(name string) bool { return name < "0006" })

	_, err = conn.ExecContext(ctx, `
		UPDATE watermill_offsets_taskmaster_events SET last_processed_transaction_id = '100', offset_acked = 7 WHERE consumer_group = 'queue_stats';
		UPDATE watermill_offsets_taskmaster_events SET last_processed_transaction_id = '90', offset_acked = 3 WHERE consumer_group = 'metrics';
		INSERT INTO watermill_offsets_taskmaster_events (consumer_group, offset_acked, last_processed_transaction_id) VALUES ('billing', 1, '80');
		UPDATE projector_positions SET transaction_id = '100', "offset" = 7 WHERE consumer_group = 'queue_stats';
		UPDATE projector_positions SET transaction_id = '90', "offset" = 3 WHERE consumer_group = 'metrics';
		INSERT INTO watermill_taskmaster_events (uuid, created_at, payload, transaction_id)
		VALUES ('a', '2030-01-01 10:00:00', '{"events":[]}', '95')`)
	require.NoError(t, err)

	applyMigrations(t, ctx, conn, func(name string) bool { return strings.HasPrefix(name, "0006") })

	groups := queryCounts(t, db, `SELECT consumer_group || '@' || last_processed_transaction_id::text, offset_acked FROM watermill_offsets_taskmaster_events`)
	require.Equal(t, map[string]int64{ProjectionsGroup + "@90": 3, "billing@80": 1}, groups,
		"the projections start at the slower old group; other groups stay")
	positions := queryCounts(t, db, `SELECT projection || '@' || transaction_id::text, "offset" FROM projector_positions`)
	require.Equal(t, map[string]int64{QueueStatsProjection + "@100": 7, MetricsProjection + "@90": 3}, positions)

	var typ string
	require.NoError(t, db.Get(&typ, `SELECT data_type FROM information_schema.columns
		WHERE table_name = 'watermill_taskmaster_events' AND column_name = 'created_at'`))
	require.Equal(t, "timestamp with time zone", typ)
	var created time.Time
	require.NoError(t, db.Get(&created, `SELECT created_at FROM watermill_taskmaster_events WHERE uuid = 'a'`))
	require.True(t, created.Equal(time.Date(2030, 1, 1, 9, 0, 0, 0, time.UTC)), "10:00 in Paris is 09:00 UTC, got %v", created)

	// New messages get the time they are appended; set-aside messages have
	// their table.
	_, err = db.Exec(`INSERT INTO watermill_taskmaster_events (uuid, payload, transaction_id) VALUES ('b', '{}', pg_current_xact_id())`)
	require.NoError(t, err)
	var age float64
	require.NoError(t, db.Get(&age, `SELECT extract(epoch FROM clock_timestamp() - created_at) FROM watermill_taskmaster_events WHERE uuid = 'b'`))
	require.InDelta(t, 0, age, 60)
	var def string
	require.NoError(t, db.Get(&def, `SELECT column_default FROM information_schema.columns
		WHERE table_name = 'watermill_taskmaster_events' AND column_name = 'created_at'`))
	require.Equal(t, "clock_timestamp()", def)
	var poison int
	require.NoError(t, db.Get(&poison, `SELECT count(*) FROM outbox_poison`))
	require.Zero(t, poison)
}
