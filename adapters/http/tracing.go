package http

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gorilla/mux"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Traces. Every task keeps the W3C trace context of the request that
// created it (task.Trace): the traceparent and tracestate headers of a
// submit, a batch or a complete that enqueues, or a batch item's own
// traceparent field; claims and reads return it (trace), so workers
// continue the trace. A malformed traceparent header is ignored, as the
// W3C recommendation asks of a receiver (the task then has none); a
// malformed field of a batch item is a validation error.
//
// With a tracer (adapters/telemetry: the standard OTEL_* environment asks
// for one) the server also records spans of its own: one per request (a
// child of its traceparent header), and spans of the transitions it makes,
// each a child of its task's trace: taskmaster.submit (whose context is the
// trace the new task keeps: the producer's request, then the submit, then
// the worker), taskmaster.claim, and taskmaster.complete, .fail,
// .progress, .snooze, .extend for the reports. Without a tracer none of
// this runs.

// traceContext is the W3C Trace Context propagator: the format tasks keep.
var traceContext = propagation.TraceContext{}

// withTracing is router middleware (it runs after matching): it records a
// server span of the request, named after its route, as a child of the
// request's traceparent header.
func (s *Server) withTracing(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tpl := "unmatched"
		if cur := mux.CurrentRoute(r); cur != nil {
			tpl, _ = cur.GetPathTemplate()
		}
		ctx := context.WithValue(r.Context(), requestStartKey{}, time.Now())
		ctx = traceContext.Extract(ctx, propagation.HeaderCarrier(r.Header))
		ctx, span := s.tracer.Start(ctx, r.Method+" "+tpl, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("http.request.method", r.Method), attribute.String("http.route", tpl),
				attribute.String("url.path", r.URL.Path)))
		defer span.End()
		rec := &statusRecorder{ResponseWriter: w}
		next.ServeHTTP(rec, r.WithContext(ctx))
		status := rec.status
		if status == 0 {
			status = http.StatusOK
		}
		span.SetAttributes(attribute.Int("http.response.status_code", status))
		if status >= 500 {
			span.SetStatus(codes.Error, strconv.Itoa(status))
		}
	})
}

// requestTrace is the trace context a task created by r keeps, unless the
// item carries its own: the request's span when the server traces
// (withTracing), else its traceparent and tracestate headers as sent
// (none when the traceparent is malformed).
func (s *Server) requestTrace(r *http.Request) task.Trace {
	if s.tracer != nil {
		return traceOf(trace.SpanContextFromContext(r.Context()))
	}
	parent := r.Header.Get("Traceparent")
	if parent == "" || !task.ValidTraceparent(parent) {
		return task.Trace{}
	}
	v := task.Trace{Parent: parent}
	if state := strings.Join(r.Header.Values("Tracestate"), ","); state != "" {
		var check validation.Errors
		if task.CheckTrace(&check, "", task.Trace{Parent: parent, State: state}); check.Err() == nil {
			v.State = state // an unusable tracestate does not cost the traceparent
		}
	}
	return v
}

// traceOf encodes sc as a task's trace (none for an invalid one).
func traceOf(sc trace.SpanContext) task.Trace {
	if !sc.IsValid() {
		return task.Trace{}
	}
	carrier := propagation.MapCarrier{}
	traceContext.Inject(trace.ContextWithSpanContext(context.Background(), sc), carrier)
	return task.Trace{Parent: carrier.Get("traceparent"), State: carrier.Get("tracestate")}
}

// spanContextOf decodes a task's trace (invalid for none).
func spanContextOf(tr task.Trace) trace.SpanContext {
	if tr.Parent == "" {
		return trace.SpanContext{}
	}
	carrier := propagation.MapCarrier{"traceparent": tr.Parent}
	if tr.State != "" {
		carrier["tracestate"] = tr.State
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), carrier))
}

// submitSpan starts a taskmaster.submit span for a task of queue that will
// keep the trace it returns: a child of the item's own trace (item, when
// it has one) or of the request's span, linked to the request's span. The
// span ends with end (its error, if any). It needs a tracer (see traced).
func (s *Server) submitSpan(r *http.Request, queue string, item task.Trace) (task.Trace, func(t *task.Task, err error)) {
	ctx := r.Context()
	request := trace.SpanContextFromContext(ctx)
	if sc := spanContextOf(item); sc.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, sc)
	} else if item.Parent != "" {
		return item, func(*task.Task, error) {} // malformed: validation refuses it
	}
	_, span := s.tracer.Start(ctx, "taskmaster.submit", trace.WithSpanKind(trace.SpanKindProducer),
		trace.WithLinks(trace.Link{SpanContext: request}),
		trace.WithAttributes(attribute.String("messaging.system", "taskmaster"), attribute.String("messaging.destination.name", queue)))
	return traceOf(span.SpanContext()), func(t *task.Task, err error) {
		endTaskSpan(span, t, err)
	}
}

// taskSpans records a span named name for each task, as a child of the
// task's trace (tasks without one get none), from start to now, linked to
// the request's span. errs, when not nil, holds each task's outcome.
func (s *Server) taskSpans(r *http.Request, name string, start time.Time, ts []*task.Task, errs []error) {
	if s.tracer == nil {
		return
	}
	request := trace.SpanContextFromContext(r.Context())
	kind := trace.SpanKindInternal
	if name == "taskmaster.claim" {
		kind = trace.SpanKindConsumer
	}
	for i, t := range ts {
		if t == nil {
			continue
		}
		v := t.Snapshot()
		sc := spanContextOf(v.Trace)
		if !sc.IsValid() {
			continue
		}
		ctx := trace.ContextWithRemoteSpanContext(context.Background(), sc)
		_, span := s.tracer.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(start),
			trace.WithLinks(trace.Link{SpanContext: request}),
			trace.WithAttributes(attribute.String("messaging.system", "taskmaster"), attribute.String("messaging.destination.name", v.Queue)))
		var err error
		if errs != nil {
			err = errs[i]
		}
		endTaskSpan(span, t, err)
	}
}

// endTaskSpan ends span with t's attributes and err's status.
func endTaskSpan(span trace.Span, t *task.Task, err error) {
	if t != nil {
		v := t.Snapshot()
		span.SetAttributes(attribute.String("taskmaster.task.id", v.ID.String()), attribute.String("taskmaster.task.status", string(v.Status)),
			attribute.Int("taskmaster.task.attempt", v.Attempts))
		worker := v.WorkerID
		if a, ok := t.EndedAttempt(); ok && worker == "" {
			worker = a.WorkerID // the report ended the attempt
		}
		if worker != "" {
			span.SetAttributes(attribute.String("taskmaster.worker.id", worker))
		}
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}

// requestStart is when the request's handler began (for the spans of its
// tasks).
type requestStartKey struct{}

func requestStart(ctx context.Context) time.Time {
	if t, ok := ctx.Value(requestStartKey{}).(time.Time); ok {
		return t
	}
	return time.Now()
}
