package postgres

import (
	"container/list"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/ports"
)

// NotifyChannel is the PostgreSQL notification channel on which committed
// transactions announce queues with newly claimable tasks (payload: the
// queue name).
const NotifyChannel = "taskmaster_tasks"

// Notifier listens on NotifyChannel with one dedicated connection per
// instance and wakes the claims waiting in this process: for a
// notification of n claimable tasks, the longest-waiting claims of the
// queue whose limits add up to n (and one of each other set of worker tags),
// not all of them; for delayed tasks, the same again when they fall due.
// On the same connection it listens on FinishedChannel and wakes the
// producers waiting in this process for the tasks whose ends it names.
// It implements ports.TaskNotifier and is a lifecycle.Service.
type Notifier struct {
	lifecycle.Base
	url    string
	conn   ConnConfig
	logger *zap.Logger

	mu sync.Mutex
	// byQueue holds the claims waiting on each queue, any those waiting on
	// any queue, both in the order they began to wait.
	byQueue map[string]*waiters
	any     *waiters
	waiting int
	closed  bool
	stats   WaitStats

	// finishing holds the producers waiting for each task's end.
	finishing map[uuid.UUID]map[*finishSub]struct{}
	awaiting  int

	// due holds the wake-ups of delayed tasks; only the loop touches it.
	due dueWakes
}

var (
	_ ports.TaskNotifier = (*Notifier)(nil)
	_ lifecycle.Service  = (*Notifier)(nil)
)

// WaitStats are a notifier's figures: the claims waiting now, the
// wake-ups it handed out by reason since it was made, and the delayed
// wake-ups it holds.
type WaitStats struct {
	Waiting int64
	// Notified: tasks became claimable; Due: delayed tasks fell due;
	// Everyone: a queue was resumed or loosened, or the listening
	// connection was re-established (notifications may have been lost);
	// Passed: a waiter passed on a wake-up it could not use.
	Notified, Due, Everyone, Passed int64
	// DuePending are the delayed wake-ups held; DueDropped those not
	// held for want of room (their tasks wait for a poll).
	DuePending, DueDropped int64
	// Awaiting are the producers waiting for a task's end now; Finished
	// the wake-ups they were given by announced ends since the notifier
	// was made.
	Awaiting, Finished int64
}

// waiters are the claims waiting on one queue, oldest first, with the
// number of waiters per set of tags.
type waiters struct {
	list list.List
	tags map[string]int
}

// subscription is one waiting claim.
type subscription struct {
	n      *Notifier
	queues []string // nil: any queue
	limit  int
	tags   string
	ch     chan struct{}
	elems  []*list.Element // in n.byQueue[queues[i]], or in n.any
	gone   bool            // removed from the lists (closed, or the notifier closed waits)
}

// NewNotifier returns a notifier for the database at url, whose connection
// is bounded by conn like the pools' (keepalives, TCP user timeout); Start
// connects it. Until then, and after Stop, waits end at once.
func NewNotifier(url string, conn ConnConfig, logger *zap.Logger) *Notifier {
	return &Notifier{url: url, conn: conn, logger: logger, byQueue: map[string]*waiters{}, any: newWaiters(), closed: true,
		finishing: map[uuid.UUID]map[*finishSub]struct{}{}}
}

func newWaiters() *waiters { return &waiters{tags: map[string]int{}} }

// Start opens the listening connection and begins waking waiters.
func (n *Notifier) Start(ctx context.Context) error {
	return n.StartLoop(ctx, "notifier", func(context.Context) (lifecycle.LoopFunc, error) {
		dsn, err := n.conn.DSN(n.url)
		if err == nil {
			dsn, err = withParam(dsn, "application_name", NotifierApplicationName)
		}
		if err != nil {
			return nil, fmt.Errorf("notifier: %w", err)
		}
		l := pq.NewDialListener(n.conn.OneConnDialer(), dsn, 10*time.Millisecond, 2*time.Second, func(ev pq.ListenerEventType, err error) {
			if err != nil {
				n.logger.Warn("notification listener", zap.Error(err))
			}
		})
		for _, ch := range []string{NotifyChannel, FinishedChannel} {
			if err := l.Listen(ch); err != nil {
				_ = l.Close()
				return nil, fmt.Errorf("listen %s: %w", ch, err)
			}
		}
		n.mu.Lock()
		n.closed = false
		n.mu.Unlock()
		return func(ctx context.Context) {
			pinged := make(chan struct{}, 1)
			pinged <- struct{}{}
			n.loop(ctx, l, pinged)
			_ = l.Close() // the only error is "already closed"
			<-pinged      // a ping in progress returns once the listener is closed
		}, nil
	})
}

