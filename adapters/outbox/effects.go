package outbox

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/domain/event"
)

// What one event changes in the projections. These functions are the only
// place that interprets events; both projections use them.

// counterKey identifies a cumulative counter.
type counterKey struct {
	kind   metrics.CounterKind
	queue  string
	reason string
}

const (
	statusPending = "PENDING"
	statusDead    = "DEAD"
	statusBlocked = "BLOCKED"
)

// countersOf returns the counters e increments by one each.
//
// Beyond the counter of its type, every transition into DEAD counts as
// dead-lettered with its reason (a failure on the last attempt, a
// non-retryable failure, a dead worker, a deadline, a cancellation), and
// every transition of an existing task back to PENDING counts as requeued
// with its reason (failed, worker_dead, lease_expired, orphaned, retried),
// but for BLOCKED -> PENDING: an unblocked task goes forward, not back.
func countersOf(e event.Event) []counterKey {
	var out []counterKey
	add := func(kind metrics.CounterKind, queue, reason string) {
		out = append(out, counterKey{kind, queue, reason})
	}
	switch e.Type {
	case event.TaskSubmitted:
		add(metrics.TasksSubmitted, e.Queue, "")
	case event.TaskClaimed:
		add(metrics.TasksClaimed, e.Queue, "")
	case event.TaskCompleted:
		add(metrics.TasksCompleted, e.Queue, "")
	case event.TaskFailed:
		add(metrics.TasksFailed, e.Queue, "")
	case event.TaskCleaned:
		add(metrics.TasksCleaned, e.Queue, "")
	case event.WorkerRegistered:
		if len(e.Queues) == 0 {
			add(metrics.WorkersRegistered, metrics.AnyQueue, "")
		}
		for _, q := range e.Queues {
			add(metrics.WorkersRegistered, q, "")
		}
	case event.WorkerDied:
		add(metrics.WorkersDied, "", "")
	case event.WorkerCleaned:
		add(metrics.WorkersCleaned, "", "")
	case event.ScheduleTickSkipped:
		add(metrics.ScheduleTicksSkipped, e.Queue, e.Schedule)
	}
	if isTaskEvent(e) {
		switch {
		case e.To == statusDead && e.From != statusDead:
			add(metrics.TasksDeadLettered, e.Queue, e.Reason)
		case e.To == statusPending && e.From != "" && e.From != statusPending && e.From != statusBlocked:
			add(metrics.TasksRequeued, e.Queue, e.Reason)
		}
	}
	return out
}

var posInf = math.Inf(1)

// Rate kinds: what the per-minute buckets count (queue_rate_buckets.kind).
const (
	rateEnqueued     = "enqueued"
	rateClaimed      = "claimed"
	rateCompleted    = "completed"
	rateDeadLettered = "dead_lettered"
)

// rateKindsOf returns the per-minute bucket kinds e counts in.
func rateKindsOf(e event.Event) []string {
	var out []string
	switch e.Type {
	case event.TaskSubmitted:
		out = append(out, rateEnqueued)
	case event.TaskClaimed:
		out = append(out, rateClaimed)
	case event.TaskCompleted:
		out = append(out, rateCompleted)
	}
	if isTaskEvent(e) && e.To == statusDead && e.From != statusDead {
		out = append(out, rateDeadLettered)
	}
	return out
}

// durationKinds are the histograms of an event's durations, in the order
// of durationsOf.
var durationKinds = [3]metrics.HistogramKind{metrics.TaskQueueWait, metrics.TaskExecutionDuration, metrics.TaskEndToEndDuration}

// durationsOf returns the durations e carries (nil where it carries none),
// in the order of durationKinds. Only task events are observed (observes).
func durationsOf(e event.Event) [3]*float64 {
	return [3]*float64{e.QueueWaitSeconds, e.ExecutionSeconds, e.EndToEndSeconds}
}

// observes reports whether e's durations go into the histograms.
func observes(e event.Event) bool { return isTaskEvent(e) }

// bucketIndex returns the index of the histogram bucket of v in
// metrics.DurationBuckets (len(metrics.DurationBuckets) for +Inf).
func bucketIndex(v float64) int {
	i, _ := slices.BinarySearch(metrics.DurationBuckets, v)
	return i
}

// bucketBound returns the upper bound of bucket i.
func bucketBound(i int) float64 {
	if i == len(metrics.DurationBuckets) {
		return posInf
	}
	return metrics.DurationBuckets[i]
}

// minuteOf returns the start of the minute of t (database time).
func minuteOf(t time.Time) time.Time { return t.Truncate(time.Minute).UTC() }

func isTaskEvent(e event.Event) bool {
	return strings.HasPrefix(string(e.Type), "task.") && e.Queue != ""
}

func isWorkerEvent(e event.Event) bool {
	return strings.HasPrefix(string(e.Type), "worker.")
}
