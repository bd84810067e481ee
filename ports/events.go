package ports

import (
	"context"
	"errors"
	"time"

	"github.com/taskmaster/taskmaster/domain/event"
)

// ErrInvalidCursor is returned for an event cursor the feed did not issue.
var ErrInvalidCursor = errors.New("invalid event cursor")

// EventFeed reads committed lifecycle events in commit order, for streaming
// them to clients that resume from the last event they saw.
type EventFeed interface {
	// Tail returns a cursor after every event committed so far.
	Tail(ctx context.Context) (string, error)
	// Read returns the events after cursor, from at most limit outbox
	// messages. It returns ErrInvalidCursor for a malformed cursor.
	Read(ctx context.Context, cursor string, limit int) (FeedPage, error)
	// PollInterval is how long a reader that has caught up should wait
	// before reading again.
	PollInterval() time.Duration
}

// FeedEvent is one event with its cursor.
type FeedEvent struct {
	// ID is the cursor that resumes right after this event.
	ID    string
	Event event.Event
}

// FeedPage is the result of one read.
type FeedPage struct {
	// Events are the events read, in commit order.
	Events []FeedEvent
	// Next is the cursor to read on from (after the last event read).
	Next string
	// More reports that the read stopped at its limit: read again at once.
	More bool
	// Lost, when not empty, says that events after the cursor were deleted
	// before this reader saw them; it is the cursor of the last deleted one.
	Lost string
}
