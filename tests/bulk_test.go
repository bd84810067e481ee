package tests

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/application"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// bulkAnswer is the answer of a bulk action or a purge.
type bulkAnswer struct {
	Matched int64  `json:"matched"`
	DryRun  bool   `json:"dry_run"`
	Changed *int64 `json:"changed"`
	Removed *int64 `json:"removed"`
	Skipped *int64 `json:"skipped"`
}

// purgeJob is the progress resource of a large purge.
type purgeJob struct {
	ID         string     `json:"id"`
	Queue      string     `json:"queue"`
	Status     string     `json:"status"`
	State      string     `json:"state"`
	Matched    int64      `json:"matched"`
	Removed    int64      `json:"removed"`
	StartedAt  time.Time  `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
}

// deadTask submits a task with one attempt to queue, claims it as w and
// fails it with msg: DEAD exhausted.
func deadTask(t *testing.T, c *testclient.Client, queue, w, msg string) testclient.Task {
	t.Helper()
	sub := c.Submit(jsonObj{"queue": queue, "max_attempts": 1})
	claimed := c.Claim(jsonObj{"worker_id": w, "queue": queue, "limit": 1})
	require.Len(t, claimed, 1)
	require.Equal(t, sub.ID, claimed[0].ID, "the queue must hold no other claimable task")
	return c.Fail(sub.ID, jsonObj{"worker_id": w, "lease_id": claimed[0].Lease(), "error": msg})
}

// statuses reads the status of each task by id.
func statuses(t *testing.T, s *testserver.Server) map[string]string {
	t.Helper()
	var rows []struct {
		ID     string `db:"id"`
		Status string `db:"status"`
	}
	require.NoError(t, s.DB.SelectContext(t.Context(), &rows, `SELECT id::text, status FROM tasks`))
	out := map[string]string{}
	for _, r := range rows {
		out[r.ID] = r.Status
	}
	return out
}

// countTypes counts the events of each type about id.
func countTypes(es []outboxEvent) map[string]int {
	out := map[string]int{}
	for _, e := range es {
		out[e.Type]++
	}
	return out
}

// auditEvents returns the outbox's events of type typ.
func auditEvents(t *testing.T, s *testserver.Server, typ event.Type) []event.Event {
	t.Helper()
	var out []event.Event
	for _, e := range outboxEvents(t, s) {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

// queueCountsOf waits until GET /queues/v1 shows want for queue.
func queueCountsOf(t *testing.T, c *testclient.Client, want testclient.QueueCounts) {
	t.Helper()
	var got testclient.QueueCounts
	c.QueuesEventually(10*time.Second, func(qs []testclient.Queue) bool {
		got = testclient.QueueCounts{Queue: want.Queue}
		for _, q := range qs {
			if q.Queue == want.Queue {
				got = q.QueueCounts
				got.ActiveWorkers = want.ActiveWorkers
			}
		}
		return got == want
	})
	require.Equal(t, want, got)
}

// A bulk retry and a bulk cancel by filter: a dry run counts and changes
// nothing; the real run changes exactly what matched, each task with its
// lifecycle event once, audited with the filter and the count; the
// statistics follow.
func TestBulkRetryAndCancelByFilter(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1"})
	var refused, other []testclient.Task
	for range 3 {
		refused = append(refused, deadTask(t, c, "bulk", "w1", "upstream Connection Refused"))
	}
	timeout := deadTask(t, c, "bulk", "w1", "timeout")
	other = append(other, deadTask(t, c, "bulk-other", "w1", "connection refused"))
	filter := jsonObj{"queue": "bulk", "status": "DEAD", "dead_reason": "exhausted", "error_contains": "REFUSED",
		"created_after": time.Now().Add(-time.Hour).Format(time.RFC3339)}

	var res bulkAnswer
	res = postBulk(t, c, "/tasks/v1/bulk/retry", withDryRun(filter))
	require.Equal(t, bulkAnswer{Matched: 3, DryRun: true}, res)
	before := statuses(t, s)
	for _, x := range append(refused, timeout, other[0]) {
		require.Equal(t, "DEAD", before[x.ID])
	}

	res = postBulk(t, c, "/tasks/v1/bulk/retry", filter)
	require.EqualValues(t, 3, res.Matched)
	require.EqualValues(t, 3, *res.Changed)
	require.EqualValues(t, 0, *res.Skipped)
	after := statuses(t, s)
	events := eventsByTask(t, s)
	for _, x := range refused {
		require.Equal(t, "PENDING", after[x.ID])
		require.Equal(t, 1, countTypes(events[x.ID])["task.retried"])
	}
	require.Equal(t, "DEAD", after[timeout.ID])
	require.Equal(t, "DEAD", after[other[0].ID])
	audits := auditEvents(t, s, event.AuditTasksBulkRetried)
	require.Len(t, audits, 1)
	require.EqualValues(t, 3, *audits[0].Matched)
	require.Equal(t, "REFUSED", audits[0].Filter["error_contains"])
	require.Equal(t, "bulk", audits[0].Filter["queue"])

	// Cancel: the PENDING tasks end DEAD cancelled, the RUNNING one is
	// asked to stop (once: a second run matches nothing).
	running := c.Claim(jsonObj{"worker_id": "w1", "queue": "bulk", "limit": 1})
	require.Len(t, running, 1)
	res = postBulk(t, c, "/tasks/v1/bulk/cancel", jsonObj{"queue": "bulk", "dry_run": true})
	require.Equal(t, bulkAnswer{Matched: 3, DryRun: true}, res)
	res = postBulk(t, c, "/tasks/v1/bulk/cancel", jsonObj{"queue": "bulk"})
	require.EqualValues(t, 3, *res.Changed)
	res = postBulk(t, c, "/tasks/v1/bulk/cancel", jsonObj{"queue": "bulk"})
	require.EqualValues(t, 0, res.Matched)
	events = eventsByTask(t, s)
	for _, x := range refused {
		got := c.Get(x.ID)
		if x.ID == running[0].ID {
			require.Equal(t, "RUNNING", got.Status)
			require.NotNil(t, got.CancelRequestedAt)
			require.Equal(t, 1, countTypes(events[x.ID])["task.cancel_requested"])
			continue
		}
		require.Equal(t, "DEAD", got.Status)
		require.Equal(t, "cancelled", got.Reason())
		require.Equal(t, 1, countTypes(events[x.ID])["task.dead_lettered"])
	}
	require.Len(t, auditEvents(t, s, event.AuditTasksBulkCancelled), 2)
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "bulk", Running: 1, Dead: 3})
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "bulk-other", Dead: 1})
}

// postBulk posts body to path and returns the answer (200).
func postBulk(t *testing.T, c *testclient.Client, path string, body any) bulkAnswer {
	t.Helper()
	var out bulkAnswer
	c.Do(http.MethodPost, path, body).Expect(t, http.StatusOK, &out)
	return out
}

func withDryRun(f jsonObj) jsonObj {
	out := jsonObj{"dry_run": true}
	for k, v := range f {
		out[k] = v
	}
	return out
}

// Filters are validated field by field: statuses the action cannot
// change, malformed times, texts too long or empty.
func TestBulkFilterValidation(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for _, tc := range []struct {
		path  string
		body  jsonObj
		field string
	}{
		{"/tasks/v1/bulk/retry", jsonObj{"status": "PENDING"}, "status"},
		{"/tasks/v1/bulk/cancel", jsonObj{"status": "DONE"}, "status"},
		{"/tasks/v1/bulk/cancel", jsonObj{"dead_reason": "exhausted"}, "dead_reason"},
		{"/tasks/v1/bulk/retry", jsonObj{"queue": ""}, "queue"},
		{"/tasks/v1/bulk/retry", jsonObj{"queue": "no spaces"}, "queue"},
		{"/tasks/v1/bulk/retry", jsonObj{"error_contains": strings.Repeat("x", 201)}, "error_contains"},
		{"/tasks/v1/bulk/retry", jsonObj{"group_key": strings.Repeat("g", 129)}, "group_key"},
		{"/tasks/v1/bulk/retry", jsonObj{"dead_reason": "bored"}, "dead_reason"},
		{"/queues/v1/q/purge", jsonObj{"status": "RUNNING"}, "status"},
	} {
		p := c.Do(http.MethodPost, tc.path, tc.body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{tc.field}, p.Fields(), "%s %v", tc.path, tc.body)
	}
	p := c.Do(http.MethodPost, "/tasks/v1/bulk/retry", jsonObj{"created_before": "yesterday"}).Problem(t, http.StatusBadRequest, "malformed-request")
	require.Equal(t, []string{"created_before"}, p.Fields())
	c.Do(http.MethodGet, "/tasks/v1?created_after=soon", nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	c.Do(http.MethodGet, "/queues/v1/q/purges/not-a-job", nil).Problem(t, http.StatusNotFound, "purge-job-not-found")
}

// A purge removes the queue's PENDING tasks (not RUNNING, not another
// queue's), each with one task.purged event, audited; a DEAD purge removes
// the dead letters; the statistics follow.
func TestPurgeQueue(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1"})
	dead := deadTask(t, c, "purged", "w1", "x")
	c.Submit(jsonObj{"queue": "purged"})
	running := c.Claim(jsonObj{"worker_id": "w1", "queue": "purged", "limit": 1})
	require.Len(t, running, 1)
	var pending []string
	for range 3 {
		pending = append(pending, c.Submit(jsonObj{"queue": "purged"}).ID)
	}
	kept := c.Submit(jsonObj{"queue": "purged-not"})
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "purged", Pending: 3, Running: 1, Dead: 1})

	var res bulkAnswer
	res = postBulk(t, c, "/queues/v1/purged/purge", jsonObj{"dry_run": true})
	require.Equal(t, bulkAnswer{Matched: 3, DryRun: true}, res)
	res = postBulk(t, c, "/queues/v1/purged/purge", nil)
	require.EqualValues(t, 3, *res.Removed)
	require.EqualValues(t, 0, *res.Skipped)
	left := statuses(t, s)
	require.Len(t, left, 3)
	require.Equal(t, "RUNNING", left[running[0].ID])
	require.Equal(t, "DEAD", left[dead.ID])
	require.Equal(t, "PENDING", left[kept.ID])
	events := eventsByTask(t, s)
	for _, id := range pending {
		require.Equal(t, []outboxEvent{{Type: "task.submitted", TaskID: id, To: "PENDING"}, {Type: "task.purged", TaskID: id, From: "PENDING"}}, events[id])
	}
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "purged", Running: 1, Dead: 1})

	res = postBulk(t, c, "/queues/v1/purged/purge", jsonObj{"status": "DEAD"})
	require.EqualValues(t, 1, *res.Removed)
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "purged", Running: 1})
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "purged-not", Pending: 1})
	audits := auditEvents(t, s, event.AuditQueuePurged)
	require.Len(t, audits, 2)
	require.Equal(t, "purged", audits[1].Queue)
	require.Equal(t, map[string]string{"queue": "purged", "status": "DEAD"}, audits[1].Filter)
	require.EqualValues(t, 1, *audits[1].Matched)
}

// A purge larger than the synchronous limit answers 202 with a progress
// resource, which the background service drives to done.
func TestLargePurgeRunsAsAJob(t *testing.T) {
	t.Parallel()
	s := testserver.StartOn(t, pgtest.NewDatabase(t), nil, fx.Decorate(func(c application.BulkConfig) application.BulkConfig {
		c.PurgeSyncLimit, c.BatchSize = 10, 7
		return c
	}))
	c := testclient.New(t, s.URL)
	batch := make([]jsonObj, 50)
	for i := range batch {
		batch[i] = jsonObj{"queue": "big"}
	}
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": batch}).Expect(t, http.StatusCreated, nil)

	var job purgeJob
	r := c.Do(http.MethodPost, "/queues/v1/big/purge", jsonObj{"status": "PENDING"}).Expect(t, http.StatusAccepted, &job)
	require.NoError(t, spectest.New(t, s.URL).CheckSchema("PurgeJob", r.Body), "the 202 answer is a PurgeJob")
	loc := r.Header.Get("Location")
	require.Equal(t, "/queues/v1/big/purges/"+job.ID, loc)
	require.EqualValues(t, 50, job.Matched)
	require.Equal(t, "big", job.Queue)
	require.Equal(t, "PENDING", job.Status)
	testclient.Poll(t, 20*time.Second, "the purge job to finish", func() bool {
		c.Do(http.MethodGet, loc, nil).Expect(t, http.StatusOK, &job)
		return job.State != "running"
	})
	require.Equal(t, "done", job.State)
	require.EqualValues(t, 50, job.Removed)
	require.NotNil(t, job.FinishedAt)
	require.Zero(t, countTasks(t, s, "big"))
	purged := 0
	for _, es := range eventsByTask(t, s) {
		purged += countTypes(es)["task.purged"]
	}
	require.Equal(t, 50, purged)
	c.Do(http.MethodGet, "/queues/v1/other/purges/"+job.ID, nil).Problem(t, http.StatusNotFound, "purge-job-not-found")
	queueCountsOf(t, c, testclient.QueueCounts{Queue: "big"})
}

// GET /tasks/v1 takes the filter and pages with a keyset cursor.
func TestListTasksByFilter(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1"})
	var want []string
	for range 5 {
		want = append(want, deadTask(t, c, "listed", "w1", "Disk FULL").ID)
	}
	deadTask(t, c, "listed", "w1", "timeout")
	c.Submit(jsonObj{"queue": "listed", "idempotency_key": "invoice-full-42"})

	var got []string
	q := url.Values{"queue": {"listed"}, "status": {"DEAD"}, "error_contains": {"full"}, "limit": {"2"}}
	for range 10 {
		page := c.List(q.Encode())
		for _, x := range page.Tasks {
			got = append(got, x.ID)
		}
		if page.NextCursor == nil {
			break
		}
		q.Set("cursor", *page.NextCursor)
	}
	for i, j := 0, len(want)-1; i < j; i, j = i+1, j-1 {
		want[i], want[j] = want[j], want[i]
	}
	require.Equal(t, want, got, "newest first, every page once")
	require.Len(t, c.List("queue=listed&text=FULL").Tasks, 6, "text searches errors and idempotency keys")
	require.Empty(t, c.List("queue=listed&created_before="+url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339))).Tasks)
}

// Bulk actions and purges need the admin scope (admin keys are never
// limited to queues; the rule for limited keys is checked in the
// application's tests); the audit events name the key and reach the event
// stream.
func TestBulkActionsNeedAdmin(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read", "produce", "work"}})
	admin, adminID := s.key(t, jsonObj{"scopes": []string{"admin"}})
	for _, path := range []string{"/tasks/v1/bulk/retry", "/tasks/v1/bulk/cancel", "/queues/v1/emails/purge"} {
		forbiddenProblem(t, reader.Do(http.MethodPost, path, jsonObj{"queue": "emails", "dry_run": true}))
		s.anon.Do(http.MethodPost, path, jsonObj{"dry_run": true}).Problem(t, http.StatusUnauthorized, "unauthorized")
	}
	forbiddenProblem(t, reader.Do(http.MethodGet, "/queues/v1/emails/purges/"+uuidZero, nil))

	s.admin.Submit(jsonObj{"queue": "emails"})
	s.admin.Submit(jsonObj{"queue": "sms"})
	res := postBulk(t, admin, "/tasks/v1/bulk/cancel", jsonObj{"dry_run": true})
	require.EqualValues(t, 2, res.Matched, "a filter without a queue covers every queue")
	res = postBulk(t, admin, "/tasks/v1/bulk/cancel", jsonObj{"queue": "emails"})
	require.EqualValues(t, 1, *res.Changed)
	audits := auditEvents(t, s.Server, event.AuditTasksBulkCancelled)
	require.Len(t, audits, 1)
	require.Equal(t, adminID, audits[0].KeyID)

	raw := readEventsUntil(t, admin, s.URL, "type=audit.*", func() {
		postBulk(t, admin, "/queues/v1/sms/purge", jsonObj{"status": "PENDING"})
	}, func(data string) bool { return strings.Contains(data, string(event.AuditQueuePurged)) })
	require.Contains(t, raw[len(raw)-1], `"matched":1`)
	require.Contains(t, raw[len(raw)-1], adminID)
}

const uuidZero = "00000000-0000-0000-0000-000000000000"
