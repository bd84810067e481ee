package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/client"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/spectest"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// Pipelines over HTTP: complete-and-enqueue, dependencies, attempt history
// and the statistics of BLOCKED tasks, on the real server and PostgreSQL.

// submitGraph posts a batch and requires 201.
func submitGraph(t *testing.T, c *testclient.Client, items ...jsonObj) ([]testclient.Task, []bool) {
	t.Helper()
	var out struct {
		Tasks   []testclient.Task `json:"tasks"`
		Created []bool            `json:"created"`
	}
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items}).Expect(t, http.StatusCreated, &out)
	require.Len(t, out.Tasks, len(items))
	return out.Tasks, out.Created
}

// claimQueue claims up to 1,000 tasks of queue for worker (registered here).
func claimQueue(t *testing.T, c *testclient.Client, worker, queue string) map[string]testclient.Task {
	t.Helper()
	c.Register(jsonObj{"id": worker})
	out := map[string]testclient.Task{}
	for _, tk := range c.Claim(jsonObj{"worker_id": worker, "queue": queue, "limit": 1000}) {
		out[tk.ID] = tk
	}
	return out
}

// holderBody is the body of a report by t's holder, with more fields.
func holderBody(tk testclient.Task, more jsonObj) jsonObj {
	body := jsonObj{"worker_id": tk.Holder(), "lease_id": tk.Lease()}
	for k, v := range more {
		body[k] = v
	}
	return body
}

// outboxEvent is one task event as the outbox holds it.
type outboxEvent struct {
	Type   string `json:"type"`
	TaskID string `json:"task_id"`
	From   string `json:"from"`
	To     string `json:"to"`
	Reason string `json:"reason"`
}

// taskEvents reads every outbox event about id, in commit order.
func taskEvents(t *testing.T, s *testserver.Server, id string) []outboxEvent {
	t.Helper()
	return eventsByTask(t, s)[id]
}

// eventsByTask reads every task event in the outbox, in commit order, by
// task id.
func eventsByTask(t *testing.T, s *testserver.Server) map[string][]outboxEvent {
	t.Helper()
	var payloads [][]byte
	require.NoError(t, s.DB.SelectContext(t.Context(), &payloads,
		`SELECT payload::text::bytea FROM watermill_taskmaster_events ORDER BY transaction_id, "offset"`))
	out := map[string][]outboxEvent{}
	for _, p := range payloads {
		var env struct {
			Events []outboxEvent `json:"events"`
		}
		require.NoError(t, json.Unmarshal(p, &env))
		for _, e := range env.Events {
			if e.TaskID != "" {
				out[e.TaskID] = append(out[e.TaskID], e)
			}
		}
	}
	return out
}

func countTasks(t *testing.T, s *testserver.Server, queue string) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB.GetContext(t.Context(), &n, `SELECT count(*) FROM tasks WHERE queue = $1`, queue))
	return n
}

// A complete with enqueue creates the next stage's tasks in its
// transaction and answers with them; a repeated idempotency key answers
// with the task that holds it; once the task is DONE, repeating the report
// creates nothing.
func TestPipelineCompleteEnqueuesTheNextStage(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	stage1, stage2 := "s1-"+uuid.NewString(), "s2-"+uuid.NewString()
	a := submitAndClaim(t, c, "w", jsonObj{"queue": stage1, "payload": 1})
	enqueue := []jsonObj{
		{"queue": stage2, "payload": jsonObj{"from": a.ID, "n": 1}, "idempotency_key": a.ID + "/1"},
		{"queue": stage2, "payload": jsonObj{"from": a.ID, "n": 2}, "priority": 5, "tags": []string{"gpu"}},
	}
	var done testclient.Task
	c.Do(http.MethodPost, reportPath(a.ID, "complete"), holderBody(a, jsonObj{"result": "ok", "enqueue": enqueue})).
		Expect(t, http.StatusOK, &done)
	require.Equal(t, "DONE", done.Status)
	require.Len(t, done.Enqueued, 2)
	for i, e := range done.Enqueued {
		require.Equal(t, stage2, e.Queue)
		require.Equal(t, "PENDING", e.Status)
		require.Equal(t, []string{}, c.Describe(e.ID).DependsOn)
		require.Equal(t, e, c.Get(e.ID), "enqueued[%d] is stored as answered", i)
	}
	require.Equal(t, 5, done.Enqueued[1].Priority)
	require.Equal(t, []string{"gpu"}, done.Enqueued[1].Tags)
	require.Equal(t, 2, countTasks(t, s, stage2))
	// One message holds the completion and the submissions, in that order.
	msgs := 0
	var payloads []string
	require.NoError(t, s.DB.SelectContext(t.Context(), &payloads, `SELECT payload::text FROM watermill_taskmaster_events`))
	for _, p := range payloads {
		if strings.Contains(p, a.ID) && strings.Contains(p, "task.completed") {
			msgs++
			require.Less(t, strings.Index(p, "task.completed"), strings.Index(p, "task.submitted"), p)
			require.Equal(t, 2, strings.Count(p, "task.submitted"), p)
		}
	}
	require.Equal(t, 1, msgs)

	// The report repeated (its answer lost): the task is DONE, nothing more.
	r := c.Do(http.MethodPost, reportPath(a.ID, "complete"), holderBody(a, jsonObj{"enqueue": enqueue}))
	require.Equal(t, "DONE", r.Problem(t, http.StatusConflict, "invalid-transition").CurrentStatus)
	require.Equal(t, 2, countTasks(t, s, stage2))

	// Another task enqueuing the same key gets the existing task back.
	b := submitAndClaim(t, c, "w", jsonObj{"queue": stage1})
	var other testclient.Task
	c.Do(http.MethodPost, reportPath(b.ID, "complete"), holderBody(b, jsonObj{"enqueue": enqueue[:1]})).
		Expect(t, http.StatusOK, &other)
	require.Equal(t, done.Enqueued[0].ID, other.Enqueued[0].ID)
	require.Equal(t, 2, countTasks(t, s, stage2))

	// Without enqueue the answer is the task alone; with an empty one,
	// enqueued is an empty list.
	plain := submitAndClaim(t, c, "w", jsonObj{"queue": stage1})
	r = c.Do(http.MethodPost, reportPath(plain.ID, "complete"), holderBody(plain, nil)).Expect(t, http.StatusOK, nil)
	require.NotContains(t, string(r.Body), `"enqueued"`)
	empty := submitAndClaim(t, c, "w", jsonObj{"queue": stage1})
	r = c.Do(http.MethodPost, reportPath(empty.ID, "complete"), holderBody(empty, jsonObj{"enqueue": []jsonObj{}})).Expect(t, http.StatusOK, nil)
	require.Contains(t, string(r.Body), `"enqueued":[]`)
}

