package tests

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"
)

// specCalls are TestOpenAPIResponsesMatchSpec's helpers: expect requires a
// status and returns the JSON body, problem also the problem type.
type specCalls struct {
	expect  func(wantStatus int, method, path, body string) map[string]any
	problem func(wantStatus int, slug, method, path, body string) map[string]any
}

// exerciseSchedulesAndSnooze makes the calls of recurring schedules, active-
// unique keys, retry policies and snoozes for the spec test, so that their
// real answers are validated against docs/openapi.yaml.
func exerciseSchedulesAndSnooze(t *testing.T, c specCalls) {
	t.Helper()
	// Unique keys and retry policies on submit.
	held := c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-u","unique_key":"u1","retry":{"base_seconds":0.5,"jitter":"full"}}`)
	require.Equal(t, "u1", held["unique_key"])
	require.Equal(t, map[string]any{"base_seconds": 0.5, "max_seconds": 300.0, "jitter": "full"}, held["retry"])
	require.Equal(t, held["id"], c.expect(200, "POST", "/tasks/v1", `{"queue":"spec-u","unique_key":"u1"}`)["id"])
	c.problem(422, "validation-error", "POST", "/tasks/v1", `{"queue":"spec-u","unique_key":""}`)
	c.problem(422, "validation-error", "POST", "/tasks/v1", `{"queue":"spec-u","retry":{"base_seconds":0}}`)

	// Snooze.
	c.expect(201, "POST", "/workers/v1/register", `{"id":"spec-w5","queues":["spec-u"]}`)
	claimed := c.expect(200, "POST", "/tasks/v1/claim", `{"worker_id":"spec-w5","queue":"spec-u"}`)["tasks"].([]any)
	require.Len(t, claimed, 1)
	task := claimed[0].(map[string]any)
	id, lease := task["id"].(string), task["lease_id"].(string)
	c.problem(422, "validation-error", "POST", "/tasks/v1/"+id+"/snooze", `{"worker_id":"spec-w5","lease_id":"`+lease+`","delay_seconds":0}`)
	c.problem(409, "lease-lost", "POST", "/tasks/v1/"+id+"/snooze", `{"worker_id":"spec-w5","lease_id":"`+uuid.NewString()+`","delay_seconds":5}`)
	c.problem(404, "task-not-found", "POST", "/tasks/v1/"+uuid.NewString()+"/snooze", `{"worker_id":"spec-w5","lease_id":"`+lease+`","delay_seconds":5}`)
	c.problem(400, "malformed-request", "POST", "/tasks/v1/"+id+"/snooze", `{"worker_id":"spec-w5","lease_id":"`+lease+`","delay_seconds":"soon"}`)
	snoozed := c.expect(200, "POST", "/tasks/v1/"+id+"/snooze", `{"worker_id":"spec-w5","lease_id":"`+lease+`","delay_seconds":60}`)
	require.Equal(t, "PENDING", snoozed["status"])
	require.EqualValues(t, 1, snoozed["snoozes"])

	// A retry refused because the unique key is taken.
	c.expect(200, "POST", "/tasks/v1/"+id+"/cancel", "")
	c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-u","unique_key":"u1"}`)
	c.problem(409, "unique-key-taken", "POST", "/tasks/v1/"+id+"/retry", "")

	// Schedules.
	created := c.expect(201, "POST", "/schedules/v1", `{"name":"spec-nightly","cron":"30 2 * * *","timezone":"Europe/Paris",`+
		`"task":{"queue":"spec-s","payload":{"full":true},"retry":{"base_seconds":2}},"overlap":"allow"}`)
	require.NotNil(t, created["next_run_at"])
	c.expect(201, "POST", "/schedules/v1", `{"name":"spec-paused","cron":"@every 1h","task":{"queue":"spec-s"},"paused":true}`)
	c.problem(409, "schedule-exists", "POST", "/schedules/v1", `{"name":"spec-nightly","cron":"@daily","task":{"queue":"spec-s"}}`)
	c.problem(422, "validation-error", "POST", "/schedules/v1", `{"name":"spec-x","cron":"61 * * * *","task":{"queue":"spec-s"}}`)
	c.problem(400, "malformed-request", "POST", "/schedules/v1", `{"name":"spec-x","cron":5}`)
	require.Len(t, c.expect(200, "GET", "/schedules/v1", "")["schedules"], 2)
	c.expect(200, "GET", "/schedules/v1/spec-nightly", "")
	c.problem(404, "schedule-not-found", "GET", "/schedules/v1/nope", "")
	resumed := c.expect(200, "PATCH", "/schedules/v1/spec-paused", `{"paused":false,"overlap":"skip"}`)
	require.NotNil(t, resumed["next_run_at"])
	c.problem(422, "validation-error", "PATCH", "/schedules/v1/spec-paused", `{"timezone":"Nowhere/Land"}`)
	c.problem(404, "schedule-not-found", "PATCH", "/schedules/v1/nope", `{"paused":true}`)
	c.expect(200, "DELETE", "/schedules/v1/spec-paused", "")
	c.problem(404, "schedule-not-found", "DELETE", "/schedules/v1/spec-paused", "")
}
