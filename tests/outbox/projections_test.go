package outboxe2e

import (
	"context"
	"io"
	"math"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

func fastOutbox(c *app.Config) {
	c.Outbox.PollInterval = 20 * time.Millisecond
	// testserver keeps consumed outbox rows far longer than any test, so
	// the tests may count the outbox's events.
}

// knownWorkload drives every kind of transition over HTTP, with counts the
// tests know:
//
//	alpha: 5 submitted; wa claims 3: 1 completed, 1 failed and requeued,
//	       1 failed non-retryable (DEAD non_retryable)
//	beta:  3 submitted (max_attempts 1); wb claims 2: 1 completed, 1 failed
//	       (DEAD exhausted, then retried); 1 cancelled (DEAD cancelled)
//	workers: wa registers alpha, wb registers every queue
func knownWorkload(t *testing.T, c *client) {
	t.Helper()
	require.Equal(t, http.StatusCreated, c.mustCall("POST", "/workers/v1/register", map[string]any{"id": "wa", "queues": []string{"alpha"}}, nil))
	require.Equal(t, http.StatusCreated, c.mustCall("POST", "/workers/v1/register", map[string]any{"id": "wb"}, nil))
	for range 5 {
		require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "alpha", "max_attempts": 2}, nil))
	}
	var beta []taskJSON
	for range 3 {
		var tk taskJSON
		require.Equal(t, http.StatusCreated, c.mustCall("POST", "/tasks/v1", map[string]any{"queue": "beta", "max_attempts": 1}, &tk))
		beta = append(beta, tk)
	}
	var ca claimResponse
	c.mustCall("POST", "/tasks/v1/claim", map[string]any{"worker_id": "wa", "limit": 3}, &ca)
	require.Len(t, ca.Tasks, 3)
	c.mustCall("POST", "/tasks/v1/"+ca.Tasks[0].ID+"/complete", map[string]any{"worker_id": "wa", "lease_id": ca.Tasks[0].LeaseID}, nil)
	c.mustCall("POST", "/tasks/v1/"+ca.Tasks[1].ID+"/fail", map[string]any{"worker_id": "wa", "lease_id": ca.Tasks[1].LeaseID, "error": "again"}, nil)
	c.mustCall("POST", "/tasks/v1/"+ca.Tasks[2].ID+"/fail", map[string]any{"worker_id": "wa", "lease_id": ca.Tasks[2].LeaseID, "error": "never", "retryable": false}, nil)

	var cb claimResponse
	c.mustCall("POST", "/tasks/v1/claim", map[string]any{"worker_id": "wb", "queue": "beta", "limit": 2}, &cb)
	require.Len(t, cb.Tasks, 2)
	c.mustCall("POST", "/tasks/v1/"+cb.Tasks[0].ID+"/complete", map[string]any{"worker_id": "wb", "lease_id": cb.Tasks[0].LeaseID}, nil)
	c.mustCall("POST", "/tasks/v1/"+cb.Tasks[1].ID+"/fail", map[string]any{"worker_id": "wb", "lease_id": cb.Tasks[1].LeaseID, "error": "last try"}, nil)
	require.Equal(t, http.StatusOK, c.mustCall("POST", "/tasks/v1/"+beta[2].ID+"/cancel", nil, nil))
	require.Equal(t, http.StatusOK, c.mustCall("POST", "/tasks/v1/"+cb.Tasks[1].ID+"/retry", nil, nil))
}