// loop wakes waiters until ctx ends. pinged holds a token while no ping is
// in progress.
func (n *Notifier) loop(ctx context.Context, l *pq.Listener, pinged chan struct{}) {
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	due := time.NewTimer(time.Hour)
	defer due.Stop()
	for {
		n.due.arm(due, time.Now())
		select {
		case <-ctx.Done():
			return
		case note := <-l.Notify:
			if note == nil {
				// The connection was re-established: notifications may have
				// been lost, so everyone looks again.
				n.wakeEveryone("", true)
				n.wakeFinishing(nil)
				continue
			}
			if note.Channel == FinishedChannel {
				n.wakeFinishing(parseFinished(note.Extra))
				continue
			}
			n.received(parseWake(note.Extra), time.Now())
		case now := <-due.C:
			for _, d := range n.due.popDue(now) {
				n.wakeCount(d.queue, d.count, &n.stats.Due)
			}
			n.mu.Lock()
			n.stats.DuePending = int64(n.due.len())
			n.mu.Unlock()
		case <-ping.C:
			// Ping makes the listener notice a dead connection; it blocks
			// for a round trip, so it runs aside, one at a time, and the
			// loop's caller waits for it after closing the listener.
			select {
			case <-pinged:
				go func() {
					defer func() { pinged <- struct{}{} }()
					_ = l.Ping()
				}()
			default:
			}
		}
	}
}

// received acts on one notification that arrived at now.
func (n *Notifier) received(m wakeMessage, now time.Time) {
	if m.everyone {
		n.wakeEveryone(m.queue, m.queue == "")
		return
	}
	if m.now > 0 {
		n.wakeCount(m.queue, m.now, &n.stats.Notified)
	}
	for _, d := range m.delays {
		if !n.due.add(now.Add(d.after), m.queue, d.count) {
			n.mu.Lock()
			n.stats.DueDropped++
			n.mu.Unlock()
		}
	}
	n.mu.Lock()
	n.stats.DuePending = int64(n.due.len())
	n.mu.Unlock()
}

// wakeCount wakes the claims waiting on queue (then those waiting on any
// queue), oldest first, until their limits add up to count and one of each
// set of tags is awake. A waiter already woken and not yet looking again
// counts for its tags, not for the count.
func (n *Notifier) wakeCount(queue string, count int, counter *int64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, ws := range []*waiters{n.byQueue[queue], n.any} {
		if ws == nil {
			continue
		}
		covered := map[string]bool{}
		for e := ws.list.Front(); e != nil; e = e.Next() {
			if count <= 0 && len(covered) == len(ws.tags) {
				break
			}
			s := e.Value.(*subscription)
			if count <= 0 && covered[s.tags] {
				continue
			}
			covered[s.tags] = true
			if s.signal() {
				*counter++
				count -= s.limit
			}
		}
	}
}

// wakeEveryone wakes every claim waiting on queue, or every claim at all.
func (n *Notifier) wakeEveryone(queue string, all bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	wake := func(ws *waiters) {
		for e := ws.list.Front(); e != nil; e = e.Next() {
			if e.Value.(*subscription).signal() {
				n.stats.Everyone++
			}
		}
	}
	if all {
		for _, ws := range n.byQueue {
			wake(ws)
		}
	} else if ws := n.byQueue[queue]; ws != nil {
		wake(ws)
	}
	wake(n.any)
}

// signal gives s a wake-up unless it holds one; it reports whether it gave.
func (s *subscription) signal() bool {
	select {
	case s.ch <- struct{}{}:
		return true
	default:
		return false
	}
}

// Wait implements ports.TaskNotifier.
func (n *Notifier) Wait(spec ports.WaitSpec) ports.TaskWait {
	s := &subscription{n: n, limit: max(1, spec.Limit), tags: strings.Join(spec.Tags, "\x00"), ch: make(chan struct{}, 1)}
	if len(spec.Queues) > 0 {
		s.queues = slices.Clone(spec.Queues)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		s.gone = true
		close(s.ch)
		return s
	}
	if s.queues == nil {
		s.elems = []*list.Element{n.any.push(s)}
	} else {
		s.elems = make([]*list.Element, len(s.queues))
		for i, q := range s.queues {
			ws := n.byQueue[q]
			if ws == nil {
				ws = newWaiters()
				n.byQueue[q] = ws
			}
			s.elems[i] = ws.push(s)
		}
	}
	n.waiting++
	return s
}

func (ws *waiters) push(s *subscription) *list.Element {
	ws.tags[s.tags]++
	return ws.list.PushBack(s)
}

func (ws *waiters) remove(e *list.Element) {
	s := ws.list.Remove(e).(*subscription)
	if ws.tags[s.tags]--; ws.tags[s.tags] == 0 {
		delete(ws.tags, s.tags)
	}
}

