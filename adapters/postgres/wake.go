package postgres

import (
	"container/heap"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
)

// A wake-up notification (NotifyChannel) names one queue and what a
// committed transaction made claimable there, so that each instance wakes
// as many waiting claims as there are tasks, not every claim waiting on the
// queue, and wakes them again when delayed tasks fall due:
//
//	queue                   anything may have changed: every waiter looks
//	queue N                 N tasks became claimable now
//	queue N d1:c1,d2:c2     and c1 tasks fall due in d1 ms, c2 in d2 ms, ...
//
// Queue names hold no spaces (task.QueueNameSet). Delays count from the
// transaction's now(), before its commit, so a receiver that starts the
// delay when the notification arrives (after the commit) never wakes a
// waiter before the database's clock reaches the task's run_at.

// maxWakeDelays bounds the delays one notification lists: delays are
// rounded up to ever coarser steps (1 ms, 10 ms, 100 ms, ...) until no more
// distinct ones remain. Rounding up wakes late, never early.
const maxWakeDelays = 32

// queueWake is what one transaction made claimable in one queue.
type queueWake struct {
	everyone bool
	now      int
	// later counts the tasks by run_at (Unix nanoseconds).
	later map[int64]int
}

// wakeMessage is a parsed notification.
type wakeMessage struct {
	queue    string
	everyone bool
	now      int
	delays   []wakeDelay
}

// wakeDelay is a count of tasks falling due after a delay.
type wakeDelay struct {
	after time.Duration
	count int
}

// payload encodes w for queue with delays counted from now.
func (w *queueWake) payload(queue string, now time.Time) string {
	if w.everyone {
		return queue
	}
	n := w.now
	delays := map[int64]int{} // in milliseconds, rounded up
	for at, c := range w.later {
		if d := at - now.UnixNano(); d > 0 {
			delays[(d+int64(time.Millisecond)-1)/int64(time.Millisecond)] += c
		} else {
			n += c
		}
	}
	var b strings.Builder
	b.WriteString(queue)
	b.WriteByte(' ')
	b.WriteString(strconv.Itoa(n))
	for step := int64(10); len(delays) > maxWakeDelays; step *= 10 {
		coarse := make(map[int64]int, len(delays))
		for d, c := range delays {
			coarse[(d+step-1)/step*step] += c
		}
		delays = coarse
	}
	if len(delays) > 0 {
		keys := make([]int64, 0, len(delays))
		for d := range delays {
			keys = append(keys, d)
		}
		slices.Sort(keys)
		for i, d := range keys {
			if i == 0 {
				b.WriteByte(' ')
			} else {
				b.WriteByte(',')
			}
			b.WriteString(strconv.FormatInt(d, 10))
			b.WriteByte(':')
			b.WriteString(strconv.Itoa(delays[d]))
		}
	}
	return b.String()
}

// add counts one task made PENDING with run_at at.
func (w *queueWake) add(at time.Time) {
	if at.IsZero() {
		w.now++
		return
	}
	if w.later == nil {
		w.later = map[int64]int{}
	}
	w.later[at.UnixNano()]++
}

// parseWake reads a notification's payload. Anything it does not
// understand wakes every waiter on the queue it names.
func parseWake(payload string) wakeMessage {
	fields := strings.Fields(payload)
	if len(fields) == 0 {
		return wakeMessage{everyone: true}
	}
	m := wakeMessage{queue: fields[0]}
	if len(fields) == 1 || len(fields) > 3 {
		m.everyone = true
		return m
	}
	n, err := strconv.Atoi(fields[1])
	if err != nil || n < 0 {
		return wakeMessage{queue: fields[0], everyone: true}
	}
	m.now = n
	if len(fields) == 3 {
		for _, part := range strings.Split(fields[2], ",") {
			d, c, ok := strings.Cut(part, ":")
			ms, err1 := strconv.ParseInt(d, 10, 64)
			count, err2 := strconv.Atoi(c)
			if !ok || err1 != nil || err2 != nil || ms < 0 || ms > math.MaxInt64/int64(time.Millisecond) || count < 1 {
				return wakeMessage{queue: fields[0], everyone: true}
			}
			m.delays = append(m.delays, wakeDelay{after: time.Duration(ms) * time.Millisecond, count: count})
		}
	}
	return m
}

