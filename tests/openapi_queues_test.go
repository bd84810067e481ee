package tests

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// exerciseQueues makes the calls of the queue listing, detail and settings
// for the spec test, so that their real answers are validated against
// docs/openapi.yaml.
func exerciseQueues(t *testing.T, c specCalls) {
	t.Helper()
	set := c.expect(200, "PATCH", "/queues/v1/spec-settings", `{"paused":true,"max_running":2,"rate_limit":{"per_second":5}}`)
	require.Equal(t, map[string]any{"per_second": 5.0, "burst": 5.0}, set["rate_limit"])
	set = c.expect(200, "PATCH", "/queues/v1/spec-settings", `{"max_running":null,"max_running_per_group":3}`)
	require.Nil(t, set["max_running"])
	d := c.expect(200, "GET", "/queues/v1/spec-settings", "")
	require.Equal(t, true, d["paused"])
	c.expect(200, "GET", "/queues/v1/spec", "")
	page := c.expect(200, "GET", "/queues/v1?prefix=spec&paused=false&limit=1", "")
	require.NotNil(t, page["next_cursor"])
	c.expect(200, "GET", "/queues/v1?pattern=spec-*&min_pending=0&cursor="+page["next_cursor"].(string), "")
	c.problem(404, "queue-not-found", "GET", "/queues/v1/spec-nowhere", "")
	c.problem(422, "validation-error", "PATCH", "/queues/v1/spec-settings", `{"max_running":0}`)
	c.problem(400, "malformed-request", "PATCH", "/queues/v1/spec-settings", `{"nope":1}`)
	c.problem(422, "validation-error", "GET", "/queues/v1?limit=0", "")
}