func TestQueuesEndpointServesTheProjection(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastOutbox)
	c := newClient(t, func() string { return s.URL })
	knownWorkload(t, c)
	truth := truthCounts(t, s.DB)

	var got map[string]queueJSON
	require.Eventually(t, func() bool {
		var resp struct {
			Queues []queueJSON `json:"queues"`
		}
		c.mustCall("GET", "/queues/v1", nil, &resp)
		got = map[string]queueJSON{}
		counts := map[string]int64{}
		for _, q := range resp.Queues {
			got[q.Queue] = q
			for status, n := range map[string]int64{"PENDING": q.Pending, "RUNNING": q.Running, "DONE": q.Done, "DEAD": q.Dead, "BLOCKED": q.Blocked} {
				if n != 0 {
					counts[q.Queue+"/"+status] = n
				}
			}
		}
		return equalCounts(counts, truth) && got["beta"].Totals.Requeued["retried"] == 1
	}, 30*time.Second, 20*time.Millisecond, "GET /queues/v1 never matched the tasks table %v", truth)

	alpha, beta := got["alpha"], got["beta"]
	require.EqualValues(t, 2, alpha.ActiveWorkers, "wa serves alpha, wb every queue")
	require.EqualValues(t, 1, beta.ActiveWorkers)
	require.EqualValues(t, 5, alpha.Totals.Submitted)
	require.EqualValues(t, 3, alpha.Totals.Claimed)
	require.EqualValues(t, 1, alpha.Totals.Completed)
	require.EqualValues(t, 2, alpha.Totals.Failed)
	require.Equal(t, map[string]int64{"non_retryable": 1}, alpha.Totals.DeadLettered)
	require.Equal(t, map[string]int64{"failed": 1}, alpha.Totals.Requeued)
	require.Equal(t, map[string]int64{"exhausted": 1, "cancelled": 1}, beta.Totals.DeadLettered)
	require.Equal(t, map[string]int64{"retried": 1}, beta.Totals.Requeued)

	for _, q := range []queueJSON{alpha, beta} {
		require.NotNil(t, q.OldestPendingAgeSeconds, q.Queue)
		require.GreaterOrEqual(t, *q.OldestPendingAgeSeconds, 0.0)
		require.Less(t, *q.OldestPendingAgeSeconds, 60.0)
		require.NotNil(t, q.StatsAsOf)
		require.WithinDuration(t, time.Now(), *q.StatsAsOf, time.Minute)
		require.ElementsMatch(t, []string{"last_1m", "last_5m", "last_15m"}, keys(q.Rates))
	}
	// All events happened within the last minute: the 1-minute window holds
	// (nearly) all of them, the 5-minute window averages them over 5.
	require.InDelta(t, 5, alpha.Rates["last_1m"].Enqueued, 0.5)
	require.InDelta(t, 1, alpha.Rates["last_5m"].Enqueued, 0.1)
	require.InDelta(t, 3, alpha.Rates["last_1m"].Claimed, 0.5)
	require.InDelta(t, 1, alpha.Rates["last_1m"].Completed, 0.5)
	require.InDelta(t, 2, beta.Rates["last_1m"].DeadLettered, 0.5)
}

func equalCounts(a, b map[string]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// scrape fetches and parses a Prometheus text exposition.
func scrape(t *testing.T, url string) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(string(body)))
	require.NoError(t, err, "%s", body)
	return fams
}

// sample finds the metric of family name whose labels are exactly labels.
func sample(fams map[string]*dto.MetricFamily, name string, labels map[string]string) *dto.Metric {
	fam := fams[name]
	if fam == nil {
		return nil
	}
	for _, m := range fam.Metric {
		got := map[string]string{}
		for _, lp := range m.Label {
			got[lp.GetName()] = lp.GetValue()
		}
		if len(got) == len(labels) && equalLabels(got, labels) {
			return m
		}
	}
	return nil
}