// A holder whose lease was taken back enqueues nothing: the report is
// refused (409) and no task is created, in its queue or elsewhere.
func TestPipelineStaleHoldersCompleteEnqueuesNothing(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, func(cfg *app.Config) { cfg.LeaseReaperInterval = 50 * time.Millisecond })
	stage1, stage2 := "s1-"+uuid.NewString(), "s2-"+uuid.NewString()
	c.Register(jsonObj{"id": "slow"})
	c.Register(jsonObj{"id": "fast"})
	c.Submit(jsonObj{"queue": stage1, "max_attempts": 3})
	stale := c.Claim(jsonObj{"worker_id": "slow", "queue": stage1, "lease_seconds": 1})[0]
	var fresh testclient.Task
	testclient.Poll(t, 30*time.Second, "the lease to run out and the task to be claimed again", func() bool {
		got := c.Claim(jsonObj{"worker_id": "fast", "queue": stage1})
		if len(got) == 1 {
			fresh = got[0]
		}
		return len(got) == 1
	})
	enqueue := []jsonObj{{"queue": stage2, "payload": "next"}}
	r := c.Do(http.MethodPost, reportPath(stale.ID, "complete"), holderBody(stale, jsonObj{"enqueue": enqueue}))
	require.Equal(t, "RUNNING", r.Problem(t, http.StatusConflict, "lease-lost").CurrentStatus)
	require.Equal(t, 0, countTasks(t, s, stage2))

	var done testclient.Task
	c.Do(http.MethodPost, reportPath(fresh.ID, "complete"), holderBody(fresh, jsonObj{"enqueue": enqueue})).Expect(t, http.StatusOK, &done)
	require.Len(t, done.Enqueued, 1)
	require.Equal(t, 1, countTasks(t, s, stage2))
}

// Enqueued bodies are checked like submissions, all-or-nothing: a 422 names
// enqueue[i].field and nothing changes; the batch complete refuses only the
// item, naming items[i].enqueue[j].field; enqueues are capped at 1,000 per
// request, a batch's items together included.
func TestPipelineEnqueueValidation(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	queue := "v-" + uuid.NewString()
	held := submitAndClaim(t, c, "w", jsonObj{"queue": queue})
	bad := []jsonObj{
		{"queue": queue}, {"queue": queue}, {"queue": queue},
		{"queue": "no spaces"},
		{"queue": queue, "max_attempts": 0},
		{"queue": queue, "payload": json.RawMessage(`"\u0000"`)},
		{"queue": queue, "deadline": "2000-01-01T00:00:00Z"},
	}
	fields := func(r *testclient.Response) []string {
		return r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields()
	}
	r := c.Do(http.MethodPost, reportPath(held.ID, "complete"), holderBody(held, jsonObj{"enqueue": bad[:5]}))
	require.Equal(t, []string{"enqueue[3].queue", "enqueue[4].max_attempts"}, fields(r))
	// What storage cannot hold is found once the bodies are well formed.
	r = c.Do(http.MethodPost, reportPath(held.ID, "complete"), holderBody(held, jsonObj{"enqueue": bad[5:6]}))
	require.Equal(t, []string{"enqueue[0].payload"}, fields(r))
	// A deadline already past is known at the database time.
	r = c.Do(http.MethodPost, reportPath(held.ID, "complete"), holderBody(held, jsonObj{"enqueue": bad[6:]}))
	require.Equal(t, []string{"enqueue[0].deadline"}, fields(r))
	many := make([]jsonObj, 1001)
	for i := range many {
		many[i] = jsonObj{"queue": queue}
	}
	r = c.Do(http.MethodPost, reportPath(held.ID, "complete"), holderBody(held, jsonObj{"enqueue": many}))
	require.Equal(t, []string{"enqueue"}, fields(r))
	require.Equal(t, "RUNNING", c.Get(held.ID).Status, "nothing changed")
	require.Equal(t, 1, countTasks(t, s, queue))

	// Batch complete: items 0 and 2 go on, item 1 fails on its own.
	more := claimQueue(t, c, "w", queue)
	c.Submit(jsonObj{"queue": queue})
	c.Submit(jsonObj{"queue": queue})
	for id, tk := range claimQueue(t, c, "w", queue) {
		more[id] = tk
	}
	var items []jsonObj
	var order []testclient.Task
	for _, tk := range more {
		order = append(order, tk)
	}
	order = append(order, held)
	for i, tk := range order[:3] {
		item := jsonObj{"id": tk.ID, "lease_id": tk.Lease(), "enqueue": []jsonObj{{"queue": queue, "payload": i}}}
		if i == 1 {
			item["enqueue"] = []jsonObj{{"queue": queue, "payload": json.RawMessage(`1e1000000`)}}
		}
		items = append(items, item)
	}
	var out struct {
		Items []struct {
			ID       string              `json:"id"`
			Outcome  string              `json:"outcome"`
			Problem  *testclient.Problem `json:"problem"`
			Enqueued *[]testclient.Task  `json:"enqueued"`
			Task     *testclient.Task    `json:"task"`
		} `json:"items"`
	}
	c.Do(http.MethodPost, "/tasks/v1/complete", jsonObj{"worker_id": "w", "items": items}).Expect(t, http.StatusOK, &out)
	require.Equal(t, "done", out.Items[0].Outcome)
	require.Len(t, *out.Items[0].Enqueued, 1)
	require.Equal(t, "error", out.Items[1].Outcome)
	require.Equal(t, 422, out.Items[1].Problem.Status)
	require.Equal(t, []string{"items[1].enqueue[0].payload"}, out.Items[1].Problem.Fields())
	require.Nil(t, out.Items[1].Enqueued)
	require.Equal(t, "RUNNING", c.Get(order[1].ID).Status)
	require.Equal(t, "done", out.Items[2].Outcome)
	require.Len(t, *out.Items[2].Enqueued, 1)
	require.Equal(t, 5, countTasks(t, s, queue))

	// More than 1,000 across the items: the whole request is refused.
	over := []jsonObj{
		{"id": order[1].ID, "lease_id": order[1].Lease(), "enqueue": many[:600]},
		{"id": held.ID, "lease_id": held.Lease(), "enqueue": many[:401]},
	}
	r = c.Do(http.MethodPost, "/tasks/v1/complete", jsonObj{"worker_id": "w", "items": over})
	require.Equal(t, []string{"items"}, fields(r))
	// A failure carries no enqueue.
	r = c.Do(http.MethodPost, "/tasks/v1/fail", jsonObj{"worker_id": "w", "items": []jsonObj{
		{"id": held.ID, "lease_id": held.Lease(), "enqueue": []jsonObj{}},
	}})
	require.Equal(t, []string{"items[0].enqueue"}, fields(r))
	require.Equal(t, 5, countTasks(t, s, queue))
}

