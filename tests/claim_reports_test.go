package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// claimAnswer is a claim's answer with the outcomes of the reports it
// carried.
type claimAnswer struct {
	Tasks     []testclient.Task `json:"tasks"`
	Truncated bool              `json:"truncated"`
	Completed []claimOutcome    `json:"completed"`
	Failed    []claimOutcome    `json:"failed"`
}

type claimOutcome struct {
	ID      string              `json:"id"`
	Outcome string              `json:"outcome"`
	Task    *testclient.Task    `json:"task"`
	Problem *testclient.Problem `json:"problem"`
}

// claimReporting claims with body and requires 200.
func claimReporting(t *testing.T, c *testclient.Client, body jsonObj) claimAnswer {
	t.Helper()
	var out claimAnswer
	c.Do(http.MethodPost, "/tasks/v1/claim", body).Expect(t, http.StatusOK, &out)
	return out
}

func leaseItem(task testclient.Task, more jsonObj) jsonObj {
	item := jsonObj{"id": task.ID, "lease_id": task.Lease()}
	maps.Copy(item, more)
	return item
}

// A worker reports the tasks it finished and takes its next ones in one
// request: the reports are applied as the batch reports apply them (each
// fenced on its own, outcomes in request order), then the claim.
func TestAClaimCarriesTheWorkersReports(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1", "queues": []string{"q"}})
	var ids []string
	for i := range 4 {
		ids = append(ids, c.Submit(jsonObj{"queue": "q", "payload": jsonObj{"n": i}}).ID)
	}
	held := c.Claim(jsonObj{"worker_id": "w1", "limit": 3})
	require.Len(t, held, 3)
	stale := c.Submit(jsonObj{"queue": "other"})

	got := claimReporting(t, c, jsonObj{"worker_id": "w1", "limit": 2,
		"complete": []jsonObj{leaseItem(held[0], jsonObj{"result": jsonObj{"rows": 7}}), leaseItem(held[1], nil)},
		"fail": []jsonObj{
			leaseItem(held[2], jsonObj{"error": "boom", "retryable": false}),
			{"id": stale.ID, "lease_id": held[0].Lease()},
		}})

	require.Len(t, got.Tasks, 1, "one task was left")
	require.Equal(t, ids[3], got.Tasks[0].ID)
	require.Equal(t, "RUNNING", got.Tasks[0].Status)
	require.Len(t, got.Completed, 2)
	for i, o := range got.Completed {
		require.Equal(t, held[i].ID, o.ID)
		require.Equal(t, "done", o.Outcome)
		require.Equal(t, "DONE", o.Task.Status)
		require.Equal(t, *o.Task, c.Get(o.ID))
	}
	require.JSONEq(t, `{"rows": 7}`, string(got.Completed[0].Task.Result))
	require.Len(t, got.Failed, 2)
	require.Equal(t, "dead", got.Failed[0].Outcome)
	require.Equal(t, "non_retryable", c.Get(held[2].ID).Reason())
	require.Equal(t, "error", got.Failed[1].Outcome, "a task the worker does not hold")
	require.Equal(t, testclient.ProblemTypePrefix+"lease-lost", got.Failed[1].Problem.Type)
	require.Equal(t, "PENDING", c.Get(stale.ID).Status)

	// Every transition once, with its event.
	for i, want := range [][]string{
		{"task.submitted", "task.claimed", "task.completed"},
		{"task.submitted", "task.claimed", "task.completed"},
		{"task.submitted", "task.claimed", "task.failed"},
		{"task.submitted", "task.claimed"},
	} {
		var types []string
		for _, e := range taskEvents(t, s, ids[i]) {
			types = append(types, e.Type)
		}
		require.Equal(t, want, types, "task %d", i)
	}

	// A claim without reports answers without outcomes.
	var raw map[string]json.RawMessage
	c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w1"}).Expect(t, http.StatusOK, &raw)
	require.NotContains(t, raw, "completed")
	require.NotContains(t, raw, "failed")
}

