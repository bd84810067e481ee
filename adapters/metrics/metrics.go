// Package metrics is the Prometheus adapter: a custom registry with the
// lifecycle counters and histograms projected from the outbox, gauges read
// from the statistics tables, HTTP request durations, and the Go runtime,
// process and connection pool collectors.
//
// Lifecycle counters and histograms are not kept in process memory: the
// metrics projector (adapters/outbox) accumulates them in tables, exactly once
// per event, and the collector reads those tables at scrape time. So they
// survive restarts, start where they left off on a new instance, and every
// instance reports the same values (aggregate them across instances with max,
// not sum).
package metrics

import (
	"context"
	"database/sql"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.uber.org/zap"
)

// Namespace prefixes every Taskmaster metric name.
const Namespace = "taskmaster"

// CounterKind names a cumulative counter the metrics projection keeps. Its
// Prometheus name is taskmaster_<kind>_total.
type CounterKind string

// Counter kinds. The comment gives the Prometheus labels.
const (
	// TasksSubmitted counts new tasks {queue}.
	TasksSubmitted CounterKind = "tasks_submitted"
	// TasksClaimed counts claims {queue}.
	TasksClaimed CounterKind = "tasks_claimed"
	// TasksCompleted counts completions {queue}.
	TasksCompleted CounterKind = "tasks_completed"
	// TasksFailed counts failures reported by workers {queue}, retried or not.
	TasksFailed CounterKind = "tasks_failed"
	// TasksDeadLettered counts transitions to DEAD {queue, reason}.
	TasksDeadLettered CounterKind = "tasks_dead_lettered"
	// TasksRequeued counts transitions back to PENDING {queue, reason}:
	// failed (retry after backoff), worker_dead, lease_expired, orphaned,
	// retried (operator).
	TasksRequeued CounterKind = "tasks_requeued"
	// TasksCleaned counts tasks deleted by retention (no labels).
	TasksCleaned CounterKind = "tasks_cleaned"
	// WorkersRegistered counts registrations {queue}, once per registered
	// queue; a worker registered for every queue counts under queue="*".
	WorkersRegistered CounterKind = "workers_registered"
	// WorkersDied counts workers declared dead (no labels).
	WorkersDied CounterKind = "workers_died"
	// WorkersCleaned counts dead workers deleted by retention (no labels).
	WorkersCleaned CounterKind = "workers_cleaned"
	// ScheduleTicksSkipped counts due ticks of recurring schedules that
	// created no task {queue, schedule} (stored with the schedule's name as
	// the reason).
	ScheduleTicksSkipped CounterKind = "schedule_ticks_skipped"
)

// AnyQueue is the queue label of a worker registered for every queue.
const AnyQueue = "*"

// HistogramKind names a duration histogram the metrics projection keeps. Its
// Prometheus name is taskmaster_<kind>_seconds, labelled {queue}.
type HistogramKind string

// Histogram kinds.
const (
	// TaskQueueWait observes claimed_at - created_at on every claim.
	TaskQueueWait HistogramKind = "task_queue_wait"
	// TaskExecutionDuration observes finished - claimed_at whenever a running
	// attempt ends (completed, failed, requeued or dead-lettered).
	TaskExecutionDuration HistogramKind = "task_execution_duration"
	// TaskEndToEndDuration observes terminal time - created_at when a task
	// reaches DONE or DEAD, across retries.
	TaskEndToEndDuration HistogramKind = "task_end_to_end_duration"
)

// DurationBuckets are the upper bounds, in seconds, of the duration
// histograms: from 5 ms to a day, since tasks may wait or run for hours.
var DurationBuckets = []float64{
	0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60,
	120, 300, 600, 1800, 3600, 7200, 21600, 86400,
}

// Counter is one stored counter value.
type Counter struct {
	Kind   CounterKind
	Queue  string
	Reason string
	Value  float64
}

// Bucket is one non-cumulative histogram bucket.
type Bucket struct {
	// UpperBound is the bucket's inclusive upper bound (+Inf for the last).
	UpperBound float64
	// Count is the number of observations in this bucket alone.
	Count uint64
}

