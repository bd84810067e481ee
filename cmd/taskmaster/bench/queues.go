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
// thousandth of them paused.
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

// runQueues submits one task to each of --tasks queues (q-000001, ...),
// waits until the projections have applied them, pauses every thousandth
// queue and analyzes the tables (as autovacuum soon would), then times the
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
	batch := make([]submitItem, 0, opts.BatchSize)
	for i := 1; i <= n; i++ {
		batch = append(batch, submitItem{Queue: name(i)})
		if len(batch) == cap(batch) || i == n {
			if err := env.api.submitBatch(ctx, batch); err != nil {
				return Report{}, err
			}
			batch = batch[:0]
		}
	}
	fmt.Fprintf(log, "[queues] %d tasks submitted in %.1f s; waiting for the projections\n", n, time.Since(start).Seconds())
	for {
		lag, _, err := projectionLag(ctx, env.db)
		if err != nil {
			return Report{}, err
		}
		var queues int
		if err := env.db.GetContext(ctx, &queues, `SELECT count(DISTINCT queue) FROM queue_status_counts`); err != nil {
			return Report{}, err
		}
		if lag == 0 && queues >= n {
			break
		}
		select {
		case <-ctx.Done():
			return Report{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	if _, err := env.db.ExecContext(ctx, `
		INSERT INTO queue_settings (queue, paused, updated_at)
		SELECT 'q-' || lpad(i::text, 6, '0'), true, now() FROM generate_series(1, $1, 1000) AS i
		ON CONFLICT (queue) DO UPDATE SET paused = true`, n); err != nil {
		return Report{}, err
	}
	if _, err := env.db.ExecContext(ctx, `ANALYZE queue_status_counts, queue_settings, queue_totals, queue_rate_buckets, metric_counters, tasks`); err != nil {
		return Report{}, err
	}
	fmt.Fprintf(log, "[queues] ready after %.1f s\n", time.Since(start).Seconds())

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
