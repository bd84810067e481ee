package application_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// The kept hours of series answer what a fresh read of the buckets
// answers, after buckets land in the current minute and for a queue asked
// for the first time, and a key limited to some queues sees only theirs.
func TestDashboardSeriesCacheAgreesWithAFullRead(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	bucket := func(queue, kind string, minutesAgo, n int) {
		_, err := s.db.ExecContext(ctx, `
			INSERT INTO queue_rate_buckets AS b (queue, minute, kind, count)
			VALUES ($1, date_trunc('minute', now()) - $2 * interval '1 minute', $3, $4)
			ON CONFLICT (queue, minute, kind) DO UPDATE SET count = b.count + excluded.count`, queue, minutesAgo, kind, n)
		require.NoError(t, err)
	}
	bucket("a", "enqueued", 50, 7)
	bucket("a", "claimed", 2, 3)
	bucket("b", "dead_lettered", 0, 1)

	stats := outbox.NewStatsReader(s.db)
	svc := application.NewDashboardService(stats, postgres.NewDashboardReader(s.db))
	fresh := func(queues ...string) map[string]ports.RateSeries {
		out, _, err := stats.RateSeries(ctx, queues, application.SeriesMinutes)
		require.NoError(t, err)
		return out
	}
	got, err := svc.RateSeries(ctx, []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, fresh("a", "b"), got)
	require.EqualValues(t, 7, got["a"].Enqueued[application.SeriesMinutes-51])

	// New buckets in the recent minutes, and a queue asked for the first
	// time: its whole hour is read, the others' recent minutes only.
	bucket("a", "claimed", 0, 5)
	bucket("c", "completed", 40, 2)
	require.Eventually(t, func() bool {
		got, err = svc.RateSeries(ctx, []string{"a", "b", "c"})
		require.NoError(t, err)
		return got["a"].Claimed[application.SeriesMinutes-1] >= 5
	}, 5*time.Second, 100*time.Millisecond)
	require.EqualValues(t, 2, got["c"].Completed[application.SeriesMinutes-41], "a new queue's whole hour")
	want := fresh("a", "b", "c")
	// The minute may have turned between the two reads: compare on the
	// same end minute, or accept the shift's equivalent.
	if got["a"].Claimed[application.SeriesMinutes-1] == want["a"].Claimed[application.SeriesMinutes-1] {
		require.Equal(t, want, got)
	}

	limited := ports.WithPrincipal(ctx, apikeyLimitedTo(t, "b"))
	only, err := svc.RateSeries(limited, []string{"a", "b"})
	require.NoError(t, err)
	require.Len(t, only, 1)
	require.Contains(t, only, "b")
}

// However many queues the pages ask for, the service keeps the hours of
// MaxSeriesQueues at most (the least recently asked go first), and one
// call may ask for that many.
func TestDashboardSeriesCacheIsBounded(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	svc := application.NewDashboardService(outbox.NewStatsReader(s.db), postgres.NewDashboardReader(s.db))
	page := func(from int) []string {
		out := make([]string, application.MaxSeriesQueues)
		for i := range out {
			out[i] = "q" + strconv.Itoa(from+i)
		}
		return out
	}
	for from := 0; from < 5*application.MaxSeriesQueues; from += application.MaxSeriesQueues / 2 {
		_, err := svc.RateSeries(ctx, page(from))
		require.NoError(t, err)
		require.LessOrEqual(t, svc.KeptSeriesQueues(), application.MaxSeriesQueues)
	}
	_, err := svc.RateSeries(ctx, append(page(0), "one-more"))
	require.Error(t, err, "one call asks for MaxSeriesQueues at most")
}

// The busiest queues of the last minutes come first, by the events counted,
// then by name; a pattern and a key's queues narrow them.
func TestDashboardActiveQueuesBusiestFirst(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := context.Background()
	for _, b := range []struct {
		queue, kind string
		minutesAgo  int
		n           int
	}{{"calm", "enqueued", 0, 1}, {"busy", "claimed", 1, 50}, {"busy", "completed", 0, 40}, {"old", "enqueued", 30, 1000},
		{"mid", "dead_lettered", 2, 20}, {"mid-2", "enqueued", 0, 20}} {
		_, err := s.db.ExecContext(ctx, `INSERT INTO queue_rate_buckets (queue, minute, kind, count)
			VALUES ($1, date_trunc('minute', now()) - $2 * interval '1 minute', $3, $4)`, b.queue, b.minutesAgo, b.kind, b.n)
		require.NoError(t, err)
	}
	svc := application.NewDashboardService(outbox.NewStatsReader(s.db), postgres.NewDashboardReader(s.db))
	got, err := svc.ActiveQueues(ctx, "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"busy", "mid", "mid-2", "calm"}, got, "the last half hour's old queue is not active")
	got, err = svc.ActiveQueues(ctx, "", 2)
	require.NoError(t, err)
	require.Equal(t, []string{"busy", "mid"}, got)
	got, err = svc.ActiveQueues(ctx, "*mid*", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"mid", "mid-2"}, got)
	got, err = svc.ActiveQueues(ports.WithPrincipal(ctx, apikeyLimitedTo(t, "calm")), "", 10)
	require.NoError(t, err)
	require.Equal(t, []string{"calm"}, got)
}

func apikeyLimitedTo(t *testing.T, queue string) *apikey.Key {
	t.Helper()
	return apikey.Restore(apikey.Snapshot{Name: "limited", Scopes: []apikey.Scope{apikey.ScopeRead}, Queues: []string{queue}})
}