// Histogram is one stored histogram.
type Histogram struct {
	Kind    HistogramKind
	Queue   string
	Buckets []Bucket
	Sum     float64
}

// TaskCount is the number of tasks of a queue in a status.
type TaskCount struct {
	Queue  string
	Status string
	Count  float64
}

// WorkerCount is the number of workers in a status.
type WorkerCount struct {
	Status string
	Count  float64
}

// ConsumerLag is how far an outbox consumer group is behind.
type ConsumerLag struct {
	ConsumerGroup string
	// OldestUnconsumedSeconds is the age of the oldest event the group has
	// not consumed yet (0 when it is caught up).
	OldestUnconsumedSeconds float64
}

// PoisonCount is how many outbox messages a projection has set aside.
type PoisonCount struct {
	Projection string
	Count      float64
}

// Snapshot is everything the collector reads at scrape time.
type Snapshot struct {
	Counters   []Counter
	Histograms []Histogram
	Tasks      []TaskCount
	Workers    []WorkerCount
	Lags       []ConsumerLag
	Poison     []PoisonCount
}

// Source reads a Snapshot from storage.
type Source interface {
	// Snapshot reads everything at once. Its per-queue figures of the
	// queues without series of their own (series.Assign; the source passes
	// it the queues it sees unless series.Full()) come summed under
	// OtherQueue.
	Snapshot(ctx context.Context, series *QueueSeries) (*Snapshot, error)
}

// Params are what NewRegistry needs.
type Params struct {
	// Source provides the projected counters, histograms and gauges.
	Source Source
	// DB, when set, adds the connection pool statistics.
	DB *sql.DB
	// Logger logs scrape errors.
	Logger *zap.Logger
	// ScrapeTimeout bounds the reads of one scrape (default 5 s).
	ScrapeTimeout time.Duration
	// Streams, when set, reports this process's event streams.
	Streams func() StreamStats
	// MaxQueueSeries is how many queues have per-queue series of their own
	// (0: DefaultMaxQueueSeries); the others are summed under
	// queue="_other" (QueueSeries).
	MaxQueueSeries int
}

// StreamStats are the event streams' figures of one process.
type StreamStats struct {
	// Open is how many streams are open.
	Open int64
	// Reads counts the shared reader's reads of the outbox, CatchUpReads
	// those of streams catching up from an older cursor on their own.
	Reads, CatchUpReads int64
	// Dropped counts streams ended for reading too slowly, Refused the
	// streams refused for want of room.
	Dropped, Refused int64
}

// Registry is Taskmaster's Prometheus registry.
type Registry struct {
	reg          *prometheus.Registry
	httpDuration *prometheus.HistogramVec
	pushDuration *prometheus.HistogramVec
	// The shared transactions (ObserveBatch).
	batchRequests, batchWait, batchRun *prometheus.HistogramVec
	logger                             *zap.Logger
}

// NewRegistry builds the registry with every collector registered.
func NewRegistry(p Params) *Registry {
	if p.Logger == nil {
		p.Logger = zap.NewNop()
	}
	if p.ScrapeTimeout <= 0 {
		p.ScrapeTimeout = 5 * time.Second
	}
	r := &Registry{
		reg:    prometheus.NewRegistry(),
		logger: p.Logger,
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "http_request_duration_seconds",
			Help:      "Duration of HTTP requests by route template, method and status.",
			Buckets:   prometheus.DefBuckets,
		}, []string{"route", "method", "status"}),
		pushDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "push_delivery_seconds",
			Help:      "Duration of this instance's push deliveries by queue and response status class (2xx, 3xx, 4xx, 5xx; none: timeout or connection error).",
			Buckets:   prometheus.DefBuckets,
		}, []string{"queue", "status_class"}),
		batchRequests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "shared_transaction_requests",
			Help:      "Requests each shared transaction of this instance served, by kind (claim: claims with the reports they carry; report: completions, failures and releases; await: checks of awaited tasks).",
			Buckets:   prometheus.ExponentialBuckets(1, 2, 11),
		}, []string{"kind"}),
		batchWait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "shared_transaction_wait_seconds",
			Help:      "How long each request waited for its shared transaction to start (for the running one of its kind to end), by kind.",
			Buckets:   batchSeconds,
		}, []string{"kind"}),
		batchRun: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace,
			Name:      "shared_transaction_seconds",
			Help:      "How long each shared transaction ran until its requests could be answered (statements, commit and the application's work between them), by kind.",
			Buckets:   batchSeconds,
		}, []string{"kind"}),
	}
	r.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		r.httpDuration,
		r.pushDuration,
		r.batchRequests,
		r.batchWait,
		r.batchRun,
	)
	if p.DB != nil {
		r.reg.MustRegister(collectors.NewDBStatsCollector(p.DB, Namespace))
	}
	if p.Source != nil {
		r.reg.MustRegister(newSnapshotCollector(p.Source, p.ScrapeTimeout, NewQueueSeries(p.MaxQueueSeries)))
	}
	if p.Streams != nil {
		r.reg.MustRegister(newStreamsCollector(p.Streams))
	}
	return r
}