func equalLabels(a, b map[string]string) bool {
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func counterValue(t *testing.T, fams map[string]*dto.MetricFamily, name string, labels map[string]string) float64 {
	t.Helper()
	m := sample(fams, name, labels)
	require.NotNil(t, m, "%s%v missing", name, labels)
	require.Equal(t, dto.MetricType_COUNTER, fams[name].GetType(), name)
	return m.GetCounter().GetValue()
}

func TestMetricsExposeEverySeriesWithItsQueuesValues(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, fastOutbox)
	c := newClient(t, func() string { return s.URL })
	knownWorkload(t, c)
	// The reapers and retention (another component) emit these; append them
	// as they would, so every series has a value.
	at := time.Now()
	tx := postgres.NewTxRunner(s.DB)
	require.NoError(t, tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
		st.Outbox.Record(
			event.Event{Version: 1, Type: event.WorkerRegistered, WorkerID: "ghost", Queues: []string{"gamma"}, To: "ACTIVE", OccurredAt: at},
			event.Event{Version: 1, Type: event.TaskRequeued, Queue: "gamma", From: "RUNNING", To: "PENDING", Reason: "worker_dead",
				OccurredAt: at, ExecutionSeconds: event.Seconds(3 * time.Second)},
			event.Event{Version: 1, Type: event.TaskDeadLettered, Queue: "gamma", From: "PENDING", To: "DEAD", Reason: "deadline",
				OccurredAt: at, EndToEndSeconds: event.Seconds(10 * time.Second)},
			event.Event{Version: 1, Type: event.TaskCleaned, Queue: "gamma", From: "DEAD", OccurredAt: at},
			event.Event{Version: 1, Type: event.WorkerDied, WorkerID: "ghost", From: "ACTIVE", To: "DEAD", OccurredAt: at},
			event.Event{Version: 1, Type: event.WorkerCleaned, WorkerID: "ghost", From: "DEAD", OccurredAt: at},
		)
		return nil
	}))
	waitCaughtUp(t, s.DB)

	fams := scrape(t, s.URL+"/metrics")
	q := func(queue string) map[string]string { return map[string]string{"queue": queue} }
	qr := func(queue, reason string) map[string]string {
		return map[string]string{"queue": queue, "reason": reason}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"taskmaster_tasks_submitted_total", q("alpha"), 5},
		{"taskmaster_tasks_submitted_total", q("beta"), 3},
		{"taskmaster_tasks_submitted_total", q("gamma"), 0},
		{"taskmaster_tasks_claimed_total", q("alpha"), 3},
		{"taskmaster_tasks_claimed_total", q("beta"), 2},
		{"taskmaster_tasks_completed_total", q("alpha"), 1},
		{"taskmaster_tasks_completed_total", q("beta"), 1},
		{"taskmaster_tasks_failed_total", q("alpha"), 2},
		{"taskmaster_tasks_failed_total", q("beta"), 1},
		{"taskmaster_tasks_dead_lettered_total", qr("alpha", "non_retryable"), 1},
		{"taskmaster_tasks_dead_lettered_total", qr("beta", "exhausted"), 1},
		{"taskmaster_tasks_dead_lettered_total", qr("beta", "cancelled"), 1},
		{"taskmaster_tasks_dead_lettered_total", qr("gamma", "deadline"), 1},
		{"taskmaster_tasks_requeued_total", qr("alpha", "failed"), 1},
		{"taskmaster_tasks_requeued_total", qr("beta", "retried"), 1},
		{"taskmaster_tasks_requeued_total", qr("gamma", "worker_dead"), 1},
		{"taskmaster_tasks_cleaned_total", nil, 1},
		{"taskmaster_workers_registered_total", q("alpha"), 1},
		{"taskmaster_workers_registered_total", q("*"), 1},
		{"taskmaster_workers_registered_total", q("gamma"), 1},
		{"taskmaster_workers_died_total", nil, 1},
		{"taskmaster_workers_cleaned_total", nil, 1},
	} {
		require.Equal(t, c.want, counterValue(t, fams, c.name, c.labels), "%s%v", c.name, c.labels)
	}
	require.Len(t, fams["taskmaster_tasks_dead_lettered_total"].Metric, 4, "no other dead-letter series")

	for _, h := range []struct {
		name  string
		queue string
		count uint64
	}{
		{"taskmaster_task_queue_wait_seconds", "alpha", 3},
		{"taskmaster_task_queue_wait_seconds", "beta", 2},
		{"taskmaster_task_execution_duration_seconds", "alpha", 3},
		{"taskmaster_task_execution_duration_seconds", "beta", 2},
		{"taskmaster_task_execution_duration_seconds", "gamma", 1},
		{"taskmaster_task_end_to_end_duration_seconds", "alpha", 2},
		{"taskmaster_task_end_to_end_duration_seconds", "beta", 3},
		{"taskmaster_task_end_to_end_duration_seconds", "gamma", 1},
	} {
		m := sample(fams, h.name, q(h.queue))
		require.NotNil(t, m, "%s{queue=%q}", h.name, h.queue)
		require.Equal(t, dto.MetricType_HISTOGRAM, fams[h.name].GetType())
		require.Equal(t, h.count, m.GetHistogram().GetSampleCount(), "%s{queue=%q}", h.name, h.queue)
		buckets := m.GetHistogram().GetBucket()
		require.NotEmpty(t, buckets)
		require.LessOrEqual(t, buckets[len(buckets)-1].GetCumulativeCount(), h.count)
	}
	gamma := sample(fams, "taskmaster_task_execution_duration_seconds", q("gamma")).GetHistogram()
	require.InDelta(t, 3.0, gamma.GetSampleSum(), 1e-9)
	for _, b := range gamma.GetBucket() {
		want := uint64(0)
		if b.GetUpperBound() >= 3 {
			want = 1
		}
		require.Equal(t, want, b.GetCumulativeCount(), "le=%v", b.GetUpperBound())
	}

	// Gauges: tasks by queue and status equal the tasks table for the real
	// queues; workers by status; the consumer groups are caught up.
	for k, n := range truthCounts(t, s.DB) {
		queue, status, _ := strings.Cut(k, "/")
		m := sample(fams, "taskmaster_tasks", map[string]string{"queue": queue, "status": status})
		require.NotNil(t, m, k)
		require.Equal(t, float64(n), m.GetGauge().GetValue(), k)
	}
	require.Equal(t, 0.0, sample(fams, "taskmaster_tasks", map[string]string{"queue": "alpha", "status": "RUNNING"}).GetGauge().GetValue())
	for status, n := range map[string]float64{"ACTIVE": 2, "STALE": 0, "DEAD": 0} {
		m := sample(fams, "taskmaster_workers", map[string]string{"status": status})
		require.NotNil(t, m, status)
		require.Equal(t, n, m.GetGauge().GetValue(), status)
	}
	m := sample(fams, "taskmaster_outbox_lag_seconds", map[string]string{"consumer_group": outbox.ProjectionsGroup})
	require.NotNil(t, m)
	require.Equal(t, 0.0, m.GetGauge().GetValue())
	require.Len(t, fams["taskmaster_outbox_lag_seconds"].Metric, 1, "one consumer group feeds both projections")
	for _, p := range []string{outbox.QueueStatsProjection, outbox.MetricsProjection} {
		m := sample(fams, "taskmaster_outbox_poison_messages", map[string]string{"projection": p})
		require.NotNil(t, m, p)
		require.Equal(t, 0.0, m.GetGauge().GetValue(), p)
	}

	// HTTP durations by route template, method and status; runtime and process.
	submits := sample(fams, "taskmaster_http_request_duration_seconds", map[string]string{"route": "/tasks/v1", "method": "POST", "status": "201"})
	require.NotNil(t, submits)
	require.EqualValues(t, 8, submits.GetHistogram().GetSampleCount())
	require.NotNil(t, sample(fams, "taskmaster_http_request_duration_seconds", map[string]string{"route": "/tasks/v1/{id}/complete", "method": "POST", "status": "200"}))
	for _, name := range []string{"go_goroutines", "go_memstats_alloc_bytes", "process_cpu_seconds_total", "process_resident_memory_bytes", "go_sql_open_connections"} {
		require.Contains(t, fams, name)
	}

	// /actuator/prometheus serves the same registry.
	actuator := scrape(t, s.URL+"/actuator/prometheus")
	for name, fam := range fams {
		if !strings.HasPrefix(name, "taskmaster_task") || strings.HasPrefix(name, "taskmaster_http") {
			continue
		}
		require.Contains(t, actuator, name)
		require.Equal(t, len(fam.Metric), len(actuator[name].Metric), name)
		for _, m := range fam.Metric {
			labels := map[string]string{}
			for _, lp := range m.Label {
				labels[lp.GetName()] = lp.GetValue()
			}
			other := sample(actuator, name, labels)
			require.NotNil(t, other, "%s%v", name, labels)
			require.Equal(t, m.GetCounter().GetValue(), other.GetCounter().GetValue())
			require.Equal(t, m.GetHistogram().GetSampleCount(), other.GetHistogram().GetSampleCount())
		}
	}
	require.False(t, math.IsNaN(counterValue(t, actuator, "taskmaster_tasks_submitted_total", q("alpha"))))
}

