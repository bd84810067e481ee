package reapers_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	httpadapter "github.com/taskmaster/taskmaster/adapters/http"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
)

// The lease tests' liveness: workers beat every 200 ms (a third of the stale
// threshold) and are declared dead only after 10 s of silence, so a slow
// machine never turns a lease test into a dead-worker test.
const (
	leaseStaleAfter = 600 * time.Millisecond
	beatEvery       = leaseStaleAfter / 3
)

func leaseSettings(cfg *app.Config) {
	cfg.App.Liveness.StaleAfter = leaseStaleAfter
	cfg.App.Liveness.DeadAfter = 10 * time.Second
}

// claimLease claims up to limit tasks of queue for workerID with a lease of
// leaseSeconds.
func (s *instance) claimLease(t *testing.T, workerID, queue string, limit, leaseSeconds int) []httpadapter.TaskJSON {
	t.Helper()
	var resp struct {
		Tasks []httpadapter.TaskJSON `json:"tasks"`
	}
	s.expect(t, http.MethodPost, "/tasks/v1/claim",
		map[string]any{"worker_id": workerID, "queue": queue, "limit": limit, "lease_seconds": leaseSeconds}, http.StatusOK, &resp)
	return resp.Tasks
}

// beat sends one heartbeat (body nil: none) and returns its answer.
func (s *instance) beat(t *testing.T, workerID string, body any) httpadapter.HeartbeatResponse {
	t.Helper()
	var resp httpadapter.HeartbeatResponse
	s.expect(t, http.MethodPost, "/workers/v1/"+workerID+"/heartbeat", body, http.StatusOK, &resp)
	return resp
}

// listing is a heartbeat body listing tasks under their leases.
func listing(tasks ...httpadapter.TaskJSON) map[string]any {
	refs := make([]httpadapter.LeaseRefJSON, len(tasks))
	for i, tk := range tasks {
		refs[i] = refOf(tk)
	}
	return map[string]any{"tasks": refs}
}

func refOf(tk httpadapter.TaskJSON) httpadapter.LeaseRefJSON {
	return httpadapter.LeaseRefJSON{ID: tk.ID, LeaseID: *tk.LeaseID}
}

// keepBeating heartbeats for workerID every beatEvery with body() (nil: no
// body) on its own goroutine, as a live worker does, until the test ends or
// stop is called. It reports failed beats when stopped.
func (s *instance) keepBeating(t *testing.T, workerID string, body func() any) (stop func()) {
	t.Helper()
	done := make(chan struct{})
	var wg sync.WaitGroup
	var failures []string
	wg.Add(1)
	go func() {
		defer wg.Done()
		pace := time.NewTicker(beatEvery)
		defer pace.Stop()
		for {
			select {
			case <-done:
				return
			case <-pace.C:
			}
			var b any
			if body != nil {
				b = body()
			}
			if err := s.post("/workers/v1/"+workerID+"/heartbeat", b); err != nil {
				failures = append(failures, err.Error())
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(done)
			wg.Wait()
			require.Empty(t, failures, "heartbeats of %s", workerID)
		})
	}
	t.Cleanup(stop)
	return stop
}

// post sends a JSON request from any goroutine and reports a failure or a
// status other than 200 as an error.
func (s *instance) post(path string, body any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	resp, err := http.Post(s.URL+path, "application/json", rd)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %d %s", path, resp.StatusCode, out)
	}
	return nil
}

