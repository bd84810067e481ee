package tests

import (
	"net/http"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// 20 concurrent submissions with one unique key create exactly one task;
// the others get it back (200). Once it is DONE the key is free again.
func TestUniqueKeyRaceCreatesOneTaskAndIsFreeAfterDone(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	body := jsonObj{"queue": "reports", "unique_key": "daily-report", "payload": jsonObj{"day": 1}}
	const n = 20
	statuses := make([]int, n)
	ids := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := c.Send(http.MethodPost, "/tasks/v1", body, nil)
			if !assertNoError(t, err) {
				return
			}
			var got testclient.Task
			r.Expect(t, r.Status, &got)
			statuses[i], ids[i] = r.Status, got.ID
		}()
	}
	close(start)
	wg.Wait()
	created := 0
	for i := range n {
		require.Contains(t, []int{http.StatusCreated, http.StatusOK}, statuses[i])
		if statuses[i] == http.StatusCreated {
			created++
		}
		require.Equal(t, ids[0], ids[i], "every submission names the one task")
	}
	require.Equal(t, 1, created)
	var rows int
	require.NoError(t, s.DB.Get(&rows, `SELECT count(*) FROM tasks WHERE unique_key = 'daily-report'`))
	require.Equal(t, 1, rows)
	first := c.Get(ids[0])
	require.Equal(t, "daily-report", *first.UniqueKey)

	// Held while RUNNING, free once DONE.
	running := submitAndClaimExisting(t, c, "w1", first)
	var again testclient.Task
	c.Do(http.MethodPost, "/tasks/v1", body).Expect(t, http.StatusOK, &again)
	require.Equal(t, first.ID, again.ID)
	c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	next := c.Submit(body)
	require.NotEqual(t, first.ID, next.ID, "a new task once the holder is DONE")
}

// submitAndClaimExisting claims the existing PENDING task want for worker.
func submitAndClaimExisting(t *testing.T, c *testclient.Client, worker string, want testclient.Task) testclient.Task {
	t.Helper()
	c.Register(jsonObj{"id": worker, "queues": []string{want.Queue}})
	got := c.Claim(jsonObj{"worker_id": worker, "queue": want.Queue})
	require.Len(t, got, 1)
	require.Equal(t, want.ID, got[0].ID)
	return got[0]
}

func assertNoError(t *testing.T, err error) bool {
	t.Helper()
	if err != nil {
		t.Errorf("request failed: %v", err)
		return false
	}
	return true
}

// A submission carrying both keys: the idempotency key decides first (the
// queue's task with it, whatever its status), then the unique key (an
// unfinished holder); else a new task that holds both.
func TestSubmitWithBothKeys(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	holder := c.Submit(jsonObj{"queue": "q", "unique_key": "u"})
	var got testclient.Task
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "unique_key": "u", "idempotency_key": "i"}).Expect(t, http.StatusOK, &got)
	require.Equal(t, holder.ID, got.ID, "no task has i: the unique key's holder is returned")
	require.Nil(t, got.IdempotencyKey)

	running := submitAndClaimExisting(t, c, "w1", holder)
	c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	both := c.Submit(jsonObj{"queue": "q", "unique_key": "u", "idempotency_key": "i"})
	require.Equal(t, "i", *both.IdempotencyKey)
	require.Equal(t, "u", *both.UniqueKey)

	running = submitAndClaimExisting(t, c, "w1", both)
	c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "unique_key": "u", "idempotency_key": "i"}).Expect(t, http.StatusOK, &got)
	require.Equal(t, both.ID, got.ID, "the idempotency key still names the DONE task")
	require.Equal(t, "DONE", got.Status)
}

// In a batch, repeats of a unique key behave like repeated submissions.
func TestBatchWithUniqueKeys(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	held := c.Submit(jsonObj{"queue": "q", "unique_key": "a"})
	var out struct {
		Tasks   []testclient.Task `json:"tasks"`
		Created []bool            `json:"created"`
	}
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{
		{"queue": "q", "unique_key": "a"}, {"queue": "q", "unique_key": "b"}, {"queue": "q", "unique_key": "b"}, {"queue": "q"},
	}}).Expect(t, http.StatusCreated, &out)
	require.Equal(t, []bool{false, true, false, true}, out.Created)
	require.Equal(t, held.ID, out.Tasks[0].ID)
	require.Equal(t, out.Tasks[1].ID, out.Tasks[2].ID)
}