// Several instances share the consumer groups: each message is applied once
// whichever instance's subscriber gets it.
func TestInstancesSharingADatabaseProjectEachEventOnce(t *testing.T) {
	t.Parallel()
	url := pgtest.NewDatabase(t)
	a := testserver.StartOn(t, url, fastOutbox)
	b := testserver.StartOn(t, url, fastOutbox)
	urlA, urlB := func() string { return a.URL }, func() string { return b.URL }
	load := startRandomWorkload(t, urlA, urlB, urlA, urlB)
	load.waitOps(t, 300)
	load.finish(t)
	waitCaughtUp(t, a.DB)
	require.Equal(t, truthCounts(t, a.DB), projectedCounts(t, a.DB))
	require.Equal(t, expectedCounters(outboxEvents(t, a.DB)),
		queryCounts(t, a.DB, `SELECT kind || '/' || queue || '/' || reason, value FROM metric_counters`))
	// Both serve the same counters.
	fa, fb := scrape(t, a.URL+"/metrics"), scrape(t, b.URL+"/metrics")
	for _, m := range fa["taskmaster_tasks_submitted_total"].Metric {
		labels := map[string]string{"queue": m.Label[0].GetValue()}
		require.Equal(t, m.GetCounter().GetValue(), counterValue(t, fb, "taskmaster_tasks_submitted_total", labels))
	}
}

