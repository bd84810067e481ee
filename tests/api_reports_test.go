package tests

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// submitAndClaim submits a task to a fresh queue and claims it for worker
// (registered here).
func submitAndClaim(t *testing.T, c *testclient.Client, worker string, submit jsonObj) testclient.Task {
	t.Helper()
	c.Register(jsonObj{"id": worker})
	created := c.Submit(submit)
	got := c.Claim(jsonObj{"worker_id": worker, "queue": created.Queue})
	require.Len(t, got, 1)
	require.Equal(t, created.ID, got[0].ID)
	return got[0]
}

func reportPath(id, what string) string { return "/tasks/v1/" + id + "/" + what }

func TestAPICompleteMarksTheTaskDoneWithItsResult(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})

	done := c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "result": jsonObj{"rows": 42}})
	require.Equal(t, "DONE", done.Status)
	require.JSONEq(t, `{"rows": 42}`, string(done.Result))
	require.NotNil(t, done.FinishedAt)
	require.Equal(t, *done.FinishedAt, done.UpdatedAt)
	require.False(t, done.FinishedAt.Before(*done.ClaimedAt))
	require.Nil(t, done.WorkerID, "a finished task has no holder")
	require.Nil(t, done.LeaseID)
	require.Equal(t, 1, done.Attempts)
	require.Nil(t, done.DeadReason)
	require.Equal(t, done, c.Get(running.ID))
}

// Fencing is never optional: a holder's report without its lease_id is a
// 422 naming the field, from the holder as from anyone else, and changes
// nothing.
func TestAPIReportsWithoutALeaseIDAreRefused(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	for _, what := range []string{"complete", "fail", "extend"} {
		for _, who := range []string{"w1", "w2"} {
			p := c.Do(http.MethodPost, reportPath(running.ID, what), jsonObj{"worker_id": who}).
				Problem(t, http.StatusUnprocessableEntity, "validation-error")
			require.Equal(t, []string{"lease_id"}, p.Fields(), "%s by %s", what, who)
		}
	}
	p := c.Do(http.MethodPost, reportPath(running.ID, "complete"), jsonObj{}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"worker_id", "lease_id"}, p.Fields())
	require.Equal(t, running, c.Get(running.ID))
	done := c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	require.Equal(t, "DONE", done.Status)
	require.JSONEq(t, `null`, string(done.Result))
}

func TestAPIFencingRejectsEveryoneButTheHolderAndChangesNothing(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "holder", jsonObj{"queue": "q"})
	c.Register(jsonObj{"id": "other"})

	for name, body := range map[string]jsonObj{
		"another worker":       {"worker_id": "other", "lease_id": running.Lease()},
		"a lease never issued": {"worker_id": "holder", "lease_id": uuid.NewString()},
	} {
		for _, what := range []string{"complete", "fail"} {
			p := c.Do(http.MethodPost, reportPath(running.ID, what), body).Problem(t, http.StatusConflict, "lease-lost")
			require.Equal(t, "RUNNING", p.CurrentStatus, "%s %s", name, what)
		}
	}
	require.Equal(t, running, c.Get(running.ID), "rejected reports change nothing")
}

func TestAPIFencingRejectsAStaleLease(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	first := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	c.Fail(first.ID, jsonObj{"worker_id": "w1", "lease_id": first.Lease(), "error": "x", "retryable": false})
	c.Do(http.MethodPost, reportPath(first.ID, "retry"), nil).Expect(t, http.StatusOK, nil)
	second := claimOne(t, c, "w1")
	require.Equal(t, first.ID, second.ID)
	require.NotEqual(t, first.Lease(), second.Lease(), "every claim issues a new lease")

	for _, what := range []string{"complete", "fail"} {
		p := c.Do(http.MethodPost, reportPath(first.ID, what), jsonObj{"worker_id": "w1", "lease_id": first.Lease()}).
			Problem(t, http.StatusConflict, "lease-lost")
		require.Equal(t, "RUNNING", p.CurrentStatus)
	}
	require.Equal(t, second, c.Get(first.ID))
	require.Equal(t, "DONE", c.Complete(first.ID, jsonObj{"worker_id": "w1", "lease_id": second.Lease()}).Status)
}

