package tests

import (
	"bufio"
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/adapters/ui"
	"github.com/taskmaster/taskmaster/docs"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// Every route on the real server's router (extra routes that other adapters
// mount included) must be described in docs/openapi.yaml, and the
// description must not promise routes the server does not have.
func TestOpenAPICoversEveryRoute(t *testing.T) {
	t.Parallel()
	var srv *httpadapter.Server
	testserver.StartOn(t, pgtest.NewDatabase(t), nil, fx.Populate(&srv))
	doc := spectest.Load(t)

	onRouter := map[string]bool{}
	for _, r := range srv.Routes() {
		if strings.HasPrefix(r.Path, strings.TrimSuffix(ui.Prefix, "/")) {
			continue // the dashboard's HTML pages: docs/dashboard.md, not the JSON API
		}
		path := specPath(r.Path)
		methods := r.Methods
		if len(methods) == 0 {
			methods = []string{"(any method)"}
		}
		for _, m := range methods {
			onRouter[m+" "+path] = true
			item := doc.Paths.Find(path)
			if item == nil || item.GetOperation(m) == nil {
				t.Errorf("route %s %s is on the router but not in docs/openapi.yaml: describe it (request, responses, problems)", m, r.Path)
			}
		}
	}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			if !onRouter[method+" "+path] {
				t.Errorf("docs/openapi.yaml describes %s %s, which is not on the router", method, path)
			}
		}
	}
}

// specPath turns a gorilla/mux template into OpenAPI's: {id:[0-9]+} -> {id}.
func specPath(tpl string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(tpl, '{')
		if open < 0 {
			b.WriteString(tpl)
			return b.String()
		}
		end := strings.IndexByte(tpl[open:], '}')
		if end < 0 {
			b.WriteString(tpl)
			return b.String()
		}
		name, _, _ := strings.Cut(tpl[open+1:open+end], ":")
		b.WriteString(tpl[:open] + "{" + name + "}")
		tpl = tpl[open+end+1:]
	}
}

// The served description is the file, byte for byte, and the file is a
// valid OpenAPI 3.1 document.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	doc := spectest.Load(t)
	require.Equal(t, "3.1.0", doc.OpenAPI)
	require.True(t, doc.IsOpenAPI31OrLater())

	resp, err := http.Get(s.URL + "/openapi.yaml")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "application/yaml", resp.Header.Get("Content-Type"))
	require.Equal(t, docs.OpenAPI, body)
}

// The problem table in adapters/http/problem.go and the Problem schema's
// x-problem-types and type enum list the same slugs, statuses and titles.
func TestOpenAPIProblemTypesMatchServer(t *testing.T) {
	t.Parallel()
	served := problemKindsInSource(t)
	require.NotEmpty(t, served)

	doc := spectest.Load(t)
	schema := doc.Components.Schemas["Problem"].Value
	var described []problemKind
	raw, err := json.Marshal(schema.Extensions["x-problem-types"])
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &described))
	slices.SortFunc(described, func(a, b problemKind) int { return strings.Compare(a.Slug, b.Slug) })
	require.Equal(t, served, described, "x-problem-types in docs/openapi.yaml must list exactly the problems adapters/http serves")

	var enum []string
	for _, v := range schema.Properties["type"].Value.Enum {
		enum = append(enum, v.(string))
	}
	slices.Sort(enum)
	var want []string
	for _, k := range served {
		want = append(want, httpadapter.ProblemTypePrefix+k.Slug)
	}
	require.Equal(t, want, enum, "the Problem type enum must list every served problem type")
}

type problemKind struct {
	Slug   string `json:"slug"`
	Status int    `json:"status"`
	Title  string `json:"title"`
}

