package tests

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// progressEvent is a task.progress event.
type progressEvent struct {
	OccurredAt time.Time `json:"occurred_at"`
	Progress   struct {
		Percent float64         `json:"percent"`
		Message string          `json:"message"`
		Details json.RawMessage `json:"details"`
	} `json:"progress"`
}

// progressEvents returns the task.progress events of task id in the
// outbox, in commit order.
func progressEvents(t *testing.T, s *testserver.Server, id string) []progressEvent {
	t.Helper()
	var payloads [][]byte
	require.NoError(t, s.DB.Select(&payloads, `SELECT payload::text::bytea FROM watermill_taskmaster_events ORDER BY transaction_id, "offset"`))
	var out []progressEvent
	for _, p := range payloads {
		var msg struct {
			Events []struct {
				progressEvent
				Type   string `json:"type"`
				TaskID string `json:"task_id"`
			} `json:"events"`
		}
		require.NoError(t, json.Unmarshal(p, &msg))
		for _, e := range msg.Events {
			if e.Type == "task.progress" && e.TaskID == id {
				out = append(out, e.progressEvent)
			}
		}
	}
	return out
}

// Progress is fenced like a completion, stored on the task, and announced
// by task.progress events at most once a second per task, the last report
// announced once its second is over; heartbeats may carry it; the next
// claim starts without.
func TestProgressIsFencedStoredAndCoalesced(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w"})
	c.Register(jsonObj{"id": "other"})
	task := c.Submit(jsonObj{"queue": "p", "max_attempts": 3})
	held := c.Claim(jsonObj{"worker_id": "w"})[0]
	report := func(worker, lease string, pct float64, msg string) *testclient.Response {
		return c.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/progress", jsonObj{"worker_id": worker, "lease_id": lease, "percent": pct,
			"message": msg, "details": jsonObj{"step": msg}})
	}

	// Fenced: another worker, a stale lease, change nothing.
	report("other", held.Lease(), 50, "x").Problem(t, http.StatusConflict, "lease-lost")
	report("w", "00000000-0000-4000-8000-000000000000", 50, "x").Problem(t, http.StatusConflict, "lease-lost")
	require.Nil(t, c.Get(task.ID).Progress)

	// A burst of reports: the first is announced at once, the rest within
	// its second only once the second is over, with the last values.
	start := time.Now()
	var got testclient.Task
	for i := 1; i <= 5; i++ {
		report("w", held.Lease(), float64(i*10), "step").Expect(t, http.StatusOK, &got)
	}
	require.Equal(t, 50.0, got.Progress.Percent, "the task shows the latest report")
	require.Equal(t, "RUNNING", got.Status)
	var events []progressEvent
	testclient.Poll(t, 15*time.Second, "the last report to be announced", func() bool {
		events = progressEvents(t, s, task.ID)
		return len(events) > 0 && events[len(events)-1].Progress.Percent == 50
	})
	if time.Since(start) < time.Second {
		require.Len(t, events, 1, "all five came within the first event's second")
	}
	for i := 1; i < len(events); i++ {
		require.GreaterOrEqual(t, events[i].OccurredAt.Sub(events[i-1].OccurredAt), time.Second, "at most one per second")
	}
	require.LessOrEqual(t, len(events), 2)
	require.JSONEq(t, `{"step": "step"}`, string(events[len(events)-1].Progress.Details))

	// A heartbeat item reports progress too (with its renewal).
	testclient.Poll(t, 5*time.Second, "a second since the last announcement", func() bool {
		return time.Since(events[len(events)-1].OccurredAt) > 1100*time.Millisecond
	})
	c.Heartbeat("w", jsonObj{"tasks": []jsonObj{{"id": task.ID, "lease_id": held.Lease(), "percent": 75, "message": "beat"}}})
	require.Equal(t, 75.0, c.Get(task.ID).Progress.Percent)
	testclient.Poll(t, 10*time.Second, "the heartbeat's report to be announced", func() bool {
		ev := progressEvents(t, s, task.ID)
		return ev[len(ev)-1].Progress.Message == "beat"
	})
	p := c.Do(http.MethodPost, "/workers/v1/w/heartbeat", jsonObj{"tasks": []jsonObj{{"id": task.ID, "lease_id": held.Lease(), "message": "no percent"}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[0].percent"}, p.Fields())

	// The progress stays after the attempt; the next claim starts without.
	c.Fail(task.ID, jsonObj{"worker_id": "w", "lease_id": held.Lease(), "error": "again"})
	require.Equal(t, 75.0, c.Get(task.ID).Progress.Percent)
	var again []testclient.Task
	testclient.Poll(t, 20*time.Second, "the retry to be claimable", func() bool {
		again = c.Claim(jsonObj{"worker_id": "w"})
		return len(again) == 1
	})
	require.Nil(t, again[0].Progress)
	require.Nil(t, c.Get(task.ID).Progress)

	for _, body := range []jsonObj{
		{"worker_id": "w", "lease_id": again[0].Lease()},
		{"worker_id": "w", "lease_id": again[0].Lease(), "percent": -1},
		{"worker_id": "w", "lease_id": again[0].Lease(), "percent": 1, "details": jsonObj{"n": "\u0000"}},
		{"worker_id": "w", "percent": 1},
	} {
		c.Do(http.MethodPost, "/tasks/v1/"+task.ID+"/progress", body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	}
}