func TestAPIReportsOnAFinishedTaskAreInvalidTransitions(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	report := jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "result": 1}
	done := c.Complete(running.ID, report)

	p := c.Do(http.MethodPost, reportPath(running.ID, "complete"), report).Problem(t, http.StatusConflict, "invalid-transition")
	require.Equal(t, "DONE", p.CurrentStatus, "completed twice")
	p = c.Do(http.MethodPost, reportPath(running.ID, "fail"), jsonObj{"worker_id": "w1", "lease_id": running.Lease()}).
		Problem(t, http.StatusConflict, "invalid-transition")
	require.Equal(t, "DONE", p.CurrentStatus)
	require.Equal(t, done, c.Get(running.ID))

	// A PENDING task has no lease to report under: whatever lease the
	// reporter names is lost.
	pending := c.Submit(jsonObj{"queue": "q2"})
	p = c.Do(http.MethodPost, reportPath(pending.ID, "complete"), jsonObj{"worker_id": "w1", "lease_id": running.Lease()}).
		Problem(t, http.StatusConflict, "lease-lost")
	require.Equal(t, "PENDING", p.CurrentStatus)
}

func TestAPIReportsOnUnknownTasksAre404(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1"})
	for _, id := range []string{uuid.NewString(), "not-a-uuid"} {
		for _, what := range []string{"complete", "fail"} {
			c.Do(http.MethodPost, reportPath(id, what), jsonObj{"worker_id": "w1", "lease_id": uuid.NewString()}).Problem(t, http.StatusNotFound, "task-not-found")
		}
		for _, what := range []string{"retry", "cancel"} {
			c.Do(http.MethodPost, reportPath(id, what), nil).Problem(t, http.StatusNotFound, "task-not-found")
		}
	}
}

func TestAPIReportsNeedAWorkerID(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	for _, what := range []string{"complete", "fail"} {
		p := c.Do(http.MethodPost, reportPath(running.ID, what), jsonObj{"lease_id": running.Lease()}).
			Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"worker_id"}, p.Fields())
	}
	require.Equal(t, running, c.Get(running.ID))
}

// With the default base of 1 s, the first failure waits exactly 2 s: run_at
// is the failure's database time (updated_at) plus the delay.
func TestAPIFailRetryableWaitsTheBackoffOfTheFirstAttempt(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})

	failed := c.Fail(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "error": "timeout"})
	require.Equal(t, "PENDING", failed.Status)
	require.Equal(t, 1, failed.Attempts)
	require.Equal(t, "timeout", failed.Error())
	require.Nil(t, failed.WorkerID)
	require.Nil(t, failed.LeaseID)
	require.Nil(t, failed.FinishedAt)
	require.Nil(t, failed.DeadReason)
	require.Equal(t, 2*time.Second, failed.RunAt.Sub(failed.UpdatedAt))
	require.Empty(t, c.Claim(jsonObj{"worker_id": "w1"}), "not claimable before run_at")
	require.Equal(t, failed, c.Get(running.ID))
}

// With a base of 100 ms the delays are 200 ms then 400 ms; the task becomes
// claimable again only once run_at has come, and the third failure of three
// attempts is final.
func TestAPIFailRetryableBackoffDoublesUntilAttemptsAreExhausted(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) { cfg.App.Backoff.Base = 100 * time.Millisecond })
	task := submitAndClaim(t, c, "w1", jsonObj{"queue": "q", "max_attempts": 3})

	for attempt, delay := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond} {
		failed := c.Fail(task.ID, jsonObj{"worker_id": "w1", "lease_id": task.Lease(), "error": "flaky"})
		require.Equal(t, "PENDING", failed.Status)
		require.Equal(t, attempt+1, failed.Attempts)
		require.Equal(t, delay, failed.RunAt.Sub(failed.UpdatedAt), "attempt %d", attempt+1)

		var claimed []testclient.Task
		testclient.Poll(t, 10*time.Second, "the task to be claimable again", func() bool {
			claimed = c.Claim(jsonObj{"worker_id": "w1"})
			return len(claimed) == 1
		})
		task = claimed[0]
		require.Equal(t, attempt+2, task.Attempts)
		require.False(t, task.ClaimedAt.Before(failed.RunAt), "claimed at %s, before run_at %s", task.ClaimedAt, failed.RunAt)
	}

	dead := c.Fail(task.ID, jsonObj{"worker_id": "w1", "lease_id": task.Lease(), "error": "still flaky"})
	require.Equal(t, "DEAD", dead.Status)
	require.Equal(t, "exhausted", dead.Reason())
	require.Equal(t, 3, dead.Attempts)
	require.Equal(t, "still flaky", dead.Error())
	require.NotNil(t, dead.FinishedAt)
	require.Nil(t, dead.WorkerID)
	require.Nil(t, dead.LeaseID)
}

