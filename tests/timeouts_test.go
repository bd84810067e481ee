package tests

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// fastTimeouts runs the timeout reaper every 100 ms.
func fastTimeouts(c *app.Config) { c.TimeoutReaperInterval = 100 * time.Millisecond }

// attemptsOf returns a task's attempts.
func attemptsOf(t *testing.T, c *testclient.Client, id string) []map[string]any {
	t.Helper()
	var out struct{ Attempts []map[string]any }
	c.Do(http.MethodGet, "/tasks/v1/"+id+"/attempts", nil).Expect(t, http.StatusOK, &out)
	return out.Attempts
}

// An attempt that runs past its time limit ends, whatever its holder's
// heartbeats say: with attempts left the task is retried after backoff
// (outcome timed_out), on its last attempt it is DEAD exhausted; the
// holder's heartbeats name it in lost and cancel, and its reports are
// refused.
func TestTimedOutAttemptUnderHeartbeatsIsRetriedThenDead(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, fastTimeouts)
	c.Register(jsonObj{"id": "w"})
	task := c.Submit(jsonObj{"queue": "slow", "timeout_seconds": 1, "max_attempts": 2,
		"retry": jsonObj{"base_seconds": 0.1, "max_seconds": 0.2}})
	require.Equal(t, 1, *task.TimeoutSeconds)

	// The holder keeps listing every task it holds, every 100 ms.
	var (
		mu      sync.Mutex
		holding []testclient.Task
		beats   []testclient.Beat
	)
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	go func() {
		for ctx.Err() == nil {
			mu.Lock()
			listing := testclient.Listing(holding...)
			mu.Unlock()
			r, err := c.Send(http.MethodPost, "/workers/v1/w/heartbeat", listing, nil)
			if err == nil && r.Status == http.StatusOK {
				var b testclient.Beat
				if json.Unmarshal(r.Body, &b) == nil {
					mu.Lock()
					beats = append(beats, b)
					mu.Unlock()
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	claim := func() testclient.Task {
		var got []testclient.Task
		testclient.Poll(t, 10*time.Second, "the task to be claimable", func() bool {
			got = c.Claim(jsonObj{"worker_id": "w"})
			return len(got) == 1
		})
		mu.Lock()
		holding = got
		mu.Unlock()
		return got[0]
	}

	first := claim()
	require.NotNil(t, first.TimeoutAt)
	require.Equal(t, first.ClaimedAt.Add(time.Second), *first.TimeoutAt)
	testclient.Poll(t, 10*time.Second, "the first attempt to time out", func() bool { return c.Get(task.ID).Attempts == 1 && c.Get(task.ID).Status != "RUNNING" })
	after := c.Get(task.ID)
	require.Equal(t, "execution timeout after 1s", after.Error())
	require.Nil(t, after.TimeoutAt)
	// The holder learns it from its heartbeats: lost, and cancel.
	ref := first.Ref()
	testclient.Poll(t, 10*time.Second, "a heartbeat to name the task", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, b := range beats {
			if containsRef(b.Lost, ref) && containsRef(b.Cancel, ref) {
				return true
			}
		}
		return false
	})
	c.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/complete", jsonObj{"worker_id": "w", "lease_id": first.Lease()}).
		Problem(t, http.StatusConflict, "lease-lost")

	second := claim()
	require.Equal(t, 2, second.Attempts)
	testclient.Poll(t, 10*time.Second, "the last attempt to time out", func() bool { return c.Get(task.ID).Status == "DEAD" })
	dead := c.Get(task.ID)
	require.Equal(t, "exhausted", dead.Reason())
	require.Equal(t, "execution timeout after 1s", dead.Error())
	c.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/complete", jsonObj{"worker_id": "w", "lease_id": second.Lease()}).
		Problem(t, http.StatusConflict, "invalid-transition")

	attempts := attemptsOf(t, c, task.ID)
	require.Len(t, attempts, 2)
	for _, a := range attempts {
		require.Equal(t, "timed_out", a["outcome"])
		require.Equal(t, "execution timeout after 1s", a["error"])
	}
}

func containsRef(refs []testclient.LeaseRef, r testclient.LeaseRef) bool {
	for _, x := range refs {
		if x == r {
			return true
		}
	}
	return false
}

// A queue's default_timeout_seconds limits the attempts of its tasks that
// have no limit of their own, from the claims made after it was set; null
// clears it. A task's own limit wins.
func TestQueueDefaultTimeLimit(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, fastTimeouts)
	c.Register(jsonObj{"id": "w"})
	var settings map[string]any
	c.Do(http.MethodPatch, "/queues/v1/limited", jsonObj{"default_timeout_seconds": 600}).Expect(t, http.StatusOK, &settings)
	require.Equal(t, 600.0, settings["default_timeout_seconds"])

	plain := c.Submit(jsonObj{"queue": "limited"})
	own := c.Submit(jsonObj{"queue": "limited", "timeout_seconds": 30})
	claimed := c.Claim(jsonObj{"worker_id": "w", "limit": 2})
	require.Len(t, claimed, 2)
	for _, task := range claimed {
		want := 600 * time.Second
		if task.ID == own.ID {
			want = 30 * time.Second
		}
		require.Equal(t, task.ClaimedAt.Add(want), *task.TimeoutAt, task.ID)
	}
	require.Nil(t, c.Get(plain.ID).TimeoutSeconds, "the task keeps no limit of its own")

	c.Do(http.MethodPatch, "/queues/v1/limited", jsonObj{"default_timeout_seconds": nil}).Expect(t, http.StatusOK, &settings)
	require.Nil(t, settings["default_timeout_seconds"])
	later := c.Submit(jsonObj{"queue": "limited"})
	got := c.Claim(jsonObj{"worker_id": "w"})
	require.Len(t, got, 1)
	require.Equal(t, later.ID, got[0].ID)
	require.Nil(t, got[0].TimeoutAt, "no limit once cleared")

	for _, bad := range []any{0, 86401, "1", 1.5} {
		p := c.Do(http.MethodPatch, "/queues/v1/limited", jsonObj{"default_timeout_seconds": bad}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"default_timeout_seconds"}, p.Fields(), bad)
	}
	for _, bad := range []any{0, 86401, -5} {
		p := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "timeout_seconds": bad}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"timeout_seconds"}, p.Fields(), bad)
	}
	p := c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []jsonObj{{"queue": "q"}, {"queue": "q", "timeout_seconds": 0}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[1].timeout_seconds"}, p.Fields())
}
