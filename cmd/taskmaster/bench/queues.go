package bench

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"
)

func init() { register("queues", runQueues) }

// QueueFigures are the queues scenario's: GET /queues/v1 and /metrics with
// --tasks queues (default 100,000), each holding one PENDING task, a
// thousandth of them paused (queueFillSQL).
type QueueFigures struct {
	Queues int `json:"queues"`
	// Requests are the timed requests, each repeated Repeats times.
	Requests []QueueRequest `json:"requests"`
	Repeats  int            `json:"repeats"`
}

// QueueRequest is one request's latency and response size.
type QueueRequest struct {
	Name      string      `json:"name"`
	Path      string      `json:"path"`
	LatencyMS Percentiles `json:"latency_ms"`
	Bytes     int         `json:"bytes"`
	// Items is how many queues the answer listed (listings only).
	Items int `json:"items,omitempty"`
}

// queueFillSQL fills $1 queues q-000001, ... in SQL: one PENDING task each
// (submitted up to an hour ago), the projections' rows for it (counts,
// totals, counters, and in a tenth of the queues a recent claim and
// completion with their rate buckets and duration histograms), a
// thousandth of the queues paused; then it analyzes the tables, as
// autovacuum soon would.
var queueFillSQL = []string{
	`INSERT INTO tasks (id, queue, status, max_attempts, run_at, created_at, updated_at)
	 SELECT gen_random_uuid(), 'q-' || lpad(i::text, 6, '0'), 'PENDING', 3,
		now() - (i % 3600) * interval '1 second', now() - (i % 3600) * interval '1 second', now()
	 FROM generate_series(1, $1) AS i`,
	`INSERT INTO queue_status_counts (queue, status, count)
	 SELECT 'q-' || lpad(i::text, 6, '0'), s.status, 1
	 FROM generate_series(1, $1) AS i, (VALUES ('PENDING'), ('DONE')) AS s(status)
	 WHERE s.status = 'PENDING' OR i % 10 = 0`,
	`INSERT INTO queue_totals (queue, kind, reason, count)
	 SELECT 'q-' || lpad(i::text, 6, '0'), k.kind, '', 1
	 FROM generate_series(1, $1) AS i, (VALUES ('tasks_submitted'), ('tasks_claimed'), ('tasks_completed')) AS k(kind)
	 WHERE k.kind = 'tasks_submitted' OR i % 10 = 0`,
	`INSERT INTO metric_counters (kind, queue, reason, value)
	 SELECT k.kind, 'q-' || lpad(i::text, 6, '0'), '', 1
	 FROM generate_series(1, $1) AS i, (VALUES ('tasks_submitted'), ('tasks_claimed'), ('tasks_completed')) AS k(kind)
	 WHERE k.kind = 'tasks_submitted' OR i % 10 = 0`,
	`INSERT INTO queue_rate_buckets (queue, minute, kind, count, seconds)
	 SELECT 'q-' || lpad(i::text, 6, '0'), date_trunc('minute', now()) - (i % 15) * interval '1 minute', k.kind, 1, k.seconds
	 FROM generate_series(1, $1, 10) AS i,
		(VALUES ('enqueued', 0.0), ('claimed', 0.0), ('completed', 0.0), ('queue_wait', 0.02), ('execution', 0.15)) AS k(kind, seconds)`,
	`INSERT INTO metric_histogram_buckets (kind, queue, upper_bound, count)
	 SELECT k.kind, 'q-' || lpad(i::text, 6, '0'), k.le, 1
	 FROM generate_series(1, $1, 10) AS i,
		(VALUES ('task_queue_wait', 0.025::float8), ('task_execution_duration', 0.25), ('task_end_to_end_duration', 0.25)) AS k(kind, le)`,
	`INSERT INTO metric_histogram_sums (kind, queue, sum)
	 SELECT k.kind, 'q-' || lpad(i::text, 6, '0'), k.s
	 FROM generate_series(1, $1, 10) AS i,
		(VALUES ('task_queue_wait', 0.02::float8), ('task_execution_duration', 0.15), ('task_end_to_end_duration', 0.17)) AS k(kind, s)`,
	`INSERT INTO queue_settings (queue, paused, updated_at)
	 SELECT 'q-' || lpad(i::text, 6, '0'), true, now() FROM generate_series(1, $1, 1000) AS i
	 ON CONFLICT (queue) DO UPDATE SET paused = true`,
}