func TestAPIFailNonRetryableIsDeadAtOnce(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q", "max_attempts": 5})
	dead := c.Fail(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "error": "bad input", "retryable": false})
	require.Equal(t, "DEAD", dead.Status)
	require.Equal(t, "non_retryable", dead.Reason())
	require.Equal(t, 1, dead.Attempts)
	require.Equal(t, "bad input", dead.Error())
	require.NotNil(t, dead.FinishedAt)
}

func TestAPIFailWithMaxAttemptsOneIsExhausted(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q", "max_attempts": 1})
	dead := c.Fail(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "retryable": true})
	require.Equal(t, "DEAD", dead.Status)
	require.Equal(t, "exhausted", dead.Reason())
}

func TestAPIFailErrorIsLimitedTo64KiB(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	p := c.Do(http.MethodPost, reportPath(running.ID, "fail"),
		jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "error": strings.Repeat("e", 64<<10+1)}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"error"}, p.Fields())
	require.Equal(t, running, c.Get(running.ID))

	failed := c.Fail(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "error": strings.Repeat("é", 32<<10)})
	require.Len(t, failed.Error(), 64<<10, "exactly 64 KiB is accepted and kept whole")
}

func TestAPIRetryMovesADeadTaskBackToPendingKeepingItsHistory(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q", "max_attempts": 2})
	dead := c.Fail(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "error": "kaboom", "retryable": false})

	var retried testclient.Task
	c.Do(http.MethodPost, reportPath(running.ID, "retry"), nil).Expect(t, http.StatusOK, &retried)
	require.Equal(t, "PENDING", retried.Status)
	require.Zero(t, retried.Attempts, "attempts start over")
	require.Nil(t, retried.DeadReason)
	require.Nil(t, retried.FinishedAt)
	require.Contains(t, retried.Error(), "non_retryable")
	require.Contains(t, retried.Error(), "kaboom")
	require.Equal(t, retried.UpdatedAt, retried.RunAt, "claimable at once")
	require.True(t, retried.UpdatedAt.After(dead.UpdatedAt))

	again := claimOne(t, c, "w1")
	require.Equal(t, running.ID, again.ID)
	require.Equal(t, 1, again.Attempts)
}

func TestAPICancelMovesAPendingTaskToDead(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	pending := c.Submit(jsonObj{"queue": "q"})
	var cancelled testclient.Task
	c.Do(http.MethodPost, reportPath(pending.ID, "cancel"), nil).Expect(t, http.StatusOK, &cancelled)
	require.Equal(t, "DEAD", cancelled.Status)
	require.Equal(t, "cancelled", cancelled.Reason())
	require.NotNil(t, cancelled.FinishedAt)
	c.Register(jsonObj{"id": "w1"})
	require.Empty(t, c.Claim(jsonObj{"worker_id": "w1"}))

	var retried testclient.Task
	c.Do(http.MethodPost, reportPath(pending.ID, "retry"), nil).Expect(t, http.StatusOK, &retried)
	require.Contains(t, retried.Error(), "cancelled")
}

func TestAPIRetryAndCancelFromOtherStatesAreConflicts(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	pending := c.Submit(jsonObj{"queue": "p"})
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "r"})
	done := submitAndClaim(t, c, "w1", jsonObj{"queue": "d"})
	c.Complete(done.ID, jsonObj{"worker_id": "w1", "lease_id": done.Lease()})
	dead := c.Submit(jsonObj{"queue": "x"})
	c.Do(http.MethodPost, reportPath(dead.ID, "cancel"), nil).Expect(t, http.StatusOK, nil)

	for _, tc := range []struct {
		id, action, status string
	}{
		{pending.ID, "retry", "PENDING"},
		{running.ID, "retry", "RUNNING"},
		{done.ID, "retry", "DONE"},
		{done.ID, "cancel", "DONE"},
		{dead.ID, "cancel", "DEAD"},
	} {
		before := c.Get(tc.id)
		p := c.Do(http.MethodPost, reportPath(tc.id, tc.action), nil).Problem(t, http.StatusConflict, "invalid-transition")
		require.Equal(t, tc.status, p.CurrentStatus, "%s of a %s task", tc.action, tc.status)
		require.Equal(t, before, c.Get(tc.id))
	}
}
