package postgres

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lib/pq"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/ports"
)

// NotifyChannel is the PostgreSQL notification channel on which committed
// transactions announce queues with newly claimable tasks (payload: the
// queue name).
const NotifyChannel = "taskmaster_tasks"

// Notifier listens on NotifyChannel with one dedicated connection per
// instance and fans wake-ups out to the claims waiting in this process. It
// implements ports.TaskNotifier.
type Notifier struct {
	url    string
	logger *zap.Logger

	mu       sync.Mutex
	subs     map[*subscription]struct{}
	closed   bool
	listener *pq.Listener
	stop     chan struct{}
	done     chan struct{}
}

var _ ports.TaskNotifier = (*Notifier)(nil)

type subscription struct {
	queues map[string]bool // nil: any queue
	ch     chan struct{}
}

// NewNotifier returns a notifier for the database at url; Start connects it.
func NewNotifier(url string, logger *zap.Logger) *Notifier {
	return &Notifier{url: url, logger: logger, subs: make(map[*subscription]struct{})}
}

// Start opens the listening connection and begins fanning out.
func (n *Notifier) Start(context.Context) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.listener != nil {
		return errors.New("notifier already started")
	}
	l := pq.NewListener(n.url, 10*time.Millisecond, 2*time.Second, func(ev pq.ListenerEventType, err error) {
		if err != nil {
			n.logger.Warn("notification listener", zap.Error(err))
		}
	})
	if err := l.Listen(NotifyChannel); err != nil {
		_ = l.Close()
		return fmt.Errorf("listen %s: %w", NotifyChannel, err)
	}
	n.listener = l
	n.stop = make(chan struct{})
	n.done = make(chan struct{})
	go n.loop(l, n.stop, n.done)
	return nil
}

func (n *Notifier) loop(l *pq.Listener, stop, done chan struct{}) {
	defer close(done)
	ping := time.NewTicker(30 * time.Second)
	defer ping.Stop()
	for {
		select {
		case <-stop:
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
			go func() { _ = l.Ping() }()
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
			if _, ok := n.subs[s]; ok {
				delete(n.subs, s)
			}
		})
	}
}

// Close answers every waiting claim at once (their channels close), refuses
// new waits, and stops listening. It is idempotent and waits for the
// listening goroutine to end.
func (n *Notifier) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	for s := range n.subs {
		close(s.ch)
		delete(n.subs, s)
	}
	l, stop, done := n.listener, n.stop, n.done
	n.mu.Unlock()
	if l == nil {
		return nil
	}
	close(stop)
	<-done
	_ = l.Close() // the only error is "already closed"
	return nil
}