// streamsCollector reports the event streams of this process.
type streamsCollector struct {
	stats            func() StreamStats
	open, reads      *prometheus.Desc
	dropped, refused *prometheus.Desc
}

func newStreamsCollector(stats func() StreamStats) *streamsCollector {
	return &streamsCollector{
		stats: stats,
		open:  prometheus.NewDesc(Namespace+"_event_streams", "Event streams (GET /events/v1) open on this instance.", nil, nil),
		reads: prometheus.NewDesc(Namespace+"_event_stream_reads_total",
			"Reads of the outbox for event streams: by the instance's one shared reader, or by streams catching up from an older cursor.",
			[]string{"reader"}, nil),
		dropped: prometheus.NewDesc(Namespace+"_event_streams_dropped_total",
			"Event streams ended because their client read too slowly.", nil, nil),
		refused: prometheus.NewDesc(Namespace+"_event_streams_refused_total",
			"Event streams refused (503) because the instance served as many as it may.", nil, nil),
	}
}

func (c *streamsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.open
	ch <- c.reads
	ch <- c.dropped
	ch <- c.refused
}

func (c *streamsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, float64(s.Open))
	ch <- prometheus.MustNewConstMetric(c.reads, prometheus.CounterValue, float64(s.Reads), "shared")
	ch <- prometheus.MustNewConstMetric(c.reads, prometheus.CounterValue, float64(s.CatchUpReads), "catch_up")
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(s.Dropped))
	ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue, float64(s.Refused))
}

// ObserveHTTP records one finished request; it has the shape of the HTTP
// adapter's ObserveFunc.
func (r *Registry) ObserveHTTP(route, method string, status int, elapsed time.Duration) {
	r.httpDuration.WithLabelValues(route, method, strconv.Itoa(status)).Observe(elapsed.Seconds())
}

// batchSeconds are the buckets of the shared transactions' times: 100 us
// to ~1.1 s, each 1.5 times the one before, fine enough to tell a 5 ms
// transaction from an 8 ms one.
var batchSeconds = prometheus.ExponentialBuckets(0.0001, 1.5, 24)

// ObserveBatch implements ports.BatchObserver:
// taskmaster_shared_transaction_requests, _wait_seconds (one observation per
// request) and _seconds.
func (r *Registry) ObserveBatch(kind string, waited []time.Duration, ran time.Duration) {
	r.batchRequests.WithLabelValues(kind).Observe(float64(len(waited)))
	r.batchRun.WithLabelValues(kind).Observe(ran.Seconds())
	wait := r.batchWait.WithLabelValues(kind)
	for _, d := range waited {
		wait.Observe(d.Seconds())
	}
}

// ObserveDelivery records one push delivery to queue's endpoint that got
// status (0: none) after latency.
func (r *Registry) ObserveDelivery(queue string, status int, latency time.Duration) {
	class := "none"
	if status >= 100 && status < 600 {
		class = strconv.Itoa(status/100) + "xx"
	}
	r.pushDuration.WithLabelValues(queue, class).Observe(latency.Seconds())
}

