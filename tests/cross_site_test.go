package tests

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/adapters/ui"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// rawRequest sends one request with exactly the given Host, headers and
// body, and returns the status and body.
func rawRequest(t *testing.T, base, method, path, host string, header http.Header, body string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequestWithContext(t.Context(), method, base+path, rd)
	require.NoError(t, err)
	for k, vs := range header {
		req.Header[k] = vs
	}
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

// concreteRoute fills every variable of a route template.
func concreteRoute(path string) string {
	return strings.NewReplacer("{id}", uuid.NewString(), "{queue}", "q", "{name}", "n").Replace(path)
}

// Every JSON route, in both modes, refuses a body that is not sent as
// application/json with 415 before it does anything: text/plain and form
// encodings are what a page of another site can send without a CORS
// preflight. application/json with a utf-8 charset is JSON; a bodyless
// request without a Content-Type (curl -X POST .../retry) is served.
func TestJSONRoutesTakeOnlyApplicationJSONBodies(t *testing.T) {
	t.Parallel()
	for _, auth := range []httpadapter.AuthMode{httpadapter.AuthOff, httpadapter.AuthOn} {
		t.Run(string(auth), func(t *testing.T) {
			t.Parallel()
			var srv *httpadapter.Server
			s := testserver.StartOn(t, pgtest.NewDatabase(t), func(c *app.Config) { c.HTTP.Auth = auth }, fx.Populate(&srv))
			token := ""
			if auth == httpadapter.AuthOn {
				token = s.AdminKey(t)
			}
			header := func(kv ...string) http.Header {
				h := http.Header{}
				if token != "" {
					h.Set("Authorization", "Bearer "+token)
				}
				for i := 0; i+1 < len(kv); i += 2 {
					h.Set(kv[i], kv[i+1])
				}
				return h
			}
			checked := 0
			for _, r := range srv.Routes() {
				if strings.HasPrefix(r.Path, strings.TrimSuffix(ui.Prefix, "/")) || r.Access.Public {
					continue
				}
				for _, method := range r.Methods {
					if method == http.MethodGet {
						continue
					}
					path := concreteRoute(r.Path)
					for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
						"multipart/form-data; boundary=x", "application/json; charset=iso-8859-1", "application/jsonx", "not a type"} {
						status, body := rawRequest(t, s.URL, method, path, "", header("Content-Type", ct), `{"queue":"q"}`)
						require.Equal(t, http.StatusUnsupportedMediaType, status, "%s %s as %q: %s", method, r.Path, ct, body)
						require.Contains(t, body, "unsupported-media-type")
					}
					status, body := rawRequest(t, s.URL, method, path, "", header(), `{"queue":"q"}`)
					require.Equal(t, http.StatusUnsupportedMediaType, status, "%s %s with a body and no Content-Type: %s", method, r.Path, body)
					for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON;Charset=\"UTF-8\""} {
						status, body := rawRequest(t, s.URL, method, path, "", header("Content-Type", ct), `{}`)
						require.NotEqual(t, http.StatusUnsupportedMediaType, status, "%s %s as %q: %s", method, r.Path, ct, body)
					}
					status, body = rawRequest(t, s.URL, method, path, "", header(), "")
					require.NotEqual(t, http.StatusUnsupportedMediaType, status, "%s %s without a body: %s", method, r.Path, body)
					checked++
				}
			}
			require.GreaterOrEqual(t, checked, 23, "every route that takes a body")

			// Refused means nothing happened.
			var n int
			require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
			require.Zero(t, n, "a text/plain submit created a task")
			status, _ := rawRequest(t, s.URL, http.MethodPost, "/tasks/v1", "", header("Content-Type", "text/plain"), `{"queue":"q"}`)
			require.Equal(t, http.StatusUnsupportedMediaType, status)
			require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
			require.Zero(t, n)
		})
	}
}