// C implements ports.TaskWait.
func (s *subscription) C() <-chan struct{} { return s.ch }

// Pass implements ports.TaskWait: the oldest other waiter of s's queues
// that holds no wake-up gets one.
func (s *subscription) Pass() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pass(s)
}

func (n *Notifier) pass(s *subscription) {
	lists := []*waiters{n.any}
	for _, q := range s.queues {
		if ws := n.byQueue[q]; ws != nil {
			lists = append(lists, ws)
		}
	}
	for _, ws := range lists {
		for e := ws.list.Front(); e != nil; e = e.Next() {
			if o := e.Value.(*subscription); o != s && o.signal() {
				n.stats.Passed++
				return
			}
		}
	}
}

// Close implements ports.TaskWait.
func (s *subscription) Close() {
	n := s.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if s.gone {
		return
	}
	s.gone = true
	n.unlink(s)
	select {
	case <-s.ch: // a wake-up it will not use: someone else looks
		n.pass(s)
	default:
	}
}

// unlink removes s from the lists it waits in.
func (n *Notifier) unlink(s *subscription) {
	if s.queues == nil {
		n.any.remove(s.elems[0])
	} else {
		for i, q := range s.queues {
			ws := n.byQueue[q]
			ws.remove(s.elems[i])
			if ws.list.Len() == 0 {
				delete(n.byQueue, q)
			}
		}
	}
	n.waiting--
}

// Stats returns the notifier's figures.
func (n *Notifier) Stats() WaitStats {
	n.mu.Lock()
	defer n.mu.Unlock()
	st := n.stats
	st.Waiting = int64(n.waiting)
	st.Awaiting = int64(n.awaiting)
	return st
}

// finishSub is one producer waiting for a task's end.
type finishSub struct {
	n    *Notifier
	id   uuid.UUID
	ch   chan struct{}
	gone bool // removed (closed, or the notifier closed waits)
}

// WaitFinished implements ports.TaskNotifier.
func (n *Notifier) WaitFinished(id uuid.UUID) ports.FinishWait {
	f := &finishSub{n: n, id: id, ch: make(chan struct{}, 1)}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		f.gone = true
		close(f.ch)
		return f
	}
	subs := n.finishing[id]
	if subs == nil {
		subs = map[*finishSub]struct{}{}
		n.finishing[id] = subs
	}
	subs[f] = struct{}{}
	n.awaiting++
	return f
}

// wakeFinishing wakes the producers waiting for the ends of ids, or every
// one of them when ids is nil.
func (n *Notifier) wakeFinishing(ids []uuid.UUID) {
	n.mu.Lock()
	defer n.mu.Unlock()
	wake := func(subs map[*finishSub]struct{}) {
		for f := range subs {
			select {
			case f.ch <- struct{}{}:
				n.stats.Finished++
			default:
			}
		}
	}
	if ids == nil {
		for _, subs := range n.finishing {
			wake(subs)
		}
		return
	}
	for _, id := range ids {
		wake(n.finishing[id])
	}
}

// C implements ports.FinishWait.
func (f *finishSub) C() <-chan struct{} { return f.ch }

// Close implements ports.FinishWait.
func (f *finishSub) Close() {
	n := f.n
	n.mu.Lock()
	defer n.mu.Unlock()
	if f.gone {
		return
	}
	f.gone = true
	subs := n.finishing[f.id]
	delete(subs, f)
	if len(subs) == 0 {
		delete(n.finishing, f.id)
	}
	n.awaiting--
}

// CloseWaits answers every waiting claim and producer at once (their channels close) and
// refuses new waits until the next Start. The HTTP server calls it when it
// begins to stop, so long polls do not hold the shutdown up.
func (n *Notifier) CloseWaits() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	closeAll := func(ws *waiters) {
		for e := ws.list.Front(); e != nil; e = e.Next() {
			s := e.Value.(*subscription)
			s.gone = true
			close(s.ch)
		}
	}
	for _, ws := range n.byQueue {
		closeAll(ws)
	}
	closeAll(n.any)
	n.byQueue, n.any, n.waiting = map[string]*waiters{}, newWaiters(), 0
	for _, subs := range n.finishing {
		for f := range subs {
			f.gone = true
			close(f.ch)
		}
	}
	n.finishing, n.awaiting = map[uuid.UUID]map[*finishSub]struct{}{}, 0
}

// Stop answers every waiting claim (CloseWaits), stops listening and waits
// for the listening goroutine. It is idempotent.
func (n *Notifier) Stop(ctx context.Context) error {
	n.CloseWaits()
	return n.StopLoop(ctx)
}
