package outbox

import (
	"context"
	"database/sql"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
)

// Feed reads lifecycle events straight from the outbox table with a cursor,
// for GET /events/v1. It is not a consumer group: it keeps no state in the
// database, so any number of clients may read, each from its own cursor.
//
// A cursor is "<transaction_id>-<offset>-<index>": the outbox position of a
// message and the index of an event in it; reading resumes after that event.
// Like watermill-sql, the feed reads only messages of transactions below the
// oldest running transaction (pg_snapshot_xmin), so a transaction that
// commits late with a lower id is never skipped.
//
// The janitor deletes consumed messages once they are older than the
// retention. A reader whose cursor is older than the janitor's high-water
// mark has lost events; Read reports it in FeedPage.Lost and carries on with
// what is left.
type Feed struct {
	db     *sql.DB
	poll   time.Duration
	logger *zap.Logger
}

var _ ports.EventFeed = (*Feed)(nil)

// NewFeed returns a feed over db that asks caught-up readers to wait poll.
func NewFeed(db *sql.DB, poll time.Duration, logger *zap.Logger) *Feed {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Feed{db: db, poll: poll, logger: logger}
}

// PollInterval implements ports.EventFeed.
func (f *Feed) PollInterval() time.Duration { return f.poll }

// cursor is a position in the feed: after event index of the message at pos.
type cursor struct {
	pos   Position
	index int
}

func (c cursor) String() string {
	return fmt.Sprintf("%d-%d-%d", c.pos.TransactionID, c.pos.Offset, c.index)
}

func parseCursor(s string) (cursor, error) {
	parts := strings.Split(s, "-")
	if len(parts) != 3 {
		return cursor{}, fmt.Errorf("%w: %q", ports.ErrInvalidCursor, s)
	}
	tx, err1 := strconv.ParseUint(parts[0], 10, 64)
	off, err2 := strconv.ParseInt(parts[1], 10, 64)
	idx, err3 := strconv.ParseInt(parts[2], 10, 32)
	if err1 != nil || err2 != nil || err3 != nil || off < 0 || idx < 0 {
		return cursor{}, fmt.Errorf("%w: %q", ports.ErrInvalidCursor, s)
	}
	return cursor{pos: Position{TransactionID: tx, Offset: off}, index: int(idx)}, nil
}

// Tail implements ports.EventFeed: the cursor after every message of
// transactions below the oldest running one.
func (f *Feed) Tail(ctx context.Context) (string, error) {
	var xmin uint64
	if err := f.db.QueryRowContext(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
		return "", fmt.Errorf("event feed tail: %w", err)
	}
	return cursor{pos: Position{TransactionID: xmin - 1, Offset: math.MaxInt64}}.String(), nil
}

// feedSQL reads, in one snapshot, the janitor's high-water mark and up to $3
// messages from the cursor's message on (that message included: the cursor
// may point into it).
const feedSQL = `
SELECT s.transaction_id::text, s."offset", m.transaction_id::text, m."offset", m.payload
FROM outbox_janitor_state s
LEFT JOIN LATERAL (
	SELECT transaction_id, "offset", payload
	FROM watermill_taskmaster_events
	WHERE (transaction_id, "offset") >= ($1::xid8, $2::bigint)
		AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
	ORDER BY transaction_id, "offset"
	LIMIT $3
) m ON true
ORDER BY m.transaction_id, m."offset"`

// Read implements ports.EventFeed.
func (f *Feed) Read(ctx context.Context, from string, limit int) (ports.FeedPage, error) {
	c, err := parseCursor(from)
	if err != nil {
		return ports.FeedPage{}, err
	}
	rows, err := f.db.QueryContext(ctx, feedSQL, strconv.FormatUint(c.pos.TransactionID, 10), c.pos.Offset, limit+1)
	if err != nil {
		return ports.FeedPage{}, fmt.Errorf("read event feed: %w", err)
	}
	defer rows.Close()
	page := ports.FeedPage{Next: from}
	messages := 0
	for rows.Next() {
		var (
			markTx  uint64
			markOff int64
			msgTx   sql.NullString
			msgOff  sql.NullInt64
			payload []byte
			events  []event.Event
		)
		if err := rows.Scan(&markTx, &markOff, &msgTx, &msgOff, &payload); err != nil {
			return ports.FeedPage{}, fmt.Errorf("read event feed: %w", err)
		}
		if mark := (Position{TransactionID: markTx, Offset: markOff}); c.pos.Less(mark) && page.Lost == "" {
			page.Lost = cursor{pos: mark, index: math.MaxInt32}.String()
		}
		if !msgTx.Valid {
			continue // no message: the LEFT JOIN's empty row
		}
		tx, err := strconv.ParseUint(msgTx.String, 10, 64)
		if err != nil {
			return ports.FeedPage{}, fmt.Errorf("read event feed: transaction id %q: %w", msgTx.String, err)
		}
		pos := Position{TransactionID: tx, Offset: msgOff.Int64}
		if pos != c.pos {
			messages++
		}
		if events, err = envelope.Decode(payload); err != nil {
			f.logger.Error("event feed skips an undecodable outbox message",
				zap.Uint64("transaction_id", pos.TransactionID), zap.Int64("offset", pos.Offset), zap.Error(err))
		}
		for i, e := range events {
			if pos == c.pos && i <= c.index {
				continue // delivered before
			}
			page.Events = append(page.Events, ports.FeedEvent{ID: cursor{pos: pos, index: i}.String(), Event: e})
		}
		if pos != c.pos || len(events) > c.index {
			page.Next = cursor{pos: pos, index: max(len(events)-1, 0)}.String()
		}
	}
	if err := rows.Err(); err != nil {
		return ports.FeedPage{}, fmt.Errorf("read event feed: %w", err)
	}
	page.More = messages >= limit
	return page, nil
}
