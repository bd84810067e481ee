package tests

import (
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox/envelope"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// outboxEvents returns every event of the instance's outbox, in order.
func outboxEvents(t *testing.T, s *testserver.Server) []event.Event {
	t.Helper()
	var payloads [][]byte
	require.NoError(t, s.DB.Select(&payloads, `SELECT payload::text::bytea FROM watermill_taskmaster_events ORDER BY transaction_id, "offset"`))
	var out []event.Event
	for _, p := range payloads {
		events, err := envelope.Decode(p)
		require.NoError(t, err)
		out = append(out, events...)
	}
	return out
}

// A snooze gives the task back for later without spending its attempt: a
// task with max_attempts 1 snoozed twice still runs, and completes. No claim
// comes before the snooze's run_at (checked on the claim's own database time,
// not on how fast the test is).
func TestSnoozeDoesNotBurnAttempts(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1", "queues": []string{"q"}})
	submitted := c.Submit(jsonObj{"queue": "q", "max_attempts": 1})
	notBefore := submitted.RunAt
	claim := func() testclient.Task {
		t.Helper()
		var claimed []testclient.Task
		testclient.Poll(t, 10*time.Second, "the snoozed task is claimable again", func() bool {
			claimed = c.Claim(jsonObj{"worker_id": "w1", "queue": "q"})
			return len(claimed) == 1
		})
		require.NotNil(t, claimed[0].ClaimedAt)
		require.False(t, claimed[0].ClaimedAt.Before(notBefore), "claimed at %s, before run_at %s", claimed[0].ClaimedAt, notBefore)
		return claimed[0]
	}
	for round := 1; round <= 2; round++ {
		held := claim()
		require.Equal(t, 1, held.Attempts, "the same attempt, round %d", round)
		var snoozed testclient.Task
		c.Do(http.MethodPost, "/tasks/v1/"+submitted.ID+"/snooze",
			jsonObj{"worker_id": "w1", "lease_id": held.Lease(), "delay_seconds": 1}).Expect(t, http.StatusOK, &snoozed)
		require.Equal(t, "PENDING", snoozed.Status)
		require.Equal(t, 0, snoozed.Attempts)
		require.Equal(t, round, snoozed.Snoozes)
		require.Nil(t, snoozed.LeaseID)
		require.Equal(t, time.Second, snoozed.RunAt.Sub(snoozed.UpdatedAt))
		notBefore = snoozed.RunAt
	}
	last := claim()
	done := c.Complete(last.ID, jsonObj{"worker_id": "w1", "lease_id": last.Lease()})
	require.Equal(t, "DONE", done.Status)
	require.Equal(t, 1, done.Attempts)
	require.Equal(t, 2, done.Snoozes)

	var snoozes []event.Event
	for _, e := range outboxEvents(t, s) {
		if e.Type == event.TaskSnoozed {
			snoozes = append(snoozes, e)
		}
	}
	require.Len(t, snoozes, 2)
	for _, e := range snoozes {
		require.Equal(t, "RUNNING", e.From)
		require.Equal(t, "PENDING", e.To)
		require.Equal(t, "snoozed", e.Reason)
		require.Equal(t, 0, e.Attempt)
		require.Equal(t, 1.0, *e.DelaySeconds)
		require.Equal(t, submitted.ID, e.TaskID)
	}
	// The statistics count it as a transition back to PENDING.
	c.QueuesEventually(10*time.Second, func(qs []testclient.Queue) bool {
		return len(qs) == 1 && qs[0].Totals.Requeued["snoozed"] == 2 && qs[0].Done == 1
	})
	qs := c.Queues()
	require.EqualValues(t, 2, qs[0].Totals.Requeued["snoozed"])
	require.EqualValues(t, 1, qs[0].Done)
	require.EqualValues(t, 0, qs[0].Pending)
}

// A snooze is fenced like complete: a stale holder gets 409 and nothing
// changes; bad input is 422 naming the field.
func TestSnoozeIsFencedAndValidated(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	running := submitAndClaim(t, c, "w1", jsonObj{"queue": "q"})
	path := "/tasks/v1/" + running.ID + "/snooze"
	c.Do(http.MethodPost, path, jsonObj{"worker_id": "w1", "lease_id": uuid.NewString(), "delay_seconds": 5}).Problem(t, http.StatusConflict, "lease-lost")
	c.Do(http.MethodPost, path, jsonObj{"worker_id": "w2", "lease_id": running.Lease(), "delay_seconds": 5}).Problem(t, http.StatusConflict, "lease-lost")
	for body, field := range map[string]string{
		`{"worker_id":"w1","delay_seconds":5}`:                                            "lease_id",
		`{"worker_id":"w1","lease_id":"` + running.Lease() + `"}`:                         "delay_seconds",
		`{"worker_id":"w1","lease_id":"` + running.Lease() + `","delay_seconds":0}`:       "delay_seconds",
		`{"worker_id":"w1","lease_id":"` + running.Lease() + `","delay_seconds":-3}`:      "delay_seconds",
		`{"worker_id":"w1","lease_id":"` + running.Lease() + `","delay_seconds":2592001}`: "delay_seconds",
	} {
		p := c.Do(http.MethodPost, path, body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{field}, p.Fields(), body)
	}
	c.Do(http.MethodPost, path, `{"worker_id":"w1","lease_id":"`+running.Lease()+`","delay_seconds":1.5}`).Problem(t, http.StatusBadRequest, "malformed-request")
	c.Do(http.MethodPost, "/tasks/v1/"+uuid.NewString()+"/snooze", jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "delay_seconds": 5}).
		Problem(t, http.StatusNotFound, "task-not-found")
	require.Equal(t, running, c.Get(running.ID), "nothing changed")

	snoozed := c.Do(http.MethodPost, path, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "delay_seconds": 2592000})
	snoozed.Expect(t, http.StatusOK, nil)
	c.Do(http.MethodPost, path, jsonObj{"worker_id": "w1", "lease_id": running.Lease(), "delay_seconds": 5}).Problem(t, http.StatusConflict, "lease-lost")
	c.Do(http.MethodPost, "/tasks/v1/"+running.ID+"/complete", jsonObj{"worker_id": "w1", "lease_id": running.Lease()}).Problem(t, http.StatusConflict, "lease-lost")
}

