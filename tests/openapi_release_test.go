package tests

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// exerciseRelease makes the calls of releases (single and batch) for the
// spec test, so that their real answers are validated against
// docs/openapi.yaml.
func exerciseRelease(t *testing.T, c specCalls) {
	t.Helper()
	c.expect(201, "POST", "/workers/v1/register", `{"id":"spec-w7","queues":["spec-r"]}`)
	for range 3 {
		c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-r","max_attempts":1}`)
	}
	claimed := c.expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w7","queue":"spec-r","limit":3}`)["tasks"].([]any)
	require.Len(t, claimed, 3)
	ref := func(i int) (string, string) {
		tk := claimed[i].(map[string]any)
		return tk["id"].(string), tk["lease_id"].(string)
	}
	id0, lease0 := ref(0)
	c.problem(422, "validation-error", "POST", "/tasks/v1/"+id0+"/release", `{"worker_id":"spec-w7"}`)
	c.problem(409, "lease-lost", "POST", "/tasks/v1/"+id0+"/release", `{"worker_id":"spec-w7","lease_id":"`+uuid.NewString()+`"}`)
	c.problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/release", `{"worker_id":"spec-w7","lease_id":"`+lease0+`"}`)
	c.problem(400, "malformed-request", "POST", "/tasks/v1/"+id0+"/release", `{"worker_id":"spec-w7","lease_id":"`+lease0+`","now":true}`)
	released := c.expect(200, "POST", "/tasks/v1/"+id0+"/release", `{"worker_id":"spec-w7","lease_id":"`+lease0+`"}`)
	require.Equal(t, "PENDING", released["status"])
	require.EqualValues(t, 0, released["attempts"])

	id1, lease1 := ref(1)
	id2, lease2 := ref(2)
	c.problem(422, "validation-error", "POST", "/tasks/v1/release", `{"worker_id":"spec-w7","items":[{"id":"`+id1+`"}]}`)
	c.problem(400, "malformed-request", "POST", "/tasks/v1/release", `{"worker_id":"spec-w7","items":{}}`)
	batch := c.expect(200, "POST", "/tasks/v1/release", `{"worker_id":"spec-w7","items":[`+
		`{"id":"`+id1+`","lease_id":"`+lease1+`"},{"id":"`+id2+`","lease_id":"`+uuid.NewString()+`"}]}`)["items"].([]any)
	require.Equal(t, "requeued", batch[0].(map[string]any)["outcome"])
	require.Equal(t, "error", batch[1].(map[string]any)["outcome"])
	c.expect(200, "POST", "/tasks/v1/release", `{"worker_id":"spec-w7","items":[{"id":"`+id2+`","lease_id":"`+lease2+`"}]}`)
	attempts := c.expect(200, "GET", "/tasks/v1/"+id2+"/attempts", "")["attempts"].([]any)
	require.Equal(t, "released", attempts[0].(map[string]any)["outcome"])
}
