package ports

import (
	"context"
	"errors"

	"github.com/taskmaster/taskmaster/domain/event"
)

// ErrInvalidCursor is returned for an event cursor the feed did not issue.
var ErrInvalidCursor = errors.New("invalid event cursor")

// ErrTooManyStreams is returned when an instance already serves as many
// event streams as it may; the client should try again later.
var ErrTooManyStreams = errors.New("too many event streams")

// ErrSubscriberTooSlow ends a stream whose client did not read its events
// as fast as they came: the client resumes from the last event it got.
var ErrSubscriberTooSlow = errors.New("the client read the stream too slowly")

// ErrStreamsStopped ends the streams of an instance that stops.
var ErrStreamsStopped = errors.New("event streams stopped")

// EventStreams serves streams of committed lifecycle events, in commit
// order, to clients that resume from the last event they saw.
type EventStreams interface {
	// Subscribe opens a stream of the events after cursor ("" for the
	// events committed from now on). It returns ErrInvalidCursor for a
	// malformed cursor and ErrTooManyStreams when the instance serves as
	// many streams as it may.
	Subscribe(ctx context.Context, cursor string) (EventSubscription, error)
}

// EventSubscription is one open stream.
type EventSubscription interface {
	// Cursor is where the stream starts: the cursor it was opened with, or
	// the one "now" stood for.
	Cursor() string
	// Pages delivers the stream's events, page by page, in order.
	Pages() <-chan FeedPage
	// Done is closed when the stream ended; Err then says why
	// (ErrSubscriberTooSlow, ErrStreamsStopped, a read error, or nil after
	// Close). Pages still buffered are not delivered.
	Done() <-chan struct{}
	Err() error
	// Close ends the stream. It is safe to call more than once.
	Close()
}

// FeedEvent is one event with its cursor.
type FeedEvent struct {
	// ID is the cursor that resumes right after this event.
	ID string
	// Type, TaskID, WorkflowID, Queue and Queues are the event's
	// (domain/event.Event), for filtering.
	Type       event.Type
	TaskID     string
	WorkflowID string
	Queue      string
	Queues     []string
	// Data is the event's JSON (an event.Event) as it was stored.
	Data []byte
}

// FeedPage is a run of events.
type FeedPage struct {
	// Events are the events, in commit order.
	Events []FeedEvent
	// Next is the cursor after the page (after its last event, or past
	// messages it had no events of).
	Next string
	// More reports that the read stopped at its limit: there is more to
	// read at once.
	More bool
	// Lost, when not empty, says that events before this page were deleted
	// before the reader saw them; it is the cursor of the last deleted one.
	Lost string
}
