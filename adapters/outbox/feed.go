package outbox

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
)

// Feed reads lifecycle events straight from the outbox table with a cursor.
// It is not a consumer group: it keeps no state in the database. Streams
// reads it once per poll interval for every event stream of the instance,
// and a stream that resumes from further back reads it on its own until it
// has caught up.
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
	db       *sql.DB
	maxBytes int
	logger   *zap.Logger
}

// NewFeed returns a feed over db whose reads take, beyond two messages, at
// most maxBytes of stored payload.
func NewFeed(db *sql.DB, maxBytes int, logger *zap.Logger) *Feed {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &Feed{db: db, maxBytes: maxBytes, logger: logger}
}

// cursor is a position in the feed: after event index of the message at pos.
type cursor struct {
	pos   Position
	index int
}

func (c cursor) String() string {
	return fmt.Sprintf("%d-%d-%d", c.pos.TransactionID, c.pos.Offset, c.index)
}

// less reports whether c comes before d.
func (c cursor) less(d cursor) bool {
	if c.pos != d.pos {
		return c.pos.Less(d.pos)
	}
	return c.index < d.index
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

// Tail returns the cursor after every message of transactions below the
// oldest running one: a reader from it gets every event committed later.
func (f *Feed) Tail(ctx context.Context) (string, error) {
	var xmin uint64
	if err := f.db.QueryRowContext(ctx, `SELECT pg_snapshot_xmin(pg_current_snapshot())::text`).Scan(&xmin); err != nil {
		return "", postgres.TranslateError(fmt.Errorf("event feed tail: %w", err))
	}
	return cursor{pos: Position{TransactionID: xmin - 1, Offset: math.MaxInt64}}.String(), nil
}

// feedSQL reads, in one snapshot, the janitor's high-water mark and up to $3
// messages from the cursor's message on (that message included: the cursor
// may point into it), of which, beyond the first two (so that a read always
// gets past the cursor's message), no more than $4 bytes
// of stored payload (pg_column_size reads the size without fetching the
// payload). It also returns how many messages there were before that cut,
// and the oldest transaction still running (below which it read all).
const feedSQL = `
SELECT s.transaction_id::text, s."offset", m.transaction_id::text, m."offset", m.payload, coalesce(m.candidates, 0),
	pg_snapshot_xmin(pg_current_snapshot())::text
FROM outbox_janitor_state s
LEFT JOIN LATERAL (
	SELECT transaction_id, "offset", payload, candidates FROM (
		SELECT transaction_id, "offset", payload, count(*) OVER () AS candidates,
			row_number() OVER w AS n,
			sum(pg_column_size(payload)) OVER w - pg_column_size(payload) AS before
		FROM (
			SELECT transaction_id, "offset", payload
			FROM watermill_taskmaster_events
			WHERE (transaction_id, "offset") >= ($1::xid8, $2::bigint)
				AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
			ORDER BY transaction_id, "offset"
			LIMIT $3
		) c
		WINDOW w AS (ORDER BY transaction_id, "offset")
	) b
	WHERE n <= 2 OR before < $4
) m ON true
ORDER BY m.transaction_id, m."offset"`

// Read returns the events after cursor from at most limit outbox messages
// (fewer if their payload is large). A read that finds nothing new moves
// the cursor to just below the oldest running transaction. It returns
// ports.ErrInvalidCursor for a malformed cursor.
func (f *Feed) Read(ctx context.Context, from string, limit int) (ports.FeedPage, error) {
	c, err := parseCursor(from)
	if err != nil {
		return ports.FeedPage{}, err
	}
	// One more than limit: the cursor's own message comes first.
	rows, err := f.db.QueryContext(ctx, feedSQL, strconv.FormatUint(c.pos.TransactionID, 10), c.pos.Offset, limit+1, f.maxBytes)
	if err != nil {
		return ports.FeedPage{}, postgres.TranslateError(fmt.Errorf("read event feed: %w", err))
	}
	defer rows.Close()
	page := ports.FeedPage{Next: from}
	var xmin uint64
	kept, candidates, messages := 0, 0, 0
	for rows.Next() {
		var (
			markTx  uint64
			markOff int64
			msgTx   sql.NullString
			msgOff  sql.NullInt64
			payload []byte
		)
		if err := rows.Scan(&markTx, &markOff, &msgTx, &msgOff, &payload, &candidates, &xmin); err != nil {
			return ports.FeedPage{}, fmt.Errorf("read event feed: %w", err)
		}
		if mark := (Position{TransactionID: markTx, Offset: markOff}); c.pos.Less(mark) && page.Lost == "" {
			page.Lost = cursor{pos: mark, index: math.MaxInt32}.String()
		}
		if !msgTx.Valid {
			continue // no message: the LEFT JOIN's empty row
		}
		kept++
		tx, err := strconv.ParseUint(msgTx.String, 10, 64)
		if err != nil {
			return ports.FeedPage{}, fmt.Errorf("read event feed: transaction id %q: %w", msgTx.String, err)
		}
		pos := Position{TransactionID: tx, Offset: msgOff.Int64}
		if pos != c.pos {
			messages++
		}
		events, err := feedEvents(payload)
		if err != nil {
			f.logger.Error("event feed skips an undecodable outbox message",
				zap.Uint64("transaction_id", pos.TransactionID), zap.Int64("offset", pos.Offset), zap.Error(err))
		}
		for i, e := range events {
			if pos == c.pos && i <= c.index {
				continue // delivered before
			}
			e.ID = cursor{pos: pos, index: i}.String()
			page.Events = append(page.Events, e)
		}
		if pos != c.pos || len(events) > c.index {
			page.Next = cursor{pos: pos, index: max(len(events)-1, 0)}.String()
		}
	}
	if err := rows.Err(); err != nil {
		return ports.FeedPage{}, postgres.TranslateError(fmt.Errorf("read event feed: %w", err))
	}
	if xmin > 0 && c.pos.TransactionID >= xmin {
		return f.rewound(ctx, c, xmin)
	}
	page.More = messages >= limit || kept < candidates
	if messages == 0 && !page.More && xmin > 0 {
		// Nothing after the cursor below the oldest running transaction: the
		// reader has seen everything there, and its position may say so
		// (as Tail's does). Readers that caught up then compare.
		if caughtUp := (cursor{pos: Position{TransactionID: xmin - 1, Offset: math.MaxInt64}}); c.less(caughtUp) {
			page.Next = caughtUp.String()
		}
	}
	return page, nil
}

// RewindMargin is how far before the last transaction the new primary
// replayed as a standby a rewound feed goes back (see rewound).
const RewindMargin = 10 * time.Second

// rewoundSQL finds the first message created less than $1 before the last
// transaction the server replayed in recovery (a promoted standby's last
// transaction from its former primary), or before now when it replayed none,
// among those the janitor has not deleted.
const rewoundSQL = `
SELECT m.transaction_id::text, m."offset" FROM watermill_taskmaster_events m, outbox_janitor_state s
WHERE m.created_at > coalesce(pg_last_xact_replay_timestamp(), now()) - make_interval(secs => $1)
	AND (m.transaction_id, m."offset") > (s.transaction_id, s."offset")
ORDER BY m.transaction_id, m."offset" LIMIT 1`

// rewound is the page of a read whose cursor the database has not reached:
// every cursor the feed hands out is below the oldest running transaction
// of its read, and that only ever grows, unless the database's history went
// back. A failover to a standby that had not received every commit (an
// asynchronous one), or a crash that lost commits made with
// synchronous_commit off, does that: the transactions after the last one it
// kept are gone, and the ids they had are handed out again. A reader that
// kept its cursor would skip every new message until the ids passed it. So
// the page says the events through the cursor are lost (Lost, which streams
// send as stream.events_lost), and moves the cursor to just before the
// first message created RewindMargin before the last transaction the server
// replayed from its former primary: what the new primary committed is
// delivered, and so, again, are the last seconds before the failover (at
// least once across it).
func (f *Feed) rewound(ctx context.Context, c cursor, xmin uint64) (ports.FeedPage, error) {
	var (
		tx  sql.NullString
		off sql.NullInt64
	)
	err := f.db.QueryRowContext(ctx, rewoundSQL, RewindMargin.Seconds()).Scan(&tx, &off)
	if err != nil && err != sql.ErrNoRows {
		return ports.FeedPage{}, postgres.TranslateError(fmt.Errorf("read event feed after a rewind: %w", err))
	}
	// At the latest just below the oldest running transaction, as a
	// caught-up reader is: a cursor at or past it would read as rewound
	// again.
	next := cursor{pos: Position{TransactionID: xmin - 1, Offset: math.MaxInt64}}
	if tx.Valid {
		id, perr := strconv.ParseUint(tx.String, 10, 64)
		if perr != nil {
			return ports.FeedPage{}, fmt.Errorf("read event feed after a rewind: transaction id %q: %w", tx.String, perr)
		}
		if before := (cursor{pos: Position{TransactionID: id, Offset: off.Int64 - 1}, index: math.MaxInt32}); before.less(next) {
			next = before
		}
	}
	f.logger.Warn("event feed: the database has not reached this cursor (a failover to a standby that had not received "+
		"every commit, or commits lost in a crash); the events through it are reported lost, reading resumes before the failover",
		zap.String("cursor", c.String()), zap.String("resume_after", next.String()))
	return ports.FeedPage{Next: next.String(), Lost: c.String()}, nil
}

// feedEvents returns the events of a payload, each with its JSON and the
// fields streams filter on. The scanner reads the publisher's plain shape;
// anything else goes through encoding/json.
func feedEvents(payload []byte) ([]ports.FeedEvent, error) {
	var out []ports.FeedEvent
	s := newScanner(payload)
	err := s.events(func(raw []byte, e *scannedEvent) {
		out = append(out, ports.FeedEvent{Type: event.Type(e.typ), TaskID: string(e.taskID), WorkflowID: string(e.workflowID),
			Queue: e.queue, Queues: e.queues, Data: raw})
	})
	if err == nil {
		return out, nil
	}
	var p struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("decode outbox payload: %w", err)
	}
	out = out[:0]
	for _, raw := range p.Events {
		var e event.Event
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, fmt.Errorf("decode outbox event: %w", err)
		}
		out = append(out, ports.FeedEvent{Type: e.Type, TaskID: e.TaskID, WorkflowID: e.WorkflowID, Queue: e.Queue, Queues: e.Queues, Data: raw})
	}
	return out, nil
}
