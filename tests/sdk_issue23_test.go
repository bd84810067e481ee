package tests

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/client/clientotel"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// The SDK waits for results, reports progress, speaks time limits and
// metadata, and (with clientotel) carries its caller's trace to the tasks
// it submits and from a task to its handler's context.
func TestSDKWaitsProgressTimeLimitsMetadataAndTraces(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	spec := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, spec.Transport(http.DefaultTransport))
	ctx := t.Context()
	_, err := c.Register(ctx, client.RegisterParams{ID: "w"})
	require.NoError(t, err)

	// A worker that completes what it claims, reporting progress first.
	worked := make(chan *client.Task, 4)
	go func() {
		for i := 0; i < 2; i++ {
			tasks, err := c.Claim(ctx, client.ClaimParams{WorkerID: "w", Wait: 10 * time.Second})
			if err != nil || len(tasks) == 0 {
				continue
			}
			task := tasks[0]
			p, err := c.Progress(ctx, task.ID, client.ProgressParams{WorkerID: "w", LeaseID: task.LeaseID, Percent: 50,
				Message: "half", Details: map[string]int{"n": 1}})
			if err == nil {
				worked <- p
			}
			_, _ = c.Complete(ctx, task.ID, client.CompleteParams{WorkerID: "w", LeaseID: task.LeaseID, Result: "done"})
		}
	}()

	done, err := c.SubmitAndWait(ctx, client.SubmitParams{Queue: "sdk23", TimeoutSeconds: 600,
		Metadata: map[string]string{"tenant": "acme"}})
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, done.Status)
	require.JSONEq(t, `"done"`, string(done.Result))
	require.Equal(t, 600, done.TimeoutSeconds)
	require.Equal(t, map[string]string{"tenant": "acme"}, done.Metadata)
	require.Equal(t, 50.0, done.LastProgress.Percent, "the last report stays after the attempt")
	p := <-worked
	require.Equal(t, "half", p.LastProgress.Message)
	require.JSONEq(t, `{"n":1}`, string(p.LastProgress.Details))
	require.NotNil(t, p.TimeoutAt)

	task, err := c.Submit(ctx, client.SubmitParams{Queue: "sdk23"})
	require.NoError(t, err)
	waited, err := c.Wait(ctx, task.ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, waited.Status)

	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	pending, err := c.Submit(ctx, client.SubmitParams{Queue: "nobody-works-here"})
	require.NoError(t, err)
	_, err = c.Wait(short, pending.ID)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	_, err = c.Progress(ctx, pending.ID, client.ProgressParams{WorkerID: "w", LeaseID: "00000000-0000-4000-8000-000000000000", Percent: 1})
	require.True(t, client.IsLeaseLost(err), "%v", err)

	page, err := c.List(ctx, client.ListParams{Metadata: map[string]string{"tenant": "acme"}})
	require.NoError(t, err)
	require.Len(t, page.Tasks, 1)
	require.Equal(t, done.ID, page.Tasks[0].ID)
	limit := 90
	settings, err := c.UpdateQueue(ctx, "sdk23", client.QueuePatch{DefaultTimeoutSeconds: &limit})
	require.NoError(t, err)
	require.Equal(t, 90, *settings.DefaultTimeoutSeconds)

	// Traces: the caller's span reaches the task, and the task's trace the
	// handler's context.
	traced, err := client.New(s.URL, clientotel.Propagation())
	require.NoError(t, err)
	traceID, _ := trace.TraceIDFromHex("4bf92f3577b34da6a3ce929d0e0e4736")
	spanID, _ := trace.SpanIDFromHex("00f067aa0ba902b7")
	caller := trace.ContextWithSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
		TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled}))
	sub, err := traced.Submit(caller, client.SubmitParams{Queue: "traced"})
	require.NoError(t, err)
	require.Equal(t, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", sub.Trace.Traceparent)
	handler := clientotel.TaskContext(context.Background(), *sub)
	require.Equal(t, traceID, trace.SpanContextFromContext(handler).TraceID())
	require.True(t, trace.SpanContextFromContext(handler).IsRemote())
	plain, err := c.Submit(ctx, client.SubmitParams{Queue: "traced"})
	require.NoError(t, err)
	require.Nil(t, plain.Trace, "no span, no trace")
	require.Equal(t, ctx, clientotel.TaskContext(ctx, *plain))
}