// A task's own retry policy sets its backoff: without jitter exactly
// min(2^attempts x base, max); with full jitter between zero and that.
func TestRetryPolicyPerTask(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w1"})
	failOnce := func(queue string, retry jsonObj, attempts int) testclient.Task {
		t.Helper()
		submitted := c.Submit(jsonObj{"queue": queue, "max_attempts": 10, "retry": retry})
		var last testclient.Task
		for range attempts {
			var claimed []testclient.Task
			testclient.Poll(t, 20*time.Second, "claimable after its backoff", func() bool {
				claimed = c.Claim(jsonObj{"worker_id": "w1", "queue": queue})
				return len(claimed) == 1
			})
			last = c.Fail(submitted.ID, jsonObj{"worker_id": "w1", "lease_id": claimed[0].Lease(), "error": "again"})
		}
		return last
	}
	exact := failOnce("exact", jsonObj{"base_seconds": 0.2, "max_seconds": 0.5}, 1)
	require.Equal(t, 400*time.Millisecond, exact.RunAt.Sub(exact.UpdatedAt), "2^1 x 0.2 s")
	require.Equal(t, &testclient.RetryPolicy{BaseSeconds: 0.2, MaxSeconds: 0.5, Jitter: "none"}, c.Get(exact.ID).Retry)
	capped := failOnce("capped", jsonObj{"base_seconds": 0.2, "max_seconds": 0.5}, 2)
	require.Equal(t, 500*time.Millisecond, capped.RunAt.Sub(capped.UpdatedAt), "2^2 x 0.2 s, capped at 0.5 s")

	for range 5 {
		jittered := failOnce("jitter-"+uuid.NewString(), jsonObj{"base_seconds": 1, "max_seconds": 2, "jitter": "full"}, 1)
		wait := jittered.RunAt.Sub(jittered.UpdatedAt)
		require.GreaterOrEqual(t, wait, time.Duration(0))
		require.LessOrEqual(t, wait, 2*time.Second)
	}
	noPolicy := c.Submit(jsonObj{"queue": "plain"})
	require.Nil(t, noPolicy.Retry)

	for body, fields := range map[string][]string{
		`{"queue":"q","retry":{}}`:                                      {"retry.base_seconds"},
		`{"queue":"q","retry":{"base_seconds":0.05}}`:                   {"retry.base_seconds"},
		`{"queue":"q","retry":{"base_seconds":3601}}`:                   {"retry.base_seconds"},
		`{"queue":"q","retry":{"base_seconds":5,"max_seconds":4}}`:      {"retry.max_seconds"},
		`{"queue":"q","retry":{"base_seconds":5,"max_seconds":604801}}`: {"retry.max_seconds"},
		`{"queue":"q","retry":{"base_seconds":5,"jitter":"equal"}}`:     {"retry.jitter"},
	} {
		p := c.Do(http.MethodPost, "/tasks/v1", body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, fields, p.Fields(), body)
	}
}