func (s *instance) complete(t *testing.T, workerID string, tk httpadapter.TaskJSON) (int, httpadapter.Problem) {
	t.Helper()
	code, body := s.call(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/complete", map[string]any{"worker_id": workerID, "lease_id": *tk.LeaseID})
	var p httpadapter.Problem
	if code != http.StatusOK {
		require.NoError(t, json.Unmarshal(body, &p), "%s", body)
	}
	return code, p
}

// A claim commits but its response never reaches the worker. The worker
// keeps beating, listing the tasks it knows (none): by its second heartbeat
// after the claim the server has taken the task back as orphaned, another
// worker completes it, and the first worker's late report is refused.
func TestAClaimWhoseResponseWasLostIsRequeuedAndCompletedElsewhere(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	tk := s.submit(t, map[string]any{"queue": queue})
	s.register(t, "forgetful")
	s.register(t, "rescuer")

	// The response is read only to check the test's premise and to replay
	// the worker's late report; the worker itself acts as if it never came.
	lost := s.claimLease(t, "forgetful", queue, 1, 300)
	require.Len(t, lost, 1)
	require.Equal(t, tk.ID, lost[0].ID)

	beats := 0
	for s.task(t, tk.ID).Status == "RUNNING" {
		require.Less(t, beats, 2, "the task is still RUNNING after two heartbeats more than an interval apart")
		// A worker's pace: one heartbeat interval between beats.
		time.Sleep(beatEvery)
		answer := s.beat(t, "forgetful", map[string]any{"tasks": []any{}})
		require.Empty(t, answer.Lost, "it listed nothing, so it lost nothing")
		beats++
	}
	requeued := s.task(t, tk.ID)
	require.Equal(t, "PENDING", requeued.Status)
	require.Equal(t, 1, requeued.Attempts, "the lost claim counted as an attempt")
	require.Nil(t, requeued.LeaseID)
	require.Nil(t, requeued.LeaseExpiresAt)
	events := about(outbox(t, s.DB, event.TaskRequeued), tk.ID)
	require.Equal(t, []string{"task.requeued RUNNING>PENDING orphaned"}, transitions(events))
	require.Equal(t, "forgetful", events[0].WorkerID)
	orphanedAfter := events[0].OccurredAt.Sub(*lost[0].ClaimedAt)
	t.Logf("orphaned %s after the claim, by heartbeat %d (interval %s)", orphanedAfter, beats, beatEvery)
	require.Greater(t, orphanedAfter, beatEvery, "never before one heartbeat interval")

	again := s.claimLease(t, "rescuer", queue, 1, 300)
	require.Len(t, again, 1)
	require.Equal(t, 2, again[0].Attempts)
	code, p := s.complete(t, "forgetful", lost[0])
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, httpadapter.ProblemTypePrefix+"lease-lost", p.Type)
	require.Equal(t, "RUNNING", p.CurrentStatus)

	code, _ = s.complete(t, "rescuer", again[0])
	require.Equal(t, http.StatusOK, code)
	code, p = s.complete(t, "forgetful", lost[0])
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, httpadapter.ProblemTypePrefix+"invalid-transition", p.Type)
	require.Equal(t, "DONE", p.CurrentStatus)
	require.Len(t, about(outbox(t, s.DB, event.TaskCompleted), tk.ID), 1)
}

// A worker that is alive and beating (without listing its tasks) has a task
// whose handler hangs: the lease reaper takes it back when its lease runs out,
// not before, and the hung holder's reports are refused from then on.
func TestAHungTaskUnderALiveWorkerIsRequeuedWhenItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	tk := s.submit(t, map[string]any{"queue": queue, "max_attempts": 2})
	s.register(t, "alive")
	s.keepBeating(t, "alive", nil)
	hung := s.claimLease(t, "alive", queue, 1, 1)
	require.Len(t, hung, 1)
	require.Equal(t, hung[0].ClaimedAt.Add(time.Second), *hung[0].LeaseExpiresAt)

	requeued := s.waitTask(t, tk.ID, "PENDING")
	require.Equal(t, 1, requeued.Attempts)
	events := about(outbox(t, s.DB, event.TaskRequeued), tk.ID)
	require.Equal(t, []string{"task.requeued RUNNING>PENDING lease_expired"}, transitions(events))
	require.False(t, events[0].OccurredAt.Before(*hung[0].LeaseExpiresAt), "not before the lease ran out")
	require.Equal(t, "ACTIVE", s.worker(t, "alive").Status, "the worker stayed alive throughout")

	code, p := s.complete(t, "alive", hung[0])
	require.Equal(t, http.StatusConflict, code)
	require.Equal(t, httpadapter.ProblemTypePrefix+"lease-lost", p.Type)
	require.Equal(t, "PENDING", p.CurrentStatus)

	// On its last attempt a lease that runs out is the end: DEAD lease_expired.
	last := s.claimLease(t, "alive", queue, 1, 1)
	require.Len(t, last, 1)
	dead := s.waitTask(t, tk.ID, "DEAD")
	require.Equal(t, "lease_expired", *dead.DeadReason)
	require.Equal(t, []string{"task.dead_lettered RUNNING>DEAD lease_expired"},
		transitions(about(outbox(t, s.DB, event.TaskDeadLettered), tk.ID)))
}

