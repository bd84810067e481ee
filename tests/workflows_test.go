package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// Workflows over HTTP on the real server and PostgreSQL: spawn and join,
// failure policies per edge, runs (their page, cancel and retry), replays,
// debounce and throttle.

// spawned is the answer of a spawn or a batch.
type spawned struct {
	Tasks   []testclient.Task `json:"tasks"`
	Created []bool            `json:"created"`
}

// spawn posts a spawn by tk's holder and requires 201.
func spawn(t *testing.T, c *testclient.Client, tk testclient.Task, items ...jsonObj) []testclient.Task {
	t.Helper()
	var out spawned
	c.Do(http.MethodPost, reportPath(tk.ID, "spawn"), holderBody(tk, jsonObj{"tasks": items})).Expect(t, http.StatusCreated, &out)
	require.Len(t, out.Tasks, len(items))
	return out.Tasks
}

// parentsPage is GET /tasks/v1/{id}/parents.
type parentsPage struct {
	Parents    []testclient.Task `json:"parents"`
	NextCursor *string           `json:"next_cursor"`
	Truncated  bool              `json:"truncated"`
}

// allParents reads every page of a task's parents, limit at a time.
func allParents(t *testing.T, c *testclient.Client, id string, limit int) []testclient.Task {
	t.Helper()
	var out []testclient.Task
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "the pages never end")
		path := fmt.Sprintf("/tasks/v1/%s/parents?limit=%d", id, limit)
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page parentsPage
		c.Do(http.MethodGet, path, nil).Expect(t, http.StatusOK, &page)
		require.LessOrEqual(t, len(page.Parents), limit)
		out = append(out, page.Parents...)
		if page.NextCursor == nil {
			return out
		}
		cursor = *page.NextCursor
	}
}

// workflowPage is GET /workflows/v1/{id}.
type workflowPage struct {
	ID             string            `json:"id"`
	Total          int64             `json:"total"`
	StatusCounts   map[string]int64  `json:"status_counts"`
	DeadReasons    map[string]int64  `json:"dead_reasons"`
	Finished       bool              `json:"finished"`
	FirstCreatedAt time.Time         `json:"first_created_at"`
	LastUpdatedAt  time.Time         `json:"last_updated_at"`
	LastFinishedAt *time.Time        `json:"last_finished_at"`
	Tasks          []testclient.Task `json:"tasks"`
	NextCursor     *string           `json:"next_cursor"`
}

func getWorkflow(t *testing.T, c *testclient.Client, id string) workflowPage {
	t.Helper()
	var out workflowPage
	c.Do(http.MethodGet, "/workflows/v1/"+id, nil).Expect(t, http.StatusOK, &out)
	return out
}

// workflowResult is the answer of a run's cancel or retry.
type workflowResult struct {
	ID      string `json:"id"`
	Matched int64  `json:"matched"`
	Changed int64  `json:"changed"`
	Blocked *int64 `json:"blocked"`
	Skipped int64  `json:"skipped"`
}

func countEvents(events []outboxEvent, typ string) int {
	n := 0
	for _, e := range events {
		if e.Type == typ {
			n++
		}
	}
	return n
}