// dueWakes are the wake-ups of delayed tasks, earliest first. Those of one
// queue within dueGrain of each other are merged (rounded up: never early).
type dueWakes struct {
	h     dueHeap
	byKey map[dueKey]*dueWake
}

type dueWake struct {
	at    time.Time
	queue string
	count int
	unit  int64 // at in dueGrain units
}

type dueKey struct {
	queue string
	unit  int64
}

const (
	dueGrain = 10 * time.Millisecond
	// maxDueWakes bounds the delayed wake-ups an instance holds; the tasks
	// of those it cannot hold are found by the waiting claims' polls.
	maxDueWakes = 100_000
)

// add holds a wake-up of count waiters of queue at at; false when full.
func (d *dueWakes) add(at time.Time, queue string, count int) bool {
	unit := (at.UnixNano() + int64(dueGrain) - 1) / int64(dueGrain)
	k := dueKey{queue: queue, unit: unit}
	if w := d.byKey[k]; w != nil {
		w.count += count
		return true
	}
	if len(d.h) >= maxDueWakes {
		return false
	}
	if d.byKey == nil {
		d.byKey = map[dueKey]*dueWake{}
	}
	w := &dueWake{at: time.Unix(0, unit*int64(dueGrain)), queue: queue, count: count, unit: unit}
	heap.Push(&d.h, w)
	d.byKey[k] = w
	return true
}

// popDue removes and returns the wake-ups due at now.
func (d *dueWakes) popDue(now time.Time) []*dueWake {
	var out []*dueWake
	for len(d.h) > 0 && !d.h[0].at.After(now) {
		w := heap.Pop(&d.h).(*dueWake)
		delete(d.byKey, dueKey{queue: w.queue, unit: w.unit})
		out = append(out, w)
	}
	return out
}

// arm sets t to fire when the earliest wake-up is due (in an hour when
// none is held: the loop arms it again after every event).
func (d *dueWakes) arm(t *time.Timer, now time.Time) {
	if len(d.h) == 0 {
		t.Reset(time.Hour)
		return
	}
	t.Reset(max(0, d.h[0].at.Sub(now)))
}

func (d *dueWakes) len() int { return len(d.h) }

// dueHeap is a container/heap of wake-ups by time.
type dueHeap []*dueWake

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(*dueWake)) }
func (h *dueHeap) Pop() any {
	old := *h
	w := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return w
}

// FinishedChannel is the notification channel on which committed
// transactions announce the ends (DONE, DEAD, or purged) of awaited tasks
// (task.Task.Awaited): the payload lists their ids, comma-separated.
const FinishedChannel = "taskmaster_finished"

// maxFinishedPerNotification bounds the ids of one notification: 200 ids
// of 36 characters and their commas stay below PostgreSQL's 8,000-byte
// payload limit.
const maxFinishedPerNotification = 200

// finishedPayloads encodes ids as the payloads of FinishedChannel.
func finishedPayloads(ids []uuid.UUID) pq.StringArray {
	var out pq.StringArray
	for len(ids) > 0 {
		n := min(len(ids), maxFinishedPerNotification)
		var b strings.Builder
		for i, id := range ids[:n] {
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(id.String())
		}
		out = append(out, b.String())
		ids = ids[n:]
	}
	return out
}

// parseFinished reads a FinishedChannel payload; ids it cannot read are
// left out (their waiters find out at their safety check).
func parseFinished(payload string) []uuid.UUID {
	parts := strings.Split(payload, ",")
	out := make([]uuid.UUID, 0, len(parts))
	for _, p := range parts {
		if id, err := uuid.Parse(strings.TrimSpace(p)); err == nil {
			out = append(out, id)
		}
	}
	return out
}