// problemKindsInSource reads every problemKind{"slug", "title", status}
// literal in adapters/http.
func problemKindsInSource(t *testing.T) []problemKind {
	t.Helper()
	root, _ := moduleRoot(t)
	fset := token.NewFileSet()
	files, err := filepath.Glob(filepath.Join(root, "adapters", "http", "*.go"))
	require.NoError(t, err)
	var out []problemKind
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if id, ok := lit.Type.(*ast.Ident); !ok || id.Name != "problemKind" || len(lit.Elts) != 3 {
				return true
			}
			slug, err1 := strconv.Unquote(lit.Elts[0].(*ast.BasicLit).Value)
			title, err2 := strconv.Unquote(lit.Elts[1].(*ast.BasicLit).Value)
			require.NoError(t, err1)
			require.NoError(t, err2)
			sel, ok := lit.Elts[2].(*ast.SelectorExpr)
			require.True(t, ok, "problem %s: status must be an http.Status constant", slug)
			out = append(out, problemKind{Slug: slug, Title: title, Status: httpStatus(t, sel.Sel.Name)})
			return true
		})
	}
	slices.SortFunc(out, func(a, b problemKind) int { return strings.Compare(a.Slug, b.Slug) })
	return out
}

func httpStatus(t *testing.T, name string) int {
	t.Helper()
	for code := 100; code < 600; code++ {
		text := http.StatusText(code)
		if text != "" && "Status"+strings.NewReplacer(" ", "", "-", "", "'", "").Replace(text) == name {
			return code
		}
	}
	// Names that do not follow StatusText exactly.
	switch name {
	case "StatusRequestEntityTooLarge":
		return http.StatusRequestEntityTooLarge
	}
	t.Fatalf("unknown status constant %s", name)
	return 0
}

