// Package spectest checks real HTTP traffic against docs/openapi.yaml: a
// RoundTripper that validates every response (and every request the server
// accepted) with kin-openapi, so any test that talks to the server through it
// also tests the API description.
package spectest

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/docs"
)

// Load parses and validates the embedded docs/openapi.yaml.
func Load(t testing.TB) *openapi3.T {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromData(docs.OpenAPI)
	require.NoError(t, err, "docs/openapi.yaml does not parse")
	require.NoError(t, doc.Validate(loader.Context), "docs/openapi.yaml is not a valid OpenAPI document")
	return doc
}

// Validator validates traffic to one server against the description. It
// collects violations and reports them when the test ends, so it is safe to
// use from goroutines that outlive an assertion.
type Validator struct {
	doc    *openapi3.T
	router routers.Router

	mu         sync.Mutex
	violations []string
	seen       map[string]map[int]int // operation id -> status -> count
}

// New returns a validator for the server at baseURL (http://host:port). The
// test fails at cleanup if any exchange broke the description.
func New(t testing.TB, baseURL string) *Validator {
	t.Helper()
	doc := Load(t)
	doc.Servers = openapi3.Servers{{URL: baseURL}}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	v := &Validator{doc: doc, router: router, seen: map[string]map[int]int{}}
	t.Cleanup(func() {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, msg := range v.violations {
			t.Error(msg)
		}
	})
	return v
}

// Client returns an http.Client whose every exchange is validated.
func (v *Validator) Client() *http.Client {
	return &http.Client{Transport: v.Transport(http.DefaultTransport)}
}

// Transport wraps next: it validates each response against the operation
// the request matched (requests themselves when the server accepted them,
// since a 4xx answer to a request the test built wrong on purpose is the
// point). A request that matches no operation must get a problem.
//
// An event stream (text/event-stream) never ends, so it cannot be read
// whole first: for one, Transport validates the status, the headers and
// that the operation documents the media type, and hands the body on
// unread. The caller reads what it needs and may check each message's data
// with CheckSchema.
func (v *Validator) Transport(next http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		var reqBody []byte
		if req.Body != nil {
			b, err := io.ReadAll(req.Body)
			_ = req.Body.Close()
			if err != nil {
				return nil, err
			}
			reqBody = b
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		resp, err := next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		if isEventStream(resp.Header) {
			v.check(req, reqBody, resp, nil)
			return resp, nil
		}
		respBody, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return nil, err
		}
		resp.Body = io.NopCloser(bytes.NewReader(respBody))
		v.check(req, reqBody, resp, respBody)
		return resp, nil
	})
}

// Seen returns, per operation id, the statuses validated so far.
func (v *Validator) Seen() map[string][]int {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := map[string][]int{}
	for op, statuses := range v.seen {
		for s := range statuses {
			out[op] = append(out[op], s)
		}
		slices.Sort(out[op])
	}
	return out
}

// Operations lists the description's operation ids.
func (v *Validator) Operations() []string {
	var ids []string
	for _, item := range v.doc.Paths.Map() {
		for _, op := range item.Operations() {
			ids = append(ids, op.OperationID)
		}
	}
	slices.Sort(ids)
	return ids
}

// CheckSchema validates a JSON document against the description's schema
// components.schemas[name], as a response.
func (v *Validator) CheckSchema(name string, doc []byte) error {
	ref := v.doc.Components.Schemas[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("docs/openapi.yaml has no schema %q", name)
	}
	var value any
	if err := json.Unmarshal(doc, &value); err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return ref.Value.VisitJSON(value, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors(), openapi3.VisitAsResponse())
}

// isEventStream reports whether a response is a Server-Sent Events stream.
func isEventStream(h http.Header) bool {
	return strings.HasPrefix(h.Get("Content-Type"), "text/event-stream")
}

func (v *Validator) fail(req *http.Request, status int, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.violations = append(v.violations, fmt.Sprintf("%s %s -> %d: %s", req.Method, req.URL.RequestURI(), status, fmt.Sprintf(format, args...)))
}

