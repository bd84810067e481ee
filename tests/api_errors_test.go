package tests

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

func TestAPIUnknownRouteIs404Problem(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for _, path := range []string{"/", "/nope", "/no%20such%20route", "/tasks/v2", "/tasks/v1/" + uuid.NewString() + "/explode", "/workers/v1/w/heartbeat/extra"} {
		c.Do(http.MethodGet, path, nil).Problem(t, http.StatusNotFound, "not-found")
	}
	// A path that is not in canonical form is not redirected (a POST that
	// follows a 301 becomes a GET): no route has it.
	for _, path := range []string{"/workers/v1//heartbeat", "/tasks/v1//complete", "/workers/v1/a%2Fb/heartbeat", "/tasks/v1/./claim", "/tasks//v1"} {
		c.Do(http.MethodPost, path, "{}").Problem(t, http.StatusNotFound, "not-found")
	}
}

func TestAPIWrongMethodIs405Problem(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for _, tc := range []struct{ method, path string }{
		{http.MethodDelete, "/tasks/v1"},
		{http.MethodPut, "/tasks/v1"},
		{http.MethodGet, "/workers/v1/register"},
		{http.MethodPut, "/workers/v1"},
		{http.MethodPost, "/queues/v1"},
		{http.MethodPost, "/healthz"},
		{http.MethodDelete, "/tasks/v1/" + uuid.NewString()},
	} {
		c.Do(tc.method, tc.path, nil).Problem(t, http.StatusMethodNotAllowed, "method-not-allowed")
	}
}

func TestAPIMalformedBodiesAre400(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for name, body := range map[string]string{
		"truncated":      `{"queue": "q"`,
		"not json":       `queue=q`,
		"trailing data":  `{"queue": "q"} {"queue": "r"}`,
		"trailing comma": `{"queue": "q",}`,
		"empty":          ``,
		"array":          `[{"queue": "q"}]`,
		"null":           `null`,
	} {
		t.Run(name, func(t *testing.T) {
			c.Do(http.MethodPost, "/tasks/v1", body).Problem(t, http.StatusBadRequest, "malformed-request")
		})
	}
	c.Do(http.MethodPost, "/tasks/v1/claim", `{"worker_id": `).Problem(t, http.StatusBadRequest, "malformed-request")
	c.Do(http.MethodPost, "/workers/v1/register", `{"id": 'w'}`).Problem(t, http.StatusBadRequest, "malformed-request")
}

func TestAPIUnknownFieldsAre400NamingTheField(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for path, body := range map[string]string{
		"/tasks/v1":               `{"queue": "q", "colour": "red"}`,
		"/tasks/v1/claim":         `{"worker_id": "w", "colour": "red"}`,
		"/workers/v1/register":    `{"id": "w", "colour": "red"}`,
		"/workers/v1/w/heartbeat": `{"colour": "red"}`,
		"/tasks/v1/" + uuid.NewString() + "/complete": `{"worker_id": "w", "colour": "red"}`,
	} {
		p := c.Do(http.MethodPost, path, body).Problem(t, http.StatusBadRequest, "malformed-request")
		require.Equal(t, []string{"colour"}, p.Fields(), "%s", path)
		require.Contains(t, p.Detail, "colour")
	}
}

