package envelope

import (
	"encoding/json"
	"strconv"

	"github.com/taskmaster/taskmaster/adapters/jsontext"
	"github.com/taskmaster/taskmaster/domain/event"
)

// Every transaction encodes its events into its outbox message: in the
// batch scenario encoding/json's reflection over event.Event took a tenth
// of the server's CPU. appendPayload writes the payload by hand, byte for
// byte what json.Marshal(Payload{...}) writes (HTML escaping on, fields in
// the struct's order, omitempty as tagged; TestAppendPayloadMatchesMarshal
// and FuzzAppendPayload compare them), for the events of the hot paths:
// lifecycle events of tasks and workers. An event that carries what only
// encoding/json writes here (settings, limits, filters, metadata, progress:
// operators' and rarer events) or what it refuses (a time outside years
// 0-9999, a float that is not finite) sends the message through
// encoding/json.

// encodedFields are the JSON names of event.Event's fields that
// appendEvent writes; fallbackFields those that send an event through
// encoding/json when set. A field in neither fails
// TestEveryEventFieldIsEncoded.
var (
	encodedFields = []string{"version", "type", "task_id", "workflow_id", "replay_of", "queue", "queues", "from", "to", "reason", "attempt",
		"worker_id", "occurred_at", "correlation_id", "key_id", "target_key_id", "schedule", "matched",
		"delay_seconds", "queue_wait_seconds", "execution_seconds", "end_to_end_seconds"}
	fallbackFields = []string{"settings", "limit", "filter", "metadata", "progress"}
)

// marshalPayload is json.Marshal(Payload{Events: events}), by hand where it
// can be.
func marshalPayload(events []event.Event) ([]byte, error) {
	if b, ok := appendPayload(make([]byte, 0, 64+256*len(events)), events); ok {
		return b, nil
	}
	return json.Marshal(Payload{Events: events})
}

// appendPayload appends events' payload, or reports false when one of them
// is not for it (see above).
func appendPayload(b []byte, events []event.Event) ([]byte, bool) {
	if events == nil {
		return append(b, `{"events":null}`...), true
	}
	b = append(b, `{"events":[`...)
	for i := range events {
		if i > 0 {
			b = append(b, ',')
		}
		var ok bool
		if b, ok = appendEvent(b, &events[i]); !ok {
			return nil, false
		}
	}
	return append(b, "]}"...), true
}

// appendEvent appends e in event.Event's field order.
func appendEvent(b []byte, e *event.Event) ([]byte, bool) {
	if e.Settings != nil || e.Limit != nil || len(e.Filter) > 0 || len(e.Metadata) > 0 || e.Progress != nil ||
		!jsontext.TimeOK(e.OccurredAt) {
		return nil, false
	}
	str := func(b []byte, name, v string) []byte {
		if v == "" {
			return b
		}
		b = append(b, `,"`...)
		b = append(b, name...)
		b = append(b, `":`...)
		return jsontext.AppendString(b, v, true)
	}
	b = append(b, `{"version":`...)
	b = strconv.AppendInt(b, int64(e.Version), 10)
	b = append(b, `,"type":`...)
	b = jsontext.AppendString(b, string(e.Type), true)
	b = str(b, "task_id", e.TaskID)
	b = str(b, "workflow_id", e.WorkflowID)
	b = str(b, "replay_of", e.ReplayOf)
	b = str(b, "queue", e.Queue)
	if len(e.Queues) > 0 {
		b = append(b, `,"queues":[`...)
		for i, q := range e.Queues {
			if i > 0 {
				b = append(b, ',')
			}
			b = jsontext.AppendString(b, q, true)
		}
		b = append(b, ']')
	}
	b = str(b, "from", e.From)
	b = str(b, "to", e.To)
	b = str(b, "reason", e.Reason)
	if e.Attempt != 0 {
		b = append(b, `,"attempt":`...)
		b = strconv.AppendInt(b, int64(e.Attempt), 10)
	}
	b = str(b, "worker_id", e.WorkerID)
	b = append(b, `,"occurred_at":`...)
	b = jsontext.AppendTime(b, e.OccurredAt)
	b = str(b, "correlation_id", e.CorrelationID)
	b = str(b, "key_id", e.KeyID)
	b = str(b, "target_key_id", e.TargetKeyID)
	b = str(b, "schedule", e.Schedule)
	if e.Matched != nil {
		b = append(b, `,"matched":`...)
		b = strconv.AppendInt(b, *e.Matched, 10)
	}
	for _, f := range []struct {
		name string
		v    *float64
	}{{"delay_seconds", e.DelaySeconds}, {"queue_wait_seconds", e.QueueWaitSeconds},
		{"execution_seconds", e.ExecutionSeconds}, {"end_to_end_seconds", e.EndToEndSeconds}} {
		if f.v == nil {
			continue
		}
		if !jsontext.FloatOK(*f.v) {
			return nil, false
		}
		b = append(b, `,"`...)
		b = append(b, f.name...)
		b = append(b, `":`...)
		b = jsontext.AppendFloat(b, *f.v)
	}
	return append(b, '}'), true
}
