// Package envelope is the outbox's wire format, the one place both of its
// sides take it from: the Watermill topic lifecycle events are published to,
// the metadata a message carries, and the payload of one message. The
// publisher (adapters/postgres.TxRunner) and the consumers (adapters/outbox:
// projections, event streams) import it; it imports neither, so renaming
// something here cannot silently split the two sides.
//
// The topic's tables are watermill-sql's PostgreSQL defaults, created by
// migrations/0001_init.sql: watermill_taskmaster_events (the outbox) and
// watermill_offsets_taskmaster_events (each consumer group's position).
package envelope

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
)

// Topic is the Watermill topic of lifecycle events.
const Topic = "taskmaster_events"

// MetadataCorrelationID is the message metadata key of the correlation id of
// the request that caused the transaction.
const MetadataCorrelationID = "correlation_id"

// Payload is the payload of one outbox message: the events of one
// transaction, in the order they happened, as JSON {"events": [...]}.
type Payload struct {
	// Events are the transaction's lifecycle events.
	Events []event.Event `json:"events"`
}

// NewMessage wraps events into one outbox message, stamping the correlation
// id of ctx on the message and on events that have none.
func NewMessage(ctx context.Context, events []event.Event) (*message.Message, error) {
	cid := ports.CorrelationID(ctx)
	for i := range events {
		if events[i].CorrelationID == "" {
			events[i].CorrelationID = cid
		}
	}
	payload, err := marshalPayload(events)
	if err != nil {
		return nil, fmt.Errorf("encode events: %w", err)
	}
	msg := message.NewMessage(watermill.NewUUID(), payload)
	if cid != "" {
		msg.Metadata.Set(MetadataCorrelationID, cid)
	}
	return msg, nil
}

// Decode returns the events of a message's payload.
func Decode(payload []byte) ([]event.Event, error) {
	var p Payload
	if err := json.Unmarshal(payload, &p); err != nil {
		return nil, fmt.Errorf("decode outbox payload: %w", err)
	}
	return p.Events, nil
}