func TestAPIWrongTypesAre400NamingTheField(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	id := uuid.NewString()
	for _, tc := range []struct{ path, body, field string }{
		{"/tasks/v1", `{"queue": 5}`, "queue"},
		{"/tasks/v1", `{"queue": "q", "priority": "high"}`, "priority"},
		{"/tasks/v1", `{"queue": "q", "max_attempts": 1.5}`, "max_attempts"},
		{"/tasks/v1", `{"queue": "q", "tags": "gpu"}`, "tags"},
		{"/tasks/v1", `{"queue": "q", "tags": [1]}`, "tags"},
		{"/tasks/v1", `{"queue": "q", "idempotency_key": {}}`, "idempotency_key"},
		{"/tasks/v1", `{"queue": "q", "deadline": 5}`, "deadline"},
		{"/tasks/v1", `{"queue": "q", "run_at": "tomorrow"}`, "run_at"},
		{"/tasks/v1/claim", `{"worker_id": "w", "limit": "ten"}`, "limit"},
		{"/tasks/v1/claim", `{"worker_id": 7}`, "worker_id"},
		{"/tasks/v1/" + id + "/complete", `{"worker_id": "w", "lease_id": "not-a-uuid"}`, "lease_id"},
		{"/tasks/v1/" + id + "/fail", `{"worker_id": "w", "retryable": "yes"}`, "retryable"},
		{"/tasks/v1/" + id + "/fail", `{"worker_id": "w", "error": {"message": "x"}}`, "error"},
		{"/workers/v1/register", `{"queues": "q"}`, "queues"},
	} {
		t.Run(tc.field+" "+tc.body, func(t *testing.T) {
			p := c.Do(http.MethodPost, tc.path, tc.body).Problem(t, http.StatusBadRequest, "malformed-request")
			require.Equal(t, []string{tc.field}, p.Fields())
			require.Contains(t, p.Detail, tc.field)
		})
	}
}

func TestAPIBodyOver1MiBIs413AndTheServerKeepsServing(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	require.EqualValues(t, 1<<20, s.Config.HTTP.MaxBodyBytes)
	big := fmt.Sprintf(`{"queue": "q", "payload": %q}`, strings.Repeat("x", 1<<20))
	c.Do(http.MethodPost, "/tasks/v1", big).Problem(t, http.StatusRequestEntityTooLarge, "body-too-large")

	var n int
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
	require.Zero(t, n)
	require.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/healthz", nil).Status)
	c.Submit(jsonObj{"queue": "q", "payload": strings.Repeat("x", 1<<19)})
}

func TestAPIBodyLimitIsConfigurable(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) { cfg.HTTP.MaxBodyBytes = 4096 })
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "payload": strings.Repeat("x", 4096)}).
		Problem(t, http.StatusRequestEntityTooLarge, "body-too-large")
	c.Submit(jsonObj{"queue": "q", "payload": strings.Repeat("x", 3000)})
}

func TestAPIValidationListsEveryOffendingField(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	tags := make([]string, 17)
	for i := range tags {
		tags[i] = fmt.Sprintf("t%d", i)
	}
	p := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"max_attempts": 101, "tags": tags}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.ElementsMatch(t, []string{"queue", "max_attempts", "tags"}, p.Fields())
	for _, e := range p.Errors {
		require.NotEmpty(t, e.Message, e.Field)
	}

	for _, tc := range []struct {
		body   jsonObj
		fields []string
	}{
		{jsonObj{"queue": "   "}, []string{"queue"}},
		{jsonObj{"queue": strings.Repeat("q", 129)}, []string{"queue"}},
		{jsonObj{"queue": "q", "max_attempts": -1}, []string{"max_attempts"}},
		{jsonObj{"queue": "q", "priority": int64(1) << 31}, []string{"priority"}},
		{jsonObj{"queue": "q", "tags": []string{"ok", "", strings.Repeat("t", 65)}}, []string{"tags[1]", "tags[2]"}},
		{jsonObj{"queue": "q", "idempotency_key": strings.Repeat("k", 256)}, []string{"idempotency_key"}},
		{jsonObj{"queue": "q", "run_at": "2030-01-02T00:00:00Z", "deadline": "2030-01-01T00:00:00Z"}, []string{"deadline"}},
	} {
		p := c.Do(http.MethodPost, "/tasks/v1", tc.body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, tc.fields, p.Fields(), "%v", tc.body)
	}
}