// InFlightFigures are what the requests served at the moment hold of the
// HTTP adapter's admission caps.
type InFlightFigures struct {
	Requests, Claims, Waits, BodyBytes int64
}

// ObserveInFlight exports what the requests served at the moment hold of
// the HTTP adapter's admission caps, read at scrape time from inFlight:
// taskmaster_http_requests_in_flight{class="requests"|"claims"|"waits"} and
// taskmaster_http_request_body_bytes_in_flight. Call it once.
func (r *Registry) ObserveInFlight(inFlight func() InFlightFigures) {
	r.reg.MustRegister(&inFlightCollector{read: inFlight})
}

var (
	inFlightRequestsDesc = prometheus.NewDesc(Namespace+"_http_requests_in_flight",
		"Requests being served, by admission class: claims (long polls included), waits (requests waiting for a task to finish, wait_ms) and the other requests (event streams and operational endpoints are not counted).",
		[]string{"class"}, nil)
	inFlightBodyBytesDesc = prometheus.NewDesc(Namespace+"_http_request_body_bytes_in_flight",
		"Request body bytes reserved by the requests being served.", nil, nil)
)

// inFlightCollector reads the admission counts at scrape time.
type inFlightCollector struct {
	read func() InFlightFigures
}

func (c *inFlightCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- inFlightRequestsDesc
	ch <- inFlightBodyBytesDesc
}

func (c *inFlightCollector) Collect(ch chan<- prometheus.Metric) {
	n := c.read()
	ch <- prometheus.MustNewConstMetric(inFlightRequestsDesc, prometheus.GaugeValue, float64(n.Requests), "requests")
	ch <- prometheus.MustNewConstMetric(inFlightRequestsDesc, prometheus.GaugeValue, float64(n.Claims), "claims")
	ch <- prometheus.MustNewConstMetric(inFlightRequestsDesc, prometheus.GaugeValue, float64(n.Waits), "waits")
	ch <- prometheus.MustNewConstMetric(inFlightBodyBytesDesc, prometheus.GaugeValue, float64(n.BodyBytes))
}

// Gatherer returns the registry, for tests and embedding.
func (r *Registry) Gatherer() prometheus.Gatherer { return r.reg }

// Handler serves the registry in the Prometheus exposition formats. A
// collector that fails is logged and left out; the rest is served.
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{
		ErrorLog:      zap.NewStdLog(r.logger.Named("metrics")),
		ErrorHandling: promhttp.ContinueOnError,
	})
}

// counterLabels are the Prometheus labels of each counter kind.
var counterLabels = map[CounterKind][]string{
	TasksSubmitted:    {"queue"},
	TasksClaimed:      {"queue"},
	TasksCompleted:    {"queue"},
	TasksFailed:       {"queue"},
	TasksDeadLettered: {"queue", "reason"},
	TasksRequeued:     {"queue", "reason"},
	TasksCleaned:      nil,
	WorkersRegistered: {"queue"},
	WorkersDied:       nil,
	WorkersCleaned:    nil,
	// Schedules are few and named by operators: a bounded label.
	ScheduleTicksSkipped: {"queue", "schedule"},
}

var counterHelp = map[CounterKind]string{
	TasksSubmitted:    "Tasks submitted.",
	TasksClaimed:      "Tasks claimed by workers.",
	TasksCompleted:    "Tasks completed.",
	TasksFailed:       "Task failures reported by workers (retried or not).",
	TasksDeadLettered: "Tasks moved to DEAD, by reason.",
	TasksRequeued:     "Tasks moved back to PENDING, by reason.",
	TasksCleaned:      "Finished tasks deleted by retention.",
	WorkersRegistered: "Worker registrations, per registered queue (* = any queue).",
	WorkersDied:       "Workers declared dead.",
	WorkersCleaned:    "Dead workers deleted by retention.",
	ScheduleTicksSkipped: "Due ticks of recurring schedules that created no task (overlap skip: the previous task was unfinished; " +
		"or an unfinished task held the template's unique key).",
}