// Enqueuing is producing: a key needs the produce scope as well as work,
// and may enqueue only into its queues.
func TestPipelineEnqueueNeedsProduceOnTheQueue(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	workOnly, _ := s.key(t, jsonObj{"scopes": []string{"work"}})
	pipeline, _ := s.key(t, jsonObj{"scopes": []string{"work", "produce"}, "queues": []string{"stage-*"}})
	s.admin.Submit(jsonObj{"queue": "stage-1"})
	s.admin.Submit(jsonObj{"queue": "stage-1"})
	workOnly.Register(jsonObj{"id": "wo", "queues": []string{"stage-1"}})
	pipeline.Register(jsonObj{"id": "pl", "queues": []string{"stage-1"}})
	a := workOnly.Claim(jsonObj{"worker_id": "wo"})[0]
	b := pipeline.Claim(jsonObj{"worker_id": "pl"})[0]

	r := workOnly.Do(http.MethodPost, reportPath(a.ID, "complete"), holderBody(a, jsonObj{"enqueue": []jsonObj{{"queue": "stage-2"}}}))
	p := forbiddenProblem(t, r)
	require.Equal(t, []any{"produce"}, p["required_scopes"])
	r = pipeline.Do(http.MethodPost, reportPath(b.ID, "complete"), holderBody(b, jsonObj{"enqueue": []jsonObj{{"queue": "other"}}}))
	require.Equal(t, "other", forbiddenProblem(t, r)["queue"])
	r = pipeline.Do(http.MethodPost, "/tasks/v1/complete", jsonObj{"worker_id": "pl", "items": []jsonObj{
		{"id": b.ID, "lease_id": b.Lease(), "enqueue": []jsonObj{{"queue": "stage-2"}, {"queue": "other"}}},
	}})
	require.Equal(t, "other", forbiddenProblem(t, r)["queue"])
	require.Equal(t, 0, countTasks(t, s.Server, "stage-2"))
	require.Equal(t, 0, countTasks(t, s.Server, "other"))

	// Allowed: work and produce on stage-*.
	var done testclient.Task
	pipeline.Do(http.MethodPost, reportPath(b.ID, "complete"), holderBody(b, jsonObj{"enqueue": []jsonObj{{"queue": "stage-2"}}})).
		Expect(t, http.StatusOK, &done)
	require.Len(t, done.Enqueued, 1)
	// A plain complete still needs work only.
	workOnly.Do(http.MethodPost, reportPath(a.ID, "complete"), holderBody(a, nil)).Expect(t, http.StatusOK, nil)
}

// A batch may name earlier items (ref) and existing tasks (id) in
// depends_on: such a task is BLOCKED, never claimed, until every parent is
// DONE; GET shows depends_on and blocked_by; a worker reads its parents'
// results in order; a parent already DONE counts as done.
func TestDependenciesBlockUntilEveryParentIsDone(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	queue := "d-" + uuid.NewString()
	old := submitAndClaim(t, c, "w", jsonObj{"queue": queue})
	c.Complete(old.ID, holderBody(old, jsonObj{"result": "old"}))

	ts, created := submitGraph(t, c,
		jsonObj{"queue": queue, "ref": "fetch", "payload": "f"},
		jsonObj{"queue": queue, "ref": "parse", "payload": "p"},
		jsonObj{"queue": queue, "ref": "join", "depends_on": []string{"parse", old.ID, "fetch"}},
		jsonObj{"queue": queue, "depends_on": []string{"join"}},
	)
	require.Equal(t, []bool{true, true, true, true}, created)
	join, last := ts[2], ts[3]
	require.Equal(t, "BLOCKED", join.Status)
	require.Equal(t, "BLOCKED", last.Status)

	got := c.Describe(join.ID)
	require.Equal(t, []string{ts[1].ID, old.ID, ts[0].ID}, got.DependsOn)
	require.Equal(t, []string{ts[1].ID, ts[0].ID}, got.BlockedBy)
	require.Equal(t, []string{}, c.Describe(ts[0].ID).DependsOn)

	held := claimQueue(t, c, "w", queue)
	require.Len(t, held, 2, "BLOCKED tasks are never claimed")
	c.Complete(ts[1].ID, holderBody(held[ts[1].ID], jsonObj{"result": "parsed"}))
	require.Equal(t, []string{ts[0].ID}, c.Describe(join.ID).BlockedBy)
	require.Empty(t, claimQueue(t, c, "w", queue))
	c.Complete(ts[0].ID, holderBody(held[ts[0].ID], jsonObj{"result": "fetched"}))

	got = c.Describe(join.ID)
	require.Equal(t, "PENDING", got.Status)
	require.Equal(t, []string{}, got.BlockedBy)
	require.Equal(t, "BLOCKED", c.Get(last.ID).Status)
	claimed := claimQueue(t, c, "w", queue)
	require.Len(t, claimed, 1)
	var parents struct {
		Parents []testclient.Task `json:"parents"`
	}
	c.Do(http.MethodGet, "/tasks/v1/"+join.ID+"/parents", nil).Expect(t, http.StatusOK, &parents)
	var results []string
	for _, p := range parents.Parents {
		results = append(results, string(p.Result))
	}
	require.Equal(t, []string{`"parsed"`, `"old"`, `"fetched"`}, results)
	require.Equal(t, []outboxEvent{
		{"task.submitted", join.ID, "", "BLOCKED", ""},
		{"task.unblocked", join.ID, "BLOCKED", "PENDING", "dependencies_done"},
		{"task.claimed", join.ID, "PENDING", "RUNNING", ""},
	}, taskEvents(t, s, join.ID))
	c.Do(http.MethodGet, "/tasks/v1/"+uuid.NewString()+"/parents", nil).Problem(t, http.StatusNotFound, "task-not-found")

	// Every parent DONE already: PENDING at once.
	ts, _ = submitGraph(t, c, jsonObj{"queue": queue, "depends_on": []string{old.ID}})
	require.Equal(t, "PENDING", ts[0].Status)
}