// A worker that lists its other tasks but not this one: the task is taken
// back at once as orphaned, without waiting for its lease.
func TestATaskItsWorkerNoLongerListsIsRequeuedBeforeItsLeaseRunsOut(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	kept := s.submit(t, map[string]any{"queue": queue, "priority": 1})
	dropped := s.submit(t, map[string]any{"queue": queue})
	s.register(t, "w")
	held := s.claimLease(t, "w", queue, 2, 3600)
	require.Len(t, held, 2)
	require.Equal(t, kept.ID, held[0].ID)
	s.keepBeating(t, "w", func() any { return listing(held[0]) })

	s.waitTask(t, dropped.ID, "PENDING")
	require.Equal(t, []string{"task.requeued RUNNING>PENDING orphaned"}, transitions(about(outbox(t, s.DB, event.TaskRequeued), dropped.ID)))
	require.Equal(t, "RUNNING", s.task(t, kept.ID).Status)
}

// Extend keeps a slow task past its original lease; so do heartbeats that
// list it.
func TestExtendAndListingHeartbeatsKeepASlowTaskAlive(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	s.submit(t, map[string]any{"queue": queue})
	s.submit(t, map[string]any{"queue": queue})
	s.register(t, "extender")
	s.register(t, "lister")
	s.keepBeating(t, "extender", nil)
	extended := s.claimLease(t, "extender", queue, 1, 1)
	listed := s.claimLease(t, "lister", queue, 1, 1)
	require.Len(t, extended, 1)
	require.Len(t, listed, 1)
	s.keepBeating(t, "lister", func() any { return listing(listed[0]) })

	// Two and a half times the original lease: many reaper intervals.
	until := extended[0].ClaimedAt.Add(2500 * time.Millisecond)
	for {
		var got httpadapter.TaskJSON
		s.expect(t, http.MethodPost, "/tasks/v1/"+extended[0].ID+"/extend",
			map[string]any{"worker_id": "extender", "lease_id": *extended[0].LeaseID, "lease_seconds": 1}, http.StatusOK, &got)
		require.Equal(t, "RUNNING", got.Status)
		require.Equal(t, got.UpdatedAt.Add(time.Second), *got.LeaseExpiresAt)
		if got.UpdatedAt.After(until) {
			break
		}
		// The slow handler's pace: well within its one-second lease.
		time.Sleep(300 * time.Millisecond)
	}
	for _, tk := range []httpadapter.TaskJSON{extended[0], listed[0]} {
		now := s.task(t, tk.ID)
		require.Equal(t, "RUNNING", now.Status)
		require.Equal(t, *tk.LeaseID, *now.LeaseID, "the same lease throughout")
		require.True(t, now.LeaseExpiresAt.After(tk.ClaimedAt.Add(2*time.Second)), "renewed past the original lease")
	}
	code, _ := s.complete(t, "extender", extended[0])
	require.Equal(t, http.StatusOK, code)
	code, _ = s.complete(t, "lister", listed[0])
	require.Equal(t, http.StatusOK, code)
	for _, tk := range []httpadapter.TaskJSON{extended[0], listed[0]} {
		require.Empty(t, about(outbox(t, s.DB, event.TaskRequeued), tk.ID))
	}
}

