package outbox

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
)

// seenEvent is what the projections see of an event: its class key and
// durations.
type seenEvent struct {
	class     eventClass
	has       uint8
	durations [3]float64
}

// seen returns what the projections see of a batch's only message.
func seen(t testing.TB, b *Batch) ([]seenEvent, error) {
	t.Helper()
	require.Len(t, b.Messages, 1)
	m := b.Messages[0]
	var out []seenEvent
	for _, e := range m.events {
		out = append(out, seenEvent{b.classes.keys[e.class], e.has, e.durations})
	}
	return out, m.DecodeErr
}

// FuzzScanAgreesWithEncodingJSON checks that the scanner sees in any
// payload exactly what encoding/json decodes (or fails where encoding/json
// fails). Payloads are valid JSON in valid UTF-8, as PostgreSQL's json type
// guarantees.
func FuzzScanAgreesWithEncodingJSON(f *testing.F) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 600, time.UTC)
	real, err := json.Marshal(envelope.Payload{Events: []event.Event{
		{Version: 1, Type: event.TaskClaimed, TaskID: uuid.NewString(), Queue: "emails", From: "PENDING", To: "RUNNING",
			Attempt: 1, WorkerID: "w-1", OccurredAt: at, CorrelationID: "c-1", QueueWaitSeconds: event.Seconds(1500 * time.Millisecond)},
		{Version: 1, Type: event.TaskFailed, TaskID: uuid.NewString(), Queue: "emails", From: "RUNNING", To: "DEAD",
			Reason: "exhausted", OccurredAt: at, ExecutionSeconds: event.Seconds(0), EndToEndSeconds: event.Seconds(time.Hour)},
		{Version: 1, Type: event.WorkerRegistered, WorkerID: "w-1", Queues: []string{"emails", "sms"}, To: "ACTIVE", OccurredAt: at},
		{Version: 1, Type: event.WorkerRegistered, WorkerID: "w-2", To: "ACTIVE", OccurredAt: at},
		{Version: 1, Type: event.TaskSnoozed, TaskID: uuid.NewString(), Queue: "emails", From: "RUNNING", To: "PENDING",
			Reason: "snoozed", OccurredAt: at, DelaySeconds: event.Seconds(90 * time.Second)},
		{Version: 1, Type: event.ScheduleTickSkipped, Queue: "reports", Schedule: "nightly", Reason: "overlap", OccurredAt: at},
		{Version: 1, Type: event.TaskCompleted, TaskID: uuid.NewString(), Queue: "emails", From: "RUNNING", To: "DONE",
			OccurredAt: at, Metadata: map[string]string{"tenant": "acme", "request.id": "r-\"1\""}},
		{Version: 1, Type: event.TaskProgress, TaskID: uuid.NewString(), Queue: "emails", From: "RUNNING", To: "RUNNING",
			OccurredAt: at, Progress: &event.Progress{Percent: 42.5, Message: "copying", Details: json.RawMessage(`{"n":[1,2]}`)}},
	}})
	require.NoError(f, err)
	for _, seed := range []string{
		string(real),
		`{"events":[]}`, `{"events":null}`, `{}`, `null`, `5`, `"x"`, `[]`, `{"events":5}`, `{"events":[null]}`, `{"events":[5]}`,
		`{"events":[{"type":"task.submitted","queue":"q\u00e9\"\\","to":"PENDING","occurred_at":"2030-01-02T03:04:05+05:30"}]}`,
		`{"events":[{"Type":"task.submitted","queue":"q"}]}`, `{"EVENTS":[{"type":"task.submitted"}]}`,
		`{"events":[{"type":"task.submitted"}],"events":[{"queue":"q"}]}`,
		`{"events":[{"type":"a","type":null,"queue":"q","queue":""}]}`,
		`{"events":[{"queue":5}]}`, `{"events":[{"queues":"q"}]}`, `{"events":[{"queues":[null,"a"]}]}`, `{"events":[{"queues":[]}]}`,
		`{"events":[{"queue_wait_seconds":"1"}]}`, `{"events":[{"queue_wait_seconds":1e400}]}`, `{"events":[{"execution_seconds":-3.5e-2}]}`,
		`{"events":[{"end_to_end_seconds":null,"end_to_end_seconds":2}]}`, `{"events":[{"version":"1"}]}`, `{"events":[{"attempt":1.5}]}`,
		`{"events":[{"task_id":5}]}`, `{"events":[{"occurred_at":"yesterday"}]}`, `{"events":[{"occurred_at":null}]}`,
		`{"events":[{"extra":{"a":[1,{"b":"}"}]},"type":"task.completed","queue":"q"}]}`, `{"other":[{"x":1}],"events":[{"type":"t"}]}`,
		` { "events" : [ { "type" : "task.submitted" , "queue" : "q" } ] } `, `{"ev\u0065nts":[{"type":"x"}]}`,
		`{"events":[{"typ\u0065":"x"}]}`, `{"events":[{"reason":"\ud83d\ude00"}]}`,
		`{"events":[{"schedule":5}]}`, `{"events":[{"schedule":null,"schedule":"s"}]}`, `{"events":[{"Schedule":"s"}]}`,
		`{"events":[{"delay_seconds":"1"}]}`, `{"events":[{"delay_seconds":1e400}]}`, `{"events":[{"delay_seconds":null}]}`,
		`{"events":[{"metadata":{"a":"b","a":"c"}}]}`, `{"events":[{"metadata":{"a":null}}]}`, `{"events":[{"metadata":{"a":1}}]}`,
		`{"events":[{"metadata":[]}]}`, `{"events":[{"metadata":null}]}`, `{"events":[{"metadata":{}}]}`,
		`{"events":[{"metadata":{"\u0061":"b"}}]}`, `{"events":[{"Metadata":{"a":"b"}}]}`, `{"events":[{"metadata":"x"}]}`,
		`{"events":[{"progress":{"percent":"1"}}]}`, `{"events":[{"progress":{"percent":1,"details":{"x":[]}}}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		if !json.Valid(payload) || !utf8.Valid(payload) {
			t.Skip("PostgreSQL's json type admits only valid JSON in UTF-8")
		}
		decoded, decodeErr := envelope.Decode(payload)
		want := newBatch()
		want.add(Position{TransactionID: 1, Offset: 1}, payload, decoded, decodeErr)
		batch := append(append([]byte(`[["1", 1, `), payload...), ']', ']')
		got, err := decodeBatch(batch)
		require.NoError(t, err)
		wantSeen, wantErr := seen(t, want)
		gotSeen, gotErr := seen(t, got)
		if wantErr != nil {
			require.Error(t, gotErr, "encoding/json fails on %s", payload)
			return
		}
		require.NoError(t, gotErr, "%s", payload)
		require.Equal(t, wantSeen, gotSeen, "%s", payload)
		require.Equal(t, bytes.TrimSpace(payload), []byte(got.Messages[0].Payload))
	})
}

// A batch's messages come out in delivery order, whatever order the query
// aggregated them in.
func TestDecodeBatchSortsByPosition(t *testing.T) {
	t.Parallel()
	b, err := decodeBatch([]byte(`[["7", 3, {"events":[]}], ["5", 9, null], ["7", 2, {"events":[{"type":"x"}]}]]`))
	require.NoError(t, err)
	var got []string
	for _, m := range b.Messages {
		got = append(got, m.Position.String())
	}
	require.Equal(t, []string{"5/9", "7/2", "7/3"}, got)
	_, err = decodeBatch([]byte(`[["7", "3", {}]]`))
	require.Error(t, err)
}

// benchBatch is a batch of messages of per events each, as the batch query
// returns it.
func benchBatch(tb testing.TB, messages, per int) []byte {
	tb.Helper()
	var rows [][]any
	at := time.Now()
	for i := range messages {
		var evs []event.Event
		for j := range per {
			evs = append(evs, event.Event{Version: 1, Type: event.TaskCompleted, TaskID: uuid.NewString(), Queue: fmt.Sprintf("q-%d", j%4),
				From: "RUNNING", To: "DONE", Attempt: 1, WorkerID: "w", OccurredAt: at, CorrelationID: "c",
				ExecutionSeconds: event.Seconds(time.Second), EndToEndSeconds: event.Seconds(2 * time.Second)})
		}
		p, err := json.Marshal(envelope.Payload{Events: evs})
		require.NoError(tb, err)
		rows = append(rows, []any{strconv.Itoa(1000 + i), int64(i + 1), json.RawMessage(p)})
	}
	out, err := json.Marshal(rows)
	require.NoError(tb, err)
	return out
}

// BenchmarkDecodeAndProject measures the projector's own CPU per event:
// decoding a batch of 40 messages of 100 events and projecting it.
//
//	go test -run '^$' -bench DecodeAndProject ./adapters/outbox/
func BenchmarkDecodeAndProject(b *testing.B) {
	payload := benchBatch(b, 40, 100)
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		batch, err := decodeBatch(payload)
		if err != nil {
			b.Fatal(err)
		}
		for _, pr := range projections() {
			sum := newSummary(batch.classes)
			for _, m := range batch.Messages {
				sum.add(m.events)
			}
			pr.write(sum, &statement{}, "g")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*4000), "ns/event")
}

// The scanner knows every field of event.Event: the fields it reads, and
// the kinds of the others, taken from the type (a field added later is
// type-checked like the rest).
func TestScannerKnowsEveryEventField(t *testing.T) {
	t.Parallel()
	for _, f := range readFields {
		require.Contains(t, eventFields, f, "the scanner reads a field events do not have")
	}
	require.Len(t, eventFields, len(readFields)+len(skippedFields))
	// Fields only operators' audit events carry, and task.progress (at
	// most one a second per task), are rare next to transitions: they may
	// send their events to encoding/json.
	rare := map[string]bool{"settings": true, "progress": true, "limit": true}
	for name, kind := range skippedFields {
		if rare[name] {
			continue
		}
		require.Contains(t, []reflect.Kind{reflect.String, reflect.Int, reflect.Int64, reflect.Float64, reflect.Map}, kind,
			"field %s: a kind the scanner does not check sends every event to encoding/json", name)
	}
}
