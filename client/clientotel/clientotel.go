// Package clientotel connects the Go SDK (package client, which stays on
// the standard library) to OpenTelemetry through the W3C Trace Context:
// calls carry their context's trace, so the tasks they create keep it, and
// a worker's handler continues the trace its task was submitted under.
//
//	c, err := client.New(url, clientotel.Propagation())
//	r := client.NewRunner(c, client.RunnerConfig{..., HandlerContext: clientotel.TaskContext})
package clientotel

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmaster/taskmaster/client"
)

// traceContext is the W3C Trace Context propagator: the format of tasks'
// traces.
var traceContext = propagation.TraceContext{}

// Propagation makes every call of the client carry its context's trace
// (the traceparent and tracestate headers of ctx's OpenTelemetry span):
// a task it submits (or enqueues) keeps the trace, and the server's own
// spans of the call are its children. A context without a span sends
// nothing.
func Propagation() client.Option {
	return client.WithHeaders(func(ctx context.Context, h http.Header) {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	})
}

// TaskContext returns ctx carrying the task's trace (client.Task.Trace)
// as its remote parent span, so that spans started from it continue the
// trace the task was submitted under; ctx itself when the task has none,
// or a malformed one.
func TaskContext(ctx context.Context, t client.Task) context.Context {
	if sc := SpanContext(t); sc.IsValid() {
		return trace.ContextWithRemoteSpanContext(ctx, sc)
	}
	return ctx
}

// SpanContext returns the task's trace as an OpenTelemetry span context
// (invalid when it has none).
func SpanContext(t client.Task) trace.SpanContext {
	if t.Trace == nil || t.Trace.Traceparent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": t.Trace.Traceparent}
	if t.Trace.Tracestate != "" {
		carrier["tracestate"] = t.Trace.Tracestate
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
}