// An operator's cancel and drain reach the worker in its heartbeat's answer;
// a cancel the holder ignores ends the task when its lease runs out.
func TestCancelAndDrainReachTheWorkerThroughItsHeartbeat(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	obeyed := s.submit(t, map[string]any{"queue": queue, "priority": 2})
	ignored := s.submit(t, map[string]any{"queue": queue, "priority": 1})
	s.register(t, "w")
	held := s.claimLease(t, "w", queue, 2, 2)
	require.Len(t, held, 2)
	require.Equal(t, []string{obeyed.ID, ignored.ID}, []string{held[0].ID, held[1].ID})

	answer := s.beat(t, "w", listing(held...))
	require.Empty(t, answer.Cancel)
	require.False(t, answer.Drain)

	for _, tk := range held {
		var got httpadapter.TaskJSON
		s.expect(t, http.MethodPost, "/tasks/v1/"+tk.ID+"/cancel", nil, http.StatusOK, &got)
		require.Equal(t, "RUNNING", got.Status, "a running task's cancel is a request")
		require.NotNil(t, got.CancelRequestedAt)
	}
	answer = s.beat(t, "w", listing(held...))
	require.ElementsMatch(t, []httpadapter.LeaseRefJSON{refOf(held[0]), refOf(held[1])}, answer.Cancel)
	require.Empty(t, answer.Lost)

	// The worker fails the first: DEAD cancelled, not retried.
	var failed httpadapter.TaskJSON
	s.expect(t, http.MethodPost, "/tasks/v1/"+held[0].ID+"/fail",
		map[string]any{"worker_id": "w", "lease_id": *held[0].LeaseID, "error": "cancelled by operator", "retryable": true}, http.StatusOK, &failed)
	require.Equal(t, "DEAD", failed.Status)
	require.Equal(t, "cancelled", *failed.DeadReason)
	// It ignores the second and beats without listing: it stays alive, but
	// nothing renews the lease, which runs out.
	s.keepBeating(t, "w", nil)
	dead := s.waitTask(t, held[1].ID, "DEAD")
	require.Equal(t, "cancelled", *dead.DeadReason)

	// Drain.
	var drained httpadapter.WorkerJSON
	s.expect(t, http.MethodPost, "/workers/v1/w/drain", nil, http.StatusOK, &drained)
	require.True(t, drained.Draining)
	s.expect(t, http.MethodPost, "/workers/v1/nobody/drain", nil, http.StatusNotFound, nil)
	require.True(t, s.beat(t, "w", map[string]any{"tasks": []any{}}).Drain)
	more := s.submit(t, map[string]any{"queue": queue})
	require.Empty(t, s.claimLease(t, "w", queue, 10, 60), "a draining worker claims nothing")
	s.expect(t, http.MethodPost, "/workers/v1/register", map[string]any{"id": "w"}, http.StatusOK, nil)
	require.False(t, s.beat(t, "w", nil).Drain, "registering again clears the drain")
	again := s.claimLease(t, "w", queue, 10, 60)
	require.Len(t, again, 1)
	require.Equal(t, more.ID, again[0].ID)

	byTask := func(id string) []string {
		return transitions(about(outbox(t, s.DB, event.TaskCancelRequested, event.TaskFailed, event.TaskDeadLettered), id))
	}
	require.Equal(t, []string{"task.cancel_requested RUNNING>RUNNING ", "task.failed RUNNING>DEAD cancelled"}, byTask(held[0].ID))
	require.Equal(t, []string{"task.cancel_requested RUNNING>RUNNING ", "task.dead_lettered RUNNING>DEAD cancelled"}, byTask(held[1].ID))
	require.Equal(t, []string{"worker.draining ACTIVE>ACTIVE "}, transitions(about(outbox(t, s.DB, event.WorkerDraining), "w")))
}

// A heartbeat that lists a task taken away from the worker (its lease ran
// out and another worker claimed it) reports it in lost, and touches neither
// the task nor the other worker's lease.
func TestAHeartbeatListingATaskTakenAwayReportsItLost(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	tk := s.submit(t, map[string]any{"queue": queue})
	s.register(t, "slow")
	s.register(t, "next")
	s.keepBeating(t, "slow", nil)
	first := s.claimLease(t, "slow", queue, 1, 1)
	require.Len(t, first, 1)
	s.waitTask(t, tk.ID, "PENDING")
	second := s.claimLease(t, "next", queue, 1, 300)
	require.Len(t, second, 1)

	answer := s.beat(t, "slow", listing(first[0]))
	require.Equal(t, []httpadapter.LeaseRefJSON{refOf(first[0])}, answer.Lost)
	require.Empty(t, answer.Cancel)
	now := s.task(t, tk.ID)
	require.Equal(t, "next", *now.WorkerID)
	require.Equal(t, *second[0].LeaseExpiresAt, *now.LeaseExpiresAt, "another worker's lease is not renewed by this one's heartbeat")

}

