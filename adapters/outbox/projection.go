package outbox

// The consumer group of the projections, and the projections it feeds. A
// projection's name is its row in projector_positions.
const (
	// ProjectionsGroup is the watermill-sql consumer group that feeds every
	// projection. Migration 0006 creates its offsets row, so the janitor
	// waits for it from the start.
	ProjectionsGroup = "projections"
	// QueueStatsProjection maintains what GET /queues/v1 serves.
	QueueStatsProjection = "queue_stats"
	// MetricsProjection maintains the counters and histograms of GET /metrics.
	MetricsProjection = "metrics"
)

// projection is one projection of the outbox: its name and how a summary
// of events changes its tables. Each projection keeps its own position, so a
// message is applied to each once, whatever the consumer group redelivers.
type projection struct {
	name string
	// write adds to st the statement parts that apply sum, each writing
	// only if the expression guard returns a row.
	write func(sum *summary, st *statement, guard string)
}

// projections are the built-in projections, in the order they are applied.
func projections() []projection {
	return []projection{
		{name: QueueStatsProjection, write: writeQueueStats},
		{name: MetricsProjection, write: writeMetrics},
	}
}

// projectionNames are the names of the built-in projections.
func projectionNames() []string {
	var out []string
	for _, p := range projections() {
		out = append(out, p.name)
	}
	return out
}

func projectionNamed(name string) (projection, bool) {
	for _, p := range projections() {
		if p.name == name {
			return p, true
		}
	}
	return projection{}, false
}
