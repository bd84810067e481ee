package tests

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// exercisePushAndLimits makes the calls of push queues and named limits
// for the spec test: settings with a push delivery (its secret once), a
// delivered task's attempts and the queue's recent deliveries, and every
// operation of /limits/v1, so that their real answers are validated
// against docs/openapi.yaml.
func exercisePushAndLimits(t *testing.T, c specCalls) {
	t.Helper()
	ep := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.ReadAll(r.Body)
		_, _ = io.WriteString(w, `{"ok":true}`)
	}))
	t.Cleanup(ep.Close)
	set := c.expect(200, "PATCH", "/queues/v1/spec-push", `{"push":{"url":"`+ep.URL+`","headers":{"Authorization":"Bearer x"},"max_in_flight":2}}`)
	push := set["push"].(map[string]any)
	require.NotEmpty(t, push["secret"])
	set = c.expect(200, "PATCH", "/queues/v1/spec-push", `{"push":{"rotate_secret":true,"secret_overlap_seconds":60},"rate_limit_per_group":{"per_second":3}}`)
	require.NotNil(t, set["push"].(map[string]any)["previous_secret_expires_at"])
	task := c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-push","payload":{"n":1}}`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := c.expect(200, "GET", "/queues/v1/spec-push", "")
		got := c.expect(200, "GET", "/tasks/v1/"+task["id"].(string), "")
		if got["status"] == "DONE" && d["deliveries"] != nil {
			break
		}
		require.False(t, time.Now().After(deadline), "the spec's push task was not delivered: %v", got)
		time.Sleep(20 * time.Millisecond)
	}
	attempts := c.expect(200, "GET", "/tasks/v1/"+task["id"].(string)+"/attempts", "")["attempts"].([]any)
	require.Equal(t, 200.0, attempts[0].(map[string]any)["http_status"])
	c.problem(422, "validation-error", "PATCH", "/queues/v1/spec-push", `{"push":{"url":"https://not-allowed.example.com/"}}`)

	c.expect(201, "PUT", "/limits/v1/spec-limit", `{"per_second":2,"max_running":3}`)
	c.expect(200, "PUT", "/limits/v1/spec-limit", `{"per_second":2,"burst":4,"max_running":3}`)
	c.expect(200, "PATCH", "/queues/v1/spec-limited", `{"limits":["spec-limit"]}`)
	l := c.expect(200, "GET", "/limits/v1/spec-limit", "")
	require.Equal(t, []any{"spec-limited"}, l["queues"])
	c.expect(200, "GET", "/limits/v1", "")
	c.problem(409, "limit-in-use", "DELETE", "/limits/v1/spec-limit", "")
	c.expect(200, "PATCH", "/queues/v1/spec-limited", `{"limits":null}`)
	c.expect(200, "DELETE", "/limits/v1/spec-limit", "")
	c.problem(404, "limit-not-found", "GET", "/limits/v1/spec-limit", "")
	c.problem(404, "limit-not-found", "DELETE", "/limits/v1/spec-limit", "")
	c.problem(422, "validation-error", "PUT", "/limits/v1/spec-limit", `{}`)
	c.problem(422, "validation-error", "GET", "/limits/v1/bad!name", "")
	c.problem(400, "malformed-request", "PUT", "/limits/v1/spec-limit", `{"max_running":"many"}`)
}