// queueCounters are emitted, at zero if need be, for every queue that has
// any counter, so rate() has a starting point.
var queueCounters = []CounterKind{TasksSubmitted, TasksClaimed, TasksCompleted, TasksFailed}

// unlabelledCounters are always emitted, at zero if need be.
var unlabelledCounters = []CounterKind{TasksCleaned, WorkersDied, WorkersCleaned}

var histogramHelp = map[HistogramKind]string{
	TaskQueueWait:         "Time tasks waited from submission to claim (claimed_at - created_at).",
	TaskExecutionDuration: "Time a running attempt took (finished - claimed_at).",
	TaskEndToEndDuration:  "Time from submission to DONE or DEAD, across retries.",
}

// snapshotCollector turns a Snapshot read at scrape time into constant
// metrics. It is an unchecked collector: its label values depend on the data.
type snapshotCollector struct {
	src       Source
	series    *QueueSeries
	timeout   time.Duration
	counters  map[CounterKind]*prometheus.Desc
	histos    map[HistogramKind]*prometheus.Desc
	tasks     *prometheus.Desc
	workers   *prometheus.Desc
	lag       *prometheus.Desc
	poison    *prometheus.Desc
	readError *prometheus.Desc
}

func newSnapshotCollector(src Source, timeout time.Duration, series *QueueSeries) *snapshotCollector {
	c := &snapshotCollector{
		src:      src,
		series:   series,
		timeout:  timeout,
		counters: map[CounterKind]*prometheus.Desc{},
		histos:   map[HistogramKind]*prometheus.Desc{},
		tasks: prometheus.NewDesc(Namespace+"_tasks", "Tasks by queue and status (from the statistics projection).",
			[]string{"queue", "status"}, nil),
		workers: prometheus.NewDesc(Namespace+"_workers", "Workers by status (from the statistics projection).",
			[]string{"status"}, nil),
		lag: prometheus.NewDesc(Namespace+"_outbox_lag_seconds",
			"Age of the oldest outbox event a consumer group has not consumed yet (0 when caught up).",
			[]string{"consumer_group"}, nil),
		poison: prometheus.NewDesc(Namespace+"_outbox_poison_messages",
			"Outbox messages a projection set aside because it could not apply them; replay them once fixed (taskmaster outbox poison).",
			[]string{"projection"}, nil),
		readError: prometheus.NewDesc(Namespace+"_metrics_read_error", "Reading the projected metrics failed.", nil, nil),
	}
	for kind, labels := range counterLabels {
		c.counters[kind] = prometheus.NewDesc(Namespace+"_"+string(kind)+"_total", counterHelp[kind], labels, nil)
	}
	for kind, help := range histogramHelp {
		c.histos[kind] = prometheus.NewDesc(Namespace+"_"+string(kind)+"_seconds", help, []string{"queue"}, nil)
	}
	return c
}

// Describe sends nothing: the collector is unchecked.
func (c *snapshotCollector) Describe(chan<- *prometheus.Desc) {}

// Collect reads a snapshot and emits it.
func (c *snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	snap, err := c.src.Snapshot(ctx, c.series)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.readError, err)
		return
	}
	c.collectCounters(ch, snap.Counters)
	for _, h := range snap.Histograms {
		desc, ok := c.histos[h.Kind]
		if !ok {
			continue
		}
		count, cumulative := cumulate(h.Buckets)
		ch <- prometheus.MustNewConstHistogram(desc, count, h.Sum, cumulative, h.Queue)
	}
	for _, t := range snap.Tasks {
		ch <- prometheus.MustNewConstMetric(c.tasks, prometheus.GaugeValue, t.Count, t.Queue, t.Status)
	}
	for _, w := range snap.Workers {
		ch <- prometheus.MustNewConstMetric(c.workers, prometheus.GaugeValue, w.Count, w.Status)
	}
	for _, l := range snap.Lags {
		ch <- prometheus.MustNewConstMetric(c.lag, prometheus.GaugeValue, l.OldestUnconsumedSeconds, l.ConsumerGroup)
	}
	for _, p := range snap.Poison {
		ch <- prometheus.MustNewConstMetric(c.poison, prometheus.GaugeValue, p.Count, p.Projection)
	}
}

