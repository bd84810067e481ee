//go:build !race

// The page weight test and the benchmark stage 240,000 rate buckets and
// render a 1.4 MB page: minutes under the race detector on a busy machine,
// for the same bytes. `make test` runs with -race; run them with
// `go test ./adapters/ui/` (and -bench, see BenchmarkOverview).

package ui_test

import (
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/adapters/ui"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/ports"
)

// manyQueues is the overview's sizing point (docs/dashboard.md).
const manyQueues = 1000

// fillQueues stages n busy queues the way the statistics projection leaves
// them: status counts, an hour of per-minute buckets of every kind (a
// daily-cycle shape with deterministic noise, every minute non-zero), one
// PENDING task each (the oldest-pending probe) and a few active workers.
func fillQueues(t testing.TB, db *sqlx.DB, n int) {
	t.Helper()
	for _, q := range []string{
		`INSERT INTO queue_status_counts (queue, status, count)
		 SELECT format('queue-%s', lpad(q::text, 4, '0')), s, 1 + (q * 37 + length(s) * 11) % 5000
		 FROM generate_series(1, $1) q, unnest(ARRAY['PENDING','RUNNING','DONE','DEAD']) s`,
		`INSERT INTO queue_rate_buckets (queue, minute, kind, count)
		 SELECT format('queue-%s', lpad(q::text, 4, '0')), date_trunc('minute', now()) - m * interval '1 minute', k,
		        greatest(1, (60 + 45 * sin(m / 9.0 + q) + (q * 7919 + m * 104729 + length(k)) % 17)::int)
		 FROM generate_series(1, $1) q, generate_series(0, 59) m, unnest(ARRAY['enqueued','claimed','completed','dead_lettered']) k`,
		`INSERT INTO tasks (id, queue, status, priority, payload, max_attempts, run_at, created_at, updated_at)
		 SELECT gen_random_uuid(), format('queue-%s', lpad(q::text, 4, '0')), 'PENDING', 0, '{}', 3,
		        now(), now() - q * interval '1 second', now()
		 FROM generate_series(1, $1) q`,
		`INSERT INTO workers (id, queues, tags, status, registered_at, last_heartbeat_at)
		 SELECT format('worker-%s', w), ARRAY[format('queue-%s', lpad(w::text, 4, '0'))], '{}', 'ACTIVE', now(), now()
		 FROM generate_series(1, 50) w`,
		`ANALYZE`,
	} {
		args := []any{n}
		if q == `ANALYZE` || q[:19] == `INSERT INTO workers` {
			args = nil
		}
		_, err := db.ExecContext(context.Background(), q, args...)
		require.NoError(t, err, q)
	}
}

// overviewHandler is the dashboard over the real adapters, authentication
// off (the session lookup is a cached map read; it is not what is measured).
func overviewHandler(t testing.TB, db *sqlx.DB) http.Handler {
	t.Helper()
	tx := postgres.NewTxRunner(db)
	stats := outbox.NewStatsReader(db)
	h, err := ui.New(ui.Config{}, ui.Deps{
		Tasks:     application.NewTaskService(tx, application.Config{}),
		Queues:    application.NewQueueService(stats, tx),
		Dashboard: application.NewDashboardService(stats, postgres.NewDashboardReader(db)),
	})
	require.NoError(t, err)
	return h
}

// getOverview serves GET /ui/ as a browser asks for it (gzip accepted) and
// returns the bytes transferred and the body's size.
func getOverview(t testing.TB, h http.Handler) (wire, raw int) {
	req := httptest.NewRequest(http.MethodGet, "/ui/", nil)
	req.Header.Set("Accept-Encoding", "gzip, deflate, br")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	require.Equal(t, http.StatusOK, rec.Code)
	wire = rec.Body.Len()
	zr, err := gzip.NewReader(rec.Body)
	require.NoError(t, err)
	body, err := io.ReadAll(zr)
	require.NoError(t, err)
	return wire, len(body)
}

// The overview of 1,000 busy queues shows a page of the 100 busiest, under
// 300 kB on the wire with their rows and charts; listed by name, its pages
// of 100 reach every queue.
func TestOverviewWeightWithManyQueues(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDB(t)
	fillQueues(t, db, manyQueues)
	h := overviewHandler(t, db)
	wire, raw := getOverview(t, h)
	t.Logf("overview of %d queues: %d bytes transferred (gzip), %d bytes of HTML", manyQueues, wire, raw)
	require.Less(t, wire, 300_000)

	rows := regexp.MustCompile(`data-queue="(queue-\d+)"`)
	seen := map[string]bool{}
	after := ""
	for page := 0; ; page++ {
		require.Less(t, page, manyQueues/100+1)
		req := httptest.NewRequest(http.MethodGet, "/ui/?sort=name&after="+after, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.Equal(t, http.StatusOK, rec.Code)
		found := rows.FindAllStringSubmatch(rec.Body.String(), -1)
		require.LessOrEqual(t, len(found), 100)
		for _, m := range found {
			seen[m[1]] = true
		}
		next := regexp.MustCompile(`after=(queue-\d+)`).FindStringSubmatch(rec.Body.String())
		if next == nil {
			break
		}
		after = next[1]
	}
	require.Len(t, seen, manyQueues)
	for i := 1; i <= manyQueues; i += 199 {
		require.True(t, seen[fmt.Sprintf("queue-%04d", i)])
	}
}

// BenchmarkOverview measures the server time of the overview page of 1,000
// busy queues (the 100 busiest; database reads and rendering, gzip
// included), and apart from it
// the queue listing: as the overview reads it (counts only) and as
// GET /queues/v1 serves it (with every queue's totals and rate windows),
// a page of 1,000:
//
//	go test -run '^$' -bench Overview -benchtime 20x ./adapters/ui/
//
// Metrics: ms/page is the mean server time, wire_kB the bytes transferred,
// html_kB the uncompressed page; ms/listing the listing's mean time.
func BenchmarkOverview(b *testing.B) {
	db := pgtest.NewDB(b)
	fillQueues(b, db, manyQueues)
	h := overviewHandler(b, db)
	getOverview(b, h) // warm the statement plans and the series
	b.Run("page", func(b *testing.B) {
		var wire, raw int
		start := time.Now()
		for b.Loop() {
			wire, raw = getOverview(b, h)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/page")
		b.ReportMetric(float64(wire)/1000, "wire_kB")
		b.ReportMetric(float64(raw)/1000, "html_kB")
	})
	for _, countsOnly := range []bool{true, false} {
		name := "listing-with-rates"
		if countsOnly {
			name = "listing-counts-only"
		}
		b.Run(name, func(b *testing.B) {
			qs := application.NewQueueService(outbox.NewStatsReader(db), postgres.NewTxRunner(db))
			limit := manyQueues
			start := time.Now()
			for b.Loop() {
				p, err := qs.Queues(context.Background(), ports.QueueQuery{Limit: &limit, CountsOnly: countsOnly})
				require.NoError(b, err)
				require.Len(b, p.Queues, manyQueues)
			}
			b.ReportMetric(float64(time.Since(start).Milliseconds())/float64(b.N), "ms/listing")
		})
	}
}
