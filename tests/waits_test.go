package tests

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// noSafetyCheck leaves waiting producers to notifications alone: their
// safety check comes after every test's end.
func noSafetyCheck(c *app.Config) { c.App.AwaitSafetyInterval = 10 * time.Minute }

// waitFor starts GET /tasks/v1/{id}?wait_ms=ms on c and returns the answer
// and when it came.
func waitFor(c *testclient.Client, id string, ms int) <-chan waitAnswer {
	out := make(chan waitAnswer, 1)
	go func() {
		r := c.Do(http.MethodGet, "/tasks/v1/"+id+"?wait_ms="+strconv.Itoa(ms), nil)
		var task testclient.Task
		_ = json.Unmarshal(r.Body, &task)
		out <- waitAnswer{status: r.Status, task: task, at: time.Now()}
	}()
	return out
}

type waitAnswer struct {
	status int
	task   testclient.Task
	at     time.Time
}

// awaited reports whether task id is marked awaited (a producer waits for
// it and the end of it will be announced).
func awaited(t *testing.T, s *testserver.Server, id string) bool {
	var b bool
	require.NoError(t, s.DB.Get(&b, `SELECT awaited FROM tasks WHERE id = $1`, id))
	return b
}

// A producer waiting on one instance is woken by the completion made
// through another: the completing transaction announces the end of the
// awaited task, and the waiter's instance wakes it (its safety check is
// minutes away, so the notification is the only way it can answer).
func TestWaiterIsWokenByACompletionOnAnotherInstance(t *testing.T) {
	t.Parallel()
	db := pgtest.NewDatabase(t)
	a := testserver.StartOn(t, db, noSafetyCheck)
	b := testserver.StartOn(t, db, noSafetyCheck)
	ca, cb := testclient.New(t, a.URL), testclient.New(t, b.URL)

	task := ca.Submit(jsonObj{"queue": "waits"})
	waiting := waitFor(cb, task.ID, 30000)
	testclient.Poll(t, 10*time.Second, "the waiter to mark the task", func() bool { return awaited(t, b, task.ID) })
	require.Equal(t, 1.0, scrape(t, b.URL, "taskmaster_task_waiters"))

	ca.Register(jsonObj{"id": "w"})
	claimed := ca.Claim(jsonObj{"worker_id": "w"})
	require.Len(t, claimed, 1)
	done := ca.Complete(task.ID, jsonObj{"worker_id": "w", "lease_id": claimed[0].Lease(), "result": "ok"})
	completedAt := time.Now()
	require.Equal(t, "DONE", done.Status)

	select {
	case ans := <-waiting:
		require.Equal(t, http.StatusOK, ans.status)
		require.Equal(t, "DONE", ans.task.Status)
		require.JSONEq(t, `"ok"`, string(ans.task.Result))
		t.Logf("waiter answered %s after the completion's answer", ans.at.Sub(completedAt))
	case <-time.After(20 * time.Second):
		t.Fatal("the waiter was not woken")
	}
	require.Equal(t, 1.0, scrape(t, b.URL, "taskmaster_task_waiter_wakeups_total"), "woken by the announcement")
	require.Equal(t, 0.0, scrape(t, b.URL, "taskmaster_task_waiters"))
}

// The end of a task nobody waits for is announced to no one: only the
// awaited task's completion sends a notification.
func TestOnlyAwaitedTasksAnnounceTheirEnd(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, noSafetyCheck)
	plain := c.Submit(jsonObj{"queue": "q"})
	waited := c.Submit(jsonObj{"queue": "q"})
	waiting := waitFor(c, waited.ID, 30000)
	testclient.Poll(t, 10*time.Second, "the waiter to mark the task", func() bool { return awaited(t, s, waited.ID) })
	require.False(t, awaited(t, s, plain.ID))
	c.Register(jsonObj{"id": "w"})
	for _, task := range c.Claim(jsonObj{"worker_id": "w", "limit": 2}) {
		c.Complete(task.ID, jsonObj{"worker_id": "w", "lease_id": task.Lease()})
	}
	ans := <-waiting
	require.Equal(t, "DONE", ans.task.Status)
	require.Equal(t, 1.0, scrape(t, s.URL, "taskmaster_task_waiter_wakeups_total"))
}

// A wait that ends first answers with the task as it is, 200 all the
// same; a finished task answers at once; a wait out of range is a 422.
func TestWaitEndsWithTheTaskAsItIs(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	task := c.Submit(jsonObj{"queue": "q"})
	start := time.Now()
	r := c.Do(http.MethodGet, "/tasks/v1/"+task.ID+"?wait_ms=300", nil).Expect(t, http.StatusOK, nil)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	var got testclient.TaskDetail
	require.NoError(t, json.Unmarshal(r.Body, &got))
	require.Equal(t, "PENDING", got.Status)
	require.NotNil(t, got.DependsOn, "the detail, as without wait_ms")

	c.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	start = time.Now()
	r = c.Do(http.MethodGet, "/tasks/v1/"+task.ID+"?wait_ms=60000", nil).Expect(t, http.StatusOK, nil)
	require.Less(t, time.Since(start), 30*time.Second, "a finished task answers at once")
	require.Contains(t, string(r.Body), `"status":"DEAD"`)

	for _, q := range []string{"-1", "60001", "soon", "1.5"} {
		p := c.Do(http.MethodGet, "/tasks/v1/"+task.ID+"?wait_ms="+q, nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"wait_ms"}, p.Fields(), q)
	}
	c.Do(http.MethodGet, "/tasks/v1/00000000-0000-4000-8000-000000000000?wait_ms=1000", nil).Problem(t, http.StatusNotFound, "task-not-found")
}

