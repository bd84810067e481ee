package postgres

import (
	"context"
	"fmt"
	"sync"
	"time"

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
// instance and fans wake-ups out to the claims waiting in this process. It
// implements ports.TaskNotifier and is a lifecycle.Service.
type Notifier struct {
	lifecycle.Base
	url    string
	conn   ConnConfig
	logger *zap.Logger

	mu     sync.Mutex
	subs   map[*subscription]struct{}
	closed bool
}

var (
	_ ports.TaskNotifier = (*Notifier)(nil)
	_ lifecycle.Service  = (*Notifier)(nil)
)

type subscription struct {
	queues map[string]bool // nil: any queue
	ch     chan struct{}
}

// NewNotifier returns a notifier for the database at url, whose connection
// is bounded by conn like the pools' (keepalives, TCP user timeout); Start
// connects it. Until then, and after Stop, waits end at once.
func NewNotifier(url string, conn ConnConfig, logger *zap.Logger) *Notifier {
	return &Notifier{url: url, conn: conn, logger: logger, subs: make(map[*subscription]struct{}), closed: true}
}

// Start opens the listening connection and begins fanning out.
func (n *Notifier) Start(ctx context.Context) error {
	return n.StartLoop(ctx, "notifier", func(context.Context) (lifecycle.LoopFunc, error) {
		l := pq.NewDialListener(n.conn.Dialer(), withParam(n.conn.DSN(n.url), "application_name", NotifierApplicationName), 10*time.Millisecond, 2*time.Second, func(ev pq.ListenerEventType, err error) {
			if err != nil {
				n.logger.Warn("notification listener", zap.Error(err))
			}
		})
		if err := l.Listen(NotifyChannel); err != nil {
			_ = l.Close()
			return nil, fmt.Errorf("listen %s: %w", NotifyChannel, err)
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

// loop fans notifications out until ctx ends. pinged holds a token while no
// ping is in progress.
func (n *Notifier) loop(ctx context.Context, l *pq.Listener, pinged chan struct{}) {
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case note := <-l.Notify:
			if note == nil {
				// The connection was re-established: notifications may have
				// been lost, so everyone looks again.
				n.wake("", true)
				continue
			}
			n.wake(note.Extra, false)
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

// wake signals the subscriptions interested in queue (all when everyone).
func (n *Notifier) wake(queue string, everyone bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for s := range n.subs {
		if everyone || s.queues == nil || s.queues[queue] {
			select {
			case s.ch <- struct{}{}:
			default: // a wake-up is already pending
			}
		}
	}
}

// Subscribe implements ports.TaskNotifier.
func (n *Notifier) Subscribe(queues []string) (<-chan struct{}, func()) {
	s := &subscription{ch: make(chan struct{}, 1)}
	if len(queues) > 0 {
		s.queues = make(map[string]bool, len(queues))
		for _, q := range queues {
			s.queues[q] = true
		}
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		close(s.ch)
		return s.ch, func() {}
	}
	n.subs[s] = struct{}{}
	var once sync.Once
	return s.ch, func() {
		once.Do(func() {
			n.mu.Lock()
			defer n.mu.Unlock()
			delete(n.subs, s)
		})
	}
}

// CloseWaits answers every waiting claim at once (their channels close) and
// refuses new waits until the next Start. The HTTP server calls it when it
// begins to stop, so long polls do not hold the shutdown up.
func (n *Notifier) CloseWaits() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	for s := range n.subs {
		close(s.ch)
		delete(n.subs, s)
	}
}

// Stop answers every waiting claim (CloseWaits), stops listening and waits
// for the listening goroutine. It is idempotent.
func (n *Notifier) Stop(ctx context.Context) error {
	n.CloseWaits()
	return n.StopLoop(ctx)
}
