package tests

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/taskmaster/taskmaster/adapters/telemetry"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// otlpReceiver is an OTLP/HTTP trace receiver: it speaks the protocol the
// exporter speaks (protobuf ExportTraceServiceRequest on /v1/traces) and
// keeps the spans it is sent.
type otlpReceiver struct {
	srv   *httptest.Server
	mu    sync.Mutex
	spans []receivedSpan
}

// receivedSpan is what a test looks at of an exported span.
type receivedSpan struct {
	name, traceID, spanID, parentID string
	attrs                           map[string]string
}

func newOTLPReceiver(t *testing.T) *otlpReceiver {
	t.Helper()
	r := &otlpReceiver{}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path != "/v1/traces" || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/x-protobuf" {
			http.Error(w, "not an OTLP/HTTP trace export", http.StatusNotFound)
			return
		}
		body, err := io.ReadAll(req.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var export coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(body, &export); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		for _, rs := range export.ResourceSpans {
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					got := receivedSpan{name: sp.Name, traceID: hex.EncodeToString(sp.TraceId), spanID: hex.EncodeToString(sp.SpanId),
						parentID: hex.EncodeToString(sp.ParentSpanId), attrs: map[string]string{}}
					for _, a := range sp.Attributes {
						got.attrs[a.Key] = a.Value.GetStringValue()
					}
					r.spans = append(r.spans, got)
				}
			}
		}
		r.mu.Unlock()
		out, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
		w.Header().Set("Content-Type", "application/x-protobuf")
		_, _ = w.Write(out)
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// named returns the received spans called name.
func (r *otlpReceiver) named(name string) []receivedSpan {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []receivedSpan
	for _, s := range r.spans {
		if s.name == name {
			out = append(out, s)
		}
	}
	return out
}

const (
	producerTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	producerSpan  = "00f067aa0ba902b7"
)

// A submit's trace reaches the worker (the claim hands it out) and the
// server's own spans, exported over OTLP to a real receiver: the request's
// span (a child of the producer's), taskmaster.submit (whose context the
// task keeps), and taskmaster.claim and taskmaster.complete, children of
// the task's trace.
func TestTraceOfASubmitReachesTheWorkerAndTheServersSpans(t *testing.T) {
	t.Parallel()
	rcv := newOTLPReceiver(t)
	s, c := startAPI(t, func(cfg *app.Config) {
		cfg.Telemetry = telemetry.Config{Enabled: true, Protocol: telemetry.ProtocolHTTP, Endpoint: rcv.srv.URL + "/v1/traces"}
	})
	header := http.Header{"Traceparent": {"00-" + producerTrace + "-" + producerSpan + "-01"}, "Tracestate": {"congo=t61rcWkgMzE"}}
	var task testclient.Task
	c.DoHeader(http.MethodPost, "/tasks/v1", jsonObj{"queue": "traced"}, header).Expect(t, http.StatusCreated, &task)
	require.NotNil(t, task.Trace)
	require.Equal(t, producerTrace, task.Trace.Traceparent[3:35], "the producer's trace id")
	keptSpan := task.Trace.Traceparent[36:52]
	require.NotEqual(t, producerSpan, keptSpan, "the task keeps the server's submit span")
	require.Equal(t, "congo=t61rcWkgMzE", *task.Trace.Tracestate)

	c.Register(jsonObj{"id": "w"})
	claimed := c.Claim(jsonObj{"worker_id": "w"})
	require.Len(t, claimed, 1)
	require.Equal(t, task.Trace.Traceparent, claimed[0].Trace.Traceparent, "the worker gets the trace")
	c.Complete(task.ID, jsonObj{"worker_id": "w", "lease_id": claimed[0].Lease()})
	untraced := c.Submit(jsonObj{"queue": "untraced"})
	require.NotNil(t, untraced.Trace, "with tracing on, a task without a producer's trace starts one at the server")

	s.Stop() // exports the spans still held
	requests := rcv.named("POST /tasks/v1")
	require.NotEmpty(t, requests)
	var request receivedSpan
	for _, r := range requests {
		if r.traceID == producerTrace {
			request = r
		}
	}
	require.Equal(t, producerSpan, request.parentID, "the request's span is a child of the producer's")
	submits := rcv.named("taskmaster.submit")
	require.NotEmpty(t, submits)
	submit := submits[0]
	require.Equal(t, producerTrace, submit.traceID)
	require.Equal(t, request.spanID, submit.parentID)
	require.Equal(t, keptSpan, submit.spanID)
	require.Equal(t, task.ID, submit.attrs["taskmaster.task.id"])
	require.Equal(t, "traced", submit.attrs["messaging.destination.name"])
	for _, name := range []string{"taskmaster.claim", "taskmaster.complete"} {
		spans := rcv.named(name)
		require.Len(t, spans, 1, name)
		require.Equal(t, producerTrace, spans[0].traceID, name)
		require.Equal(t, keptSpan, spans[0].parentID, "%s is a child of the task's trace", name)
		require.Equal(t, task.ID, spans[0].attrs["taskmaster.task.id"])
		require.Equal(t, "w", spans[0].attrs["taskmaster.worker.id"])
	}
}

// Without tracing, a task keeps the producer's traceparent and tracestate
// as sent; a malformed traceparent header is ignored (W3C), a malformed
// item field refused; batch items may carry their own.
func TestTraceIsKeptAsSentWithoutTracing(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	parent := "00-" + producerTrace + "-" + producerSpan + "-01"
	var task testclient.Task
	c.DoHeader(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q"}, http.Header{"Traceparent": {parent}, "Tracestate": {"a=1"}}).
		Expect(t, http.StatusCreated, &task)
	require.Equal(t, parent, task.Trace.Traceparent)
	require.Equal(t, "a=1", *task.Trace.Tracestate)
	require.Equal(t, *task.Trace, *c.Get(task.ID).Trace)

	c.DoHeader(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q"}, http.Header{"Traceparent": {"00-nope"}}).Expect(t, http.StatusCreated, &task)
	require.Nil(t, task.Trace, "a malformed header is ignored")
	require.Nil(t, c.Submit(jsonObj{"queue": "q"}).Trace)

	own := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	var batch struct{ Tasks []testclient.Task }
	c.DoHeader(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "q"}, {"queue": "q", "traceparent": own}}},
		http.Header{"Traceparent": {parent}}).Expect(t, http.StatusCreated, &batch)
	require.Equal(t, parent, batch.Tasks[0].Trace.Traceparent)
	require.Equal(t, own, batch.Tasks[1].Trace.Traceparent)
	require.Nil(t, batch.Tasks[1].Trace.Tracestate)
	p := c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "q", "traceparent": "01-xyz"}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[0].traceparent"}, p.Fields())
}