// POST /tasks/v1?wait_ms submits and answers once the task finished (201
// with the task as a worker left it); a wait out of range submits nothing.
func TestSubmitAndWait(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, noSafetyCheck)
	c.Register(jsonObj{"id": "w"})
	worker := make(chan struct{})
	go func() {
		defer close(worker)
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); {
			r := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "wait_ms": 1000})
			var claimed struct{ Tasks []testclient.Task }
			if json.Unmarshal(r.Body, &claimed) == nil && len(claimed.Tasks) == 1 {
				task := claimed.Tasks[0]
				c.Complete(task.ID, jsonObj{"worker_id": "w", "lease_id": task.Lease(), "result": jsonObj{"echo": task.Payload}})
				return
			}
		}
	}()
	r := c.Do(http.MethodPost, "/tasks/v1?wait_ms=30000", jsonObj{"queue": "q", "payload": 7}).Expect(t, http.StatusCreated, nil)
	var task testclient.Task
	require.NoError(t, json.Unmarshal(r.Body, &task))
	require.Equal(t, "DONE", task.Status)
	require.JSONEq(t, `{"echo": 7}`, string(task.Result))
	require.True(t, strings.HasPrefix(r.Header.Get("Location"), "/tasks/v1/"))
	<-worker

	var before, after int
	require.NoError(t, s.DB.Get(&before, `SELECT count(*) FROM tasks`))
	c.Do(http.MethodPost, "/tasks/v1?wait_ms=60001", jsonObj{"queue": "q"}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.NoError(t, s.DB.Get(&after, `SELECT count(*) FROM tasks`))
	require.Equal(t, before, after, "a refused wait submits nothing")

	// An idempotent submission that names a finished task answers at once.
	c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "k", "idempotency_key": "once"}).Expect(t, http.StatusCreated, nil)
	var again testclient.Task
	r = c.Do(http.MethodPost, "/tasks/v1?wait_ms=200", jsonObj{"queue": "k", "idempotency_key": "once"}).Expect(t, http.StatusOK, &again)
	require.Equal(t, "PENDING", again.Status, "the wait ended with the task as it is")
}

// Waiting producers hold no database connection: many more of them than
// the pool has connections wait at once, while the instance goes on
// serving, and they all answer when their task finishes.
func TestWaitersHoldNoConnection(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, func(cfg *app.Config) {
		noSafetyCheck(cfg)
		cfg.Pool.MaxOpen, cfg.Pool.MaxIdle = 4, 4
	})
	task := c.Submit(jsonObj{"queue": "q"})
	const n = 40
	answers := make([]<-chan waitAnswer, n)
	for i := range answers {
		answers[i] = waitFor(c, task.ID, 30000)
	}
	testclient.Poll(t, 20*time.Second, "every waiter to wait", func() bool {
		return scrape(t, s.URL, "taskmaster_task_waiters") == n
	})
	// The pool (4 connections) still serves everything else.
	other := c.Submit(jsonObj{"queue": "other"})
	require.Equal(t, "PENDING", c.Get(other.ID).Status)
	c.Register(jsonObj{"id": "w"})
	claimed := c.Claim(jsonObj{"worker_id": "w", "queue": "q"})
	require.Len(t, claimed, 1)
	c.Fail(task.ID, jsonObj{"worker_id": "w", "lease_id": claimed[0].Lease(), "error": "no", "retryable": false})
	var wg sync.WaitGroup
	for _, ch := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case ans := <-ch:
				require.Equal(t, "DEAD", ans.task.Status)
			case <-time.After(20 * time.Second):
				t.Error("a waiter was not woken")
			}
		}()
	}
	wg.Wait()
}

// GET /events/v1?task_id= follows chosen tasks only.
func TestEventStreamFollowsChosenTasks(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	followed := c.Submit(jsonObj{"queue": "q"})
	other := c.Submit(jsonObj{"queue": "q"})
	events := readEventsUntil(t, c, s.URL, "task_id="+followed.ID, func() {
		c.Do(http.MethodPost, "/tasks/v1/"+other.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
		c.Do(http.MethodPost, "/tasks/v1/"+followed.ID+"/cancel", nil).Expect(t, http.StatusOK, nil)
	}, func(data string) bool { return strings.Contains(data, `"task.dead_lettered"`) })
	for _, e := range events {
		require.Contains(t, e, followed.ID)
		require.NotContains(t, e, other.ID)
	}
	c.Do(http.MethodGet, "/events/v1?task_id=nope", nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	many := make([]string, 101)
	for i := range many {
		many[i] = c.Submit(jsonObj{"queue": "many"}).ID
	}
	c.Do(http.MethodGet, "/events/v1?task_id="+strings.Join(many, ","), nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
}
