package http_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/adapters/cron"
	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
	"github.com/taskmaster/taskmaster/tests/fuzzports"
)

// TestMain lets the events target read the real outbox feed on a real
// database; the other targets need none.
func TestMain(m *testing.M) { pgtest.Main(m) }

// The fuzz targets drive the real handler chain (routing, body limits,
// decoding, the use cases' validation, the domain, response encoding) with
// arbitrary input. The property: no panic, never a 5xx, and every error is
// an RFC 9457 problem. The use cases run over fuzzports (see there why no
// database); the events target reads the real outbox feed.

// chain is the full handler chain over the fixed world of fuzzports.
func chain(events ports.EventStreams) http.Handler {
	cfg := application.Config{Backoff: backoff.DefaultPolicy(), Liveness: worker.DefaultLivenessConfig(), ClaimPollInterval: time.Millisecond}
	return httpadapter.NewServer(httpadapter.DefaultServerConfig(), httpadapter.Deps{
		Tasks:     application.NewTaskService(fuzzports.TxRunner{}, cfg),
		Workers:   application.NewWorkerService(fuzzports.TxRunner{}, cfg),
		Queues:    application.NewQueueService(fuzzports.Stats{}, fuzzports.TxRunner{}),
		Health:    fuzzports.Health{},
		Logger:    zap.NewNop(),
		Events:    events,
		Schedules: application.NewScheduleService(fuzzports.TxRunner{}, cron.Parse),
		Bulk:      application.NewBulkService(fuzzports.TxRunner{}, application.BulkConfig{}),
	}).Handler()
}

var fuzzChain = chain(nil)