// Real responses, successes and problems, from every operation match the
// description.
func TestOpenAPIResponsesMatchSpec(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, pushConfig) // push queues may deliver to 127.0.0.1
	v := spectest.New(t, s.URL)
	hc := v.Client()
	call := func(method, path, body string) (int, map[string]any) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequest(method, s.URL+path, rd)
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		req.Header.Set("X-Correlation-Id", "spec-"+uuid.NewString())
		resp, err := hc.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		raw, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		var out map[string]any
		if strings.Contains(resp.Header.Get("Content-Type"), "json") {
			require.NoError(t, json.Unmarshal(raw, &out), string(raw))
		}
		return resp.StatusCode, out
	}
	expect := func(wantStatus int, method, path, body string) map[string]any {
		t.Helper()
		status, out := call(method, path, body)
		require.Equal(t, wantStatus, status, "%s %s: %v", method, path, out)
		return out
	}
	problem := func(wantStatus int, slug, method, path, body string) map[string]any {
		t.Helper()
		out := expect(wantStatus, method, path, body)
		require.Equal(t, httpadapter.ProblemTypePrefix+slug, out["type"], "%s %s", method, path)
		return out
	}

	// Operations.
	expect(200, "GET", "/healthz", "")
	expect(200, "GET", "/readyz", "")
	expect(200, "GET", "/openapi.yaml", "")

	// Producers.
	full := `{"queue":"spec","payload":{"n":1},"priority":5,"max_attempts":2,"tags":["gpu"],` +
		`"deadline":"2999-01-01T00:00:00Z","run_at":"2000-01-01T00:00:00Z","idempotency_key":"k1"}`
	first := expect(201, "POST", "/tasks/v1", full)
	again := expect(200, "POST", "/tasks/v1", full)
	require.Equal(t, first["id"], again["id"])
	problem(400, "malformed-request", "POST", "/tasks/v1", `{"queue":`)
	problem(400, "malformed-request", "POST", "/tasks/v1", `{"queue":"q","bogus":1}`)
	problem(400, "malformed-request", "POST", "/tasks/v1", `{"queue":7}`)
	problem(400, "malformed-request", "POST", "/tasks/v1", ``)
	problem(413, "body-too-large", "POST", "/tasks/v1", `{"queue":"q","payload":"`+strings.Repeat("x", 2<<20)+`"}`)
	invalid := problem(422, "validation-error", "POST", "/tasks/v1", `{"queue":"","max_attempts":101}`)
	require.Len(t, invalid["errors"], 2)

	for range 3 {
		expect(201, "POST", "/tasks/v1", `{"queue":"spec"}`)
	}
	page := expect(200, "GET", "/tasks/v1?queue=spec&limit=2", "")
	require.NotNil(t, page["next_cursor"])
	expect(200, "GET", "/tasks/v1?queue=spec&status=PENDING&limit=2&cursor="+page["next_cursor"].(string), "")
	expect(200, "GET", "/tasks/v1", "")
	problem(422, "validation-error", "GET", "/tasks/v1?status=LOST", "")
	problem(422, "validation-error", "GET", "/tasks/v1?limit=0", "")
	expect(200, "GET", "/tasks/v1/"+first["id"].(string), "")
	problem(404, "task-not-found", "GET", "/tasks/v1/"+uuid.NewString(), "")
	problem(404, "task-not-found", "GET", "/tasks/v1/not-a-uuid", "")

	// Workers.
	expect(201, "POST", "/workers/v1/register", `{"id":"spec-w1","queues":["spec"],"tags":["gpu"]}`)
	reg := expect(200, "POST", "/workers/v1/register", `{"id":"spec-w1","queues":["spec"],"tags":["gpu"]}`)
	require.Greater(t, reg["heartbeat_interval_seconds"], 0.0)
	expect(201, "POST", "/workers/v1/register", `{"id":"spec-w2","queues":["spec"]}`)
	generated := expect(201, "POST", "/workers/v1/register", "")
	require.NotEmpty(t, generated["id"])
	problem(422, "validation-error", "POST", "/workers/v1/register", `{"id":"bad id!"}`)
	problem(400, "malformed-request", "POST", "/workers/v1/register", `{"queues":"spec"}`)
	expect(200, "POST", "/workers/v1/spec-w1/heartbeat", "")
	expect(200, "POST", "/workers/v1/spec-w1/heartbeat", "{}")
	problem(400, "malformed-request", "POST", "/workers/v1/spec-w1/heartbeat", `{"tasks":5}`)
	problem(404, "worker-not-found", "POST", "/workers/v1/nobody/heartbeat", "")
	expect(200, "GET", "/workers/v1", "")

	claimed := expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w1","queue":"spec","limit":10}`)
	tasks := claimed["tasks"].([]any)
	require.Len(t, tasks, 4)
	expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w1"}`) // nothing left: an empty list
	problem(404, "worker-not-found", "POST", "/tasks/v1/claim", `{"worker_id":"nobody"}`)
	problem(422, "validation-error", "POST", "/tasks/v1/claim", `{"worker_id":"spec-w1","limit":0}`)
	problem(422, "validation-error", "POST", "/tasks/v1/claim", `{}`)

	held := func(i int) (id, lease string) {
		m := tasks[i].(map[string]any)
		return m["id"].(string), m["lease_id"].(string)
	}
	id0, lease0 := held(0)
	expect(200, "POST", "/tasks/v1/"+id0+"/complete", `{"worker_id":"spec-w1","lease_id":"`+lease0+`","result":{"ok":true}}`)
	done := problem(409, "invalid-transition", "POST", "/tasks/v1/"+id0+"/complete", `{"worker_id":"spec-w1","lease_id":"`+lease0+`"}`)
	require.Equal(t, "DONE", done["current_status"])
	id1, lease1 := held(1)
	lost := problem(409, "lease-lost", "POST", "/tasks/v1/"+id1+"/complete", `{"worker_id":"spec-w2","lease_id":"`+lease1+`"}`)
	require.Equal(t, "RUNNING", lost["current_status"])
	problem(409, "lease-lost", "POST", "/tasks/v1/"+id1+"/fail", `{"worker_id":"spec-w1","lease_id":"`+uuid.NewString()+`"}`)
	problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/complete", `{"worker_id":"spec-w1","lease_id":"`+lease1+`"}`)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id1+"/complete", `{"worker_id":"spec-w1"}`)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id1+"/complete", `{"lease_id":"`+lease1+`"}`)
	problem(400, "malformed-request", "POST", "/tasks/v1/"+id1+"/complete", `{"worker_id":"spec-w1","lease_id":"nope"}`)
	requeued := expect(200, "POST", "/tasks/v1/"+id1+"/fail", `{"worker_id":"spec-w1","lease_id":"`+lease1+`","error":"boom"}`)
	require.Equal(t, "PENDING", requeued["status"])
	id2, lease2 := held(2)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id2+"/fail",
		`{"worker_id":"spec-w1","lease_id":"`+lease2+`","error":"`+strings.Repeat("e", 65<<10)+`"}`)
	dead := expect(200, "POST", "/tasks/v1/"+id2+"/fail", `{"worker_id":"spec-w1","lease_id":"`+lease2+`","error":"bad input","retryable":false}`)
	require.Equal(t, "non_retryable", dead["dead_reason"])

	// Batches and long poll.
	batch := expect(201, "POST", "/tasks/v1/batch", `{"tasks":[{"queue":"spec-b","payload":[1]},{"queue":"spec-b","idempotency_key":"k1"},{"queue":"spec-b","idempotency_key":"k1"}]}`)
	require.Equal(t, []any{true, true, false}, batch["created"])
	problem(422, "validation-error", "POST", "/tasks/v1/batch", `{"tasks":[{"queue":""}]}`)
	problem(400, "malformed-request", "POST", "/tasks/v1/batch", `{"tasks":{}}`)
	expect(201, "POST", "/workers/v1/register", `{"id":"spec-w3","queues":["spec-b"]}`)
	got := expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w3","limit":2,"wait_ms":100}`)["tasks"].([]any)
	require.Len(t, got, 2)
	b0, b1 := got[0].(map[string]any), got[1].(map[string]any)
	completed := expect(200, "POST", "/tasks/v1/complete", `{"worker_id":"spec-w3","items":[{"id":"`+b0["id"].(string)+
		`","lease_id":"`+b0["lease_id"].(string)+`","result":1},{"id":"`+uuid.NewString()+`","lease_id":"`+uuid.NewString()+`"}]}`)
	require.Len(t, completed["items"], 2)
	failed := expect(200, "POST", "/tasks/v1/fail", `{"worker_id":"spec-w3","items":[{"id":"`+b1["id"].(string)+
		`","lease_id":"`+b1["lease_id"].(string)+`","error":"x","retryable":false}]}`)
	require.Equal(t, "dead", failed["items"].([]any)[0].(map[string]any)["outcome"])
	problem(422, "validation-error", "POST", "/tasks/v1/complete", `{"worker_id":"spec-w3","items":[]}`)
	problem(422, "validation-error", "POST", "/tasks/v1/claim", `{"worker_id":"spec-w3","wait_ms":30001}`)

	// Pipelines: dependencies, complete-and-enqueue, attempts.
	graph := expect(201, "POST", "/tasks/v1/batch", `{"tasks":[{"queue":"spec-p","ref":"a"},`+
		`{"queue":"spec-p","ref":"b","depends_on":["a","`+id0+`"]},{"queue":"spec-p2","depends_on":["b"]}]}`)
	parent, child := graph["tasks"].([]any)[0].(map[string]any), graph["tasks"].([]any)[1].(map[string]any)
	require.Equal(t, "BLOCKED", child["status"])
	detail := expect(200, "GET", "/tasks/v1/"+child["id"].(string), "")
	require.Equal(t, []any{parent["id"], id0}, detail["depends_on"])
	require.Equal(t, []any{parent["id"]}, detail["blocked_by"])
	problem(422, "validation-error", "POST", "/tasks/v1/batch", `{"tasks":[{"queue":"spec-p","ref":"x","depends_on":["x"]}]}`)
	expect(201, "POST", "/workers/v1/register", `{"id":"spec-w6","queues":["spec-p"]}`)
	pa := expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w6","limit":5}`)["tasks"].([]any)[0].(map[string]any)
	expect(200, "GET", "/tasks/v1/"+pa["id"].(string)+"/attempts", "")
	withEnqueue := expect(200, "POST", "/tasks/v1/"+pa["id"].(string)+"/complete", `{"worker_id":"spec-w6","lease_id":"`+
		pa["lease_id"].(string)+`","result":"a","enqueue":[{"queue":"spec-p3","payload":1,"idempotency_key":"n1"}]}`)
	require.Len(t, withEnqueue["enqueued"], 1)
	problem(422, "validation-error", "POST", "/tasks/v1/"+pa["id"].(string)+"/complete", `{"worker_id":"spec-w6","lease_id":"`+
		pa["lease_id"].(string)+`","enqueue":[{"queue":""}]}`)
	parents := expect(200, "GET", "/tasks/v1/"+child["id"].(string)+"/parents", "")
	require.Len(t, parents["parents"], 2)
	problem(404, "task-not-found", "GET", "/tasks/v1/"+uuid.NewString()+"/parents", "")
	pb := expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w6"}`)["tasks"].([]any)[0].(map[string]any)
	batchEnqueued := expect(200, "POST", "/tasks/v1/complete", `{"worker_id":"spec-w6","items":[{"id":"`+pb["id"].(string)+
		`","lease_id":"`+pb["lease_id"].(string)+`","enqueue":[{"queue":"spec-p3","idempotency_key":"n1"}]}]}`)
	require.Len(t, batchEnqueued["items"].([]any)[0].(map[string]any)["enqueued"], 1)
	attempts := expect(200, "GET", "/tasks/v1/"+pb["id"].(string)+"/attempts", "")
	require.Equal(t, "completed", attempts["attempts"].([]any)[0].(map[string]any)["outcome"])
	problem(404, "task-not-found", "GET", "/tasks/v1/"+uuid.NewString()+"/attempts", "")

	// Leases and the heartbeat protocol.
	id3, lease3 := held(3)
	extended := expect(200, "POST", "/tasks/v1/"+id3+"/extend", `{"worker_id":"spec-w1","lease_id":"`+lease3+`","lease_seconds":600}`)
	require.NotNil(t, extended["lease_expires_at"])
	expect(200, "POST", "/tasks/v1/"+id3+"/extend", `{"worker_id":"spec-w1","lease_id":"`+lease3+`"}`)
	problem(409, "lease-lost", "POST", "/tasks/v1/"+id3+"/extend", `{"worker_id":"spec-w1","lease_id":"`+uuid.NewString()+`"}`)
	problem(409, "invalid-transition", "POST", "/tasks/v1/"+id0+"/extend", `{"worker_id":"spec-w1","lease_id":"`+lease0+`"}`)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id3+"/extend", `{"worker_id":"spec-w1","lease_id":"`+lease3+`","lease_seconds":43201}`)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id3+"/extend", `{"worker_id":"spec-w1"}`)
	problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/extend", `{"worker_id":"spec-w1","lease_id":"`+lease3+`"}`)
	progressed := expect(200, "POST", "/tasks/v1/"+id3+"/progress", `{"worker_id":"spec-w1","lease_id":"`+lease3+
		`","percent":12.5,"message":"step 1","details":{"files":3}}`)
	require.Equal(t, 12.5, progressed["progress"].(map[string]any)["percent"])
	problem(409, "lease-lost", "POST", "/tasks/v1/"+id3+"/progress", `{"worker_id":"spec-w1","lease_id":"`+uuid.NewString()+`","percent":1}`)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id3+"/progress", `{"worker_id":"spec-w1","lease_id":"`+lease3+`"}`)
	problem(422, "validation-error", "POST", "/tasks/v1/"+id3+"/progress", `{"worker_id":"spec-w1","lease_id":"`+lease3+`","percent":101}`)
	problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/progress", `{"worker_id":"spec-w1","lease_id":"`+lease3+`","percent":1}`)
	expect(200, "POST", "/workers/v1/spec-w1/heartbeat", `{"tasks":[{"id":"`+id3+`","lease_id":"`+lease3+`","percent":20,"message":"step 2"}]}`)
	problem(422, "validation-error", "POST", "/workers/v1/spec-w1/heartbeat", `{"tasks":[{"id":"`+id3+`","lease_id":"`+lease3+`","message":"no percent"}]}`)
	waited := expect(200, "GET", "/tasks/v1/"+id0+"?wait_ms=5000", "")
	require.Equal(t, "DONE", waited["status"])
	problem(422, "validation-error", "GET", "/tasks/v1/"+id0+"?wait_ms=60001", "")
	expect(200, "GET", "/tasks/v1?metadata.tenant=acme", "")
	problem(422, "validation-error", "GET", "/tasks/v1?metadata.a%20b=x", "")
	cancelling := expect(200, "POST", "/tasks/v1/"+id3+"/cancel", "")
	require.Equal(t, "RUNNING", cancelling["status"])
	require.NotNil(t, cancelling["cancel_requested_at"])
	beat := expect(200, "POST", "/workers/v1/spec-w1/heartbeat",
		`{"tasks":[{"id":"`+id3+`","lease_id":"`+lease3+`"},{"id":"`+id0+`","lease_id":"`+lease0+`"}]}`)
	require.Equal(t, []any{map[string]any{"id": id0, "lease_id": lease0}}, beat["lost"])
	require.Equal(t, []any{map[string]any{"id": id3, "lease_id": lease3}}, beat["cancel"])
	require.Equal(t, false, beat["drain"])
	problem(422, "validation-error", "POST", "/workers/v1/spec-w1/heartbeat", `{"tasks":[{"id":"`+id3+`"}]}`)
	problem(400, "malformed-request", "POST", "/workers/v1/spec-w1/heartbeat", `{"tasks":[{"id":"x","lease_id":"y"}]}`)
	expect(200, "POST", "/tasks/v1/"+id3+"/fail", `{"worker_id":"spec-w1","lease_id":"`+lease3+`","error":"cancelled"}`)
	drained := expect(200, "POST", "/workers/v1/spec-w3/drain", "")
	require.Equal(t, true, drained["draining"])
	expect(200, "POST", "/workers/v1/spec-w3/drain", "{}")
	problem(404, "worker-not-found", "POST", "/workers/v1/nobody/drain", "")
	problem(400, "malformed-request", "POST", "/workers/v1/spec-w3/drain", `{"now":true}`)
	require.Equal(t, true, expect(200, "POST", "/workers/v1/spec-w3/heartbeat", `{"tasks":[]}`)["drain"])
	expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w1","lease_seconds":30}`)
	problem(422, "validation-error", "POST", "/tasks/v1/claim", `{"worker_id":"spec-w1","lease_seconds":0}`)

	// Operators.
	expect(200, "POST", "/tasks/v1/"+id2+"/retry", "")
	problem(409, "invalid-transition", "POST", "/tasks/v1/"+id2+"/retry", "{}")
	expect(200, "POST", "/tasks/v1/"+id2+"/cancel", "{}")
	problem(409, "invalid-transition", "POST", "/tasks/v1/"+id2+"/cancel", "")
	problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/cancel", "")
	problem(400, "malformed-request", "POST", "/tasks/v1/"+id2+"/retry", `{"force":true}`)
	expect(200, "GET", "/queues/v1", "")

	// The event stream: filtered, then resumed with Last-Event-ID. Its body
	// never ends, so the validator checks status, headers and media type and
	// leaves the body to readEvents, which reads a bounded amount under a
	// deadline and checks each message's data against the schemas.
	events := openEvents(t, v, hc, s.URL+"/events/v1?queue=spec-events&type=task.*", "")
	expect(201, "POST", "/workers/v1/register", `{"id":"spec-w4","queues":["spec-events"]}`) // a worker event: filtered out
	expect(201, "POST", "/tasks/v1", `{"queue":"spec-other"}`)                               // another queue: filtered out
	seenFirst := expect(201, "POST", "/tasks/v1", `{"queue":"spec-events"}`)
	got1 := events.next(t)
	events.close()
	require.Equal(t, "task.submitted", got1.event["type"])
	require.Equal(t, seenFirst["id"], got1.event["task_id"])
	missed := expect(201, "POST", "/tasks/v1", `{"queue":"spec-events"}`)
	events = openEvents(t, v, hc, s.URL+"/events/v1?queue=spec-events&queue=nowhere&type=task.submitted,task.claimed", got1.id)
	got2 := events.next(t)
	events.close()
	require.Equal(t, missed["id"], got2.event["task_id"], "resumed right after the last event seen")
	problem(422, "validation-error", "GET", "/events/v1?queue=", "")
	badCursor, err := http.NewRequest(http.MethodGet, s.URL+"/events/v1", nil)
	require.NoError(t, err)
	badCursor.Header.Set("Last-Event-ID", "not-an-id")
	resp, err := hc.Do(badCursor)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)

	// Metrics, in the Prometheus text format 0.0.4.
	for _, path := range []string{"/metrics", "/actuator/prometheus"} {
		resp, err := hc.Get(s.URL + path)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, http.StatusOK, resp.StatusCode, path)
		require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain; version=0.0.4"), "%s: %s", path, resp.Header.Get("Content-Type"))
		require.Contains(t, string(body), "# TYPE taskmaster_tasks_submitted_total counter", path)
	}

	// A worker declared dead (what the heartbeat reaper does).
	_, err = s.DB.Exec(`UPDATE workers SET status = 'DEAD' WHERE id = 'spec-w2'`)
	require.NoError(t, err)
	problem(409, "worker-dead", "POST", "/workers/v1/spec-w2/heartbeat", "")
	problem(409, "worker-dead", "POST", "/tasks/v1/claim", `{"worker_id":"spec-w2"}`)

	// API keys (the admin API, open here: authentication is off on a
	// loopback address).
	createdKey := expect(201, "POST", "/admin/v1/keys",
		`{"name":"spec","scopes":["work","read"],"queues":["spec-*"],"worker_prefix":"spec-","expires_in_seconds":3600}`)
	require.Regexp(t, `^tmk_`, createdKey["key"])
	problem(422, "validation-error", "POST", "/admin/v1/keys", `{"name":"","scopes":["root"]}`)
	problem(400, "malformed-request", "POST", "/admin/v1/keys", `{"name":"x","scopes":"read"}`)
	require.Len(t, expect(200, "GET", "/admin/v1/keys", "")["keys"], 1)
	revokedKey := expect(200, "DELETE", "/admin/v1/keys/"+createdKey["id"].(string), "")
	require.NotNil(t, revokedKey["revoked_at"])
	problem(404, "key-not-found", "DELETE", "/admin/v1/keys/"+uuid.NewString(), "")
	problem(404, "key-not-found", "DELETE", "/admin/v1/keys/not-a-uuid", "")

	exerciseSchedulesAndSnooze(t, specCalls{expect: expect, problem: problem})
	exerciseBulk(t, s, specCalls{expect: expect, problem: problem})
	exerciseQueues(t, specCalls{expect: expect, problem: problem})
	exercisePushAndLimits(t, specCalls{expect: expect, problem: problem})
	exerciseRelease(t, specCalls{expect: expect, problem: problem})
	exerciseWorkflows(t, specCalls{expect: expect, problem: problem})

	// The router's own problems.
	problem(404, "not-found", "GET", "/nowhere", "")
	problem(405, "method-not-allowed", "DELETE", "/tasks/v1", "")
	problem(405, "method-not-allowed", "PUT", "/tasks/v1/claim", "")

	// Every operation was seen answering with success.
	seen := v.Seen()
	for _, op := range v.Operations() {
		ok := slices.ContainsFunc(seen[op], func(s int) bool { return s < 300 })
		require.True(t, ok, "operation %s was never exercised with a success (seen %v); add it to this test", op, seen[op])
	}
}