// Inputs that are well-formed JSON but that PostgreSQL cannot store (NUL
// characters, unpaired surrogates, numbers beyond numeric's range, invalid
// UTF-8 in a query) are client mistakes: never a 500.
func TestAPIUnstorableValuesAreClientErrorsNever500(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w", jsonObj{"queue": "runs"})
	complete := "/tasks/v1/" + running.ID + "/complete"
	holder := `"worker_id": "w", "lease_id": "` + running.Lease() + `"`
	for _, tc := range []struct {
		method, path, body string
		status             int
		fields             []string
	}{
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "payload": {"a": "nul \u0000 inside"}}`, 422, []string{"payload"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "payload": {"nul \u0000 key": 1}}`, 422, []string{"payload"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "payload": "\ud800"}`, 422, []string{"payload"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "payload": 1e1000000}`, 422, []string{"payload"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "payload": [1e-20000]}`, 422, []string{"payload"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "nul\u0000"}`, 422, []string{"queue"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "tags": ["nul\u0000"]}`, 422, []string{"tags[0]"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "idempotency_key": "nul\u0000"}`, 422, []string{"idempotency_key"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "max_attempts": 99999999999999999999}`, 400, []string{"max_attempts"}},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "run_at": "9999-12-31T23:59:59Z"}`, 201, nil},
		{http.MethodPost, "/tasks/v1", `{"queue": "q", "run_at": "0001-01-01T00:00:00Z"}`, 201, nil},
		{http.MethodPost, "/tasks/v1/claim", `{"worker_id": "w", "queue": "nul\u0000"}`, 422, []string{"queue"}},
		{http.MethodPost, "/tasks/v1/claim", `{"worker_id": "nul\u0000"}`, 404, nil},
		{http.MethodPost, "/workers/v1/register", `{"id": "w2", "queues": ["nul\u0000"]}`, 422, []string{"queues[0]"}},
		{http.MethodPost, "/workers/v1/register", `{"id": "w3", "tags": ["ok", "tab\there"]}`, 422, []string{"tags[1]"}},
		{http.MethodPost, "/workers/v1/nul%00/heartbeat", ``, 404, nil},
		{http.MethodGet, "/tasks/v1?queue=nul%00", ``, 422, []string{"queue"}},
		{http.MethodGet, "/tasks/v1?queue=%ff%fe", ``, 422, []string{"queue"}},
		{http.MethodPost, complete, `{` + holder + `, "result": {"a": "\u0000"}}`, 422, []string{"result"}},
		{http.MethodPost, complete, `{` + holder + `, "result": "\udfff"}`, 422, []string{"result"}},
		{http.MethodPost, complete, `{` + holder + `, "result": -1e200000}`, 422, []string{"result"}},
	} {
		r := c.Do(tc.method, tc.path, tc.body)
		switch {
		case tc.status == 422:
			p := r.Problem(t, 422, "validation-error")
			require.Equal(t, tc.fields, p.Fields(), "%s", r)
		case tc.status == 400:
			p := r.Problem(t, 400, "malformed-request")
			require.Equal(t, tc.fields, p.Fields(), "%s", r)
		case tc.status == 404:
			r.Problem(t, 404, "worker-not-found")
		default:
			require.Equal(t, tc.status, r.Status, "%s with %s", r, tc.body)
		}
	}
	require.Equal(t, running, c.Get(running.ID), "no rejected report changed the task")

	// A failure report is never refused for the bytes of its message.
	failed := c.Fail(running.ID, jsonObj{"worker_id": "w", "lease_id": running.Lease(), "error": "nul \u0000 inside"})
	require.Equal(t, "nul \uFFFD inside", failed.Error())
	require.Equal(t, failed, c.Get(running.ID))
}