// serve sends one request through h and checks the answer: under 500, and a
// well-formed problem when it is an error, else JSON (or an event stream).
func serve(t *testing.T, h http.Handler, method, target string, body []byte, header http.Header) {
	t.Helper()
	// A loopback name: with authentication off (as here) the server
	// answers no other.
	req, err := http.NewRequest(method, "http://127.0.0.1:8080"+target, bytes.NewReader(body))
	if err != nil {
		t.Skipf("not a request: %v", err)
	}
	if len(body) > 0 {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	ctx, cancel := context.WithCancel(req.Context())
	defer cancel()
	rec := &streamRecorder{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	h.ServeHTTP(rec, req.WithContext(ctx))
	res := rec.Result()
	got := rec.Body.Bytes()
	if res.StatusCode >= 500 {
		t.Fatalf("%s %s %q: %d %s", method, target, body, res.StatusCode, got)
	}
	switch ct := res.Header.Get("Content-Type"); {
	case res.StatusCode >= 400:
		var p httpadapter.Problem
		if ct != "application/problem+json" || json.Unmarshal(got, &p) != nil || p.Status != res.StatusCode || p.Type == "" {
			t.Fatalf("%s %s %q: %d is not a problem: %s %s", method, target, body, res.StatusCode, ct, got)
		}
	case ct == "text/event-stream":
	case !json.Valid(got):
		t.Fatalf("%s %s %q: %d with invalid JSON: %s", method, target, body, res.StatusCode, got)
	}
}

// streamRecorder cancels the request once the handler answers, so that an
// event stream ends after its first read.
type streamRecorder struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (r *streamRecorder) WriteHeader(code int) {
	r.ResponseRecorder.WriteHeader(code)
	r.cancel()
}

func lease() string { return fuzzports.Lease.String() }

const taskID = "01a1fca6-4d5d-7dbb-848e-e34b4e0816f5"

// addBodies seeds f with each body.
func addBodies(f *testing.F, bodies ...string) {
	for _, b := range bodies {
		f.Add([]byte(b))
	}
}

// jsonEdges are JSON values at the edges of what the service accepts.
var jsonEdges = []string{
	`null`, `1`, `{"to":"a@example.com"}`, `"\u0000"`, `"\ud800"`, `{"k\u0000":1}`, `1e1000000`,
	`-1e-1000000`, `1e131071`, `[0e-16384]`, `"\ud83d\ude00"`, `[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]`,
}

func FuzzSubmitTask(f *testing.F) {
	addBodies(f, ``, `{}`, `null`, `[]`, `{"queue":"emails"}`,
		`{"queue":"emails","payload":{"to":"a@example.com"},"priority":5,"max_attempts":3,"tags":["smtp"],"idempotency_key":"welcome-42"}`,
		`{"queue":"q","max_attempts":0}`, `{"queue":"q","max_attempts":101}`, `{"queue":"q","max_attempts":null}`,
		`{"queue":"q","priority":2147483648}`, `{"queue":"q","priority":1.5}`, `{"queue":"q","priority":-9223372036854775808}`,
		`{"queue":"a b"}`, `{"queue":"a/b"}`, `{"queue":"`+strings.Repeat("q", 129)+`"}`, `{"queue":"q","colour":"red"}`,
		`{"queue":"q","run_at":"2026-01-01T00:00:00Z","deadline":"2025-01-01T00:00:00Z"}`,
		`{"queue":"q","run_at":"9999-12-31T23:59:59Z"}`, `{"queue":"q","deadline":"0001-01-01T00:00:00Z"}`,
		`{"queue":"q","run_at":"9999-12-31T23:59:59-23:59"}`, `{"queue":"q","deadline":"0000-01-01T00:00:00+00:01"}`,
		`{"queue":"q","tags":["a","a",""]}`, `{"queue":"q","idempotency_key":"k\u0000"}`, `{"queue":"q"} {}`,
		`{"queue":"q","unique_key":""}`, `{"queue":"q","unique_key":"k\u0001"}`, `{"queue":"q","unique_key":"`+strings.Repeat("k", 256)+`"}`,
		`{"queue":"q","retry":{}}`, `{"queue":"q","retry":{"base_seconds":1e308,"max_seconds":-1e308}}`,
		`{"queue":"q","retry":{"base_seconds":0.1,"max_seconds":604800,"jitter":"full"}}`, `{"queue":"q","retry":{"base_seconds":1,"jitter":null}}`,
		`{"queue":"q","retry":null,"unique_key":null}`)
	for _, v := range jsonEdges {
		f.Add([]byte(`{"queue":"q","payload":` + v + `}`))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1", body, nil)
	})
}

func FuzzSubmitBatch(f *testing.F) {
	addBodies(f, `{}`, `{"tasks":[]}`, `{"tasks":null}`, `{"tasks":{}}`, `{"tasks":[{"queue":"q","payload":1},{"queue":"q","payload":2}]}`,
		`{"tasks":[{"queue":"q","idempotency_key":"k"},{"queue":"q","idempotency_key":"k"}]}`,
		`{"tasks":[{"queue":"q"},{"queue":""},{"queue":"q","max_attempts":0},{"queue":"q","tags":[""]}]}`,
		`{"tasks":[{"queue":"q","payload":1},{"queue":"q","payload":"\u0000"}]}`,
		`{"tasks":[{"queue":"q","payload":1e1000000}]}`, `{"tasks":[null]}`, `{"tasks":[1]}`,
		`{"tasks":[{"queue":"q","ref":"a"},{"queue":"q","depends_on":["a","`+taskID+`"]}]}`,
		`{"tasks":[{"queue":"q","ref":"a","depends_on":["a"]}]}`, `{"tasks":[{"queue":"q","ref":"`+taskID+`"}]}`,
		`{"tasks":[{"queue":"q","ref":"a"},{"queue":"q","ref":"a"}]}`, `{"tasks":[{"queue":"q","depends_on":"a"}]}`,
		`{"tasks":[{"queue":"q","depends_on":[null,1]}]}`, `{"tasks":[{"queue":"q","ref":""}]}`, `{"tasks":[{"queue":"q","ref":"\u0000"}]}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/batch", body, nil)
	})
}

func FuzzClaimTasks(f *testing.F) {
	addBodies(f, `{}`, `{"worker_id":"w"}`, `{"worker_id":"mailer-1","limit":10}`, `{"worker_id":"w","limit":0}`,
		`{"worker_id":"w","limit":1001}`, `{"worker_id":"w","limit":null}`, `{"worker_id":"w","wait_ms":0}`,
		`{"worker_id":"w","wait_ms":-1}`, `{"worker_id":"w","wait_ms":9223372036854775807}`, `{"worker_id":"w","lease_seconds":0}`,
		`{"worker_id":"w","lease_seconds":43201}`, `{"worker_id":"w","queue":"a/b"}`, `{"worker_id":"w","queue":"emails"}`,
		`{"worker_id":"\u0000"}`, `{"worker_id":"w","limit":"1"}`, `{"worker_id":"w","request_id":"r-1"}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/claim", body, nil)
	})
}

