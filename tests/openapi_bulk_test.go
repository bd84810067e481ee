package tests

import (
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testserver"
)

// exerciseBulk makes the calls of bulk actions, purges and the filtered
// listing for the spec test. A purge job is staged in the database (a real
// one needs more than 10,000 tasks; TestLargePurgeRunsAsAJob checks the
// 202 answer against the schema).
func exerciseBulk(t *testing.T, s *testserver.Server, c specCalls) {
	t.Helper()
	c.expect(201, "POST", "/tasks/v1", `{"queue":"spec-bulk","idempotency_key":"bulk-1"}`)
	c.expect(200, "GET", "/tasks/v1?queue=spec-bulk&text=BULK&error_contains=x&group_key=g&dead_reason=exhausted&status=DEAD"+
		"&created_after=2000-01-01T00:00:00Z&created_before=2999-01-01T00:00:00Z", "")
	dry := c.expect(200, "POST", "/tasks/v1/bulk/cancel", `{"queue":"spec-bulk","status":"PENDING,BLOCKED","dry_run":true}`)
	require.EqualValues(t, 1, dry["matched"])
	done := c.expect(200, "POST", "/tasks/v1/bulk/cancel", `{"queue":"spec-bulk","text":"bulk"}`)
	require.EqualValues(t, 1, done["changed"])
	done = c.expect(200, "POST", "/tasks/v1/bulk/retry", `{"queue":"spec-bulk","dead_reason":"cancelled","created_after":"2000-01-01T00:00:00Z"}`)
	require.EqualValues(t, 1, done["changed"])
	c.problem(422, "validation-error", "POST", "/tasks/v1/bulk/retry", `{"status":"PENDING"}`)
	c.problem(400, "malformed-request", "POST", "/tasks/v1/bulk/retry", `{"created_after":"now"}`)
	purged := c.expect(200, "POST", "/queues/v1/spec-bulk/purge", "")
	require.EqualValues(t, 1, purged["removed"])
	c.expect(200, "POST", "/queues/v1/spec-bulk/purge", `{"status":"DEAD","dry_run":true}`)
	c.problem(422, "validation-error", "POST", "/queues/v1/spec-bulk/purge", `{"status":"DONE"}`)

	id := uuid.NewString()
	stage(t, s, `INSERT INTO purge_jobs (id, queue, status, state, matched, removed, as_of, started_at, finished_at)
		VALUES ($1, 'spec-bulk', 'PENDING', 'done', 3, 3, now(), now(), now())`, id)
	job := c.expect(200, "GET", "/queues/v1/spec-bulk/purges/"+id, "")
	require.Equal(t, "done", job["state"])
	c.problem(404, "purge-job-not-found", "GET", "/queues/v1/spec-bulk/purges/"+uuid.NewString(), "")
}