func TestAPICorrelationIDIsEchoedOrGenerated(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)

	given := http.Header{testclient.HeaderCorrelationID: {"req-42.a:b/c=d+e"}}
	r := c.DoHeader(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q"}, given)
	require.Equal(t, http.StatusCreated, r.Status)
	require.Equal(t, "req-42.a:b/c=d+e", r.Header.Get(testclient.HeaderCorrelationID))

	p := c.DoHeader(http.MethodGet, "/nope", nil, given).Problem(t, http.StatusNotFound, "not-found")
	require.Equal(t, "req-42.a:b/c=d+e", p.CorrelationID)

	seen := map[string]bool{}
	for range 3 {
		r := c.Do(http.MethodGet, "/healthz", nil)
		id := r.Header.Get(testclient.HeaderCorrelationID)
		require.NotEmpty(t, id, "generated when absent")
		require.False(t, seen[id], "a new id for every request")
		seen[id] = true
	}

	for _, unsafe := range []string{"has space", strings.Repeat("x", 129), "quote\"d", "<script>"} {
		r := c.DoHeader(http.MethodGet, "/healthz", nil, http.Header{testclient.HeaderCorrelationID: {unsafe}})
		id := r.Header.Get(testclient.HeaderCorrelationID)
		require.NotEmpty(t, id)
		require.NotEqual(t, unsafe, id, "an unsafe id is replaced, not echoed")
	}
}

// Absent is not zero: an optional number that is absent takes its default,
// but an explicit value out of its range (0 included, where 0 is not in it)
// is a 422 naming the field, and changes nothing.
func TestAPIExplicitOutOfRangeNumbersAre422(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w", jsonObj{"queue": "held"})
	holder := jsonObj{"worker_id": "w", "lease_id": running.Lease()}
	with := func(base jsonObj, k string, v any) jsonObj {
		out := jsonObj{k: v}
		for bk, bv := range base {
			out[bk] = bv
		}
		return out
	}
	type call struct {
		method, path string
		body         any
		field        string
	}
	var calls []call
	for _, v := range []any{0, -1, 101} {
		calls = append(calls, call{http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "max_attempts": v}, "max_attempts"})
		calls = append(calls, call{http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []any{jsonObj{"queue": "q"}, jsonObj{"queue": "q", "max_attempts": v}}}, "tasks[1].max_attempts"})
	}
	for _, v := range []any{int64(1) << 31, -(int64(1) << 31) - 1} {
		calls = append(calls, call{http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "priority": v}, "priority"})
	}
	for _, v := range []any{0, -1, 1001} {
		calls = append(calls, call{http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "limit": v}, "limit"})
	}
	for _, v := range []any{0, -1, 43201} {
		calls = append(calls, call{http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "lease_seconds": v}, "lease_seconds"})
		calls = append(calls, call{http.MethodPost, "/tasks/v1/" + running.ID + "/extend", with(holder, "lease_seconds", v), "lease_seconds"})
	}
	for _, v := range []any{-1, 30001, int64(1) << 60} {
		calls = append(calls, call{http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "wait_ms": v}, "wait_ms"})
	}
	for _, v := range []string{"0", "-1", "1001", "99999999999999999999"} {
		calls = append(calls, call{http.MethodGet, "/tasks/v1?limit=" + v, nil, "limit"})
	}
	var before int
	require.NoError(t, s.DB.Get(&before, `SELECT count(*) FROM tasks`))
	for _, tc := range calls {
		p := c.Do(tc.method, tc.path, tc.body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{tc.field}, p.Fields(), "%s %s %v", tc.method, tc.path, tc.body)
	}
	var after int
	require.NoError(t, s.DB.Get(&after, `SELECT count(*) FROM tasks`))
	require.Equal(t, before, after, "nothing was submitted")
	require.Equal(t, running, c.Get(running.ID), "nothing was claimed or extended")

	// Zero where zero is in range is a value, not a default: no wait.
	require.Empty(t, c.Claim(jsonObj{"worker_id": "w", "wait_ms": 0}))
	// Absent numbers take their defaults.
	created := c.Submit(jsonObj{"queue": "defaults"})
	require.Equal(t, 3, created.MaxAttempts)
	require.Equal(t, 0, created.Priority)
}

