package outbox

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/metrics"
	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/ports"
)

// Streams serves the event streams of an instance (GET /events/v1) from one
// reader: a background service that reads the outbox once per poll interval
// (Feed) and hands each page to every stream in memory, so a thousand open
// streams cost one query per interval, not a thousand.
//
//   - A stream that starts now, or resumes from a cursor the reader's
//     recent pages (StreamHistory) still cover, is served from memory at
//     once.
//   - A stream that resumes from further back catches up from the database
//     on its own, a page at a time and at most StreamCatchUpReaders such
//     reads at once on the instance, until it reaches the reader's pages.
//   - Each stream holds at most StreamBuffer pages it has not taken yet
//     (pages are shared between streams, not copied). A stream whose buffer
//     is full when a page comes is dropped with ports.ErrSubscriberTooSlow:
//     a slow client never makes the instance hold more.
//   - At most MaxStreams streams are open at once (ports.ErrTooManyStreams
//     beyond).
//   - While the reader cannot read the outbox (the database is down), every
//     stream ends with its error; a new one is refused unless the database
//     answers it then (it may be back before the reader's next poll), and
//     clients resume with Last-Event-ID.
type Streams struct {
	lifecycle.Base
	feed   *Feed
	cfg    Config
	logger *zap.Logger

	// catchUp is the semaphore of catch-up reads.
	catchUp chan struct{}
	// open counts the open streams.
	open atomic.Int64
	// wg waits for the catch-up goroutines.
	wg sync.WaitGroup

	mu sync.Mutex
	// running is set while the reader runs.
	running bool
	// ready is set once the reader has its position, head.
	ready bool
	head  cursor
	// history holds the last pages the reader published, oldest first; with
	// them the reader has every event after start.
	history []hubPage
	start   cursor
	// subs holds every open stream; joined ones get the reader's pages.
	subs map[*subscription]bool
	// failing is the reader's last error while its reads fail.
	failing error

	reads, catchUpReads, dropped, refused atomic.Int64
}

var (
	_ lifecycle.Service  = (*Streams)(nil)
	_ ports.EventStreams = (*Streams)(nil)
)

// hubPage is a page the reader published: the events after from, up to
// next.
type hubPage struct {
	from, next cursor
	page       ports.FeedPage
}

// rewound reports whether the page moved the reader back: the database did
// not have its position (Feed.Read's rewind).
func (hp hubPage) rewound() bool { return hp.next.less(hp.from) }

// NewStreams returns the event streams of db.
func NewStreams(feed *Feed, cfg Config, logger *zap.Logger) (*Streams, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Streams{feed: feed, cfg: cfg, logger: logger, catchUp: make(chan struct{}, cfg.StreamCatchUpReaders),
		subs: map[*subscription]bool{}}, nil
}

// Stats returns the streams' figures since the process started.
func (h *Streams) Stats() metrics.StreamStats {
	return metrics.StreamStats{Open: h.open.Load(), Reads: h.reads.Load(), CatchUpReads: h.catchUpReads.Load(),
		Dropped: h.dropped.Load(), Refused: h.refused.Load()}
}

// Start runs the reader until Stop. It takes the reader's position (the
// tail) before it returns, so that streams opened from then on are the
// reader's at once; if the database does not answer, the reader takes it
// later.
func (h *Streams) Start(ctx context.Context) error {
	return h.StartLoop(ctx, "event streams", func(startCtx context.Context) (lifecycle.LoopFunc, error) {
		h.mu.Lock()
		h.running, h.ready, h.history = true, false, nil
		h.mu.Unlock()
		if err := h.takePosition(startCtx); err != nil {
			h.logger.Warn("event stream reader: no position yet; it tries again every poll interval", zap.Error(err))
		}
		return h.loop, nil
	})
}

// takePosition sets the reader's position to the tail, unless a stream
// opened meanwhile (the reader then reads on from where it was).
func (h *Streams) takePosition(ctx context.Context) error {
	tail, err := h.feed.Tail(ctx)
	h.reads.Add(1)
	if err != nil {
		return err
	}
	c, err := parseCursor(tail)
	if err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ready && len(h.subs) > 0 {
		return nil
	}
	h.ready, h.head, h.start, h.history = true, c, c, nil
	return nil
}

// Stop stops the reader, ends every stream (ports.ErrStreamsStopped) and
// waits for them. It is idempotent.
func (h *Streams) Stop(ctx context.Context) error { return h.StopLoop(ctx) }