// A worker spawns 1,000 children while it runs and completes with a join
// that depends on all of them and on itself; eight workers complete the
// children concurrently; the join is released exactly once (one
// task.unblocked, one claim) when the last child finishes, and reads every
// parent's result, a page at a time.
func TestWorkflowSpawnOfAThousandAndAJoinReleasedOnce(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	root, children, joins := "root-"+uuid.NewString(), "child-"+uuid.NewString(), "join-"+uuid.NewString()
	parent := submitAndClaim(t, c, "spawner", jsonObj{"queue": root, "payload": "discover"})

	items := make([]jsonObj, 1000)
	for i := range items {
		items[i] = jsonObj{"queue": children, "payload": jsonObj{"n": i}}
	}
	kids := spawn(t, c, parent, items...)
	ids := make([]string, len(kids))
	for i, k := range kids {
		require.Equal(t, "PENDING", k.Status)
		require.Equal(t, parent.ID, k.WorkflowID, "the children join the spawner's run")
		ids[i] = k.ID
	}
	require.Equal(t, "RUNNING", c.Get(parent.ID).Status, "a spawn keeps its task RUNNING")

	// The join depends on every child and on its completing task (DONE by
	// then), by id.
	var done testclient.Task
	c.Do(http.MethodPost, reportPath(parent.ID, "complete"), holderBody(parent, jsonObj{"result": "spawned",
		"enqueue": []jsonObj{{"queue": joins, "depends_on": append(ids, parent.ID)}}})).Expect(t, http.StatusOK, &done)
	require.Len(t, done.Enqueued, 1)
	join := done.Enqueued[0]
	require.Equal(t, "BLOCKED", join.Status)
	require.Equal(t, parent.ID, join.WorkflowID)
	require.Len(t, c.Describe(join.ID).BlockedBy, 1000)

	// Eight workers, and a ninth that watches the join's queue throughout.
	var (
		wg         sync.WaitGroup
		completed  atomic.Int64
		joinClaims atomic.Int64
		failures   = make(chan error, 16)
		stop       = make(chan struct{})
	)
	report := func(err error) {
		select {
		case failures <- err:
		default:
		}
	}
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("kid-worker-%d", w)
			if r, err := c.Send(http.MethodPost, "/workers/v1/register", jsonObj{"id": id}, nil); err != nil || r.Status >= 300 {
				report(fmt.Errorf("register %s: %v %v", id, r, err))
				return
			}
			for completed.Load() < 1000 {
				r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": id, "queue": children, "limit": 10, "wait_ms": 200}, nil)
				if err != nil || r.Status != http.StatusOK {
					report(fmt.Errorf("claim: %v %v", r, err))
					return
				}
				var got struct {
					Tasks []testclient.Task `json:"tasks"`
				}
				if err := json.Unmarshal(r.Body, &got); err != nil {
					report(err)
					return
				}
				for _, tk := range got.Tasks {
					var in struct {
						N int `json:"n"`
					}
					_ = json.Unmarshal(tk.Payload, &in)
					r, err := c.Send(http.MethodPost, reportPath(tk.ID, "complete"), holderBody(tk, jsonObj{"result": jsonObj{"double": 2 * in.N}}), nil)
					if err != nil || r.Status != http.StatusOK {
						report(fmt.Errorf("complete: %v %v", r, err))
						return
					}
					completed.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if r, err := c.Send(http.MethodPost, "/workers/v1/register", jsonObj{"id": "joiner"}, nil); err != nil || r.Status >= 300 {
			report(fmt.Errorf("register joiner: %v %v", r, err))
			return
		}
		for {
			select {
			case <-stop:
				return
			default:
			}
			r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "joiner", "queue": joins, "wait_ms": 100}, nil)
			if err != nil || r.Status != http.StatusOK {
				report(fmt.Errorf("claim the join: %v %v", r, err))
				return
			}
			var got struct {
				Tasks []testclient.Task `json:"tasks"`
			}
			if err := json.Unmarshal(r.Body, &got); err != nil {
				report(err)
				return
			}
			joinClaims.Add(int64(len(got.Tasks)))
		}
	}()
	testclient.Poll(t, 3*time.Minute, "the children to be done and the join claimed", func() bool {
		select {
		case err := <-failures:
			require.NoError(t, err)
		default:
		}
		return completed.Load() == 1000 && joinClaims.Load() > 0
	})
	// Let the watcher look a while longer: a second release would show.
	deadline := time.Now().Add(500 * time.Millisecond)
	testclient.Poll(t, time.Minute, "the watcher to look again", func() bool { return time.Now().After(deadline) })
	close(stop)
	wg.Wait()
	close(failures)
	for err := range failures {
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, joinClaims.Load(), "the join was handed out once")
	events := taskEvents(t, s, join.ID)
	require.Equal(t, 1, countEvents(events, "task.unblocked"), "released exactly once: %v", events)
	require.Equal(t, 1, countEvents(events, "task.claimed"))

	// The join reads every parent, in the order it named them, with their
	// results: 1,001 of them, a page of 300 at a time.
	parents := allParents(t, c, join.ID, 300)
	require.Len(t, parents, 1001)
	for i, p := range parents[:1000] {
		require.Equal(t, ids[i], p.ID)
		require.Equal(t, "DONE", p.Status)
		require.JSONEq(t, fmt.Sprintf(`{"double": %d}`, 2*i), string(p.Result))
	}
	require.Equal(t, parent.ID, parents[1000].ID)
	require.JSONEq(t, `"spawned"`, string(parents[1000].Result))
	require.Len(t, allParents(t, c, join.ID, 1000), 1001, "the default and largest page is 1,000")

	// The run: the spawner, its 1,000 children and the join.
	run := getWorkflow(t, c, parent.ID)
	require.EqualValues(t, 1002, run.Total)
	require.EqualValues(t, 1001, run.StatusCounts["DONE"])
	require.EqualValues(t, 1, run.StatusCounts["RUNNING"])
	require.False(t, run.Finished)
	require.Equal(t, parent.ID, run.Tasks[0].ID, "oldest first")
	require.Len(t, run.Tasks, 100)
	require.NotNil(t, run.NextCursor)
}