// addReports seeds a single-task report target with an id and a body.
func addReports(f *testing.F, bodies ...string) {
	for _, id := range []string{taskID, "not-a-uuid", "", "../claim", "%00"} {
		for _, b := range bodies {
			f.Add(id, []byte(b))
		}
	}
}

func FuzzCompleteTask(f *testing.F) {
	addReports(f, `{}`, `{"worker_id":"w"}`, `{"worker_id":"w","lease_id":"`+lease()+`"}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","result":{"sent":true}}`, `{"worker_id":"x","lease_id":"`+lease()+`"}`,
		`{"worker_id":"w","lease_id":"nope"}`, `{"worker_id":"w","lease_id":null}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","enqueue":[]}`, `{"worker_id":"w","lease_id":"`+lease()+`","enqueue":null}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","enqueue":[{"queue":"q","payload":1,"idempotency_key":"k"}]}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","enqueue":[{"queue":""},{"queue":"q","payload":"\u0000"}]}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","enqueue":{}}`, `{"worker_id":"w","lease_id":"`+lease()+`","enqueue":[null,1]}`)
	for _, v := range jsonEdges {
		f.Add(taskID, []byte(`{"worker_id":"w","lease_id":"`+lease()+`","result":`+v+`}`))
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/"+url.PathEscape(id)+"/complete", body, nil)
	})
}

func FuzzFailTask(f *testing.F) {
	addReports(f, `{}`, `{"worker_id":"w","lease_id":"`+lease()+`","error":"smtp timeout","retryable":true}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","error":"nul \u0000","retryable":false}`,
		`{"worker_id":"w","error":"x"}`, `{"worker_id":"w","lease_id":"`+lease()+`","retryable":"yes"}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","error":"`+strings.Repeat("e", 65<<10)+`"}`)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/"+url.PathEscape(id)+"/fail", body, nil)
	})
}

func FuzzExtendLease(f *testing.F) {
	addReports(f, `{}`, `{"worker_id":"w","lease_id":"`+lease()+`"}`, `{"worker_id":"w","lease_id":"`+lease()+`","lease_seconds":600}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","lease_seconds":0}`, `{"worker_id":"w","lease_id":"`+lease()+`","lease_seconds":43201}`,
		`{"worker_id":"w","lease_seconds":60}`)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/"+url.PathEscape(id)+"/extend", body, nil)
	})
}

func batchReportSeeds(result string) []string {
	item := func(extra string) string { return `{"id":"` + taskID + `","lease_id":"` + lease() + `"` + extra + `}` }
	return []string{`{}`, `{"worker_id":"w","items":[]}`, `{"worker_id":"w","items":[` + item(result) + `]}`,
		`{"worker_id":"w","items":[` + item(result) + `,` + item(result) + `]}`,
		`{"worker_id":"w","items":[{"id":"` + taskID + `"}]}`, `{"worker_id":"w","items":[{"lease_id":"` + lease() + `"}]}`,
		`{"worker_id":"","items":[` + item("") + `]}`, `{"worker_id":"w","items":[null]}`, `{"worker_id":"w","items":{}}`}
}