// With authentication off, the server answers only requests to a loopback
// name, whatever the route (the dashboard included): a page on a name of
// an attacker's that resolves to 127.0.0.1 (DNS rebinding) gets nothing.
// The probes answer whatever the name. With authentication on, names do
// not matter: a page cannot supply the key.
func TestWithAuthOffOnlyLoopbackHostNamesAreServed(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	require.False(t, s.Config.HTTP.AuthEnabled(), "a loopback address serves without keys by default")
	port := s.URL[strings.LastIndex(s.URL, ":"):]
	for _, host := range []string{"localhost" + port, "LOCALHOST", "127.0.0.1" + port, "127.0.0.1", "127.9.8.7" + port, "[::1]" + port, "[::1]"} {
		for _, path := range []string{"/tasks/v1", "/queues/v1", "/ui/", "/healthz"} {
			status, body := rawRequest(t, s.URL, http.MethodGet, path, host, nil, "")
			require.Equal(t, http.StatusOK, status, "Host %s, %s: %s", host, path, body)
		}
	}
	for _, host := range []string{"evil.example", "evil.example" + port, "127.0.0.1.evil.example" + port, "localhost.evil.example",
		"0.0.0.0" + port, "10.0.0.5" + port, "[::2]" + port, "taskmaster"} {
		for _, path := range []string{"/tasks/v1", "/queues/v1", "/ui/", "/ui/login", "/openapi.yaml", "/nope"} {
			status, body := rawRequest(t, s.URL, http.MethodGet, path, host, nil, "")
			require.Equal(t, http.StatusForbidden, status, "Host %s, %s: %s", host, path, body)
			require.Contains(t, body, "host-not-allowed")
		}
		status, body := rawRequest(t, s.URL, http.MethodPost, "/tasks/v1", host, http.Header{"Content-Type": {"application/json"}}, `{"queue":"q"}`)
		require.Equal(t, http.StatusForbidden, status, body)
		for _, probe := range []string{"/healthz", "/readyz"} {
			status, body := rawRequest(t, s.URL, http.MethodGet, probe, host, nil, "")
			require.Equal(t, http.StatusOK, status, "%s with Host %s: %s", probe, host, body)
		}
	}
	var n int
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
	require.Zero(t, n, "a request to a foreign name created a task")

	// With keys, any name is served.
	sec := startSecured(t, nil)
	status, body := rawRequest(t, sec.URL, http.MethodGet, "/queues/v1", "queue.example.com", http.Header{"Authorization": sec.admin.Header()["Authorization"]}, "")
	require.Equal(t, http.StatusOK, status, body)
}

// With authentication off, a request that changes something and carries
// the Origin of another site is refused and changes nothing, even without a
// body (fetch with mode no-cors sends a bodyless POST with no
// Content-Type). The same request from the server's own origin, or from a
// client that sends no Origin (curl, the SDK), is served.
func TestWithAuthOffWritesFromAnotherOriginAreRefused(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := testclient.New(t, s.URL)
	var created testclient.Task
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q"}).Expect(t, http.StatusCreated, &created)
	cancel := "/tasks/v1/" + created.ID + "/cancel"
	host := strings.TrimPrefix(s.URL, "http://")
	for _, origin := range []string{"http://evil.example", "https://evil.example", "http://localhost:1", "null", "http://" + host + ".evil.example"} {
		status, body := rawRequest(t, s.URL, http.MethodPost, cancel, "", http.Header{"Origin": {origin}}, "")
		require.Equal(t, http.StatusForbidden, status, "Origin %s: %s", origin, body)
		require.Contains(t, body, "cross-origin")
	}
	var got testclient.Task
	c.Do(http.MethodGet, "/tasks/v1/"+created.ID, nil).Expect(t, http.StatusOK, &got)
	require.Equal(t, "PENDING", got.Status, "a refused cancel changed the task")

	// Reads from another origin are not refused here (the browser does not
	// let the page read the answer); the server's own origin may write.
	status, body := rawRequest(t, s.URL, http.MethodGet, "/tasks/v1/"+created.ID, "", http.Header{"Origin": {"http://evil.example"}}, "")
	require.Equal(t, http.StatusOK, status, body)
	status, body = rawRequest(t, s.URL, http.MethodPost, cancel, "", http.Header{"Origin": {"http://" + host}}, "")
	require.Equal(t, http.StatusOK, status, body)
}
