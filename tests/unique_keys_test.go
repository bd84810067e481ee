package tests

import (
	"net/http"
	"sync"
	"testing"

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