// Queue names are 1-128 characters of [A-Za-z0-9._:-] wherever they enter:
// they become Prometheus labels and URL path segments. Anything else is a 422
// naming the field (never a silently empty answer), and creates nothing.
func TestAPIQueueNamesAreCheckedWhereverTheyEnter(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w"})
	longest := strings.Repeat("q", 128)
	bad := []string{"", "a b", "a/b", "tab\there", "é", "a?b", "a%b", "a,b", strings.Repeat("q", 129)}
	for _, name := range bad {
		for _, tc := range []struct {
			method, path string
			body         any
			field        string
		}{
			{http.MethodPost, "/tasks/v1", jsonObj{"queue": name}, "queue"},
			{http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []any{jsonObj{"queue": "ok"}, jsonObj{"queue": name}}}, "tasks[1].queue"},
			{http.MethodPost, "/workers/v1/register", jsonObj{"id": "w2", "queues": []string{"ok", name}}, "queues[1]"},
		} {
			p := c.Do(tc.method, tc.path, tc.body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
			require.Equal(t, []string{tc.field}, p.Fields(), "%s %s %q", tc.method, tc.path, name)
		}
		if name == "" {
			continue // an empty claim queue or filter is an absent one
		}
		p := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "queue": name}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"queue"}, p.Fields(), "claim %q", name)
		p = c.Do(http.MethodGet, "/tasks/v1?queue="+url.QueryEscape(name), nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"queue"}, p.Fields(), "list %q", name)
		if !strings.Contains(name, ",") { // the events filter splits on commas
			p = c.Do(http.MethodGet, "/events/v1?queue="+url.QueryEscape(name), nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
			require.Equal(t, []string{"queue"}, p.Fields(), "events %q", name)
		}
	}
	var tasks, workers int
	require.NoError(t, s.DB.Get(&tasks, `SELECT count(*) FROM tasks`))
	require.NoError(t, s.DB.Get(&workers, `SELECT count(*) FROM workers`))
	require.Zero(t, tasks)
	require.Equal(t, 1, workers)

	// The whole set, at the longest length, is accepted everywhere.
	for _, name := range []string{longest, "A-Za-z0-9._:-", "emails.v2:eu-west_1"} {
		created := c.Submit(jsonObj{"queue": name})
		c.Register(jsonObj{"id": "w3", "queues": []string{name}})
		require.Equal(t, []string{created.ID}, ids(c.List("queue="+url.QueryEscape(name)).Tasks))
		got := c.Claim(jsonObj{"worker_id": "w3", "queue": name})
		require.Len(t, got, 1)
		require.Equal(t, created.ID, got[0].ID)
	}
}

func ids(ts []testclient.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.ID
	}
	return out
}

// Times that decode but that no response could carry (RFC 3339 has four-digit
// years, and responses are in UTC) or that storage would round past them are
// a 422: before, such a task was created and every answer about it was cut
// off (201 with an empty body, then broken GETs and listings).
func TestAPITimesOutsideTheRepresentableRangeAre422(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	for _, tc := range []struct{ field, value string }{
		{"run_at", "9999-12-31T23:59:59-23:59"},
		{"deadline", "9999-12-31T23:59:59-00:01"},
		{"run_at", "0000-01-01T00:00:00+00:01"},
		{"deadline", "9999-12-31T23:59:59.9999999Z"},
		{"run_at", "0000-12-31T23:59:59Z"},
	} {
		p := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", tc.field: tc.value}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{tc.field}, p.Fields(), "%s %s", tc.field, tc.value)
		p = c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []any{jsonObj{"queue": "q", tc.field: tc.value}}}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"tasks[0]." + tc.field}, p.Fields(), "%s %s", tc.field, tc.value)
	}
	var n int
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
	require.Zero(t, n)
	// The extremes themselves are kept exactly.
	far := c.Submit(jsonObj{"queue": "q", "run_at": "9999-12-31T23:59:59.999998Z", "deadline": "9999-12-31T23:59:59.999999+00:00"})
	require.Equal(t, time.Date(9999, 12, 31, 23, 59, 59, 999999000, time.UTC), far.Deadline.UTC())
	require.Equal(t, far, c.Get(far.ID))
	c.Submit(jsonObj{"queue": "q", "run_at": "0001-01-01T00:00:00Z"})
}