// A cycle, a ref that names nothing, an id that names no task (or one the
// key may not see) are 422s naming the entry; nothing is created.
func TestDependenciesRefuseCyclesAndUnknownParents(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	mine, _ := s.key(t, jsonObj{"scopes": []string{"produce"}, "queues": []string{"mine"}})
	theirs := s.admin.Submit(jsonObj{"queue": "theirs"})
	visible := s.admin.Submit(jsonObj{"queue": "mine"})
	fields := func(items ...jsonObj) []string {
		r := mine.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items})
		return r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields()
	}
	require.Equal(t, []string{"tasks[0].depends_on[0]"}, fields(
		jsonObj{"queue": "mine", "ref": "a", "depends_on": []string{"a"}}))
	require.Equal(t, []string{"tasks[0].depends_on[0]"}, fields(
		jsonObj{"queue": "mine", "ref": "a", "depends_on": []string{"b"}},
		jsonObj{"queue": "mine", "ref": "b", "depends_on": []string{"a"}}))
	require.Equal(t, []string{"tasks[1].depends_on[1]"}, fields(
		jsonObj{"queue": "mine", "ref": "a"},
		jsonObj{"queue": "mine", "depends_on": []string{"a", "nope", visible.ID}}))
	// Ids are looked up once the batch is well formed: one that names no
	// task, and one in a queue the key may not see, alike.
	require.Equal(t, []string{"tasks[1].depends_on[1]", "tasks[1].depends_on[2]"}, fields(
		jsonObj{"queue": "mine", "ref": "a"},
		jsonObj{"queue": "mine", "depends_on": []string{"a", uuid.NewString(), theirs.ID, visible.ID}}))
	require.Equal(t, []string{"tasks[1].ref", "tasks[2].ref"}, fields(
		jsonObj{"queue": "mine", "ref": "a"},
		jsonObj{"queue": "mine", "ref": "a"},
		jsonObj{"queue": "mine", "ref": uuid.NewString()}))
	var n int
	require.NoError(t, s.DB.GetContext(t.Context(), &n, `SELECT count(*) FROM tasks`))
	require.Equal(t, 2, n, "nothing was created")
	// The single submission knows no dependencies.
	mine.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "mine", "depends_on": []string{visible.ID}}).
		Problem(t, http.StatusBadRequest, "malformed-request")
}

