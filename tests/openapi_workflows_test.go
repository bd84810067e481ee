package tests

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// exerciseWorkflows makes the calls of spawns, joins, failure policies,
// runs, replays, debounce and throttle for the spec test, so that their
// real answers (and problems) are validated against docs/openapi.yaml.
func exerciseWorkflows(t *testing.T, c specCalls) {
	t.Helper()
	c.expect(201, "POST", "/workers/v1/register", `{"id":"spec-wf","queues":["spec-wf"]}`)
	root := c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-wf","payload":"root"}`)
	claimed := c.expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-wf","queue":"spec-wf"}`)["tasks"].([]any)
	require.Len(t, claimed, 1)
	id, lease := claimed[0].(map[string]any)["id"].(string), claimed[0].(map[string]any)["lease_id"].(string)
	holder := `"worker_id":"spec-wf","lease_id":"` + lease + `"`
	kids := c.expect(201, "POST", "/tasks/v1/"+id+"/spawn", `{`+holder+`,"tasks":[{"queue":"spec-wf-kid","ref":"a"},`+
		`{"queue":"spec-wf-kid","ref":"b","depends_on":[{"ref":"a","on_failure":"ignore"}]}]}`)["tasks"].([]any)
	require.Len(t, kids, 2)
	kid := kids[0].(map[string]any)["id"].(string)
	require.Equal(t, root["id"], kids[0].(map[string]any)["workflow_id"])
	c.problem(422, "validation-error", "POST", "/tasks/v1/"+id+"/spawn", `{`+holder+`,"tasks":[]}`)
	c.problem(400, "malformed-request", "POST", "/tasks/v1/"+id+"/spawn", `{`+holder+`,"tasks":[{"queue":"q","depends_on":[{"ref":"a","id":"x"}]}]}`)
	c.problem(409, "lease-lost", "POST", "/tasks/v1/"+id+"/spawn", `{"worker_id":"spec-wf","lease_id":"`+uuid.NewString()+`","tasks":[{"queue":"q"}]}`)
	c.problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/spawn", `{`+holder+`,"tasks":[{"queue":"q"}]}`)
	done := c.expect(200, "POST", "/tasks/v1/"+id+"/complete", `{`+holder+`,"result":1,"enqueue":[`+
		`{"queue":"spec-wf-join","depends_on":["`+kid+`",{"id":"`+id+`","on_failure":"skip"}]}]}`)
	join := done["enqueued"].([]any)[0].(map[string]any)
	require.Equal(t, "BLOCKED", join["status"])
	page := c.expect(200, "GET", "/tasks/v1/"+join["id"].(string)+"/parents?limit=1", "")
	require.NotNil(t, page["next_cursor"])
	c.expect(200, "GET", "/tasks/v1/"+join["id"].(string)+"/parents?limit=1&cursor="+page["next_cursor"].(string), "")
	c.problem(422, "validation-error", "GET", "/tasks/v1/"+join["id"].(string)+"/parents?limit=0", "")
	c.problem(422, "validation-error", "GET", "/tasks/v1/"+join["id"].(string)+"/parents?cursor=nope", "")

	// The run.
	run := c.expect(200, "GET", "/workflows/v1/"+id+"?limit=2", "")
	require.EqualValues(t, 4, run["total"])
	c.expect(200, "GET", "/workflows/v1/"+id+"?limit=2&cursor="+run["next_cursor"].(string), "")
	c.expect(200, "GET", "/tasks/v1?workflow_id="+id, "")
	c.problem(404, "workflow-not-found", "GET", "/workflows/v1/"+uuid.NewString(), "")
	c.problem(422, "validation-error", "GET", "/workflows/v1/"+id+"?limit=5000", "")
	cancelled := c.expect(200, "POST", "/workflows/v1/"+id+"/cancel", "")
	require.EqualValues(t, 3, cancelled["changed"])
	c.problem(404, "workflow-not-found", "POST", "/workflows/v1/"+uuid.NewString()+"/cancel", "")
	c.problem(400, "malformed-request", "POST", "/workflows/v1/"+id+"/cancel", `{"force":true}`)
	retried := c.expect(200, "POST", "/workflows/v1/"+id+"/retry", "{}")
	require.EqualValues(t, 3, retried["changed"])
	c.problem(404, "workflow-not-found", "POST", "/workflows/v1/"+uuid.NewString()+"/retry", "")
	c.expect(200, "POST", "/tasks/v1/bulk/cancel", `{"workflow_id":"`+id+`"}`)

	// Replays.
	replayed := c.expect(201, "POST", "/tasks/v1/"+id+"/replay", `{"priority":2,"metadata":{"a":"b"}}`)
	require.Equal(t, id, replayed["replay_of"])
	c.expect(201, "POST", "/tasks/v1/"+id+"/replay", "")
	c.problem(409, "invalid-transition", "POST", "/tasks/v1/"+replayed["id"].(string)+"/replay", "")
	c.problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/replay", "")
	c.problem(422, "validation-error", "POST", "/tasks/v1/"+id+"/replay", `{"max_attempts":0}`)
	c.expect(200, "POST", "/tasks/v1/bulk/replay", `{"workflow_id":"`+id+`","dry_run":true}`)
	bulk := c.expect(200, "POST", "/tasks/v1/bulk/replay", `{"queue":"spec-wf","status":"DONE"}`)
	require.EqualValues(t, 1, bulk["changed"])
	c.problem(422, "validation-error", "POST", "/tasks/v1/bulk/replay", `{"status":"RUNNING"}`)

	// Debounce and throttle.
	first := c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-deb","unique_key":"d","payload":1,"debounce_seconds":30}`)
	require.NotNil(t, first["debounce_until"])
	again := c.expect(200, "POST", "/tasks/v1", `{"queue":"spec-deb","unique_key":"d","payload":2,"debounce_seconds":30,"debounce_max_seconds":60}`)
	require.Equal(t, first["id"], again["id"])
	require.EqualValues(t, 2, again["payload"])
	c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-thr","unique_key":"t","throttle_seconds":30}`)
	c.problem(422, "validation-error", "POST", "/tasks/v1", `{"queue":"spec-thr","throttle_seconds":30}`)
	c.problem(422, "validation-error", "POST", "/tasks/v1/batch", `{"tasks":[{"queue":"spec-thr","unique_key":"t","throttle_seconds":30}]}`)
	c.expect(201, "POST", "/tasks/v1/batch", `{"workflow_id":"`+id+`","tasks":[{"queue":"spec-wf-more"}]}`)
}