func (h *Streams) loop(ctx context.Context) {
	defer h.wg.Wait()
	defer h.closeAll(ports.ErrStreamsStopped)
	t := time.NewTicker(h.cfg.PollInterval)
	defer t.Stop()
	failing := false
	for {
		switch err := h.readAll(ctx); {
		case err != nil && ctx.Err() == nil:
			if !failing {
				h.logger.Warn("event stream reader failed; streams end and are refused until it reads again", zap.Error(err))
			}
			failing = true
			h.fail(err)
		case err == nil && failing:
			h.logger.Info("event stream reader recovered")
			failing = false
			h.mu.Lock()
			h.failing = nil
			h.mu.Unlock()
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// readAll reads and publishes everything new. With no stream open it only
// moves its position to the tail (and forgets its pages): nobody would
// read them, and a stream that opens later from an older cursor catches up
// on its own.
func (h *Streams) readAll(ctx context.Context) error {
	h.mu.Lock()
	ready, idle := h.ready, len(h.subs) == 0
	h.mu.Unlock()
	if !ready || idle {
		return h.takePosition(ctx)
	}
	h.mu.Lock()
	from := h.head
	h.mu.Unlock()
	for {
		page, err := h.feed.Read(ctx, from.String(), h.cfg.StreamReadLimit)
		h.reads.Add(1)
		if err != nil {
			return err
		}
		next, err := parseCursor(page.Next)
		if err != nil {
			return err
		}
		h.publish(hubPage{from: from, next: next, page: page})
		from = next
		if !page.More {
			return nil
		}
	}
}

// publish hands a page to every joined stream and keeps it in the history.
// A page without events only moves the reader's position: there was
// nothing between.
func (h *Streams) publish(hp hubPage) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.head = hp.next
	if hp.rewound() {
		// The database no longer has the history these pages are of: a
		// stream joins again only from the rewound position on.
		h.history, h.start = nil, hp.next
	}
	if len(hp.page.Events) == 0 && hp.page.Lost == "" {
		return
	}
	if !hp.rewound() {
		h.history = append(h.history, hp)
	}
	if over := len(h.history) - h.cfg.StreamHistory; over > 0 {
		h.history = append(h.history[:0:0], h.history[over:]...)
		h.start = h.history[0].from
	}
	for s, joined := range h.subs {
		if joined && !s.offer(hp) {
			h.dropLocked(s)
		}
	}
}

// dropLocked ends a stream that did not keep up.
func (h *Streams) dropLocked(s *subscription) {
	delete(h.subs, s)
	if s.finish(ports.ErrSubscriberTooSlow) {
		h.dropped.Add(1)
	}
}

// fail ends every stream with the reader's error (their clients resume
// with Last-Event-ID, without loss, once the outbox can be read again) and
// refuses new ones until the reader reads again.
func (h *Streams) fail(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.failing = fmt.Errorf("event streams: %w", err)
	for s := range h.subs {
		delete(h.subs, s)
		s.finish(h.failing)
	}
}

// closeAll ends every stream with err.
func (h *Streams) closeAll(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.running = false
	for s := range h.subs {
		delete(h.subs, s)
		s.finish(err)
	}
}

// Subscribe implements ports.EventStreams.
func (h *Streams) Subscribe(ctx context.Context, from string) (ports.EventSubscription, error) {
	var (
		c   cursor
		err error
	)
	if from != "" {
		if c, err = parseCursor(from); err != nil {
			return nil, err
		}
	}
	if h.open.Add(1) > int64(h.cfg.MaxStreams) {
		h.open.Add(-1)
		h.refused.Add(1)
		return nil, ports.ErrTooManyStreams
	}
	h.mu.Lock()
	running, ready, failing := h.running, h.ready, h.failing
	h.mu.Unlock()
	if !running {
		h.open.Add(-1)
		return nil, ports.ErrStreamsStopped
	}
	if from == "" && (!ready || failing != nil) || from != "" && failing != nil {
		// The reader has no position yet, or its last read failed: ask the
		// database itself rather than refuse on a failure that may be over
		// (the database may be back since the reader's last poll). The
		// stream starts at the tail, or at its cursor; should the reader's
		// next read fail, it ends with that error like every other.
		tail, err := h.feed.Tail(ctx)
		if err != nil {
			h.open.Add(-1)
			if failing != nil {
				return nil, fmt.Errorf("%w (again now: %w)", failing, err)
			}
			return nil, err
		}
		if from == "" {
			c, _ = parseCursor(tail)
		}
	} else {
		// The reader's last read succeeded, but the database may have
		// gone since (the reader polls every PollInterval): a stream is
		// opened only while the database answers, so that an outage is
		// answered as every other request's is (503), not with a stream
		// that ends at the reader's next poll.
		if _, err := h.feed.Tail(ctx); err != nil {
			h.open.Add(-1)
			return nil, err
		}
		if from == "" {
			// The reader's head now, not before that read: it may have
			// moved on meanwhile, and a stream that starts behind what the
			// reader still holds would read the outbox on its own.
			h.mu.Lock()
			c = h.head
			h.mu.Unlock()
		}
	}
	sctx, cancel := context.WithCancel(context.Background())
	s := &subscription{hub: h, start: c, pages: make(chan ports.FeedPage, h.cfg.StreamBuffer),
		done: make(chan struct{}), ctx: sctx, cancel: cancel}
	h.mu.Lock()
	if !h.running {
		h.mu.Unlock()
		s.finish(ports.ErrStreamsStopped)
		return nil, ports.ErrStreamsStopped
	}
	h.subs[s] = false
	joined := h.joinLocked(s, c)
	if !joined {
		h.wg.Add(1)
	}
	h.mu.Unlock()
	if !joined {
		go s.catchUp(c)
	}
	return s, nil
}

// joinLocked makes s, whose client has seen everything up to c, a stream
// the reader feeds, if the reader's history covers c and the stream has
// room for the history's pages after c. A cursor ahead of the reader (from
// another instance's reader, a poll ahead; or from a history the database
// no longer has, after a failover that lost commits) is not joined: the
// stream reads on its own until the reader passes it, and its own read
// tells which of the two it was (Feed.Read reports a rewind).
func (h *Streams) joinLocked(s *subscription, c cursor) bool {
	if !h.ready || !h.running {
		return false
	}
	if c.less(h.start) || h.head.less(c) {
		return false
	}
	var pages []hubPage
	for _, hp := range h.history {
		if c.less(hp.next) {
			pages = append(pages, hp)
		}
	}
	if len(pages) > cap(s.pages)-len(s.pages) {
		return false // the client has not taken its catch-up pages yet
	}
	s.after = c
	for _, hp := range pages {
		s.offer(hp)
	}
	h.subs[s] = true
	return true
}

// subscription is one stream.
type subscription struct {
	hub   *Streams
	start cursor
	pages chan ports.FeedPage
	// after is what the client has seen (events up to it are not sent
	// again); only the hub's goroutines touch it, under the hub's lock.
	after cursor

	ctx    context.Context
	cancel context.CancelFunc
	once   sync.Once
	done   chan struct{}
	err    error
}

var _ ports.EventSubscription = (*subscription)(nil)

func (s *subscription) Cursor() string               { return s.start.String() }
func (s *subscription) Pages() <-chan ports.FeedPage { return s.pages }
func (s *subscription) Done() <-chan struct{}        { return s.done }

// Err says why the stream ended, once Done is closed.
func (s *subscription) Err() error {
	select {
	case <-s.done:
		return s.err
	default:
		return nil
	}
}

// Close ends the stream.
func (s *subscription) Close() {
	h := s.hub
	h.mu.Lock()
	delete(h.subs, s)
	h.mu.Unlock()
	s.finish(nil)
}

// finish ends the stream with err; it reports whether it was the first to.
func (s *subscription) finish(err error) bool {
	first := false
	s.once.Do(func() {
		first = true
		s.err = err
		close(s.done)
		s.cancel()
		s.hub.open.Add(-1)
	})
	return first
}

// offer hands the stream a page without waiting, leaving out the events
// it has seen; it reports false when the stream's buffer is full. After a
// rewind (the reader went back: Feed.Read found the database behind it),
// what the stream had seen is forgotten: it is sent again from the rewound
// position, after the page that says events were lost.
func (s *subscription) offer(hp hubPage) bool {
	if hp.rewound() {
		s.after = hp.next
	}
	page := hp.page
	if hp.from.less(s.after) {
		if !s.after.less(hp.next) {
			return true // all seen
		}
		page = trimPage(page, s.after)
	}
	select {
	case <-s.done:
		return true
	default:
	}
	select {
	case s.pages <- page:
		return true
	default:
		return false
	}
}

// trimPage returns page without its events up to after.
func trimPage(page ports.FeedPage, after cursor) ports.FeedPage {
	out := page
	out.Events = nil
	for _, e := range page.Events {
		if c, err := parseCursor(e.ID); err == nil && after.less(c) {
			out.Events = append(out.Events, e)
		}
	}
	return out
}

// catchUp reads the outbox for the stream from c until the reader's
// history covers where it got to, then joins the reader.
func (s *subscription) catchUp(c cursor) {
	h := s.hub
	defer h.wg.Done()
	for {
		select {
		case h.catchUp <- struct{}{}:
		case <-s.ctx.Done():
			return
		}
		page, err := h.feed.Read(s.ctx, c.String(), h.cfg.StreamReadLimit)
		<-h.catchUp
		h.catchUpReads.Add(1)
		if err != nil {
			if s.ctx.Err() == nil {
				h.mu.Lock()
				delete(h.subs, s)
				h.mu.Unlock()
				s.finish(fmt.Errorf("event stream catch-up: %w", err))
			}
			return
		}
		next, err := parseCursor(page.Next)
		if err != nil {
			s.finish(err)
			return
		}
		if len(page.Events) > 0 || page.Lost != "" { // a bare move of the cursor takes no room
			select {
			case s.pages <- page: // the stream's own reader waits for its client
			case <-s.ctx.Done():
				return
			}
		}
		c = next
		if page.More {
			continue
		}
		h.mu.Lock()
		joined := h.running && h.joinLocked(s, c)
		stopped := !h.running
		h.mu.Unlock()
		switch {
		case joined:
			return
		case stopped:
			s.finish(ports.ErrStreamsStopped)
			return
		}
		select {
		case <-time.After(h.cfg.PollInterval):
		case <-s.ctx.Done():
			return
		}
	}
}