// eventStream reads GET /events/v1 for TestOpenAPIResponsesMatchSpec.
type eventStream struct {
	v      *spectest.Validator
	resp   *http.Response
	body   *bufio.Reader
	cancel context.CancelFunc
}

// sseMessage is one dispatched message of an event stream.
type sseMessage struct {
	id    string
	event map[string]any
}

// openEvents opens an event stream through hc (so the validator checks its
// status and headers). Every read on it ends by a deadline: a stream that
// stays silent fails the test instead of hanging it.
func openEvents(t *testing.T, v *spectest.Validator, hc *http.Client, url, lastEventID string) *eventStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := hc.Do(req)
	if err != nil {
		cancel()
		require.NoError(t, err)
	}
	es := &eventStream{v: v, resp: resp, body: bufio.NewReader(io.LimitReader(resp.Body, 1<<20)), cancel: cancel}
	t.Cleanup(es.close)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "text/event-stream", resp.Header.Get("Content-Type"))
	return es
}

// next returns the next message that carries data, requiring that every
// message read on the way matches the description: an event has an id
// (<transaction_id>-<offset>-<index>) and a LifecycleEvent as data; a data
// message without an id is a StreamEventsLost notice.
func (es *eventStream) next(t *testing.T) sseMessage {
	t.Helper()
	var id string
	var data []string // one per data line; a message without data is not dispatched
	for {
		line, err := es.body.ReadString('\n')
		require.NoError(t, err, "the event stream ended or stayed silent")
		line = strings.TrimSuffix(line, "\n")
		switch field, value, _ := strings.Cut(line, ": "); {
		case line == "":
			if data == nil {
				id = "" // retry, a heartbeat, or a position alone
				continue
			}
			schema := "LifecycleEvent"
			if id == "" {
				schema = "StreamEventsLost"
			} else {
				require.Regexp(t, `^[0-9]+-[0-9]+-[0-9]+$`, id)
			}
			doc := []byte(strings.Join(data, "\n"))
			require.NoError(t, es.v.CheckSchema(schema, doc), "data: %s", doc)
			out := sseMessage{id: id}
			require.NoError(t, json.Unmarshal(doc, &out.event))
			return out
		case field == "id":
			id = value
		case field == "data":
			data = append(data, value)
		case field == "retry":
			require.Equal(t, "2000", value)
		case strings.HasPrefix(line, ":"):
		default:
			require.Failf(t, "not a line of an event stream", "%q", line)
		}
	}
}

