package metrics

import (
	"cmp"
	"slices"
	"sync"
)

// OtherQueue is the queue label under which the queues without series of
// their own are summed (QueueSeries).
const OtherQueue = "_other"

// DefaultMaxQueueSeries is how many queues have series of their own unless
// configured (Params.MaxQueueSeries).
const DefaultMaxQueueSeries = 1000

// QueueActivity is how busy a queue is, to rank the queues that compete for
// series of their own.
type QueueActivity struct {
	Queue string
	// Recent counts its enqueued, claimed and completed tasks of the last
	// minutes.
	Recent int64
	// Backlog is its PENDING and RUNNING tasks.
	Backlog int64
}

// QueueSeries decides which queues have per-queue series of their own, so
// that /metrics stays usable with 100,000 queues: at most max queues do; the
// others are summed under queue="_other".
//
// Counters must never go down within a series, so a queue never moves
// between its own series and _other while the process runs: queues are
// given series of their own as they are first seen, while there is room;
// when more new queues are seen at once than there is room for, the most
// active (QueueActivity) get the room left; from then on the set is full
// and fixed, and every queue not in it, however busy later, is summed under
// _other, which therefore only gains. A restart chooses anew (Prometheus
// reads a restart as a counter reset anyway). A real queue named _other
// never has series of its own: it would be indistinguishable from the sum.
type QueueSeries struct {
	max  int
	mu   sync.Mutex
	own  map[string]bool
	full bool
}

// NewQueueSeries returns the decision for at most max queues (0 or less:
// DefaultMaxQueueSeries).
func NewQueueSeries(max int) *QueueSeries {
	if max <= 0 {
		max = DefaultMaxQueueSeries
	}
	return &QueueSeries{max: max, own: map[string]bool{}}
}

// Full reports whether no queue will be given series of its own any more:
// the candidates need not be read.
func (s *QueueSeries) Full() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.full
}

// Assign gives series of their own to the new queues among seen, the most
// active first, while there is room, and returns every queue that has
// series of its own (in no particular order).
func (s *QueueSeries) Assign(seen []QueueActivity) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.full {
		var fresh []QueueActivity
		for _, q := range seen {
			if !s.own[q.Queue] && q.Queue != OtherQueue && q.Queue != "" && q.Queue != AnyQueue {
				fresh = append(fresh, q)
			}
		}
		slices.SortFunc(fresh, func(a, b QueueActivity) int {
			return cmp.Or(cmp.Compare(b.Recent, a.Recent), cmp.Compare(b.Backlog, a.Backlog), cmp.Compare(a.Queue, b.Queue))
		})
		for _, q := range fresh {
			if len(s.own) == s.max {
				s.full = true
				break
			}
			s.own[q.Queue] = true
		}
	}
	out := make([]string, 0, len(s.own))
	for q := range s.own {
		out = append(out, q)
	}
	return out
}