// collectCounters sums stored counters into each kind's label set (the
// storage may keep finer detail than the metric exposes) and fills in zeros.
func (c *snapshotCollector) collectCounters(ch chan<- prometheus.Metric, counters []Counter) {
	type series struct {
		kind   CounterKind
		labels string // the label values joined with \xff
	}
	values := map[series]float64{}
	labelValues := map[series][]string{}
	add := func(kind CounterKind, queue, reason string, v float64) {
		var lv []string
		for _, l := range counterLabels[kind] {
			switch l {
			case "queue":
				lv = append(lv, queue)
			case "reason", "schedule":
				lv = append(lv, reason)
			}
		}
		key := series{kind, strings.Join(lv, "\xff")}
		values[key] += v
		labelValues[key] = lv
	}
	queues := map[string]bool{}
	for _, k := range unlabelledCounters {
		add(k, "", "", 0)
	}
	for _, ctr := range counters {
		if _, ok := counterLabels[ctr.Kind]; !ok {
			continue
		}
		add(ctr.Kind, ctr.Queue, ctr.Reason, ctr.Value)
		if slices.Contains(queueCounters, ctr.Kind) || ctr.Kind == TasksDeadLettered || ctr.Kind == TasksRequeued {
			queues[ctr.Queue] = true
		}
	}
	for q := range queues {
		for _, k := range queueCounters {
			add(k, q, "", 0)
		}
	}
	for key, v := range values {
		ch <- prometheus.MustNewConstMetric(c.counters[key.kind], prometheus.CounterValue, v, labelValues[key]...)
	}
}

// cumulate turns non-cumulative buckets into the total count and the
// cumulative counts by finite upper bound that Prometheus expects.
func cumulate(buckets []Bucket) (uint64, map[float64]uint64) {
	sorted := slices.Clone(buckets)
	slices.SortFunc(sorted, func(a, b Bucket) int {
		switch {
		case a.UpperBound < b.UpperBound:
			return -1
		case a.UpperBound > b.UpperBound:
			return 1
		}
		return 0
	})
	out := make(map[float64]uint64, len(sorted))
	var total uint64
	for _, b := range sorted {
		total += b.Count
		if !math.IsInf(b.UpperBound, 1) {
			out[b.UpperBound] = total
		}
	}
	return total, out
}

// WaitFigures are the waiting claims of one process and the wake-ups its
// notifier handed out (cumulative), by reason.
type WaitFigures struct {
	Waiting                         int64
	Notified, Due, Everyone, Passed int64
	DuePending, DueDropped          int64
	// Awaiting are the producers waiting for a task to finish; Finished
	// the wake-ups announced ends gave them.
	Awaiting, Finished int64
}

// ObserveWaits exports the waiting claims of this process, read at scrape
// time from stats: taskmaster_claims_waiting,
// taskmaster_claim_wakeups_total{reason}, taskmaster_claim_due_wakeups and
// taskmaster_claim_due_wakeups_dropped_total, and the producers waiting
// for tasks to finish: taskmaster_task_waiters and
// taskmaster_task_waiter_wakeups_total. Call it once.
func (r *Registry) ObserveWaits(stats func() WaitFigures) {
	r.reg.MustRegister(&waitsCollector{stats: stats})
}