func FuzzCompleteBatch(f *testing.F) {
	addBodies(f, batchReportSeeds(`,"result":{"ok":1}`)...)
	addBodies(f, batchReportSeeds(`,"error":"not here"`)...)
	addBodies(f, batchReportSeeds(`,"enqueue":[{"queue":"q"},{"queue":"q","payload":1e1000000}]`)...)
	addBodies(f, batchReportSeeds(`,"enqueue":[{"queue":"","depends_on":["a"]}]`)...)
	for _, v := range jsonEdges {
		f.Add([]byte(`{"worker_id":"w","items":[{"id":"` + taskID + `","lease_id":"` + lease() + `","result":` + v + `}]}`))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/complete", body, nil)
	})
}

func FuzzFailBatch(f *testing.F) {
	addBodies(f, batchReportSeeds(`,"error":"boom","retryable":false`)...)
	addBodies(f, batchReportSeeds(`,"result":1`)...)
	addBodies(f, batchReportSeeds(`,"error":"x","enqueue":[]`)...)
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/fail", body, nil)
	})
}

func FuzzHeartbeat(f *testing.F) {
	for _, id := range []string{"mailer-1", "", "a/b", "\x00", "é"} {
		for _, b := range []string{``, `{}`, `null`, `{"tasks":[]}`, `{"tasks":null}`,
			`{"tasks":[{"id":"` + taskID + `","lease_id":"` + lease() + `"}]}`, `{"tasks":[{"id":"` + taskID + `"}]}`,
			`{"tasks":[{}]}`, `{"tasks":{}}`, `{"tasks":[null]}`} {
			f.Add(id, []byte(b))
		}
	}
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/workers/v1/"+url.PathEscape(id)+"/heartbeat", body, nil)
	})
}

