package task_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

func TestMetadataIsValidated(t *testing.T) {
	t.Parallel()
	many := map[string]string{}
	for i := range 33 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	cases := []struct {
		name  string
		m     map[string]string
		field string
	}{
		{"too many keys", many, "metadata"},
		{"empty key", map[string]string{"": "v"}, "metadata"},
		{"key too long", map[string]string{strings.Repeat("k", 65): "v"}, "metadata"},
		{"key with a space", map[string]string{"a b": "v"}, "metadata"},
		{"key with a slash", map[string]string{"a/b": "v"}, "metadata"},
		{"value too long", map[string]string{"k": strings.Repeat("é", 513)}, "metadata.k"},
		{"value with a newline", map[string]string{"k": "a\nb"}, "metadata.k"},
		{"value with NUL", map[string]string{"k": "a\x00b"}, "metadata.k"},
		{"value not UTF-8", map[string]string{"k": "\xff"}, "metadata.k"},
	}
	for _, c := range cases {
		p := task.SubmitParams{Queue: "q", Metadata: c.m}
		err := task.ValidateSubmit(&p)
		var verr *validation.Error
		require.ErrorAs(t, err, &verr, c.name)
		require.Equal(t, c.field, verr.Fields[0].Field, c.name)
	}
	ok := map[string]string{"tenant": "acme", "request.id": "r-1_2", strings.Repeat("k", 64): strings.Repeat("é", 512), "empty": ""}
	for i := len(ok); i < 32; i++ {
		ok[strings.Repeat("x", i)] = "v"
	}
	p := task.SubmitParams{Queue: "q", Metadata: ok}
	require.NoError(t, task.ValidateSubmit(&p))
}

// Metadata is copied in and out, and every event of the task carries it.
func TestMetadataTravelsWithTheTask(t *testing.T) {
	t.Parallel()
	m := map[string]string{"tenant": "acme"}
	tk, ev, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "emails", Metadata: m}, base)
	require.NoError(t, err)
	m["tenant"] = "changed"
	require.Equal(t, map[string]string{"tenant": "acme"}, tk.Snapshot().Metadata)
	require.Equal(t, map[string]string{"tenant": "acme"}, ev.Metadata)
	tk.Snapshot().Metadata["tenant"] = "changed"
	require.Equal(t, "acme", tk.Snapshot().Metadata["tenant"])
	claimed, err := tk.Claim(task.ClaimParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: 60}, base)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"tenant": "acme"}, claimed.Metadata)
	require.True(t, tk.HasMetadata(map[string]string{"tenant": "acme"}))
	require.True(t, tk.HasMetadata(nil))
	require.False(t, tk.HasMetadata(map[string]string{"tenant": "acme", "x": ""}))
	require.False(t, tk.HasMetadata(map[string]string{"tenant": "other"}))

	plain, ev, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "emails", Metadata: map[string]string{}}, base)
	require.NoError(t, err)
	require.Nil(t, plain.Snapshot().Metadata, "empty metadata is none")
	require.Nil(t, ev.Metadata)
	var none event.Event
	require.Nil(t, none.Metadata)
}

func TestTraceIsValidated(t *testing.T) {
	t.Parallel()
	good := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for _, s := range []string{good, "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-later"} {
		require.True(t, task.ValidTraceparent(s), s)
	}
	for _, s := range []string{
		"", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
		"00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01",
	} {
		require.False(t, task.ValidTraceparent(s), s)
	}
	require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", task.Trace{Parent: good}.TraceID())
	require.Equal(t, "", task.Trace{}.TraceID())

	fields := func(tr task.Trace) []string {
		p := task.SubmitParams{Queue: "q", Trace: tr}
		err := task.ValidateSubmit(&p)
		if err == nil {
			return nil
		}
		var verr *validation.Error
		require.ErrorAs(t, err, &verr)
		var out []string
		for _, f := range verr.Fields {
			out = append(out, f.Field)
		}
		return out
	}
	require.Nil(t, fields(task.Trace{Parent: good, State: "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}))
	require.Equal(t, []string{"traceparent"}, fields(task.Trace{Parent: "nope"}))
	require.Equal(t, []string{"tracestate"}, fields(task.Trace{State: "a=b"}))
	require.Equal(t, []string{"tracestate"}, fields(task.Trace{Parent: good, State: strings.Repeat("a", 513)}))
	require.Equal(t, []string{"tracestate"}, fields(task.Trace{Parent: good, State: "a=\x01"}))
	tk, _, err := task.Submit(task.SubmitParams{Queue: "q", Trace: task.Trace{Parent: good, State: "a=b"}}, base)
	require.NoError(t, err)
	require.Equal(t, task.Trace{Parent: good, State: "a=b"}, tk.Snapshot().Trace)
}