// With no retention, the janitors delete what both projectors consumed while
// a workload runs: the outbox drains, and the projections (which the janitor
// must never get ahead of) still equal the tasks table.
func TestJanitorKeepsTheOutboxDrainedUnderLoad(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) {
		fastOutbox(c)
		c.Outbox.Retention = 0
		c.Outbox.JanitorInterval = 20 * time.Millisecond
	})
	base := func() string { return s.URL }
	load := startRandomWorkload(t, base, base, base)
	var peak int64
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM watermill_taskmaster_events`))
		peak = max(peak, n)
		return load.stats.total.Load() >= 300
	}, 60*time.Second, 5*time.Millisecond)
	load.finish(t)
	require.Eventually(t, func() bool {
		var n int64
		require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM watermill_taskmaster_events`))
		return n == 0
	}, 30*time.Second, 10*time.Millisecond, "the outbox drains")
	t.Logf("at most %d messages in the outbox at a time", peak)
	require.Equal(t, truthCounts(t, s.DB), projectedCounts(t, s.DB))
	var submitted int64
	require.NoError(t, s.DB.Get(&submitted, `SELECT coalesce(sum(count), 0) FROM queue_totals WHERE kind = 'tasks_submitted'`))
	var tasks int64
	require.NoError(t, s.DB.Get(&tasks, `SELECT count(*) FROM tasks`))
	require.Equal(t, tasks, submitted)
}
