package outbox

import (
	"strconv"
	"strings"
	"time"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/domain/event"
)

// Events of one class change the same rows of every projection: a class is
// an event's type, queue, worker queues, statuses, reason and minute, all
// that the projections read but its durations (and, for schedule events,
// its schedule). A batch of thousands of
// events has a handful of classes, so the projections count events per
// class (an array increment per event) and interpret each class once.

// eventClass is the comparable key of a class.
type eventClass struct {
	typ              event.Type
	queue            string
	queues           string // the worker's queues, each length-prefixed
	from, to, reason string
	schedule         string
	minute           int64 // unix time of the start of the minute
}

// compactEvent is an event reduced to its class and durations.
type compactEvent struct {
	class int32
	// has says which durations (bit i: durationKinds[i]) the event carries.
	has       uint8
	durations [3]float64
}

// classTable interns the classes of a batch.
type classTable struct {
	index map[eventClass]int32
	// last is the last class interned (consecutive events share it).
	last      eventClass
	lastClass int32
	// keys and reps are each class's key and a representative event: its
	// fields, with OccurredAt the start of the minute and no durations.
	keys []eventClass
	reps []event.Event
}

func newClassTable() *classTable { return &classTable{index: map[eventClass]int32{}, lastClass: -1} }

// intern returns the class of key, adding it (with rep, built only when
// new) if needed.
func (t *classTable) intern(key eventClass, rep func() event.Event) int32 {
	if t.lastClass >= 0 && key == t.last {
		return t.lastClass
	}
	c, ok := t.index[key]
	if !ok {
		c = int32(len(t.reps))
		t.index[key] = c
		t.keys = append(t.keys, key)
		t.reps = append(t.reps, rep())
	}
	t.last, t.lastClass = key, c
	return c
}

// compact reduces e to its class and durations.
func (t *classTable) compact(e event.Event) compactEvent {
	minute := minuteOf(e.OccurredAt)
	key := eventClass{typ: e.Type, queue: e.Queue, queues: joinQueues(e.Queues), from: e.From, to: e.To,
		reason: e.Reason, schedule: e.Schedule, minute: minute.Unix()}
	ce := compactEvent{class: t.intern(key, func() event.Event {
		return event.Event{Type: e.Type, Queue: e.Queue, Queues: e.Queues, From: e.From, To: e.To, Reason: e.Reason,
			Schedule: e.Schedule, OccurredAt: minute}
	})}
	for i, d := range durationsOf(e) {
		if d != nil {
			ce.has |= 1 << i
			ce.durations[i] = *d
		}
	}
	return ce
}

// compactScanned reduces a scanned event to its class and durations.
func (t *classTable) compactScanned(e *scannedEvent) compactEvent {
	key := eventClass{typ: event.Type(e.typ), queue: e.queue, queues: joinQueues(e.queues), from: e.from, to: e.to,
		reason: e.reason, schedule: e.schedule, minute: e.minute}
	return compactEvent{
		class: t.intern(key, func() event.Event {
			return event.Event{Type: key.typ, Queue: e.queue, Queues: e.queues, From: e.from, To: e.to, Reason: e.reason,
				Schedule: e.schedule, OccurredAt: time.Unix(e.minute, 0).UTC()}
		}),
		has:       e.has,
		durations: e.durations,
	}
}

// joinQueues encodes a worker's queues into one comparable string.
func joinQueues(queues []string) string {
	if queues == nil {
		return ""
	}
	var b strings.Builder
	b.WriteByte('[') // an empty list differs from none
	for _, q := range queues {
		b.WriteString(strconv.Itoa(len(q)))
		b.WriteByte(':')
		b.WriteString(q)
	}
	return b.String()
}

// durationAgg aggregates the observations of one histogram.
type durationAgg struct {
	// buckets counts observations per bucket (bucketIndex).
	buckets []int64
	sum     float64
	n       int64
}

// summary is what a run of messages says, aggregated per class: how many
// events, and their durations.
type summary struct {
	table     *classTable
	counts    []int64
	durations []*[3]durationAgg
}

func newSummary(t *classTable) *summary {
	return &summary{table: t, counts: make([]int64, len(t.reps)), durations: make([]*[3]durationAgg, len(t.reps))}
}

// add adds events.
func (s *summary) add(events []compactEvent) {
	for _, e := range events {
		s.counts[e.class]++
		if e.has == 0 {
			continue
		}
		d := s.durations[e.class]
		if d == nil {
			d = &[3]durationAgg{}
			for i := range d {
				d[i].buckets = make([]int64, len(metrics.DurationBuckets)+1)
			}
			s.durations[e.class] = d
		}
		for i := range durationKinds {
			if e.has&(1<<i) != 0 {
				v := max(e.durations[i], 0)
				d[i].buckets[bucketIndex(v)]++
				d[i].sum += v
				d[i].n++
			}
		}
	}
}

// each calls fn with each class that has events: its representative event
// and how many events it has.
func (s *summary) each(fn func(rep event.Event, n int64)) {
	for c, n := range s.counts {
		if n != 0 {
			fn(s.table.reps[c], n)
		}
	}
}

// eachDuration calls fn with each histogram of each class that has
// observations.
func (s *summary) eachDuration(fn func(rep event.Event, kind metrics.HistogramKind, agg *durationAgg)) {
	for c, d := range s.durations {
		if d == nil {
			continue
		}
		for i := range d {
			if d[i].n > 0 {
				fn(s.table.reps[c], durationKinds[i], &d[i])
			}
		}
	}
}

// Batch is a run of outbox messages in delivery order, with the classes of
// their events.
type Batch struct {
	Messages []Message
	classes  *classTable
}

func newBatch() *Batch { return &Batch{classes: newClassTable()} }

// add appends a message whose events were decoded by encoding/json (or could
// not be: decodeErr).
func (b *Batch) add(pos Position, payload []byte, events []event.Event, decodeErr error) {
	m := Message{Position: pos, Payload: payload, DecodeErr: decodeErr}
	for _, e := range events {
		m.events = append(m.events, b.classes.compact(e))
	}
	b.Messages = append(b.Messages, m)
}
