package envelope

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
)

func TestEveryEventFieldIsEncoded(t *testing.T) {
	t.Parallel()
	var names []string
	typ := reflect.TypeOf(event.Event{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		names = append(names, name)
	}
	require.ElementsMatch(t, names, append(append([]string(nil), encodedFields...), fallbackFields...),
		"a field of event.Event that appendEvent neither writes nor leaves to encoding/json")
}

// samples are events of every kind the hot paths make, and of the kinds
// that go through encoding/json.
func samples() []event.Event {
	at := time.Date(2026, 11, 26, 15, 4, 5, 123456000, time.UTC)
	f := func(v float64) *float64 { return &v }
	matched := int64(42)
	return []event.Event{
		{Version: 1, Type: event.TaskSubmitted, TaskID: "0193a0b1-1111-7000-8000-000000000001", Queue: "emails", To: "PENDING", OccurredAt: at, CorrelationID: "c-1"},
		{Version: 1, Type: event.TaskClaimed, TaskID: "t", Queue: "q", From: "PENDING", To: "RUNNING", Attempt: 1, WorkerID: "w-1",
			OccurredAt: at, QueueWaitSeconds: f(0.000123), DelaySeconds: f(0)},
		{Version: 1, Type: event.TaskCompleted, TaskID: "t", Queue: "q", From: "RUNNING", To: "DONE", Attempt: 3, WorkerID: "w <&> \"x\"",
			OccurredAt: at.In(time.FixedZone("z", -7200)), ExecutionSeconds: f(1.5e-9), EndToEndSeconds: f(1e21)},
		{Version: 1, Type: event.TaskFailed, TaskID: "t", Reason: "non_retryable\u2028é", OccurredAt: at, KeyID: "k", TargetKeyID: "k2"},
		{Version: 1, Type: event.WorkerRegistered, WorkerID: "w", Queues: []string{"a", "b<c"}, OccurredAt: at},
		{Version: 1, Type: event.TaskPurged, Queue: "q", Matched: &matched, Schedule: "nightly", OccurredAt: at},
		{Version: 1, Type: event.TaskSubmitted, Queues: []string{}, OccurredAt: time.Time{}},
		{Version: 1, Type: event.TaskSubmitted, TaskID: "t", WorkflowID: "w", ReplayOf: "r", Queue: "q", OccurredAt: at},
		// encoding/json's alone:
		{Version: 1, Type: "queue.settings_changed", Queue: "q", Settings: &queue.Settings{Paused: true}, OccurredAt: at},
		{Version: 1, Type: event.TaskSubmitted, TaskID: "t", Metadata: map[string]string{"b": "2", "a": "<1>"}, OccurredAt: at},
		{Version: 1, Type: event.TaskProgress, TaskID: "t", Progress: &event.Progress{Percent: 12.5, Message: "m"}, OccurredAt: at},
		{Version: 1, Type: "task.bulk", Filter: map[string]string{"queue": "q"}, OccurredAt: at},
	}
}

func TestAppendPayloadMatchesMarshal(t *testing.T) {
	t.Parallel()
	all := samples()
	for i := range all {
		want, err := json.Marshal(Payload{Events: all[i : i+1]})
		require.NoError(t, err)
		got, err := marshalPayload(all[i : i+1])
		require.NoError(t, err)
		require.Equal(t, string(want), string(got), "event %d", i)
	}
	want, err := json.Marshal(Payload{Events: all[:8]})
	require.NoError(t, err)
	got, ok := appendPayload(nil, all[:8])
	require.True(t, ok, "the hot paths' events are written by hand")
	require.Equal(t, string(want), string(got))
	for _, e := range all[8:] {
		_, ok := appendPayload(nil, []event.Event{e})
		require.False(t, ok, "%s goes through encoding/json", e.Type)
	}
	for _, v := range []float64{math.NaN(), math.Inf(1)} {
		_, ok := appendPayload(nil, []event.Event{{Type: "x", ExecutionSeconds: &v}})
		require.False(t, ok)
		_, err := marshalPayload([]event.Event{{Type: "x", ExecutionSeconds: &v}})
		require.Error(t, err, "refused as encoding/json refuses it")
	}
	_, ok = appendPayload(nil, []event.Event{{Type: "x", OccurredAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)}})
	require.False(t, ok)
	for _, events := range [][]event.Event{nil, {}} {
		want, err := json.Marshal(Payload{Events: events})
		require.NoError(t, err)
		got, err := marshalPayload(events)
		require.NoError(t, err)
		require.Equal(t, string(want), string(got))
	}
}

func FuzzAppendPayload(f *testing.F) {
	f.Add("t", "q<&>", "w\u2028", "r", 1, 0.25, int64(1764169445123456789))
	f.Add("", "", "", "", 0, 1e-7, int64(0))
	f.Fuzz(func(t *testing.T, id, queue, worker, reason string, attempt int, secs float64, nanos int64) {
		e := event.Event{Version: 1, Type: event.TaskFailed, TaskID: id, Queue: queue, WorkerID: worker, Reason: reason,
			Attempt: attempt, ExecutionSeconds: &secs, OccurredAt: time.Unix(0, nanos).UTC()}
		want, werr := json.Marshal(Payload{Events: []event.Event{e}})
		got, gerr := marshalPayload([]event.Event{e})
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("encoding/json: %v, marshalPayload: %v", werr, gerr)
		}
		if werr == nil && string(got) != string(want) {
			t.Fatalf("got %s, encoding/json writes %s", got, want)
		}
	})
}

// BenchmarkPayload encodes a claim of 100 tasks' events by hand and with
// encoding/json:
//
//	go test -run '^$' -bench Payload -benchmem ./adapters/outbox/envelope/
func BenchmarkPayload(b *testing.B) {
	events := make([]event.Event, 100)
	for i := range events {
		events[i] = samples()[1]
	}
	b.Run("by-hand", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := marshalPayload(events); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := json.Marshal(Payload{Events: events}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
