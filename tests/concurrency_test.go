package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
)

// Eight workers claim 5,000 tasks in batches of 50 over HTTP, all at once:
// every task is claimed exactly once, by the worker the database says holds
// it, and none is left behind. Half the workers name the four queues, half
// take any queue, so both claim statements race each other.
func TestConcurrentClaimsHandEachTaskToExactlyOneWorker(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	const (
		tasks   = 5000
		workers = 8
		batch   = 50
	)
	var submitted []string
	require.NoError(t, s.DB.SelectContext(t.Context(), &submitted, `
		INSERT INTO tasks (id, queue, status, priority, max_attempts, run_at, created_at, updated_at)
		SELECT gen_random_uuid(), 'q' || (i % 4), 'PENDING', i % 3, 3, now(), now(), now()
		FROM generate_series(1, $1) AS i
		RETURNING id`, tasks))
	for i := range workers {
		body := jsonObj{"id": fmt.Sprintf("w%d", i)}
		if i%2 == 1 {
			body["queues"] = []string{"q0", "q1", "q2", "q3"}
		}
		c.Register(body)
	}

	var (
		claimedTotal atomic.Int64
		wg           sync.WaitGroup
		claims       = make([][]testclient.Task, workers)
		errs         = make(chan error, workers)
		start        = make(chan struct{})
		deadline     = time.Now().Add(2 * time.Minute)
	)
	for i := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprintf("w%d", i)
			for claimedTotal.Load() < tasks {
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: gave up with %d of %d claimed", id, claimedTotal.Load(), tasks)
					return
				}
				r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": id, "limit": batch}, nil)
				if err != nil {
					errs <- err
					return
				}
				if r.Status != http.StatusOK {
					errs <- fmt.Errorf("%s", r)
					return
				}
				var page struct{ Tasks []testclient.Task }
				if err := json.Unmarshal(r.Body, &page); err != nil {
					errs <- err
					return
				}
				if len(page.Tasks) > batch {
					errs <- fmt.Errorf("%s got %d tasks for a limit of %d", id, len(page.Tasks), batch)
					return
				}
				claims[i] = append(claims[i], page.Tasks...)
				claimedTotal.Add(int64(len(page.Tasks)))
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Plain checks, collected: a require per task would dominate the test.
	var problems []string
	holder := map[string]string{} // task id -> claiming worker
	for i, got := range claims {
		id := fmt.Sprintf("w%d", i)
		for _, task := range got {
			if prev, dup := holder[task.ID]; dup {
				problems = append(problems, fmt.Sprintf("task %s claimed by %s and %s", task.ID, prev, id))
			}
			holder[task.ID] = id
			if task.Status != "RUNNING" || task.Attempts != 1 || task.Holder() != id {
				problems = append(problems, fmt.Sprintf("%s answered %s %s attempts=%d holder=%s", id, task.ID, task.Status, task.Attempts, task.Holder()))
			}
		}
	}
	for _, id := range submitted {
		if _, ok := holder[id]; !ok {
			problems = append(problems, fmt.Sprintf("task %s was never claimed", id))
		}
	}
	require.Empty(t, problems)
	require.Len(t, holder, tasks)

	var rows []struct {
		ID       string `db:"id"`
		Status   string `db:"status"`
		Attempts int    `db:"attempts"`
		WorkerID string `db:"worker_id"`
		LeaseID  string `db:"lease_id"`
	}
	require.NoError(t, s.DB.SelectContext(t.Context(), &rows, `SELECT id, status, attempts, worker_id, lease_id FROM tasks`))
	require.Len(t, rows, tasks)
	leases := map[string]bool{}
	for _, r := range rows {
		if r.Status != "RUNNING" || r.Attempts != 1 || r.WorkerID != holder[r.ID] {
			problems = append(problems, fmt.Sprintf("stored %s %s attempts=%d worker=%s, answered to %s", r.ID, r.Status, r.Attempts, r.WorkerID, holder[r.ID]))
		}
		leases[r.LeaseID] = true
	}
	require.Empty(t, problems)
	require.Len(t, leases, tasks, "every claim got its own lease")

	var events struct {
		Claimed  int `db:"claimed"`
		Distinct int `db:"distinct_tasks"`
	}
	require.NoError(t, s.DB.GetContext(t.Context(), &events, `
		SELECT count(*) AS claimed, count(DISTINCT e->>'task_id') AS distinct_tasks
		FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.claimed'`))
	require.Equal(t, tasks, events.Claimed, "one claimed event per task")
	require.Equal(t, tasks, events.Distinct)
}

// Twelve identical submissions with one idempotency key, at once: exactly
// one creates the task (201), the other eleven get it back (200).
func TestConcurrentIdempotentSubmissionsCreateOneTask(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	const submitters = 12
	body := jsonObj{"queue": "payments", "idempotency_key": "order-42", "payload": jsonObj{"amount": 10}}

	type answer struct {
		status int
		id     string
		err    error
	}
	answers := make(chan answer, submitters)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range submitters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := c.Send(http.MethodPost, "/tasks/v1", body, nil)
			if err != nil {
				answers <- answer{err: err}
				return
			}
			var task testclient.Task
			if err := json.Unmarshal(r.Body, &task); err != nil {
				answers <- answer{err: fmt.Errorf("%s: %w", r, err)}
				return
			}
			answers <- answer{status: r.Status, id: task.ID}
		}()
	}
	close(start)
	wg.Wait()
	close(answers)

	statuses := map[int]int{}
	ids := map[string]bool{}
	for a := range answers {
		require.NoError(t, a.err)
		statuses[a.status]++
		ids[a.id] = true
	}
	require.Equal(t, map[int]int{http.StatusCreated: 1, http.StatusOK: submitters - 1}, statuses)
	require.Len(t, ids, 1, "every answer names the same task")

	var rows, submittedEvents int
	require.NoError(t, s.DB.Get(&rows, `SELECT count(*) FROM tasks WHERE queue = 'payments' AND idempotency_key = 'order-42'`))
	require.Equal(t, 1, rows)
	require.NoError(t, s.DB.Get(&submittedEvents, `
		SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e
		WHERE e->>'type' = 'task.submitted'`))
	require.Equal(t, 1, submittedEvents)
}

// Twenty copies of the holder's completion, at once: exactly one wins; the
// others learn the task is already DONE and change nothing.
func TestConcurrentCompletionsExactlyOneWins(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	const racers = 20

	results := make(chan *testclient.Response, racers)
	errs := make(chan error, racers)
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i := range racers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			r, err := c.Send(http.MethodPost, "/tasks/v1/"+running.ID+"/complete",
				jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "result": jsonObj{"racer": i}}, nil)
			if err != nil {
				errs <- err
				return
			}
			results <- r
		}()
	}
	close(start)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	var winner testclient.Task
	wins := 0
	for r := range results {
		if r.Status == http.StatusOK {
			wins++
			r.Expect(t, http.StatusOK, &winner)
			continue
		}
		p := r.Problem(t, http.StatusConflict, "invalid-transition")
		require.Equal(t, "DONE", p.CurrentStatus)
	}
	require.Equal(t, 1, wins)
	require.Equal(t, winner, c.Get(running.ID), "the stored result is the winner's")
}