// runQueues fills --tasks queues (default 100,000) in SQL (queueFillSQL),
// then times the
// listing's first page, filtered pages, a deep cursor page, a queue's detail
// and /metrics (the first scrape, which ranks the queues for the series cap,
// apart).
func runQueues(ctx context.Context, env *environment, opts Options, mon *monitor, log io.Writer) (Report, error) {
	if env.db == nil {
		return Report{}, errors.New("the queues scenario fills the database: it needs --database-url with --url")
	}
	n := opts.Tasks
	if n == 0 {
		n = 100_000
	}
	const repeats = 20
	start := time.Now()
	name := func(i int) string { return fmt.Sprintf("q-%06d", i) }
	// What the projections would hold after one task was submitted to each
	// queue (a tenth of them in the last minutes) and one claimed and
	// completed in each of a tenth of them.
	for _, q := range queueFillSQL {
		if _, err := env.db.ExecContext(ctx, q, n); err != nil {
			return Report{}, fmt.Errorf("fill %d queues: %w", n, err)
		}
	}
	if _, err := env.db.ExecContext(ctx, `ANALYZE`); err != nil {
		return Report{}, err
	}
	fmt.Fprintf(log, "[queues] %d queues filled in %.1f s\n", n, time.Since(start).Seconds())

	fig := &QueueFigures{Queues: n, Repeats: repeats}
	measure := func(label, path string, times int) error {
		var rec recorder
		var body []byte
		for range times {
			t0 := time.Now()
			b, err := env.api.get(ctx, path)
			if err != nil {
				return fmt.Errorf("%s: %w", label, err)
			}
			rec.add(time.Since(t0))
			body = b
		}
		r := QueueRequest{Name: label, Path: path, LatencyMS: rec.percentiles(), Bytes: len(body)}
		if strings.HasPrefix(path, "/queues/v1?") {
			r.Items = countQueues(body)
		}
		fig.Requests = append(fig.Requests, r)
		fmt.Fprintf(log, "[queues] %-22s p50 %8.2f ms  p99 %8.2f ms  %8d bytes\n", label, r.LatencyMS.P50, r.LatencyMS.P99, r.Bytes)
		return nil
	}
	deep := "cursor=" + base64URL(name(n-1000))
	for _, m := range []struct{ label, path string }{
		{"metrics (first scrape)", "/metrics"},
		{"first page", "/queues/v1?"},
		{"first page, limit 1000", "/queues/v1?limit=1000"},
		{"deep cursor page", "/queues/v1?" + deep},
		{"prefix", "/queues/v1?prefix=" + name(n / 2)[:6]},
		{"pattern *77*", "/queues/v1?pattern=*77*"},
		{"paused=true", "/queues/v1?paused=true"},
		{"paused=false", "/queues/v1?paused=false"},
		{"min_pending=1", "/queues/v1?min_pending=1"},
		{"min_pending=2 (none)", "/queues/v1?min_pending=2"},
		{"detail", "/queues/v1/" + name(n/2)},
		{"metrics", "/metrics"},
	} {
		times := repeats
		if m.label == "metrics (first scrape)" {
			times = 1
		}
		if err := measure(m.label, m.path, times); err != nil {
			return Report{}, err
		}
	}
	return Report{Tasks: n, Producers: 1, Workers: 0, DurationSeconds: round3(time.Since(start).Seconds()), Queues: fig}, nil
}

func printQueueFigures(w io.Writer, q *QueueFigures) {
	if q == nil {
		return
	}
	fmt.Fprintf(w, "  %d queues, each request %d times:\n", q.Queues, q.Repeats)
	for _, r := range q.Requests {
		fmt.Fprintf(w, "  %-24s p50 %8.2f ms  p99 %8.2f ms  %8d bytes  %s\n", r.Name+":", r.LatencyMS.P50, r.LatencyMS.P99, r.Bytes, r.Path)
	}
}

func base64URL(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

// countQueues is how many queues a listing's body holds (-1: not one).
func countQueues(body []byte) int {
	var page struct {
		Queues []json.RawMessage `json:"queues"`
	}
	if json.Unmarshal(body, &page) != nil {
		return -1
	}
	return len(page.Queues)
}