// A parent that ends DEAD (here: a non-retryable failure; also an operator's
// cancel of a BLOCKED task) ends its dependants DEAD dependency_failed,
// recursively, each with its own event; a dependant submitted after its
// parent died starts DEAD the same way.
func TestDependenciesFailureCascades(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	c := s.admin
	queue := "f-" + uuid.NewString()
	ts, _ := submitGraph(t, c,
		jsonObj{"queue": queue, "ref": "root"},
		jsonObj{"queue": queue, "ref": "left", "depends_on": []string{"root"}},
		jsonObj{"queue": queue, "ref": "right", "depends_on": []string{"root"}},
		jsonObj{"queue": queue, "ref": "both", "depends_on": []string{"left", "right"}},
		jsonObj{"queue": queue, "ref": "after", "depends_on": []string{"both"}},
		jsonObj{"queue": queue, "ref": "free"},
		jsonObj{"queue": queue, "depends_on": []string{"free"}},
	)
	root := claimQueue(t, c, "w", queue)[ts[0].ID]
	c.Fail(root.ID, holderBody(root, jsonObj{"error": "bad input", "retryable": false}))
	for _, i := range []int{1, 2, 3, 4} {
		got := c.Get(ts[i].ID)
		require.Equal(t, "DEAD", got.Status, "item %d", i)
		require.Equal(t, "dependency_failed", got.Reason(), "item %d", i)
		require.Equal(t, []outboxEvent{
			{"task.submitted", ts[i].ID, "", "BLOCKED", ""},
			{"task.dead_lettered", ts[i].ID, "BLOCKED", "DEAD", "dependency_failed"},
		}, taskEvents(t, s.Server, ts[i].ID), "item %d", i)
	}
	require.Equal(t, "BLOCKED", c.Get(ts[6].ID).Status, "not downstream of root")

	// Cancelling a BLOCKED task ends it (cancelled) and its dependants.
	c.Do(http.MethodPost, "/tasks/v1/"+ts[6].ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	require.Equal(t, "cancelled", c.Get(ts[6].ID).Reason())

	// Submitted after its parent died: DEAD at once, with both events.
	late, created := submitGraph(t, c, jsonObj{"queue": queue, "depends_on": []string{root.ID}})
	require.True(t, created[0])
	require.Equal(t, "DEAD", late[0].Status)
	require.Equal(t, "dependency_failed", late[0].Reason())
	require.Equal(t, []outboxEvent{
		{"task.submitted", late[0].ID, "", "BLOCKED", ""},
		{"task.dead_lettered", late[0].ID, "BLOCKED", "DEAD", "dependency_failed"},
	}, taskEvents(t, s.Server, late[0].ID))

	// An operator retrying the root does not revive its dependants.
	c.Do(http.MethodPost, "/tasks/v1/"+root.ID+"/retry", nil).Expect(t, http.StatusOK, nil)
	again := claimQueue(t, c, "w", queue)[root.ID]
	c.Complete(root.ID, holderBody(again, nil))
	require.Equal(t, "DEAD", c.Get(ts[1].ID).Status)
}

// The fan-in of 1,000 parents completed concurrently by 8 workers unblocks
// the child exactly once: one task.unblocked, PENDING once, claimed once.
func TestDependenciesFanInOfAThousandParents(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	queue, sink := "fan-"+uuid.NewString(), "sink-"+uuid.NewString()
	const parents, workers = 1000, 8
	items := make([]jsonObj, parents)
	for i := range items {
		items[i] = jsonObj{"queue": queue, "payload": i}
	}
	ts, _ := submitGraph(t, c, items...)
	ids := make([]string, parents)
	for i, tk := range ts {
		ids[i] = tk.ID
	}
	child, _ := submitGraph(t, c, jsonObj{"queue": sink, "depends_on": ids})
	require.Equal(t, "BLOCKED", child[0].Status)

	var (
		wg        sync.WaitGroup
		mu        sync.Mutex
		completed int
		failures  []string
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			worker := fmt.Sprintf("fan-%d", w)
			if r, err := c.Send(http.MethodPost, "/workers/v1/register", jsonObj{"id": worker}, nil); err != nil || r.Status >= 300 {
				mu.Lock()
				failures = append(failures, fmt.Sprint("register: ", err, r))
				mu.Unlock()
				return
			}
			for {
				r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": worker, "queue": queue, "limit": 10}, nil)
				var got struct {
					Tasks []testclient.Task `json:"tasks"`
				}
				if err == nil && r.Status == http.StatusOK {
					err = json.Unmarshal(r.Body, &got)
				}
				if err != nil || r.Status != http.StatusOK {
					mu.Lock()
					failures = append(failures, fmt.Sprint("claim: ", err, r))
					mu.Unlock()
					return
				}
				if len(got.Tasks) == 0 {
					return
				}
				for _, tk := range got.Tasks {
					r, err := c.Send(http.MethodPost, reportPath(tk.ID, "complete"), holderBody(tk, nil), nil)
					mu.Lock()
					if err != nil || r.Status != http.StatusOK {
						failures = append(failures, fmt.Sprint("complete: ", err, r))
					} else {
						completed++
					}
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	require.Empty(t, failures)
	require.Equal(t, parents, completed)

	got := c.Describe(child[0].ID)
	require.Equal(t, "PENDING", got.Status)
	require.Empty(t, got.BlockedBy)
	require.Len(t, got.DependsOn, parents)
	require.Equal(t, []outboxEvent{
		{"task.submitted", child[0].ID, "", "BLOCKED", ""},
		{"task.unblocked", child[0].ID, "BLOCKED", "PENDING", "dependencies_done"},
	}, taskEvents(t, s, child[0].ID))
	require.Len(t, claimQueue(t, c, "w", sink), 1)
}

// GET /tasks/v1/{id}/attempts lists every attempt: after a retried failure
// and a lease expiry, the running third one last (from the task itself);
// once it completes, three ended ones.
func TestAttemptHistoryAfterRetriesAndALeaseExpiry(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) {
		cfg.LeaseReaperInterval = 50 * time.Millisecond
		cfg.App.Backoff.Base = time.Millisecond
	})
	queue := "h-" + uuid.NewString()
	c.Register(jsonObj{"id": "w1"})
	c.Register(jsonObj{"id": "w2"})
	submitted := c.Submit(jsonObj{"queue": queue, "max_attempts": 3})
	claim := func(worker string, lease int) testclient.Task {
		var got []testclient.Task
		testclient.Poll(t, 30*time.Second, "a claim", func() bool {
			got = c.Claim(jsonObj{"worker_id": worker, "queue": queue, "lease_seconds": lease})
			return len(got) == 1
		})
		return got[0]
	}
	type attempt struct {
		Attempt    int        `json:"attempt"`
		WorkerID   string     `json:"worker_id"`
		ClaimedAt  time.Time  `json:"claimed_at"`
		FinishedAt *time.Time `json:"finished_at"`
		Outcome    *string    `json:"outcome"`
		Error      *string    `json:"error"`
	}
	attempts := func() []attempt {
		var out struct {
			Attempts []attempt `json:"attempts"`
		}
		c.Do(http.MethodGet, "/tasks/v1/"+submitted.ID+"/attempts", nil).Expect(t, http.StatusOK, &out)
		return out.Attempts
	}
	require.Empty(t, attempts())

	first := claim("w1", 60)
	c.Fail(first.ID, holderBody(first, jsonObj{"error": "timeout"}))
	second := claim("w2", 1) // its lease runs out
	third := claim("w1", 60)
	require.Equal(t, 3, third.Attempts)

	got := attempts()
	require.Len(t, got, 3)
	str := func(s *string) string {
		if s == nil {
			return "<null>"
		}
		return *s
	}
	summary := func(as []attempt) []string {
		var out []string
		for _, a := range as {
			out = append(out, fmt.Sprintf("%d %s %s %s", a.Attempt, a.WorkerID, str(a.Outcome), str(a.Error)))
		}
		return out
	}
	require.Equal(t, []string{"1 w1 failed timeout", "2 w2 lease_expired <null>", "3 w1 <null> <null>"}, summary(got))
	require.Nil(t, got[2].FinishedAt, "the running attempt has not finished")
	require.Equal(t, *second.ClaimedAt, got[1].ClaimedAt)
	require.True(t, got[1].FinishedAt.Sub(got[1].ClaimedAt) >= time.Second, "it ended when its 1 s lease ran out")

	c.Complete(third.ID, holderBody(third, nil))
	require.Equal(t, []string{"1 w1 failed timeout", "2 w2 lease_expired <null>", "3 w1 completed <null>"}, summary(attempts()))
	c.Do(http.MethodGet, "/tasks/v1/"+uuid.NewString()+"/attempts", nil).Problem(t, http.StatusNotFound, "task-not-found")
}

// GET /queues/v1 and the metrics count BLOCKED tasks; unblocking is not a
// requeue.
func TestStatisticsCountBlockedTasks(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	queue := "st-" + uuid.NewString()
	ts, _ := submitGraph(t, c,
		jsonObj{"queue": queue, "ref": "a"},
		jsonObj{"queue": queue, "depends_on": []string{"a"}},
		jsonObj{"queue": queue, "depends_on": []string{"a"}},
	)
	counts := func(qs []testclient.Queue) testclient.QueueCounts {
		for _, q := range qs {
			if q.Queue == queue {
				return q.QueueCounts
			}
		}
		return testclient.QueueCounts{}
	}
	qs := c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool { return counts(qs).Blocked == 2 })
	require.Equal(t, testclient.QueueCounts{Queue: queue, Pending: 1, Blocked: 2}, counts(qs))
	metrics := func() string {
		r := c.Do(http.MethodGet, "/metrics", nil)
		require.Equal(t, http.StatusOK, r.Status)
		return string(r.Body)
	}
	require.Contains(t, metrics(), fmt.Sprintf(`taskmaster_tasks{queue=%q,status="BLOCKED"} 2`, queue))

	a := claimQueue(t, c, "w", queue)[ts[0].ID]
	c.Complete(a.ID, holderBody(a, nil))
	qs = c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool { return counts(qs).Pending == 2 })
	require.Equal(t, testclient.QueueCounts{Queue: queue, Pending: 2, Done: 1, ActiveWorkers: 1}, counts(qs))
	for _, q := range qs {
		if q.Queue == queue {
			require.Empty(t, q.Totals.Requeued, "an unblocked task goes forward, not back")
			require.Equal(t, int64(3), q.Totals.Submitted)
		}
	}
	require.Contains(t, metrics(), fmt.Sprintf(`taskmaster_tasks{queue=%q,status="BLOCKED"} 0`, queue))
}