// Each failure policy of a dependency, and fan-ins that mix them: fail
// (the default) kills the dependant dependency_failed, skip kills it
// dependency_skipped, ignore lets it run with the parent's status to read;
// when parents under fail and skip die in one transaction fail wins, and
// parents under ignore alone never kill. A dependant that died passes its
// end on by its own edges.
func TestWorkflowFailurePolicies(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q := "pol-" + uuid.NewString()
	ref := func(name, policy string) jsonObj { return jsonObj{"ref": name, "on_failure": policy} }
	ts, _ := submitGraph(t, c,
		jsonObj{"queue": q, "ref": "bad", "max_attempts": 1},                                                                // 0
		jsonObj{"queue": q, "ref": "bad2", "max_attempts": 1},                                                               // 1
		jsonObj{"queue": q, "ref": "good"},                                                                                  // 2
		jsonObj{"queue": q + "-fail", "depends_on": []any{"bad", "good"}},                                                   // 3
		jsonObj{"queue": q + "-skip", "ref": "skipped", "depends_on": []any{ref("bad", "skip"), "good"}},                    // 4
		jsonObj{"queue": q + "-ignore", "depends_on": []any{ref("bad", "ignore"), ref("good", "fail")}},                     // 5
		jsonObj{"queue": q + "-mixed", "depends_on": []any{ref("bad", "skip"), ref("bad2", "fail"), ref("good", "ignore")}}, // 6
		jsonObj{"queue": q + "-ignored", "depends_on": []any{ref("bad", "ignore"), ref("bad2", "ignore"), "good"}},          // 7
		jsonObj{"queue": q + "-after-skip", "depends_on": []any{"skipped"}},                                                 // 8
		jsonObj{"queue": q + "-skip-skip", "depends_on": []any{ref("skipped", "skip")}},                                     // 9
	)
	for _, i := range []int{3, 4, 5, 6, 7, 8, 9} {
		require.Equal(t, "BLOCKED", ts[i].Status, "tasks[%d]", i)
	}
	held := claimQueue(t, c, "pw", q)
	require.Len(t, held, 3)
	good := held[ts[2].ID]
	c.Complete(good.ID, holderBody(good, jsonObj{"result": "fine"}))
	// Both bad parents die in one transaction.
	var fails struct {
		Items []struct {
			Outcome string `json:"outcome"`
		} `json:"items"`
	}
	c.Do(http.MethodPost, "/tasks/v1/fail", jsonObj{"worker_id": "pw", "items": []jsonObj{
		{"id": ts[0].ID, "lease_id": held[ts[0].ID].Lease(), "error": "boom", "retryable": false},
		{"id": ts[1].ID, "lease_id": held[ts[1].ID].Lease(), "error": "boom", "retryable": false},
	}}).Expect(t, http.StatusOK, &fails)
	for _, it := range fails.Items {
		require.Equal(t, "dead", it.Outcome)
	}
	want := map[int][2]string{
		3: {"DEAD", "dependency_failed"}, 4: {"DEAD", "dependency_skipped"}, 5: {"PENDING", ""},
		6: {"DEAD", "dependency_failed"}, 7: {"PENDING", ""}, 8: {"DEAD", "dependency_failed"}, 9: {"DEAD", "dependency_skipped"},
	}
	for i, w := range want {
		got := c.Get(ts[i].ID)
		require.Equal(t, w[0], got.Status, "tasks[%d]", i)
		require.Equal(t, w[1], got.Reason(), "tasks[%d]", i)
	}
	events := taskEvents(t, s, ts[4].ID)
	require.Equal(t, "dependency_skipped", events[len(events)-1].Reason)

	// The ignoring dependant runs, and reads its parents' ends.
	require.Empty(t, c.Describe(ts[5].ID).BlockedBy, "a parent DEAD under ignore holds nothing back")
	claimed := claimQueue(t, c, "pw", q+"-ignore")
	require.Contains(t, claimed, ts[5].ID)
	parents := allParents(t, c, ts[5].ID, 10)
	require.Equal(t, []string{ts[0].ID, ts[2].ID}, []string{parents[0].ID, parents[1].ID})
	require.Equal(t, "DEAD", parents[0].Status)
	require.Equal(t, "non_retryable", parents[0].Reason())
	require.Equal(t, "boom", parents[0].Error())
	require.Equal(t, "DONE", parents[1].Status)

	// Dependants submitted after the parent died meet the same ends at once.
	late, _ := submitGraph(t, c,
		jsonObj{"queue": q + "-late", "depends_on": []any{jsonObj{"id": ts[0].ID, "on_failure": "ignore"}}},
		jsonObj{"queue": q + "-late", "depends_on": []any{jsonObj{"id": ts[0].ID, "on_failure": "skip"}}},
		jsonObj{"queue": q + "-late", "depends_on": []any{ts[0].ID}},
		jsonObj{"queue": q + "-late", "depends_on": []any{jsonObj{"id": ts[0].ID, "on_failure": "skip"}, jsonObj{"id": ts[1].ID}}},
	)
	require.Equal(t, "PENDING", late[0].Status)
	for i, reason := range []string{"", "dependency_skipped", "dependency_failed", "dependency_failed"} {
		if reason != "" {
			require.Equal(t, "DEAD", late[i].Status, "late[%d]", i)
			require.Equal(t, reason, late[i].Reason(), "late[%d]", i)
		}
	}

	// Statistics count skips apart from failures.
	c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool {
		for _, x := range qs {
			if x.Queue == q+"-skip" {
				return x.Totals.DeadLettered["dependency_skipped"] == 1
			}
		}
		return false
	})

	// Refusals: a forward ref, an unknown policy, an entry naming both.
	r := c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{
		{"queue": q, "depends_on": []any{jsonObj{"ref": "later"}}}, {"queue": q, "ref": "later"},
	}})
	require.Equal(t, []string{"tasks[0].depends_on[0]"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	r = c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{
		{"queue": q, "ref": "a"}, {"queue": q, "depends_on": []any{ref("a", "maybe")}},
	}})
	require.Equal(t, []string{"tasks[1].depends_on[0].on_failure"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	r = c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{
		{"queue": q, "ref": "a"}, {"queue": q, "depends_on": []any{jsonObj{"ref": "a", "id": uuid.NewString()}}},
	}})
	r.Problem(t, http.StatusBadRequest, "malformed-request")
	r = c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": q, "depends_on": []any{jsonObj{"id": "nope"}}}}})
	require.Equal(t, []string{"tasks[0].depends_on[0]"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
}

// A run's cancel cancels every unfinished task of it: PENDING and BLOCKED
// ones at once (a BLOCKED join ends cancelled, not released by its
// parents' cancellation), RUNNING ones through their holders' heartbeats;
// a task asked to stop spawns nothing more.
func TestWorkflowCancelTellsRunningHolders(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q := "wc-" + uuid.NewString()
	root := submitAndClaim(t, c, "w1", jsonObj{"queue": q})
	kids := spawn(t, c, root,
		jsonObj{"queue": q + "-kids", "ref": "a"}, jsonObj{"queue": q + "-kids", "ref": "b"}, jsonObj{"queue": q + "-kids", "ref": "c"},
		jsonObj{"queue": q + "-join", "depends_on": []any{
			jsonObj{"ref": "a", "on_failure": "ignore"}, jsonObj{"ref": "b", "on_failure": "ignore"}, jsonObj{"ref": "c", "on_failure": "ignore"}}},
	)
	require.Equal(t, "BLOCKED", kids[3].Status)
	c.Register(jsonObj{"id": "w2"})
	running := c.Claim(jsonObj{"worker_id": "w2", "queue": q + "-kids"})
	require.Len(t, running, 1)

	var res workflowResult
	c.Do(http.MethodPost, "/workflows/v1/"+root.ID+"/cancel", nil).Expect(t, http.StatusOK, &res)
	require.Equal(t, workflowResult{ID: root.ID, Matched: 5, Changed: 5}, res)
	for _, k := range append(kids[:3:3], kids[3]) {
		got := c.Get(k.ID)
		if k.ID == running[0].ID {
			require.Equal(t, "RUNNING", got.Status)
			require.NotNil(t, got.CancelRequestedAt)
			continue
		}
		require.Equal(t, "DEAD", got.Status, k.ID)
		require.Equal(t, "cancelled", got.Reason(), "the join is cancelled, not released: %s", k.ID)
	}
	require.NotNil(t, c.Get(root.ID).CancelRequestedAt)

	// The holders learn it from their heartbeats.
	beat := c.Heartbeat("w1", jsonObj{"tasks": []testclient.LeaseRef{root.Ref()}})
	require.Equal(t, []testclient.LeaseRef{root.Ref()}, beat.Cancel)
	beat = c.Heartbeat("w2", jsonObj{"tasks": []testclient.LeaseRef{running[0].Ref()}})
	require.Equal(t, []testclient.LeaseRef{running[0].Ref()}, beat.Cancel)
	// A task asked to stop spawns nothing more.
	r := c.Do(http.MethodPost, reportPath(root.ID, "spawn"), holderBody(root, jsonObj{"tasks": []jsonObj{{"queue": q}}}))
	require.Equal(t, "RUNNING", r.Problem(t, http.StatusConflict, "cancel-requested").CurrentStatus)
	c.Fail(root.ID, holderBody(root, jsonObj{"error": "stopped"}))
	c.Fail(running[0].ID, holderBody(running[0], jsonObj{"error": "stopped"}))

	run := getWorkflow(t, c, root.ID)
	require.True(t, run.Finished)
	require.EqualValues(t, 5, run.StatusCounts["DEAD"])
	require.Equal(t, map[string]int64{"cancelled": 5}, run.DeadReasons)
	c.Do(http.MethodPost, "/workflows/v1/"+root.ID+"/cancel", jsonObj{}).Expect(t, http.StatusOK, &res)
	require.Equal(t, workflowResult{ID: root.ID}, res, "nothing left to cancel")
	require.Equal(t, 1, countAudit(t, s, "audit.workflow_cancelled", root.ID))

	c.Do(http.MethodPost, "/workflows/v1/"+uuid.NewString()+"/cancel", nil).Problem(t, http.StatusNotFound, "workflow-not-found")
	c.Do(http.MethodPost, "/workflows/v1/nope/retry", nil).Problem(t, http.StatusNotFound, "workflow-not-found")
	c.Do(http.MethodGet, "/workflows/v1/"+kids[0].ID, nil).Problem(t, http.StatusNotFound, "workflow-not-found")
}

// countAudit counts the outbox's audit events of type typ about run.
func countAudit(t *testing.T, s *testserver.Server, typ, run string) int {
	t.Helper()
	var payloads []string
	require.NoError(t, s.DB.SelectContext(t.Context(), &payloads, `SELECT payload::text FROM watermill_taskmaster_events`))
	n := 0
	for _, p := range payloads {
		var env struct {
			Events []struct {
				Type       string `json:"type"`
				WorkflowID string `json:"workflow_id"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal([]byte(p), &env))
		for _, e := range env.Events {
			if e.Type == typ && e.WorkflowID == run {
				n++
			}
		}
	}
	return n
}

// A run's retry after a failure re-runs only what failed and what failed
// with it: the failed task PENDING with its attempts reset, its dependants
// BLOCKED behind it again; DONE tasks are never run again.
func TestWorkflowRetryRerunsOnlyWhatFailed(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q := "wr-" + uuid.NewString()
	// A -> B (fails) -> C -> E; A -> D -> E; F alone in the run.
	ts, _ := submitGraph(t, c,
		jsonObj{"queue": q, "ref": "a"},
		jsonObj{"queue": q, "ref": "b", "depends_on": []any{"a"}, "max_attempts": 1},
		jsonObj{"queue": q, "ref": "c", "depends_on": []any{"b"}},
		jsonObj{"queue": q, "ref": "d", "depends_on": []any{"a"}},
		jsonObj{"queue": q, "ref": "e", "depends_on": []any{"c", "d"}},
		jsonObj{"queue": q, "ref": "f"},
	)
	a, b, cc, d, e, f := ts[0], ts[1], ts[2], ts[3], ts[4], ts[5]
	for _, tk := range ts {
		require.Equal(t, a.ID, tk.WorkflowID, "a batch graph is one run, named after its first task")
	}
	step := func() map[string]testclient.Task { return claimQueue(t, c, "rw", q) }
	got := step() // a, f
	require.Len(t, got, 2)
	for _, tk := range got {
		c.Complete(tk.ID, holderBody(tk, nil))
	}
	got = step() // b, d
	require.Len(t, got, 2)
	c.Fail(b.ID, holderBody(got[b.ID], jsonObj{"error": "flaky", "retryable": false}))
	c.Complete(d.ID, holderBody(got[d.ID], nil))
	require.Equal(t, "dependency_failed", c.Get(cc.ID).Reason())
	require.Equal(t, "dependency_failed", c.Get(e.ID).Reason())
	run := getWorkflow(t, c, a.ID)
	require.True(t, run.Finished)
	require.Equal(t, map[string]int64{"non_retryable": 1, "dependency_failed": 2}, run.DeadReasons)
	doneBefore := map[string]testclient.Task{a.ID: c.Get(a.ID), d.ID: c.Get(d.ID), f.ID: c.Get(f.ID)}

	var res workflowResult
	c.Do(http.MethodPost, "/workflows/v1/"+a.ID+"/retry", nil).Expect(t, http.StatusOK, &res)
	two := int64(2)
	require.Equal(t, workflowResult{ID: a.ID, Matched: 3, Changed: 3, Blocked: &two}, res)
	require.Equal(t, "PENDING", c.Get(b.ID).Status)
	require.Zero(t, c.Get(b.ID).Attempts)
	require.Equal(t, []string{b.ID}, c.Describe(cc.ID).BlockedBy)
	require.Equal(t, "BLOCKED", c.Get(cc.ID).Status)
	require.Equal(t, []string{cc.ID}, c.Describe(e.ID).BlockedBy, "d is DONE and stays so")
	for id, before := range doneBefore {
		require.Equal(t, before, c.Get(id), "a DONE task is left alone")
	}

	// Only the failed task is claimable; the rest follow as parents finish.
	for _, want := range []string{b.ID, cc.ID, e.ID} {
		got := step()
		require.Len(t, got, 1)
		require.Contains(t, got, want)
		c.Complete(want, holderBody(got[want], nil))
	}
	run = getWorkflow(t, c, a.ID)
	require.True(t, run.Finished)
	require.EqualValues(t, 6, run.StatusCounts["DONE"])
	events := eventsByTask(t, s)
	for _, id := range []string{a.ID, d.ID, f.ID} {
		require.Equal(t, 1, countEvents(events[id], "task.claimed"), "ran once: %s", id)
	}
	for _, id := range []string{b.ID, cc.ID, e.ID} {
		require.Equal(t, 1, countEvents(events[id], "task.retried"), id)
	}
	require.Equal(t, 1, countEvents(events[e.ID], "task.unblocked"), "unblocked once, after its retry")
	require.Equal(t, 1, countAudit(t, s, "audit.workflow_retried", a.ID))

	c.Do(http.MethodPost, "/workflows/v1/"+a.ID+"/retry", nil).Expect(t, http.StatusOK, &res)
	zero := int64(0)
	require.Equal(t, workflowResult{ID: a.ID, Blocked: &zero}, res, "nothing DEAD left")
}

// Debounce under 20 concurrent submissions spread over three instances:
// one task, the last payload, run_at pushed on, never past the bound of
// the first submission; a holder that is RUNNING is answered as it is.
func TestWorkflowDebounceAcrossInstances(t *testing.T) {
	t.Parallel()
	db := testserver.Start(t, nil)
	instances := []*testclient.Client{testclient.New(t, db.URL)}
	for range 2 {
		instances = append(instances, testclient.New(t, testserver.StartOn(t, db.DatabaseURL, nil).URL))
	}
	q, key := "deb-"+uuid.NewString(), "digest:42"
	answers := make([]testclient.Task, 20)
	statuses := make([]int, 20)
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := instances[i%3].Send(http.MethodPost, "/tasks/v1", jsonObj{"queue": q, "unique_key": key,
				"payload": jsonObj{"n": i}, "debounce_seconds": 60, "debounce_max_seconds": 120}, nil)
			if err != nil {
				errs <- err
				return
			}
			statuses[i] = r.Status
			errs <- json.Unmarshal(r.Body, &answers[i])
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	first, payloads := "", map[string]bool{}
	for i, a := range answers {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, statuses[i])
		if statuses[i] == http.StatusCreated {
			require.Empty(t, first, "one submission created the task")
			first = a.ID
		}
		payloads[string(a.Payload)] = true
	}
	require.NotEmpty(t, first)
	for _, a := range answers {
		require.Equal(t, first, a.ID, "every submission is answered with the one task")
	}
	require.Equal(t, 1, countTasks(t, db, q))
	stored := instances[1].Get(first)
	require.True(t, payloads[string(stored.Payload)], "the payload is one of the submissions': %s", stored.Payload)
	require.Equal(t, "PENDING", stored.Status)
	require.True(t, stored.RunAt.After(stored.CreatedAt.Add(60*time.Second)), "pushed on by the later ones: %v", stored.RunAt)
	require.Equal(t, stored.CreatedAt.Add(120*time.Second), *stored.DebounceUntil)
	require.Equal(t, 19, countEvents(taskEvents(t, db, first), "task.debounced"))

	// A later submission wins the payload; the bound caps run_at.
	var last testclient.Task
	instances[2].Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": q, "unique_key": key, "payload": "last",
		"debounce_seconds": 300}).Expect(t, http.StatusOK, &last)
	require.Equal(t, first, last.ID)
	stored = instances[0].Get(first)
	require.JSONEq(t, `"last"`, string(stored.Payload))
	require.Equal(t, stored.CreatedAt.Add(120*time.Second), stored.RunAt, "bounded by the first submission's max")

	// A RUNNING holder is answered unchanged.
	c := instances[0]
	q2 := "deb2-" + uuid.NewString()
	held := c.Submit(jsonObj{"queue": q2, "unique_key": key, "payload": "one", "debounce_seconds": 1})
	c.Register(jsonObj{"id": "dw", "queues": []string{q2}})
	var claimed []testclient.Task
	testclient.Poll(t, 30*time.Second, "the debounced task to become claimable", func() bool {
		claimed = c.Claim(jsonObj{"worker_id": "dw", "queue": q2})
		return len(claimed) == 1
	})
	require.Equal(t, held.ID, claimed[0].ID)
	var again testclient.Task
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": q2, "unique_key": key, "payload": "two", "debounce_seconds": 1}).
		Expect(t, http.StatusOK, &again)
	require.Equal(t, "RUNNING", again.Status)
	require.JSONEq(t, `"one"`, string(c.Get(held.ID).Payload))

	// Refusals.
	r := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": q2, "debounce_seconds": 5})
	require.Equal(t, []string{"debounce_seconds"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	r = c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": q2, "unique_key": "k", "debounce_seconds": 10, "debounce_max_seconds": 5})
	require.Equal(t, []string{"debounce_max_seconds"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	r = c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": q2, "unique_key": "k", "debounce_seconds": 10}}})
	require.Equal(t, []string{"tasks[0].debounce_seconds"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
}

// Throttle: a submission is answered with the last holder of its unique
// key while that one finished less than throttle_seconds ago; then a new
// task, one for 20 concurrent submissions.
func TestWorkflowThrottleWindow(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q, key := "thr-"+uuid.NewString(), "sync:7"
	body := func(seconds int) jsonObj {
		return jsonObj{"queue": q, "unique_key": key, "throttle_seconds": seconds}
	}
	a := c.Submit(body(30))
	var again testclient.Task
	c.Do(http.MethodPost, "/tasks/v1", body(30)).Expect(t, http.StatusOK, &again)
	require.Equal(t, a.ID, again.ID, "unfinished: the holder")
	held := submitAndClaimExisting(t, c, "tw", a)
	c.Complete(a.ID, holderBody(held, jsonObj{"result": "synced"}))
	c.Do(http.MethodPost, "/tasks/v1", body(30)).Expect(t, http.StatusOK, &again)
	require.Equal(t, a.ID, again.ID, "finished less than 30 s ago: still the holder")
	require.Equal(t, "DONE", again.Status)
	require.JSONEq(t, `"synced"`, string(again.Result))
	// Without throttle, a finished holder answers nothing: a new task.
	plain := c.Submit(jsonObj{"queue": q, "unique_key": key})
	require.NotEqual(t, a.ID, plain.ID)
	c.Do(http.MethodPost, "/tasks/v1/"+plain.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)

	// The window ends: A finished (as if) 40 s ago, and the plain task too.
	stage(t, s, `UPDATE tasks SET finished_at = now() - interval '40 seconds' WHERE queue = $1`, q)
	var wg sync.WaitGroup
	answers := make([]testclient.Task, 20)
	statuses := make([]int, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := c.Send(http.MethodPost, "/tasks/v1", body(30), nil)
			if err == nil {
				statuses[i] = r.Status
				_ = json.Unmarshal(r.Body, &answers[i])
			}
		}()
	}
	wg.Wait()
	created := 0
	for i, ans := range answers {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, statuses[i])
		if statuses[i] == http.StatusCreated {
			created++
		}
		require.Equal(t, answers[0].ID, ans.ID)
		require.NotEqual(t, a.ID, ans.ID)
		require.NotEqual(t, plain.ID, ans.ID)
	}
	require.Equal(t, 1, created)
	require.Equal(t, 3, countTasks(t, s, q))

	r := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": q, "throttle_seconds": 5})
	require.Equal(t, []string{"throttle_seconds"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	r = c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": q, "unique_key": key, "throttle_seconds": 0})
	require.Equal(t, []string{"throttle_seconds"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
}

// A replay is a new task made from a DONE or DEAD one: same queue, payload
// and settings (overrides apply), linked by replay_of, in a run of its
// own; in bulk by filter, with a dry run.
func TestWorkflowReplay(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q := "rep-" + uuid.NewString()
	c.Submit(jsonObj{"queue": q, "payload": jsonObj{"to": "a@x"}, "priority": 3, "max_attempts": 2,
		"tags": []string{"eu"}, "metadata": jsonObj{"tenant": "acme"}, "timeout_seconds": 30, "group_key": "g1",
		"idempotency_key": "once", "retry": jsonObj{"base_seconds": 2}})
	c.Register(jsonObj{"id": "tagged", "tags": []string{"eu"}})
	claimed := c.Claim(jsonObj{"worker_id": "tagged", "queue": q})
	require.Len(t, claimed, 1)
	orig := claimed[0]
	dead := c.Fail(orig.ID, holderBody(orig, jsonObj{"error": "smtp down", "retryable": false}))
	require.Equal(t, "DEAD", dead.Status)

	var rep testclient.Task
	r := c.Do(http.MethodPost, "/tasks/v1/"+orig.ID+"/replay", nil).Expect(t, http.StatusCreated, &rep)
	require.Equal(t, "/tasks/v1/"+rep.ID, r.Header.Get("Location"))
	require.Equal(t, orig.ID, *rep.ReplayOf)
	require.Equal(t, rep.ID, rep.WorkflowID, "a run of its own")
	require.Equal(t, "PENDING", rep.Status)
	require.Zero(t, rep.Attempts)
	require.Nil(t, rep.IdempotencyKey, "the original's key names the original")
	for name, pair := range map[string][2]any{
		"queue": {orig.Queue, rep.Queue}, "payload": {string(orig.Payload), string(rep.Payload)}, "priority": {orig.Priority, rep.Priority},
		"max_attempts": {orig.MaxAttempts, rep.MaxAttempts}, "tags": {orig.Tags, rep.Tags}, "metadata": {orig.Metadata, rep.Metadata},
		"timeout_seconds": {orig.TimeoutSeconds, rep.TimeoutSeconds}, "group_key": {orig.GroupKey, rep.GroupKey}, "retry": {orig.Retry, rep.Retry},
	} {
		require.Equal(t, pair[0], pair[1], name)
	}
	events := taskEvents(t, s, rep.ID)
	require.Equal(t, "task.submitted", events[0].Type)

	rep = testclient.Task{}
	c.Do(http.MethodPost, "/tasks/v1/"+orig.ID+"/replay", jsonObj{"payload": "other", "priority": 9, "metadata": jsonObj{}}).
		Expect(t, http.StatusCreated, &rep)
	require.JSONEq(t, `"other"`, string(rep.Payload))
	require.Equal(t, 9, rep.Priority)
	require.Empty(t, rep.Metadata)
	require.Equal(t, orig.Tags, rep.Tags)

	pending := c.Submit(jsonObj{"queue": q})
	r = c.Do(http.MethodPost, "/tasks/v1/"+pending.ID+"/replay", nil)
	require.Equal(t, "PENDING", r.Problem(t, http.StatusConflict, "invalid-transition").CurrentStatus)
	c.Do(http.MethodPost, "/tasks/v1/"+uuid.NewString()+"/replay", nil).Problem(t, http.StatusNotFound, "task-not-found")
	r = c.Do(http.MethodPost, "/tasks/v1/"+orig.ID+"/replay", jsonObj{"max_attempts": 0})
	require.Equal(t, []string{"max_attempts"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	c.Do(http.MethodPost, "/tasks/v1/"+orig.ID+"/replay", jsonObj{"queue": "elsewhere"}).Problem(t, http.StatusBadRequest, "malformed-request")

	// A replay whose unique key another unfinished task holds is refused.
	u := submitAndClaim(t, c, "rw", jsonObj{"queue": q + "-u", "unique_key": "only"})
	c.Fail(u.ID, holderBody(u, jsonObj{"retryable": false}))
	c.Submit(jsonObj{"queue": q + "-u", "unique_key": "only"})
	c.Do(http.MethodPost, "/tasks/v1/"+u.ID+"/replay", nil).Problem(t, http.StatusConflict, "unique-key-taken")

	// In bulk: DEAD by default and DONE too; a dry run counts.
	bq := q + "-bulk"
	for i := range 3 {
		tk := submitAndClaim(t, c, "rw", jsonObj{"queue": bq, "payload": i})
		if i < 2 {
			c.Fail(tk.ID, holderBody(tk, jsonObj{"retryable": false}))
		} else {
			c.Complete(tk.ID, holderBody(tk, nil))
		}
	}
	var bulk struct {
		Matched int64  `json:"matched"`
		DryRun  bool   `json:"dry_run"`
		Changed *int64 `json:"changed"`
		Skipped *int64 `json:"skipped"`
	}
	c.Do(http.MethodPost, "/tasks/v1/bulk/replay", jsonObj{"queue": bq, "dry_run": true}).Expect(t, http.StatusOK, &bulk)
	require.EqualValues(t, 3, bulk.Matched)
	require.Nil(t, bulk.Changed)
	require.Equal(t, 3, countTasks(t, s, bq))
	c.Do(http.MethodPost, "/tasks/v1/bulk/replay", jsonObj{"queue": bq, "status": "DEAD"}).Expect(t, http.StatusOK, &bulk)
	require.EqualValues(t, 2, bulk.Matched)
	require.EqualValues(t, 2, *bulk.Changed)
	require.EqualValues(t, 0, *bulk.Skipped)
	page := c.List("queue=" + bq + "&status=PENDING")
	require.Len(t, page.Tasks, 2)
	for _, tk := range page.Tasks {
		require.NotNil(t, tk.ReplayOf)
	}
	c.Do(http.MethodPost, "/tasks/v1/bulk/replay", jsonObj{"queue": bq, "status": "PENDING"}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
}

// A run's page: its tasks counted and paged, oldest first; the listing
// filters by run; a batch may name the run its tasks join; events name the
// run of tasks that belong to another task's.
func TestWorkflowPageAndListing(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q := "wp-" + uuid.NewString()
	alone := c.Submit(jsonObj{"queue": q})
	require.Equal(t, alone.ID, alone.WorkflowID)
	run := getWorkflow(t, c, alone.ID)
	require.EqualValues(t, 1, run.Total)
	require.EqualValues(t, 1, run.StatusCounts["PENDING"])
	require.EqualValues(t, 0, run.StatusCounts["DONE"], "every status is counted")
	require.False(t, run.Finished)

	// A batch that names a run joins it, plain or graph.
	var joined spawned
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"workflow_id": alone.ID, "tasks": []jsonObj{{"queue": q}, {"queue": q}}}).
		Expect(t, http.StatusCreated, &joined)
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"workflow_id": alone.ID, "tasks": []jsonObj{
		{"queue": q, "ref": "x"}, {"queue": q, "depends_on": []string{"x"}}}}).Expect(t, http.StatusCreated, nil)
	var plain spawned
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": q}, {"queue": q}}}).Expect(t, http.StatusCreated, &plain)
	require.NotEqual(t, plain.Tasks[0].WorkflowID, plain.Tasks[1].WorkflowID, "a plain batch's tasks are runs of their own")

	var ids []string
	cursor := ""
	for {
		path := "/workflows/v1/" + alone.ID + "?limit=2"
		if cursor != "" {
			path += "&cursor=" + cursor
		}
		var page workflowPage
		c.Do(http.MethodGet, path, nil).Expect(t, http.StatusOK, &page)
		require.EqualValues(t, 5, page.Total)
		for _, tk := range page.Tasks {
			ids = append(ids, tk.ID)
			require.Equal(t, alone.ID, tk.WorkflowID)
		}
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	require.Len(t, ids, 5)
	require.Equal(t, alone.ID, ids[0])
	require.IsIncreasing(t, ids, "oldest first")

	listed := c.List("workflow_id=" + alone.ID + "&limit=10")
	require.Len(t, listed.Tasks, 5)
	require.Equal(t, ids[4], listed.Tasks[0].ID, "the listing is newest first")
	require.Len(t, c.List("workflow_id="+alone.ID+"&status=BLOCKED").Tasks, 1)
	r := c.Do(http.MethodGet, "/tasks/v1?workflow_id=nope", nil)
	require.Equal(t, []string{"workflow_id"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())
	r = c.Do(http.MethodGet, "/workflows/v1/"+alone.ID+"?limit=0", nil)
	require.Equal(t, []string{"limit"}, r.Problem(t, http.StatusUnprocessableEntity, "validation-error").Fields())

	// Events name the run of a task in another's run, not of one alone.
	var submitted []outboxEvent
	var payloads []string
	require.NoError(t, s.DB.SelectContext(t.Context(), &payloads, `SELECT payload::text FROM watermill_taskmaster_events`))
	runs := map[string]string{}
	for _, p := range payloads {
		var env struct {
			Events []struct {
				outboxEvent
				WorkflowID string `json:"workflow_id"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal([]byte(p), &env))
		for _, e := range env.Events {
			if e.Type == "task.submitted" {
				submitted = append(submitted, e.outboxEvent)
				runs[e.TaskID] = e.WorkflowID
			}
		}
	}
	require.Empty(t, runs[alone.ID])
	require.Equal(t, alone.ID, runs[joined.Tasks[0].ID])
	require.NotEmpty(t, submitted)
}

// A key limited to some queues sees, lists and spawns only within them: a
// run's page counts its tasks in the key's queues, a run with none of them
// is not found; spawning is producing.
func TestWorkflowRespectsKeyQueues(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	ts, _ := submitGraph(t, s.admin, jsonObj{"queue": "a-1", "ref": "x"}, jsonObj{"queue": "b-1", "depends_on": []string{"x"}})
	hidden := s.admin.Submit(jsonObj{"queue": "b-2"})
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read"}, "queues": []string{"a-*"}})
	var page workflowPage
	reader.Do(http.MethodGet, "/workflows/v1/"+ts[0].ID, nil).Expect(t, http.StatusOK, &page)
	require.EqualValues(t, 1, page.Total, "only the task of its queues")
	require.Len(t, page.Tasks, 1)
	reader.Do(http.MethodGet, "/workflows/v1/"+hidden.ID, nil).Problem(t, http.StatusNotFound, "workflow-not-found")
	require.Len(t, reader.List("workflow_id="+ts[0].ID).Tasks, 1)
	forbiddenProblem(t, reader.Do(http.MethodPost, "/workflows/v1/"+ts[0].ID+"/cancel", nil))

	// A worker key without produce may not spawn.
	worker, _ := s.key(t, jsonObj{"scopes": []string{"work"}, "queues": []string{"a-*"}})
	worker.Register(jsonObj{"id": "kw", "queues": []string{"a-1"}})
	got := worker.Claim(jsonObj{"worker_id": "kw", "queue": "a-1"})
	require.Len(t, got, 1)
	forbiddenProblem(t, worker.Do(http.MethodPost, reportPath(got[0].ID, "spawn"), holderBody(got[0], jsonObj{"tasks": []jsonObj{{"queue": "a-2"}}})))
	both, _ := s.key(t, jsonObj{"scopes": []string{"work", "produce", "read"}, "queues": []string{"a-*"}})
	s.admin.Submit(jsonObj{"queue": "a-3"})
	both.Register(jsonObj{"id": "kb", "queues": []string{"a-3"}})
	mine := both.Claim(jsonObj{"worker_id": "kb", "queue": "a-3"})
	require.Len(t, mine, 1)
	p := forbiddenProblem(t, both.Do(http.MethodPost, reportPath(mine[0].ID, "spawn"), holderBody(mine[0], jsonObj{"tasks": []jsonObj{{"queue": "b-9"}}})))
	require.Equal(t, "b-9", p["queue"])
	kids := spawn(t, both, mine[0], jsonObj{"queue": "a-4"})
	require.Equal(t, mine[0].ID, kids[0].WorkflowID)
}

// GET /events/v1?workflow_id= follows a run: its first task's events (they
// name no run: the task is its own), its other tasks' (they name it) and
// its audit events; nothing of other runs.
func TestEventStreamFollowsAWorkflow(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	q := "ev-" + uuid.NewString()
	root := submitAndClaim(t, c, "ew", jsonObj{"queue": q})
	other := c.Submit(jsonObj{"queue": q})
	var kids []testclient.Task
	dead := 0
	events := readEventsUntil(t, c, s.URL, "workflow_id="+root.ID, func() {
		kids = spawn(t, c, root, jsonObj{"queue": q + "-kid"}, jsonObj{"queue": q + "-kid"})
		c.Do(http.MethodPost, "/tasks/v1/"+other.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
		c.Do(http.MethodPost, "/workflows/v1/"+root.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	}, func(data string) bool {
		if strings.Contains(data, `"task.dead_lettered"`) {
			dead++
		}
		return dead == 2 // the children's, after the root's cancel request
	})
	seen := map[string]bool{}
	for _, e := range events {
		require.NotContains(t, e, other.ID)
		var ev struct {
			Type       string `json:"type"`
			TaskID     string `json:"task_id"`
			WorkflowID string `json:"workflow_id"`
		}
		require.NoError(t, json.Unmarshal([]byte(e), &ev))
		seen[ev.Type+" "+ev.TaskID] = true
		if ev.TaskID != root.ID {
			require.Equal(t, root.ID, ev.WorkflowID, e)
		}
	}
	for _, k := range kids {
		require.True(t, seen["task.submitted "+k.ID], "%v", seen)
		require.True(t, seen["task.dead_lettered "+k.ID], "%v", seen)
	}
	require.True(t, seen["task.cancel_requested "+root.ID], "%v", seen)
	require.True(t, seen["audit.workflow_cancelled "], "%v", seen)
	c.Do(http.MethodGet, "/events/v1?workflow_id=nope", nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
}