func (es *eventStream) close() {
	es.cancel()
	_ = es.resp.Body.Close()
}

func TestSpecPath(t *testing.T) {
	t.Parallel()
	require.Equal(t, "/tasks/v1/{id}/fail", specPath("/tasks/v1/{id:[0-9a-f-]+}/fail"))
	require.Equal(t, "/healthz", specPath("/healthz"))
}

// The dead and requeue reasons docs/openapi.yaml lists are the domain's.
func TestOpenAPIReasonsMatchTheDomain(t *testing.T) {
	t.Parallel()
	doc := spectest.Load(t)
	enum := func(s *openapi3.Schema) []string {
		var out []string
		for _, v := range s.Enum {
			if v != nil {
				out = append(out, v.(string))
			}
		}
		slices.Sort(out)
		return out
	}
	var dead []string
	for _, r := range task.DeadReasons {
		dead = append(dead, string(r))
	}
	slices.Sort(dead)
	schemas := doc.Components.Schemas
	require.Equal(t, dead, enum(schemas["Task"].Value.Properties["dead_reason"].Value), "Task.dead_reason")
	totals := schemas["QueueTotals"].Value.Properties
	require.Equal(t, dead, enum(totals["dead_lettered"].Value.PropertyNames.Value), "QueueTotals.dead_lettered")
	var requeue []string
	for _, r := range task.RequeueReasons {
		requeue = append(requeue, string(r))
	}
	slices.Sort(requeue)
	require.Equal(t, requeue, enum(totals["requeued"].Value.PropertyNames.Value), "QueueTotals.requeued")
}