// The SDK speaks pipelines, and what it sends and reads matches the
// OpenAPI document: a graph in SubmitBatch, Get's depends_on and
// blocked_by, Complete and CompleteBatch with Enqueue, Parents, Attempts,
// the blocked count.
func TestSDKPipelines(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	v := spectest.New(t, s.URL)
	c := newSDK(t, s.URL, v.Transport(http.DefaultTransport))
	ctx := context.Background()
	queue, next := "sdk-p-"+uuid.NewString()[:8], "sdk-n-"+uuid.NewString()[:8]

	_, err := c.Submit(ctx, client.SubmitParams{Queue: queue, DependsOn: []string{uuid.NewString()}})
	require.ErrorContains(t, err, "SubmitBatch")
	ts, created, err := c.SubmitBatch(ctx, []client.SubmitParams{
		{Queue: queue, Ref: "a", Payload: 1},
		{Queue: queue, Ref: "b", Payload: 2},
		{Queue: queue, DependsOn: []string{"a", "b"}},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true}, created)
	require.Equal(t, client.StatusBlocked, ts[2].Status)
	child, err := c.Get(ctx, ts[2].ID)
	require.NoError(t, err)
	require.Equal(t, []string{ts[0].ID, ts[1].ID}, child.DependsOn)
	require.Equal(t, []string{ts[0].ID, ts[1].ID}, child.BlockedBy)
	_, _, err = c.SubmitBatch(ctx, []client.SubmitParams{{Queue: queue, Ref: "x", DependsOn: []string{"x"}}})
	require.True(t, client.IsValidation(err), "%v", err)

	_, err = c.Register(ctx, client.RegisterParams{ID: "sdk-w", Queues: []string{queue, next}})
	require.NoError(t, err)
	held, err := c.Claim(ctx, client.ClaimParams{WorkerID: "sdk-w", Queue: queue, Limit: 10})
	require.NoError(t, err)
	require.Len(t, held, 2, "the BLOCKED task is not claimed")
	byID := map[string]client.Task{held[0].ID: held[0], held[1].ID: held[1]}
	a, b := byID[ts[0].ID], byID[ts[1].ID]

	// An invalid enqueue refuses the whole complete.
	_, err = c.Complete(ctx, a.ID, client.CompleteParams{WorkerID: "sdk-w", LeaseID: a.LeaseID,
		Enqueue: []client.SubmitParams{{Queue: next}, {Queue: ""}}})
	require.True(t, client.IsValidation(err), "%v", err)
	done, err := c.Complete(ctx, a.ID, client.CompleteParams{WorkerID: "sdk-w", LeaseID: a.LeaseID, Result: "A",
		Enqueue: []client.SubmitParams{{Queue: next, Payload: "from a"}}})
	require.NoError(t, err)
	require.Equal(t, client.StatusDone, done.Status)
	require.Len(t, done.Enqueued, 1)
	require.Equal(t, next, done.Enqueued[0].Queue)
	outcomes, err := c.CompleteBatch(ctx, "sdk-w", []client.CompleteItem{{ID: b.ID, LeaseID: b.LeaseID, Result: "B",
		Enqueue: []client.SubmitParams{{Queue: next, Payload: "from b"}}}})
	require.NoError(t, err)
	require.Equal(t, client.OutcomeDone, outcomes[0].Outcome)
	require.Len(t, outcomes[0].Enqueued, 1)

	child, err = c.Get(ctx, ts[2].ID)
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, child.Status)
	require.Empty(t, child.BlockedBy)
	parents, err := c.Parents(ctx, child.ID)
	require.NoError(t, err)
	require.Len(t, parents, 2)
	require.JSONEq(t, `"A"`, string(parents[0].Result))
	require.JSONEq(t, `"B"`, string(parents[1].Result))

	attempts, err := c.Attempts(ctx, a.ID)
	require.NoError(t, err)
	require.Len(t, attempts, 1)
	require.Equal(t, client.AttemptCompleted, attempts[0].Outcome)
	require.Equal(t, "sdk-w", attempts[0].WorkerID)
	require.NotNil(t, attempts[0].FinishedAt)
	_, err = c.Attempts(ctx, uuid.NewString())
	require.True(t, client.IsNotFound(err), "%v", err)

	want := client.Queue{Queue: queue, Pending: 1, Done: 2, ActiveWorkers: 1}
	mine := func(qs []client.Queue) client.Queue {
		for _, q := range queueCounts(qs) {
			if q.Queue == queue {
				return q
			}
		}
		return client.Queue{}
	}
	qs := sdkQueuesEventually(t, c, func(qs []client.Queue) bool { return reflect.DeepEqual(mine(qs), want) })
	require.Equal(t, want, mine(qs))
}