func (v *Validator) check(req *http.Request, reqBody []byte, resp *http.Response, respBody []byte) {
	ctx := context.Background()
	route, pathParams, err := v.router.FindRoute(cloneWithBody(req, reqBody))
	if err != nil {
		// No operation: the server must answer with a 404/405 problem.
		if resp.StatusCode != http.StatusNotFound && resp.StatusCode != http.StatusMethodNotAllowed {
			v.fail(req, resp.StatusCode, "the request matches no operation in docs/openapi.yaml (%v) yet was not answered 404/405", err)
			return
		}
		v.checkProblem(req, resp, respBody)
		return
	}
	v.mu.Lock()
	if v.seen[route.Operation.OperationID] == nil {
		v.seen[route.Operation.OperationID] = map[int]int{}
	}
	v.seen[route.Operation.OperationID][resp.StatusCode]++
	v.mu.Unlock()

	reqInput := &openapi3filter.RequestValidationInput{
		Request:    cloneWithBody(req, reqBody),
		PathParams: pathParams,
		Route:      route,
		Options:    &openapi3filter.Options{MultiError: true, SkipSettingDefaults: true, AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if resp.StatusCode < 400 {
		if err := openapi3filter.ValidateRequest(ctx, reqInput); err != nil {
			v.fail(req, resp.StatusCode, "the server accepted a request the description rejects: %v", err)
		}
	}
	if resp.StatusCode < 300 && route.Operation.Responses.Status(resp.StatusCode) == nil {
		v.fail(req, resp.StatusCode, "success status %d is not documented for %s", resp.StatusCode, route.Operation.OperationID)
	}
	// An event stream's body is the caller's to read: validate everything
	// but the body, and that the media type is documented (which
	// ValidateResponse checks only together with the body).
	stream := isEventStream(resp.Header)
	if stream {
		documented := route.Operation.Responses.Status(resp.StatusCode)
		if documented == nil {
			documented = route.Operation.Responses.Default()
		}
		if documented == nil || documented.Value == nil || documented.Value.Content.Get(resp.Header.Get("Content-Type")) == nil {
			v.fail(req, resp.StatusCode, "%s answered %q, which is not documented for this status", route.Operation.OperationID, resp.Header.Get("Content-Type"))
		}
	}
	if err := openapi3filter.ValidateResponse(ctx, &openapi3filter.ResponseValidationInput{
		RequestValidationInput: reqInput,
		Status:                 resp.StatusCode,
		Header:                 resp.Header,
		Body:                   io.NopCloser(bytes.NewReader(respBody)),
		Options:                &openapi3filter.Options{MultiError: true, IncludeResponseStatus: true, ExcludeResponseBody: stream},
	}); err != nil {
		v.fail(req, resp.StatusCode, "response does not match docs/openapi.yaml: %v\nbody: %s", err, truncate(respBody))
	}
	if resp.StatusCode >= 400 {
		v.checkProblem(req, resp, respBody)
	}
}

// checkProblem validates a problem body on its own: its media type, its
// schema, and that its status is the response's.
func (v *Validator) checkProblem(req *http.Request, resp *http.Response, body []byte) {
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "application/problem+json") {
		v.fail(req, resp.StatusCode, "an error response must be application/problem+json, got %q", ct)
		return
	}
	var value any
	if err := json.Unmarshal(body, &value); err != nil {
		v.fail(req, resp.StatusCode, "problem body is not JSON: %v", err)
		return
	}
	schema := v.doc.Components.Schemas["Problem"].Value
	if err := schema.VisitJSON(value, openapi3.EnableJSONSchema2020(), openapi3.MultiErrors()); err != nil {
		v.fail(req, resp.StatusCode, "problem body does not match the Problem schema: %v\nbody: %s", err, truncate(body))
		return
	}
	var p struct {
		Status int `json:"status"`
	}
	_ = json.Unmarshal(body, &p)
	if p.Status != resp.StatusCode {
		v.fail(req, resp.StatusCode, "problem status %d differs from the response status", p.Status)
	}
}

func cloneWithBody(req *http.Request, body []byte) *http.Request {
	c := req.Clone(context.Background())
	if body != nil {
		c.Body = io.NopCloser(bytes.NewReader(body))
		c.ContentLength = int64(len(body))
	} else {
		c.Body = http.NoBody
	}
	return c
}

func truncate(b []byte) string {
	if len(b) > 2000 {
		return string(b[:2000]) + "..."
	}
	return string(b)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