// What a claim's reports may not hold is a 422 naming the item, and the
// request changes nothing: no report applied, nothing claimed.
func TestAClaimsReportsAreCheckedBeforeAnythingChanges(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	waiting := c.Submit(jsonObj{"queue": "q"})
	for name, tc := range map[string]struct {
		body  jsonObj
		field string
	}{
		"no lease":          {jsonObj{"complete": []jsonObj{{"id": running.ID}}}, "complete[0].lease_id"},
		"no id":             {jsonObj{"fail": []jsonObj{{"lease_id": running.Lease()}}}, "fail[0].id"},
		"an error on done":  {jsonObj{"complete": []jsonObj{leaseItem(running, jsonObj{"error": "x"})}}, "complete[0].error"},
		"a result on fail":  {jsonObj{"fail": []jsonObj{leaseItem(running, jsonObj{"result": 1})}}, "fail[0].result"},
		"enqueue":           {jsonObj{"complete": []jsonObj{leaseItem(running, jsonObj{"enqueue": []jsonObj{{"queue": "q"}}})}}, "complete[0].enqueue"},
		"the same task":     {jsonObj{"complete": []jsonObj{leaseItem(running, nil)}, "fail": []jsonObj{leaseItem(running, nil)}}, "fail[0].id"},
		"repeated":          {jsonObj{"complete": []jsonObj{leaseItem(running, nil), leaseItem(running, nil)}}, "complete[1].id"},
		"a bad claim field": {jsonObj{"complete": []jsonObj{leaseItem(running, nil)}, "limit": 0}, "limit"},
	} {
		body := jsonObj{"worker_id": "w1", "queue": "q"}
		maps.Copy(body, tc.body)
		p := c.Do(http.MethodPost, "/tasks/v1/claim", body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Contains(t, p.Fields(), tc.field, name)
	}
	tooMany := make([]jsonObj, 1001)
	for i := range tooMany {
		tooMany[i] = jsonObj{"id": fmt.Sprintf("00000000-0000-4000-8000-%012d", i), "lease_id": running.Lease()}
	}
	p := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w1", "complete": tooMany}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Contains(t, p.Fields(), "complete")
	require.Equal(t, running, c.Get(running.ID))
	require.Equal(t, "PENDING", c.Get(waiting.ID).Status)
}

// The request is all or nothing: a claim that fails (here, its worker was
// declared DEAD) saves none of the reports it carried.
func TestAClaimThatFailsSavesNoneOfItsReports(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	c.Submit(jsonObj{"queue": "q"})
	stage(t, s, `UPDATE workers SET status = 'DEAD' WHERE id = 'w1'`)

	c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w1", "complete": []jsonObj{leaseItem(running, nil)}}).
		Problem(t, http.StatusConflict, "worker-dead")
	// The heartbeat reaper may give the DEAD worker's task back meanwhile
	// (tasks RUNNING under a DEAD worker are orphans): never DONE.
	require.NotEqual(t, "DONE", c.Get(running.ID).Status, "the completion rolled back with the claim")
	for _, e := range taskEvents(t, s, running.ID) {
		require.NotEqual(t, "task.completed", e.Type)
	}
}

// A waiting claim's reports are saved with its first attempt: a producer
// sees the task DONE while the claim still waits, and the claim answers
// with the reports' outcomes whether it ends with a task or with none.
func TestAWaitingClaimSavesItsReportsAtOnce(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	first := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})

	answers := make(chan claimAnswer, 1)
	go func() {
		var out claimAnswer
		r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w1", "queue": "q", "wait_ms": 20000,
			"complete": []jsonObj{leaseItem(first, jsonObj{"result": "ok"})}}, nil)
		if err == nil && r.Status == http.StatusOK {
			err = json.Unmarshal(r.Body, &out)
		}
		answers <- out
	}()
	testclient.Poll(t, 10*time.Second, "the task DONE while its reporter waits", func() bool {
		return c.Get(first.ID).Status == "DONE"
	})
	next := c.Submit(jsonObj{"queue": "q"})
	var got claimAnswer
	select {
	case got = <-answers:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting claim was not woken by the submit")
	}
	require.Len(t, got.Tasks, 1)
	require.Equal(t, next.ID, got.Tasks[0].ID)
	require.Len(t, got.Completed, 1)
	require.Equal(t, "done", got.Completed[0].Outcome)

	// At the end of its wait, with no task.
	got = claimReporting(t, c, jsonObj{"worker_id": "w1", "queue": "q", "wait_ms": 200,
		"fail": []jsonObj{leaseItem(got.Tasks[0], jsonObj{"error": "later"})}})
	require.Empty(t, got.Tasks)
	require.Len(t, got.Failed, 1)
	require.Equal(t, "requeued", got.Failed[0].Outcome)
	require.Nil(t, got.Completed)
}

// Workers that report and claim in the same requests, concurrently, take
// every task exactly once and complete it exactly once.
func TestWorkersThatReportAsTheyClaimTakeEveryTaskOnce(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	const tasks, workers = 300, 8
	items := make([]jsonObj, tasks)
	for i := range items {
		items[i] = jsonObj{"queue": "fused"}
	}
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items}).Expect(t, http.StatusCreated, nil)

	var (
		mu      sync.Mutex
		claimed = map[string]int{}
		done    = map[string]int{}
		wg      sync.WaitGroup
	)
	for w := range workers {
		id := fmt.Sprintf("fw%d", w)
		c.Register(jsonObj{"id": id, "queues": []string{"fused"}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			var held []jsonObj
			for {
				body := jsonObj{"worker_id": id, "limit": 1 + w%2}
				if held != nil {
					body["complete"] = held
				}
				var out claimAnswer
				r, err := c.Send(http.MethodPost, "/tasks/v1/claim", body, nil)
				if err != nil || r.Status != http.StatusOK || json.Unmarshal(r.Body, &out) != nil {
					t.Errorf("claim of %s: %v %v", id, err, r)
					return
				}
				mu.Lock()
				for _, o := range out.Completed {
					if o.Outcome != "done" {
						t.Errorf("a report came back %q: %+v", o.Outcome, o.Problem)
					}
					done[o.ID]++
				}
				for _, tk := range out.Tasks {
					claimed[tk.ID]++
				}
				mu.Unlock()
				if len(out.Tasks) == 0 {
					return
				}
				held = held[:0]
				for _, tk := range out.Tasks {
					held = append(held, leaseItem(tk, nil))
				}
			}
		}()
	}
	wg.Wait()
	require.Len(t, claimed, tasks)
	require.Len(t, done, tasks)
	for id, n := range claimed {
		require.Equal(t, 1, n, "claimed %s", id)
		require.Equal(t, 1, done[id], "completed %s", id)
	}
	for id, events := range eventsByTask(t, s) {
		if claimed[id] == 0 {
			continue
		}
		var types []string
		for _, e := range events {
			types = append(types, e.Type)
		}
		require.Equal(t, []string{"task.submitted", "task.claimed", "task.completed"}, types, id)
	}
}
