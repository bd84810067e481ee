package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// A release hands a task back claimable at once without spending its
// attempt: a task on its last attempt (max_attempts 1) released by a
// stopping worker is PENDING again, not DEAD, wakes a claim waiting on its
// queue, and runs that same attempt again. The attempt ends "released",
// the event is task.released, the statistics count requeued.released.
func TestReleaseGivesTheAttemptBackAndWakesAWaitingClaim(t *testing.T) {
	t.Parallel()
	// No safety poll during the test: only the release's wake-up can
	// bring the waiting claim its task.
	s, c := startAPI(t, func(cfg *app.Config) { cfg.App.ClaimSafetyInterval = time.Minute })
	const queue = "rel"
	held := submitAndClaim(t, c, "w1", jsonObj{"queue": queue, "max_attempts": 1})
	require.Equal(t, 1, held.Attempts)

	got := waitingClaims(t, s, queue, 1, 20000)
	var released testclient.Task
	c.Do(http.MethodPost, "/tasks/v1/"+held.ID+"/release", jsonObj{"worker_id": "w1", "lease_id": held.Lease()}).
		Expect(t, http.StatusOK, &released)
	require.Equal(t, "PENDING", released.Status)
	require.Equal(t, 0, released.Attempts, "the claim's attempt is given back")
	require.Nil(t, released.LeaseID)
	require.Equal(t, released.UpdatedAt, released.RunAt, "claimable at once")
	require.Equal(t, 0, released.Snoozes)

	var again []map[string]any
	select {
	case again = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting claim was not woken by the release")
	}
	require.Len(t, again, 1)
	require.Equal(t, held.ID, again[0]["id"])
	require.EqualValues(t, 1, again[0]["attempts"], "the same, last, attempt again")

	// A second release under the old lease is refused; so is a report.
	c.Do(http.MethodPost, "/tasks/v1/"+held.ID+"/release", jsonObj{"worker_id": "w1", "lease_id": held.Lease()}).
		Problem(t, http.StatusConflict, "lease-lost")

	type attempt struct {
		Attempt int     `json:"attempt"`
		Outcome *string `json:"outcome"`
	}
	var hist struct {
		Attempts []attempt `json:"attempts"`
	}
	c.Do(http.MethodGet, "/tasks/v1/"+held.ID+"/attempts", nil).Expect(t, http.StatusOK, &hist)
	require.Len(t, hist.Attempts, 2)
	require.Equal(t, 1, hist.Attempts[0].Attempt)
	require.Equal(t, "released", *hist.Attempts[0].Outcome)
	require.Equal(t, 1, hist.Attempts[1].Attempt)
	require.Nil(t, hist.Attempts[1].Outcome, "running")

	var releases []event.Event
	for _, e := range outboxEvents(t, s) {
		if e.Type == event.TaskReleased {
			releases = append(releases, e)
		}
	}
	require.Len(t, releases, 1)
	e := releases[0]
	require.Equal(t, held.ID, e.TaskID)
	require.Equal(t, "RUNNING", e.From)
	require.Equal(t, "PENDING", e.To)
	require.Equal(t, "released", e.Reason)
	require.Equal(t, 0, e.Attempt)
	require.Equal(t, "w1", e.WorkerID)
	require.NotNil(t, e.ExecutionSeconds)

	qs := c.QueuesEventually(10*time.Second, func(qs []testclient.Queue) bool {
		return len(qs) == 1 && qs[0].Totals.Requeued["released"] == 1 && qs[0].Running == 1
	})
	require.EqualValues(t, 1, qs[0].Totals.Requeued["released"])
	testclient.Poll(t, 10*time.Second, "the release is counted in the metrics", func() bool {
		return scrape(t, s.URL, `taskmaster_tasks_requeued_total{queue="rel",reason="released"}`) == 1
	})
}