func TestUniqueKeyValidationAndRetryConflict(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	p := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "unique_key": ""}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"unique_key"}, p.Fields())
	p = c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "q"}, {"queue": "q", "unique_key": "a\u0001"}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[1].unique_key"}, p.Fields())

	// An operator's retry of a DEAD task whose key another task holds now.
	old := c.Submit(jsonObj{"queue": "q", "unique_key": "k"})
	c.Do(http.MethodPost, "/tasks/v1/"+old.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	c.Submit(jsonObj{"queue": "q", "unique_key": "k"})
	c.Do(http.MethodPost, "/tasks/v1/"+old.ID+"/retry", nil).Problem(t, http.StatusConflict, "unique-key-taken")
	require.Equal(t, "DEAD", c.Get(old.ID).Status)
	var retried int
	require.NoError(t, s.DB.Get(&retried, `SELECT count(*) FROM watermill_taskmaster_events WHERE payload::text LIKE '%task.retried%'`))
	require.Zero(t, retried, "nothing was recorded")
}

// A BLOCKED task holds its unique key like a PENDING or RUNNING one: a
// plain submission, a batch item and a complete's enqueue with the key all
// get it back; once it ends (DEAD here: its parent was cancelled) the key
// is free again.
func TestUniqueKeyHeldWhileBlocked(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	queue := "u-" + uuid.NewString()
	ts, created := submitGraph(t, c,
		jsonObj{"queue": queue, "ref": "parent"},
		jsonObj{"queue": queue, "unique_key": "k", "depends_on": []string{"parent"}})
	require.Equal(t, []bool{true, true}, created)
	blocked := ts[1]
	require.Equal(t, "BLOCKED", blocked.Status)
	require.Equal(t, "k", *blocked.UniqueKey)

	var got testclient.Task
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": queue, "unique_key": "k"}).Expect(t, http.StatusOK, &got)
	require.Equal(t, blocked.ID, got.ID, "the BLOCKED holder is returned")
	require.Equal(t, "BLOCKED", got.Status)

	var batch struct {
		Tasks   []testclient.Task `json:"tasks"`
		Created []bool            `json:"created"`
	}
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": queue, "unique_key": "k"}, {"queue": queue}}}).
		Expect(t, http.StatusCreated, &batch)
	require.Equal(t, []bool{false, true}, batch.Created)
	require.Equal(t, blocked.ID, batch.Tasks[0].ID)

	other := submitAndClaim(t, c, "w", jsonObj{"queue": "stage-" + uuid.NewString()})
	var done testclient.Task
	c.Do(http.MethodPost, reportPath(other.ID, "complete"),
		holderBody(other, jsonObj{"enqueue": []jsonObj{{"queue": queue, "unique_key": "k"}}})).Expect(t, http.StatusOK, &done)
	require.Len(t, done.Enqueued, 1)
	require.Equal(t, blocked.ID, done.Enqueued[0].ID, "complete-and-enqueue sees the BLOCKED holder")
	var held int
	require.NoError(t, s.DB.Get(&held, `SELECT count(*) FROM tasks WHERE queue = $1 AND unique_key = 'k'`, queue))
	require.Equal(t, 1, held)

	// Cancelling the parent ends the holder DEAD (dependency_failed): free.
	c.Do(http.MethodPost, "/tasks/v1/"+ts[0].ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	require.Equal(t, "DEAD", c.Get(blocked.ID).Status)
	next := c.Submit(jsonObj{"queue": queue, "unique_key": "k"})
	require.NotEqual(t, blocked.ID, next.ID)
}

// In a batch with dependencies an item whose unique key an unfinished task
// holds (existing PENDING or BLOCKED, or an earlier item of the batch) is
// that task, as an item with a repeated idempotency key is: its depends_on
// is not applied, and its dependants depend on the holder. An item born
// DEAD (its parent is DEAD) holds nothing. Once the holder is DONE or
// DEAD, the key makes a new task.
func TestDependencyBatchResolvesUniqueKeysToTheirHolders(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	queue, sink, other := "u-"+uuid.NewString(), "sink-"+uuid.NewString(), "o-"+uuid.NewString()
	pending := c.Submit(jsonObj{"queue": queue, "unique_key": "a"})
	gate := c.Submit(jsonObj{"queue": "gate-" + uuid.NewString()})
	first, _ := submitGraph(t, c, jsonObj{"queue": queue, "unique_key": "b", "depends_on": []string{gate.ID}})
	blocked := first[0]
	require.Equal(t, "BLOCKED", blocked.Status)
	dead := c.Submit(jsonObj{"queue": queue})
	c.Do(http.MethodPost, "/tasks/v1/"+dead.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)

	ts, created := submitGraph(t, c,
		jsonObj{"queue": queue, "ref": "a", "unique_key": "a", "depends_on": []string{gate.ID}},
		jsonObj{"queue": queue, "ref": "b", "unique_key": "b"},
		jsonObj{"queue": queue, "ref": "c1", "unique_key": "c", "depends_on": []string{gate.ID}},
		jsonObj{"queue": queue, "ref": "c2", "unique_key": "c"},
		jsonObj{"queue": other, "ref": "d1", "unique_key": "d", "depends_on": []string{dead.ID}},
		jsonObj{"queue": other, "ref": "d2", "unique_key": "d"},
		jsonObj{"queue": sink, "depends_on": []string{"a", "b", "c2", "d1", "d2"}},
	)
	require.Equal(t, []bool{false, false, true, false, true, true, true}, created)
	require.Equal(t, pending.ID, ts[0].ID, "the PENDING holder, its depends_on not applied")
	require.Equal(t, "PENDING", ts[0].Status)
	require.Equal(t, []string{}, c.Describe(pending.ID).DependsOn)
	require.Equal(t, blocked.ID, ts[1].ID, "the BLOCKED holder")
	require.Equal(t, "BLOCKED", ts[2].Status)
	require.Equal(t, ts[2].ID, ts[3].ID, "an earlier item of the batch holds it")
	require.Equal(t, "DEAD", ts[4].Status)
	require.Equal(t, "PENDING", ts[5].Status, "a task born DEAD holds no key")
	require.NotEqual(t, ts[4].ID, ts[5].ID)
	child := c.Describe(ts[6].ID)
	require.Equal(t, "DEAD", child.Status, "d1 is DEAD")
	require.Equal(t, []string{pending.ID, blocked.ID, ts[2].ID, ts[4].ID, ts[5].ID}, child.DependsOn)

	// A live dependant of the holders, then the holders end.
	ts, _ = submitGraph(t, c, jsonObj{"queue": sink, "depends_on": []string{pending.ID, blocked.ID}},
		jsonObj{"queue": queue, "unique_key": "a", "ref": "again"})
	require.Equal(t, pending.ID, ts[1].ID)
	require.Equal(t, []string{pending.ID, blocked.ID}, c.Describe(ts[0].ID).BlockedBy)
	running := submitAndClaimExisting(t, c, "w", pending)
	c.Complete(running.ID, holderBody(running, nil))
	require.Equal(t, []string{blocked.ID}, c.Describe(ts[0].ID).BlockedBy, "the holder's completion counts for the dependant")
	c.Do(http.MethodPost, "/tasks/v1/"+blocked.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	require.Equal(t, "DEAD", c.Get(ts[0].ID).Status)

	again, created := submitGraph(t, c,
		jsonObj{"queue": queue, "ref": "a", "unique_key": "a"},
		jsonObj{"queue": queue, "ref": "b", "unique_key": "b"},
		jsonObj{"queue": sink, "depends_on": []string{"a", "b"}})
	require.Equal(t, []bool{true, true, true}, created, "free once DONE or DEAD")
	require.NotEqual(t, pending.ID, again[0].ID)
	require.NotEqual(t, blocked.ID, again[1].ID)
}

// 20 concurrent batches with dependencies, each holding one unique key
// (half of them BLOCKED behind a common parent, half PENDING) and a
// dependant of it, create exactly one task with the key; every batch gets
// that task back and its own dependant depends on it.
func TestUniqueKeyRaceInDependencyBatches(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	queue, sink := "u-"+uuid.NewString(), "sink-"+uuid.NewString()
	gate := c.Submit(jsonObj{"queue": "gate-" + uuid.NewString()})
	const n = 20
	holders := make([]string, n)
	dependants := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			item := jsonObj{"queue": queue, "ref": "u", "unique_key": "race", "payload": i}
			if i%2 == 0 {
				item["depends_on"] = []string{gate.ID}
			}
			<-start
			r, err := c.Send(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{
				item, {"queue": sink, "depends_on": []string{"u"}},
			}}, nil)
			if !assertNoError(t, err) {
				return
			}
			var out struct {
				Tasks []testclient.Task `json:"tasks"`
			}
			r.Expect(t, http.StatusCreated, &out)
			if len(out.Tasks) != 2 {
				t.Errorf("batch %d: %d tasks", i, len(out.Tasks))
				return
			}
			holders[i], dependants[i] = out.Tasks[0].ID, out.Tasks[1].ID
		}()
	}
	close(start)
	wg.Wait()
	var rows int
	require.NoError(t, s.DB.Get(&rows, `SELECT count(*) FROM tasks WHERE queue = $1`, queue))
	require.Equal(t, 1, rows, "one task holds the key")
	for i := range n {
		require.Equal(t, holders[0], holders[i], "batch %d names the one holder", i)
		require.Equal(t, []string{holders[0]}, c.Describe(dependants[i]).DependsOn, "batch %d's dependant", i)
	}
	require.Equal(t, n, countTasks(t, s, sink))
}