func FuzzRegisterWorker(f *testing.F) {
	addBodies(f, ``, `{}`, `null`, `{"id":"mailer-1","queues":["emails"],"tags":["smtp"]}`, `{"id":"host 1"}`,
		`{"id":"w","queues":["a","a"]}`, `{"id":"w","queues":["a/b"]}`, `{"id":"w","tags":["tab\there"]}`,
		`{"id":"`+strings.Repeat("w", 129)+`"}`, `{"id":"w","queues":null,"tags":null}`, `{"id":1}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/workers/v1/register", body, nil)
	})
}

// FuzzEmptyBodies covers the routes whose body must be empty or {}: drain,
// retry and cancel.
func FuzzEmptyBodies(f *testing.F) {
	for route := range 3 {
		for _, id := range []string{taskID, "mailer-1", "x"} {
			for _, b := range []string{``, `{}`, ` `, `null`, `{"force":true}`, `[]`} {
				f.Add(uint8(route), id, []byte(b))
			}
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, id string, body []byte) {
		path := []string{"/workers/v1/%s/drain", "/tasks/v1/%s/retry", "/tasks/v1/%s/cancel"}[int(route)%3]
		serve(t, fuzzChain, http.MethodPost, fmt.Sprintf(path, url.PathEscape(id)), body, nil)
	})
}

// FuzzTaskReads covers the reads of one task: the task, its parents and
// its attempts.
func FuzzTaskReads(f *testing.F) {
	for route := range 3 {
		for _, id := range []string{taskID, "not-a-uuid", "", "%00", "../claim"} {
			f.Add(uint8(route), id)
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, id string) {
		path := []string{"/tasks/v1/%s", "/tasks/v1/%s/parents", "/tasks/v1/%s/attempts"}[int(route)%3]
		serve(t, fuzzChain, http.MethodGet, fmt.Sprintf(path, url.PathEscape(id)), nil, nil)
	})
}

func FuzzListTasks(f *testing.F) {
	for _, q := range []string{``, `queue=emails&status=PENDING&limit=50`, `limit=0`, `limit=1001`, `limit=-1`,
		`limit=abc`, `limit=`, `limit=99999999999999999999`, `status=pending`, `queue=a%20b`, `queue=nul%00`,
		`queue=%ff%fe`, `cursor=AZHCpz1Nd7-EjONLBIFv9Q`, `dead_reason=bored`, `status=DEAD&dead_reason=exhausted&group_key=g`,
		`created_after=2026-01-02T03:04:05Z&created_before=2025-01-01T00:00:00Z`, `created_after=tomorrow`, `error_contains=%00`,
		`text=` + strings.Repeat("x", 201), `group_key=` + strings.Repeat("g", 129), `cursor=%21%21`, `cursor=YWJj`, `limit=1&limit=2`, `%zz`, `a=b;c`,
		`group_key=%ff`, `group_key=a%00b`, `text=%c3`, `dead_reason=%ff`, `status=DEAD%00`, `queue=%ed%a0%80`, `%ff=1`, `other=%00`} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := "/tasks/v1"
		if rawQuery != "" {
			req += "?" + rawQuery
		}
		if _, err := url.ParseRequestURI(req); err != nil {
			t.Skip("not a request target")
		}
		serve(t, fuzzChain, http.MethodGet, req, nil, nil)
	})
}

func FuzzListQueues(f *testing.F) {
	for _, q := range []string{``, `prefix=emails&min_pending=1&limit=50`, `pattern=emails-*-eu`, `paused=true`, `paused=maybe`,
		`min_pending=-1`, `limit=0`, `limit=1001`, `cursor=ZW1haWxz`, `cursor=%21`, `prefix=%ff`, `pattern=%00`, `prefix=a%00`,
		`pattern=*%ff*`, `cursor=_w`, `cursor=AA`, `%ff=%ff`} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, rawQuery string) {
		req := "/queues/v1"
		if rawQuery != "" {
			req += "?" + rawQuery
		}
		if _, err := url.ParseRequestURI(req); err != nil {
			t.Skip("not a request target")
		}
		serve(t, fuzzChain, http.MethodGet, req, nil, nil)
	})
}

// FuzzEvents reads the real outbox feed on a real database: the cursor in
// Last-Event-ID is the feed's to parse.
func FuzzEvents(f *testing.F) {
	for _, q := range []string{``, `queue=emails&type=task.*`, `queue=a,b&type=task.completed,task.dead_lettered`,
		`queue=`, `type=`, `queue=a/b`, `queue=%00`, `type=*`, `queue=emails&queue=`} {
		for _, id := range []string{``, `48213-9301-0`, `0-0-0`, `18446744073709551615-9223372036854775807-2147483647`,
			`18446744073709551616-0-0`, `1-2`, `a-b-c`, `-1-0-0`, `1-2-3-4`, " 5-5-5 "} {
			f.Add(q, id)
		}
	}
	db := pgtest.NewDB(f)
	cfg := outbox.DefaultConfig()
	cfg.PollInterval = time.Millisecond
	streams, err := outbox.NewStreams(outbox.NewFeed(db.DB, cfg.StreamReadBytes, zap.NewNop()), cfg, zap.NewNop())
	if err != nil {
		f.Fatal(err)
	}
	if err := streams.Start(f.Context()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = streams.Stop(context.Background()) })
	h := chain(streams)
	f.Fuzz(func(t *testing.T, rawQuery, lastEventID string) {
		req := "/events/v1"
		if rawQuery != "" {
			req += "?" + rawQuery
		}
		if _, err := url.ParseRequestURI(req); err != nil {
			t.Skip("not a request target")
		}
		if strings.ContainsAny(lastEventID, "\r\n\x00") {
			t.Skip("not a header value")
		}
		serve(t, h, http.MethodGet, req, nil, http.Header{"Last-Event-Id": {lastEventID}})
	})
}

func FuzzSnoozeTask(f *testing.F) {
	addReports(f, `{}`, `{"worker_id":"w","lease_id":"`+lease()+`","delay_seconds":60}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","delay_seconds":0}`, `{"worker_id":"w","lease_id":"`+lease()+`","delay_seconds":2592001}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","delay_seconds":9223372036854775807}`, `{"worker_id":"w","lease_id":"`+lease()+`"}`,
		`{"worker_id":"w","delay_seconds":5}`, `{"worker_id":"w","lease_id":"`+lease()+`","delay_seconds":1.5}`)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/"+url.PathEscape(id)+"/snooze", body, nil)
	})
}

func FuzzReleaseTask(f *testing.F) {
	addReports(f, `{}`, `{"worker_id":"w","lease_id":"`+lease()+`"}`, `{"worker_id":"w"}`, `{"lease_id":"`+lease()+`"}`,
		`{"worker_id":"w","lease_id":"`+lease()+`","delay_seconds":1}`, `{"worker_id":"w","lease_id":"not-a-uuid"}`)
	f.Fuzz(func(t *testing.T, id string, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/"+url.PathEscape(id)+"/release", body, nil)
	})
}

func FuzzReleaseBatch(f *testing.F) {
	addBodies(f, batchReportSeeds(``)...)
	addBodies(f, batchReportSeeds(`,"result":1`)...)
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/tasks/v1/release", body, nil)
	})
}

func FuzzCreateSchedule(f *testing.F) {
	addBodies(f, ``, `{}`, `null`, `{"name":"n","cron":"@daily","task":{"queue":"q"}}`,
		`{"name":"n","cron":"30 2 * * *","timezone":"Europe/Paris","task":{"queue":"q","payload":{"a":1},"retry":{"base_seconds":2}},"overlap":"allow","paused":true}`,
		`{"name":"n","cron":"@every 1s","task":{"queue":"q"}}`, `{"name":"n","cron":"@every 9223372036854775807ns","task":{"queue":"q"}}`,
		`{"name":"n","cron":"@every 2562047h","task":{"queue":"q"}}`, `{"name":"n","cron":"0 0 30 2 *","task":{"queue":"q"}}`,
		`{"name":"n","cron":"TZ=UTC * * * * *","task":{"queue":"q"}}`, `{"name":"n","cron":"* * * * *","timezone":"../../etc/passwd","task":{"queue":"q"}}`,
		`{"name":"n","cron":"* * * * *","timezone":"Local","task":{"queue":"q"}}`, `{"name":"a/b","cron":"","task":{}}`,
		`{"name":"n","cron":"* * * * *","task":{"queue":"q","run_at":"2030-01-01T00:00:00Z","idempotency_key":"k"}}`,
		`{"name":"n","cron":"* * * * *","task":null}`, `{"name":"n","cron":"`+strings.Repeat("*", 300)+`","task":{"queue":"q"}}`)
	f.Fuzz(func(t *testing.T, body []byte) {
		serve(t, fuzzChain, http.MethodPost, "/schedules/v1", body, nil)
	})
}

func FuzzUpdateSchedule(f *testing.F) {
	for _, b := range []string{`{}`, `{"paused":true}`, `{"paused":false,"cron":"@every 5m"}`, `{"name":"other"}`,
		`{"timezone":""}`, `{"timezone":"Nowhere"}`, `{"task":{"queue":""}}`, `{"overlap":"both"}`, `{"cron":null}`} {
		f.Add("n", []byte(b))
	}
	f.Fuzz(func(t *testing.T, name string, body []byte) {
		serve(t, fuzzChain, http.MethodPatch, "/schedules/v1/"+url.PathEscape(name), body, nil)
	})
}

func FuzzBulkActions(f *testing.F) {
	for _, b := range []string{``, `{}`, `null`, `{"queue":"q","dry_run":true}`, `{"queue":""}`, `{"status":"PENDING,BLOCKED"}`,
		`{"status":"DEAD","dead_reason":"exhausted","error_contains":"x","text":"y","group_key":"g"}`, `{"status":","}`,
		`{"created_after":"2026-01-02T03:04:05Z","created_before":"2026-01-01T00:00:00Z"}`, `{"created_after":"now"}`,
		`{"error_contains":"\u0000"}`, `{"dry_run":"yes"}`, `{"queue":"q","status":"RUNNING","dead_reason":"cancelled"}`} {
		for route := range 3 {
			f.Add(uint8(route), []byte(b))
		}
	}
	f.Fuzz(func(t *testing.T, route uint8, body []byte) {
		path := []string{"/tasks/v1/bulk/retry", "/tasks/v1/bulk/cancel", "/queues/v1/q/purge"}[int(route)%3]
		serve(t, fuzzChain, http.MethodPost, path, body, nil)
	})
}