// A release is fenced like complete: a stale or foreign lease is 409
// lease-lost, a finished task 409 invalid-transition, an unknown task 404;
// a missing lease or worker is 422; nothing changes.
func TestReleaseIsFencedAndValidated(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	path := "/tasks/v1/" + running.ID + "/release"
	c.Do(http.MethodPost, path, jsonObj{"worker_id": "w1", "lease_id": uuid.NewString()}).Problem(t, http.StatusConflict, "lease-lost")
	c.Do(http.MethodPost, path, jsonObj{"worker_id": "w2", "lease_id": running.Lease()}).Problem(t, http.StatusConflict, "lease-lost")
	for body, field := range map[string]string{
		`{"worker_id":"w1"}`:                     "lease_id",
		`{"lease_id":"` + running.Lease() + `"}`: "worker_id",
	} {
		p := c.Do(http.MethodPost, path, body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{field}, p.Fields(), body)
	}
	c.Do(http.MethodPost, path, `{"worker_id":"w1","lease_id":"`+running.Lease()+`","delay_seconds":1}`).Problem(t, http.StatusBadRequest, "malformed-request")
	c.Do(http.MethodPost, "/tasks/v1/"+uuid.NewString()+"/release", jsonObj{"worker_id": "w1", "lease_id": running.Lease()}).
		Problem(t, http.StatusNotFound, "task-not-found")
	require.Equal(t, running, c.Get(running.ID), "nothing changed")

	done := c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	require.Equal(t, "DONE", done.Status)
	p := c.Do(http.MethodPost, path, jsonObj{"worker_id": "w1", "lease_id": running.Lease()}).Problem(t, http.StatusConflict, "invalid-transition")
	require.Equal(t, "DONE", p.CurrentStatus)
}

// A batch release hands back many tasks in one request, each item fenced on
// its own: the held ones are requeued (one an operator asked to cancel ends
// dead), a stale one is an error item, and the rest go through.
func TestReleaseBatchFencesEachItem(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1", "queues": []string{"b"}})
	for range 4 {
		c.Submit(jsonObj{"queue": "b", "max_attempts": 1})
	}
	held := c.Claim(jsonObj{"worker_id": "w1", "queue": "b", "limit": 4})
	require.Len(t, held, 4)
	c.Do(http.MethodPost, "/tasks/v1/"+held[2].ID+"/cancel", nil).Expect(t, http.StatusOK, nil)

	items := []jsonObj{
		{"id": held[0].ID, "lease_id": held[0].Lease()},
		{"id": held[1].ID, "lease_id": uuid.NewString()},
		{"id": held[2].ID, "lease_id": held[2].Lease()},
		{"id": held[3].ID, "lease_id": held[3].Lease()},
		{"id": uuid.NewString(), "lease_id": held[3].Lease()},
	}
	var out struct {
		Items []struct {
			ID      string              `json:"id"`
			Outcome string              `json:"outcome"`
			Task    *testclient.Task    `json:"task"`
			Problem *testclient.Problem `json:"problem"`
		} `json:"items"`
	}
	c.Do(http.MethodPost, "/tasks/v1/release", jsonObj{"worker_id": "w1", "items": items}).Expect(t, http.StatusOK, &out)
	require.Len(t, out.Items, 5)
	outcomes := []string{}
	for _, it := range out.Items {
		outcomes = append(outcomes, it.Outcome)
	}
	require.Equal(t, []string{"requeued", "error", "dead", "requeued", "error"}, outcomes)
	require.Equal(t, 0, out.Items[0].Task.Attempts)
	require.Equal(t, "PENDING", out.Items[3].Task.Status)
	require.Equal(t, "cancelled", out.Items[2].Task.Reason())
	require.Contains(t, out.Items[1].Problem.Type, "lease-lost")
	require.Contains(t, out.Items[4].Problem.Type, "task-not-found")
	require.Equal(t, "RUNNING", c.Get(held[1].ID).Status, "a refused item changes nothing")

	// The whole request is refused for an item without its lease.
	p := c.Do(http.MethodPost, "/tasks/v1/release", jsonObj{"worker_id": "w1", "items": []jsonObj{
		{"id": held[1].ID, "lease_id": held[1].Lease()}, {"id": held[0].ID},
	}}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"items[1].lease_id"}, p.Fields())
	require.Equal(t, "RUNNING", c.Get(held[1].ID).Status)
	c.Do(http.MethodPost, "/tasks/v1/release", jsonObj{"worker_id": "w1", "items": []jsonObj{}}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	c.Do(http.MethodPost, "/tasks/v1/release", jsonObj{"worker_id": "w1", "items": []jsonObj{{"lease_id": held[1].Lease()}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
}