// A runner's handler returning a client.Next completes its task and
// enqueues the next stage in one step; the next stage's handler reads its
// input from the payload.
func TestRunnerEnqueuesTheNextStage(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, nil)
	stage1, stage2 := "r1-"+uuid.NewString()[:8], "r2-"+uuid.NewString()[:8]
	const n = 20
	submitN(t, c, stage1, n, func(i int) any { return map[string]int{"i": i} })
	handler := func(_ context.Context, task client.Task) (any, error) {
		var p struct{ I int }
		if err := task.DecodePayload(&p); err != nil {
			return nil, client.NonRetryable(err)
		}
		if task.Queue == stage2 {
			return p.I, nil
		}
		return client.Next{Result: "staged", Enqueue: []client.SubmitParams{{Queue: stage2, Payload: map[string]int{"i": p.I * 10}}}}, nil
	}
	stop, _ := startRunner(t, c, client.RunnerConfig{Queues: []string{stage1, stage2}, Concurrency: 4}, handler)
	testclient.Poll(t, 60*time.Second, "both stages done", func() bool {
		return countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = ANY($1) AND status = 'DONE'`,
			pq.StringArray{stage1, stage2}) == 2*n
	})
	require.NoError(t, stop())
	require.Equal(t, n, countRows(t, s, `SELECT count(*) FROM tasks WHERE queue = $1 AND result = '"staged"'`, stage1))
	require.Equal(t, n, countRows(t, s, `SELECT count(DISTINCT payload->>'i') FROM tasks WHERE queue = $1
		AND (payload->>'i')::int % 10 = 0 AND result = payload->'i'`, stage2))
}

// The CLI submits after existing tasks (--depends-on), shows a task's
// dependencies, its attempts, and the blocked count.
func TestCLIPipelines(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, nil)
	c := newSDK(t, s.URL, nil)
	queue := "cli-p-" + uuid.NewString()[:8]
	parent := cliSubmit(t, s.URL, "--queue", queue)
	child := cliSubmit(t, s.URL, "--queue", queue, "--depends-on", parent.ID)
	require.Equal(t, client.StatusBlocked, child.Status)
	out := mustCLI(t, s.URL, "get", child.ID)
	require.Regexp(t, `Depends on\s+`+parent.ID, out)
	require.Regexp(t, `Blocked by\s+`+parent.ID, out)
	_, err := runCLI(t, context.Background(), s.URL, "", "submit", "--queue", queue, "--depends-on", "nope")
	require.True(t, client.IsValidation(err), "%v", err)

	_, err = c.Register(context.Background(), client.RegisterParams{ID: "cli-w", Queues: []string{queue}})
	require.NoError(t, err)
	held, err := c.Claim(context.Background(), client.ClaimParams{WorkerID: "cli-w", Queue: queue})
	require.NoError(t, err)
	require.Len(t, held, 1)
	_, err = c.Fail(context.Background(), held[0].ID, client.FailParams{WorkerID: "cli-w", LeaseID: held[0].LeaseID, Error: "disk full"})
	require.NoError(t, err)
	out = mustCLI(t, s.URL, "attempts", parent.ID)
	require.Regexp(t, `(?m)^1\s+cli-w\s+\S+\s+\S+\s+failed\s+disk full$`, out)
	var attempts struct{ Attempts []client.Attempt }
	require.NoError(t, json.Unmarshal([]byte(mustCLI(t, s.URL, "attempts", parent.ID, "--json")), &attempts))
	require.Len(t, attempts.Attempts, 1)

	// The statistics are projected from the outbox: wait until they show
	// the failure's requeue (PENDING 1, RUNNING 0), not only the block.
	sdkQueuesEventually(t, c, func(qs []client.Queue) bool {
		return len(qs) == 1 && qs[0].Blocked == 1 && qs[0].Pending == 1 && qs[0].Running == 0
	})
	require.Regexp(t, queue+`\s+1\s+0\s+0\s+0\s+1\s+1\s+`, mustCLI(t, s.URL, "queues"))
	require.Contains(t, mustCLI(t, s.URL, "list", "--queue", queue, "--status", "blocked"), child.ID)
}

// Two parents shared by 300 dependants, reported at the same moment by two
// workers: every dependant moves exactly once, with exactly one event:
// unblocked when both complete, dead dependency_failed when both fail
// (the two cascades cross on every dependant), and dead when one fails
// while the other completes.
func TestDependantsOfConcurrentlyReportedParentsMoveExactlyOnce(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	const children = 300
	for _, tc := range []struct {
		name       string
		fail       [2]bool
		wantStatus string
		wantEvent  outboxEvent
	}{
		{"both complete", [2]bool{false, false}, "PENDING", outboxEvent{Type: "task.unblocked", From: "BLOCKED", To: "PENDING", Reason: "dependencies_done"}},
		{"both fail", [2]bool{true, true}, "DEAD", outboxEvent{Type: "task.dead_lettered", From: "BLOCKED", To: "DEAD", Reason: "dependency_failed"}},
		{"one fails", [2]bool{false, true}, "DEAD", outboxEvent{Type: "task.dead_lettered", From: "BLOCKED", To: "DEAD", Reason: "dependency_failed"}},
	} {
		queue, sink := "pp-"+uuid.NewString()[:8], "pk-"+uuid.NewString()[:8]
		items := []jsonObj{{"queue": queue, "ref": "p0"}, {"queue": queue, "ref": "p1"}}
		for i := range children {
			items = append(items, jsonObj{"queue": sink, "payload": i, "depends_on": []string{"p0", "p1"}})
		}
		ts, _ := submitGraph(t, c, items...)
		held := claimQueue(t, c, "w-"+queue, queue)
		require.Len(t, held, 2, tc.name)

		var wg sync.WaitGroup
		start := make(chan struct{})
		statuses := make([]int, 2)
		for i := range 2 {
			tk := held[ts[i].ID]
			path, body := reportPath(tk.ID, "complete"), holderBody(tk, nil)
			if tc.fail[i] {
				path, body = reportPath(tk.ID, "fail"), holderBody(tk, jsonObj{"error": "broken", "retryable": false})
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				r, err := c.Send(http.MethodPost, path, body, nil)
				if err == nil {
					statuses[i] = r.Status
				}
			}()
		}
		close(start)
		wg.Wait()
		require.Equal(t, []int{http.StatusOK, http.StatusOK}, statuses, tc.name)

		var counts []struct {
			Status string `db:"status"`
			N      int    `db:"n"`
		}
		require.NoError(t, s.DB.SelectContext(t.Context(), &counts,
			`SELECT status, count(*) AS n FROM tasks WHERE queue = $1 GROUP BY status`, sink))
		require.Len(t, counts, 1, tc.name)
		require.Equal(t, tc.wantStatus, counts[0].Status, tc.name)
		require.Equal(t, children, counts[0].N, tc.name)
		byTask := eventsByTask(t, s)
		for _, child := range ts[2:] {
			events := byTask[child.ID]
			want := tc.wantEvent
			want.TaskID = child.ID
			require.Equal(t, []outboxEvent{{"task.submitted", child.ID, "", "BLOCKED", ""}, want}, events, tc.name)
		}
	}
}

// A snooze ends its attempt (outcome snoozed) under the number it was
// claimed with; the next claim, which does not spend an attempt, runs
// under that number again.
func TestAttemptHistoryKeepsASnooze(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	queue := "sn-" + uuid.NewString()[:8]
	held := submitAndClaim(t, c, "w", jsonObj{"queue": queue})
	c.Do(http.MethodPost, reportPath(held.ID, "snooze"), holderBody(held, jsonObj{"delay_seconds": 1})).Expect(t, http.StatusOK, nil)
	var again []testclient.Task
	testclient.Poll(t, 30*time.Second, "the snoozed task to be claimable again", func() bool {
		again = c.Claim(jsonObj{"worker_id": "w", "queue": queue})
		return len(again) == 1
	})
	var out struct {
		Attempts []struct {
			Attempt  int     `json:"attempt"`
			WorkerID string  `json:"worker_id"`
			Outcome  *string `json:"outcome"`
		} `json:"attempts"`
	}
	c.Do(http.MethodGet, "/tasks/v1/"+held.ID+"/attempts", nil).Expect(t, http.StatusOK, &out)
	require.Len(t, out.Attempts, 2)
	require.Equal(t, 1, out.Attempts[0].Attempt)
	require.Equal(t, "snoozed", *out.Attempts[0].Outcome)
	require.Equal(t, 1, out.Attempts[1].Attempt, "the snooze gave the attempt back")
	require.Nil(t, out.Attempts[1].Outcome, "running")
}

// A parent that was already DONE when a dependant was linked to it is kept
// by retention while that dependant is unfinished, however old it is: the
// dependant's depends_on keeps it and its worker reads its result. Once
// the dependant is DONE, retention deletes both in time. A control task
// as old, without dependants, shows retention ran meanwhile.
func TestRetentionKeepsAParentDoneBeforeItsDependantWasLinked(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, func(cfg *app.Config) {
		cfg.RetentionTTL = time.Hour
		cfg.RetentionInterval = 100 * time.Millisecond
		cfg.LeaderLeaseTTL = time.Second
	})
	queue := "r-" + uuid.NewString()
	parent := submitAndClaim(t, c, "w", jsonObj{"queue": queue, "payload": "p"})
	c.Complete(parent.ID, holderBody(parent, jsonObj{"result": "the parent's result"}))
	control := submitAndClaim(t, c, "w", jsonObj{"queue": queue, "payload": "c"})
	c.Complete(control.ID, holderBody(control, nil))

	ts, _ := submitGraph(t, c, jsonObj{"queue": queue, "depends_on": []string{parent.ID}, "payload": "child"})
	child := ts[0]
	require.Equal(t, "PENDING", child.Status, "its only parent is DONE")
	// Both finished long ago, as far as retention can tell.
	stage(t, s, `UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE id IN ($1, $2)`, parent.ID, control.ID)

	testclient.Poll(t, 30*time.Second, "retention deletes the control task", func() bool {
		return c.Do(http.MethodGet, "/tasks/v1/"+control.ID, nil).Status == http.StatusNotFound
	})
	require.Equal(t, "DONE", c.Get(parent.ID).Status, "kept: an unfinished task depends on it")
	require.Equal(t, []string{parent.ID}, c.Describe(child.ID).DependsOn)
	var parents struct {
		Parents []testclient.Task `json:"parents"`
	}
	c.Do(http.MethodGet, "/tasks/v1/"+child.ID+"/parents", nil).Expect(t, http.StatusOK, &parents)
	require.Len(t, parents.Parents, 1)
	require.JSONEq(t, `"the parent's result"`, string(parents.Parents[0].Result))

	held := claimQueue(t, c, "w2", queue)[child.ID]
	c.Complete(held.ID, holderBody(held, nil))
	stage(t, s, `UPDATE tasks SET finished_at = now() - interval '2 hours' WHERE id = $1`, child.ID)
	testclient.Poll(t, 30*time.Second, "retention deletes the parent once its dependant is done", func() bool {
		return c.Do(http.MethodGet, "/tasks/v1/"+parent.ID, nil).Status == http.StatusNotFound &&
			c.Do(http.MethodGet, "/tasks/v1/"+child.ID, nil).Status == http.StatusNotFound
	})
}