var (
	waitingDesc = prometheus.NewDesc(Namespace+"_claims_waiting",
		"Long-poll claims waiting for work on this instance.", nil, nil)
	wakeupsDesc = prometheus.NewDesc(Namespace+"_claim_wakeups_total",
		"Waiting claims woken on this instance: notified (tasks became claimable, one waiter per task), due (delayed tasks fell due), everyone (a queue resumed or loosened, or notifications may have been lost), passed (a woken claim could not use its wake-up).",
		[]string{"reason"}, nil)
	dueDesc = prometheus.NewDesc(Namespace+"_claim_due_wakeups",
		"Wake-ups of delayed tasks this instance holds until they fall due.", nil, nil)
	dueDroppedDesc = prometheus.NewDesc(Namespace+"_claim_due_wakeups_dropped_total",
		"Wake-ups of delayed tasks not held for want of room (waiting claims find those tasks by polling).", nil, nil)
	taskWaitersDesc = prometheus.NewDesc(Namespace+"_task_waiters",
		"Requests waiting on this instance for a task to finish (GET or POST with wait_ms).", nil, nil)
	taskWaiterWakeupsDesc = prometheus.NewDesc(Namespace+"_task_waiter_wakeups_total",
		"Requests waiting for a task that this instance woke because the task's end was announced (or announcements may have been lost).", nil, nil)
)

// waitsCollector reads the waiting claims' figures at scrape time.
type waitsCollector struct {
	stats func() WaitFigures
}

func (c *waitsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- waitingDesc
	ch <- wakeupsDesc
	ch <- dueDesc
	ch <- dueDroppedDesc
	ch <- taskWaitersDesc
	ch <- taskWaiterWakeupsDesc
}

func (c *waitsCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.stats()
	ch <- prometheus.MustNewConstMetric(waitingDesc, prometheus.GaugeValue, float64(s.Waiting))
	for _, w := range []struct {
		reason string
		n      int64
	}{{"notified", s.Notified}, {"due", s.Due}, {"everyone", s.Everyone}, {"passed", s.Passed}} {
		ch <- prometheus.MustNewConstMetric(wakeupsDesc, prometheus.CounterValue, float64(w.n), w.reason)
	}
	ch <- prometheus.MustNewConstMetric(dueDesc, prometheus.GaugeValue, float64(s.DuePending))
	ch <- prometheus.MustNewConstMetric(dueDroppedDesc, prometheus.CounterValue, float64(s.DueDropped))
	ch <- prometheus.MustNewConstMetric(taskWaitersDesc, prometheus.GaugeValue, float64(s.Awaiting))
	ch <- prometheus.MustNewConstMetric(taskWaiterWakeupsDesc, prometheus.CounterValue, float64(s.Finished))
}

// ReadFigures say where this process serves the reads that may lag: on the
// read replica or the primary, and how far behind the replica was at its
// last check (LagKnown false when the check failed).
type ReadFigures struct {
	OnReplica bool
	Lag       time.Duration
	LagKnown  bool
}

// ObserveReads exports, read at scrape time from figures,
// taskmaster_read_replica_in_use (1 while the reads that may lag go to the
// read replica, 0 while the primary serves them) and
// taskmaster_read_replica_lag_seconds (absent while the replica cannot be
// checked). Call it once, and only with a read replica configured.
func (r *Registry) ObserveReads(figures func() ReadFigures) {
	r.reg.MustRegister(&readsCollector{figures: figures})
}

var (
	replicaInUseDesc = prometheus.NewDesc(Namespace+"_read_replica_in_use",
		"1 while the reads that may lag (listings, queue statistics, dashboard pages) go to the read replica, 0 while the primary serves them.", nil, nil)
	replicaLagDesc = prometheus.NewDesc(Namespace+"_read_replica_lag_seconds",
		"How far behind the primary the read replica was at its last check (an upper bound: the age of the last transaction it replayed while it had not replayed all it received); absent while it cannot be checked.", nil, nil)
)

// readsCollector reads the read replica's figures at scrape time.
type readsCollector struct {
	figures func() ReadFigures
}

func (c *readsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- replicaInUseDesc
	ch <- replicaLagDesc
}

func (c *readsCollector) Collect(ch chan<- prometheus.Metric) {
	f := c.figures()
	inUse := 0.0
	if f.OnReplica {
		inUse = 1
	}
	ch <- prometheus.MustNewConstMetric(replicaInUseDesc, prometheus.GaugeValue, inUse)
	if f.LagKnown {
		ch <- prometheus.MustNewConstMetric(replicaLagDesc, prometheus.GaugeValue, f.Lag.Seconds())
	}
}