// Fencing is mandatory. A worker claims T under lease L1 and is cut off (its
// handler hangs; it beats without listing T); the lease reaper takes T back
// and the same worker claims it again under L2. The late report of attempt 1
// must change nothing: with L1 it is a 409 lease-lost, and without a lease
// (which once passed as "the holder") a 422 naming lease_id; single and batch
// reports alike. Only attempt 2's report under L2 completes the task.
func TestALateReportOfAnEarlierAttemptIsRefusedEvenFromTheSameWorker(t *testing.T) {
	t.Parallel()
	s := start(t, pgtest.NewDatabase(t), leaseSettings)
	queue := "q-" + uuid.NewString()
	tk := s.submit(t, map[string]any{"queue": queue, "max_attempts": 3})
	s.register(t, "w")
	s.keepBeating(t, "w", nil)
	first := s.claimLease(t, "w", queue, 1, 1)
	require.Len(t, first, 1)
	s.waitTask(t, tk.ID, "PENDING")
	second := s.claimLease(t, "w", queue, 1, 300)
	require.Len(t, second, 1)
	require.Equal(t, tk.ID, second[0].ID)
	require.Equal(t, 2, second[0].Attempts)
	require.NotEqual(t, *first[0].LeaseID, *second[0].LeaseID)
	l1 := *first[0].LeaseID

	problem := func(code int, body []byte) httpadapter.Problem {
		t.Helper()
		var p httpadapter.Problem
		require.NoError(t, json.Unmarshal(body, &p), "%d %s", code, body)
		return p
	}
	fields := func(p httpadapter.Problem) []string {
		out := make([]string, len(p.Errors))
		for i, e := range p.Errors {
			out[i] = e.Field
		}
		return out
	}
	for _, what := range []string{"complete", "fail", "extend"} {
		path := "/tasks/v1/" + tk.ID + "/" + what
		code, body := s.call(t, http.MethodPost, path, map[string]any{"worker_id": "w", "lease_id": l1})
		require.Equal(t, http.StatusConflict, code, "%s with the old lease: %s", what, body)
		p := problem(code, body)
		require.Equal(t, httpadapter.ProblemTypePrefix+"lease-lost", p.Type)
		require.Equal(t, "RUNNING", p.CurrentStatus)

		code, body = s.call(t, http.MethodPost, path, map[string]any{"worker_id": "w"})
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s without a lease: %s", what, body)
		require.Equal(t, []string{"lease_id"}, fields(problem(code, body)))
	}
	for _, what := range []string{"complete", "fail"} {
		path := "/tasks/v1/" + what
		var out httpadapter.BatchReportResponse
		s.expect(t, http.MethodPost, path, map[string]any{"worker_id": "w", "items": []any{
			map[string]any{"id": tk.ID, "lease_id": l1},
		}}, http.StatusOK, &out)
		require.Len(t, out.Items, 1)
		require.Equal(t, "error", out.Items[0].Outcome, "%s batch with the old lease", what)
		require.Equal(t, httpadapter.ProblemTypePrefix+"lease-lost", out.Items[0].Problem.Type)

		code, body := s.call(t, http.MethodPost, path, map[string]any{"worker_id": "w", "items": []any{
			map[string]any{"id": uuid.NewString(), "lease_id": uuid.NewString()},
			map[string]any{"id": tk.ID},
		}})
		require.Equal(t, http.StatusUnprocessableEntity, code, "%s batch without a lease: %s", what, body)
		require.Equal(t, []string{"items[1].lease_id"}, fields(problem(code, body)))
	}
	now := s.task(t, tk.ID)
	require.Equal(t, "RUNNING", now.Status)
	require.Equal(t, *second[0].LeaseID, *now.LeaseID)
	require.Equal(t, *second[0].LeaseExpiresAt, *now.LeaseExpiresAt, "not extended by the old lease")
	require.Empty(t, about(outbox(t, s.DB, event.TaskCompleted, event.TaskFailed), tk.ID), "no late report was recorded")

	code, _ := s.complete(t, "w", second[0])
	require.Equal(t, http.StatusOK, code)
	done := s.task(t, tk.ID)
	require.Equal(t, "DONE", done.Status)
	require.Equal(t, 2, done.Attempts)
}
