// Package outbox consumes the transactional outbox (the watermill-sql topic
// taskmaster_events that every committed transition appends to): a Watermill
// router with one watermill-sql consumer group per projector, the queue
// statistics and metrics projectors, the janitor that deletes consumed
// messages, and the event feed behind GET /events/v1.
package outbox

import (
	"fmt"
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

// Metadata keys under which SchemaAdapter stamps a delivered message's
// position.
const (
	MetadataTransactionID = "outbox_transaction_id"
	MetadataOffset        = "outbox_offset"
)

// SchemaAdapter is watermill-sql's PostgreSQL schema that also stamps each
// delivered message with its outbox position (metadata outbox_transaction_id
// and outbox_offset), so a consumer can remember what it applied.
type SchemaAdapter struct {
	wsql.DefaultPostgreSQLSchema
}

// UnmarshalMessage implements wsql.SchemaAdapter.
func (s SchemaAdapter) UnmarshalMessage(row wsql.Scanner) (wsql.Row, error) {
	r, err := s.DefaultPostgreSQLSchema.UnmarshalMessage(row)
	if err != nil {
		return r, err
	}
	txID, _ := r.ExtraData["transaction_id"].(int64)
	r.Msg.Metadata.Set(MetadataTransactionID, strconv.FormatInt(txID, 10))
	r.Msg.Metadata.Set(MetadataOffset, strconv.FormatInt(r.Offset, 10))
	return r, nil
}

// PositionOf returns the position SchemaAdapter stamped on msg.
func PositionOf(msg *message.Message) (Position, error) {
	tx, err := strconv.ParseUint(msg.Metadata.Get(MetadataTransactionID), 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("message %s has no outbox transaction id: %w", msg.UUID, err)
	}
	off, err := strconv.ParseInt(msg.Metadata.Get(MetadataOffset), 10, 64)
	if err != nil {
		return Position{}, fmt.Errorf("message %s has no outbox offset: %w", msg.UUID, err)
	}
	return Position{TransactionID: tx, Offset: off}, nil
}
