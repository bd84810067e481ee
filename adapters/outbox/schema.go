package outbox

import (
	"fmt"
	"slices"
	"strconv"

	wsql "github.com/ThreeDotsLabs/watermill-sql/v3/pkg/sql"
	"github.com/ThreeDotsLabs/watermill/message"
)

// Position is where a message sits in the outbox. Messages are delivered in
// (TransactionID, Offset) order, the order of the table's primary key; a
// consumer group's offsets row records the last position it consumed.
type Position struct {
	// TransactionID is the id (xid8) of the transaction that appended it.
	TransactionID uint64
	// Offset is its bigserial offset.
	Offset int64
}

// Less reports whether p comes before q.
func (p Position) Less(q Position) bool {
	if p.TransactionID != q.TransactionID {
		return p.TransactionID < q.TransactionID
	}
	return p.Offset < q.Offset
}

func (p Position) String() string { return fmt.Sprintf("%d/%d", p.TransactionID, p.Offset) }

// Message is one outbox message of a batch.
type Message struct {
	Position Position
	// Payload is the message's payload as stored (JSON).
	Payload []byte
	// DecodeErr says why the payload could not be decoded.
	DecodeErr error
	// events are its events, reduced to what the projections read.
	events []compactEvent
}

// batchSchema is watermill-sql's PostgreSQL schema with a select query that
// hands the subscriber one row, and so its handler one Watermill message,
// carrying a whole batch of outbox messages: the next ones after the
// group's position, in (transaction_id, offset) order and under the same
// pg_snapshot_xmin rule as watermill-sql's own query, at most maxMessages of
// them and, after the first, no more than maxBytes of stored (possibly
// compressed) payload. The row reports the last message's offset and
// transaction id, so the offsets adapter acknowledges the whole batch at
// once.
//
// watermill-sql delivers the rows of one query inside one transaction, one
// message at a time, with no hook at the end of the batch; batching in the
// query is what lets the projector apply a batch with one statement.
type batchSchema struct {
	wsql.DefaultPostgreSQLSchema
	maxMessages int
	maxBytes    int
}

var _ wsql.SchemaAdapter = batchSchema{}

// SelectQuery implements wsql.SchemaAdapter for the outbox topic
// (envelope.Topic). $1 is the consumer group: the offsets adapter's
// NextOffsetQuery locks its row FOR UPDATE, so one transaction of a group
// runs at a time. The batch is the JSON array [[transaction id, offset,
// payload], ...] in no particular order (sorting it would spill the
// aggregate to disk; the decoder sorts). pg_column_size reads a payload's
// stored size without fetching it from TOAST, so only the kept payloads
// are read.
func (s batchSchema) SelectQuery(topic, consumerGroup string, offsets wsql.OffsetsAdapter) wsql.Query {
	next := offsets.NextOffsetQuery(topic, consumerGroup)
	query := `
WITH last_processed AS (` + next.Query + `
), candidates AS (
	SELECT m.transaction_id, m."offset", m.payload,
		sum(pg_column_size(m.payload)) OVER (ORDER BY m.transaction_id, m."offset") - pg_column_size(m.payload) AS before
	FROM (
		SELECT transaction_id, "offset", payload
		FROM watermill_taskmaster_events
		WHERE (transaction_id, "offset") > (
				(SELECT last_processed_transaction_id FROM last_processed),
				(SELECT coalesce(offset_acked, 0) FROM last_processed))
			AND transaction_id < pg_snapshot_xmin(pg_current_snapshot())
		ORDER BY transaction_id, "offset"
		LIMIT ` + strconv.Itoa(s.maxMessages) + `
	) m
), kept AS MATERIALIZED (
	SELECT transaction_id, "offset", payload FROM candidates WHERE before < ` + strconv.Itoa(s.maxBytes) + `
)
SELECT last."offset", last.transaction_id::text, all_.messages
FROM (SELECT json_agg(json_build_array(transaction_id::text, "offset", payload)) AS messages FROM kept) all_,
	LATERAL (SELECT transaction_id, "offset" FROM kept ORDER BY transaction_id DESC, "offset" DESC LIMIT 1) last`
	return wsql.Query{Query: query, Args: next.Args}
}

// UnmarshalMessage implements wsql.SchemaAdapter: the batch becomes one
// message whose payload is the batch's JSON array.
func (s batchSchema) UnmarshalMessage(row wsql.Scanner) (wsql.Row, error) {
	var (
		r    wsql.Row
		txID string
	)
	if err := row.Scan(&r.Offset, &txID, &r.Payload); err != nil {
		return wsql.Row{}, fmt.Errorf("scan outbox batch: %w", err)
	}
	tx, err := strconv.ParseInt(txID, 10, 64)
	if err != nil {
		return wsql.Row{}, fmt.Errorf("outbox batch transaction id %q: %w", txID, err)
	}
	r.UUID = []byte(txID + "-" + strconv.FormatInt(r.Offset, 10))
	r.Msg = message.NewMessage(string(r.UUID), r.Payload)
	// The offsets adapter acknowledges up to the batch's last message.
	r.ExtraData = map[string]any{"transaction_id": tx}
	return r, nil
}

// decodeBatch returns the outbox messages of a batch message's payload in
// delivery order, each with its events decoded (or the error that prevented
// it).
func decodeBatch(payload []byte) (*Batch, error) {
	b, err := scanBatch(payload)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(b.Messages, func(x, y Message) int {
		switch {
		case x.Position.Less(y.Position):
			return -1
		case y.Position.Less(x.Position):
			return 1
		}
		return 0
	})
	return b, nil
}
