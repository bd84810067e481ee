// Package outboxe2e tests the outbox path end to end: the real service over
// HTTP (in process, or as a separate process that is killed), its
// projections, /queues/v1, /metrics and /events/v1.
package outboxe2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/outbox"
	"github.com/taskmaster/taskmaster/adapters/outbox/outboxtest"
	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
)

// childEnv, set to "serve", makes the test binary run `taskmaster serve`
// instead of the tests: the crash test starts it as a separate process it
// can kill.
const childEnv = "TASKMASTER_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "serve" {
		os.Exit(serveChild())
	}
	pgtest.Main(m)
}

func serveChild() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := app.Serve(ctx, nil, os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "taskmaster:", err)
		return 1
	}
	return 0
}

// client calls the API.
type client struct {
	t    testing.TB
	base func() string
	hc   *http.Client
}

func newClient(t testing.TB, base func() string) *client {
	return &client{t: t, base: base, hc: &http.Client{Timeout: 10 * time.Second}}
}

// call sends a JSON request and decodes a JSON answer into out (when not
// nil). A transport error (the server is gone) is returned; everything else
// is checked.
func (c *client) call(method, path string, body, out any) (int, error) {
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(c.t, err)
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.base()+path, r)
	require.NoError(c.t, err)
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	require.Less(c.t, resp.StatusCode, 500, "%s %s: %s", method, path, data)
	if out != nil && resp.StatusCode < 300 {
		require.NoError(c.t, json.Unmarshal(data, out), "%s %s: %s", method, path, data)
	}
	return resp.StatusCode, nil
}

// mustCall is call for a server that must be up.
func (c *client) mustCall(method, path string, body, out any) int {
	status, err := c.call(method, path, body, out)
	require.NoError(c.t, err)
	return status
}

type taskJSON struct {
	ID      string `json:"id"`
	Queue   string `json:"queue"`
	Status  string `json:"status"`
	LeaseID string `json:"lease_id"`
}

type claimResponse struct {
	Tasks []taskJSON `json:"tasks"`
}

type queueJSON struct {
	Queue                   string     `json:"queue"`
	Pending                 int64      `json:"pending"`
	Running                 int64      `json:"running"`
	Done                    int64      `json:"done"`
	Dead                    int64      `json:"dead"`
	Blocked                 int64      `json:"blocked"`
	ActiveWorkers           int64      `json:"active_workers"`
	OldestPendingAgeSeconds *float64   `json:"oldest_pending_age_seconds"`
	StatsAsOf               *time.Time `json:"stats_as_of"`
	Rates                   map[string]struct {
		Enqueued     float64 `json:"enqueued"`
		Claimed      float64 `json:"claimed"`
		Completed    float64 `json:"completed"`
		DeadLettered float64 `json:"dead_lettered"`
	} `json:"rates"`
	Totals struct {
		Submitted    int64            `json:"submitted"`
		Claimed      int64            `json:"claimed"`
		Completed    int64            `json:"completed"`
		Failed       int64            `json:"failed"`
		DeadLettered map[string]int64 `json:"dead_lettered"`
		Requeued     map[string]int64 `json:"requeued"`
		Cleaned      int64            `json:"cleaned"`
	} `json:"totals"`
}

// expectedCounters counts the outbox's events the way the issue defines the
// counters, independently of the projector's code: kind/queue/reason -> n.
func expectedCounters(events []event.Event) map[string]int64 {
	out := map[string]int64{}
	inc := func(kind, queue, reason string) { out[kind+"/"+queue+"/"+reason]++ }
	for _, e := range events {
		switch e.Type {
		case event.TaskSubmitted:
			inc("tasks_submitted", e.Queue, "")
		case event.TaskClaimed:
			inc("tasks_claimed", e.Queue, "")
		case event.TaskCompleted:
			inc("tasks_completed", e.Queue, "")
		case event.TaskFailed:
			inc("tasks_failed", e.Queue, "")
			if e.To == "DEAD" {
				inc("tasks_dead_lettered", e.Queue, e.Reason)
			} else {
				inc("tasks_requeued", e.Queue, e.Reason)
			}
		case event.TaskDeadLettered:
			inc("tasks_dead_lettered", e.Queue, e.Reason)
		case event.TaskRequeued, event.TaskRetried:
			inc("tasks_requeued", e.Queue, e.Reason)
		case event.TaskCleaned:
			inc("tasks_cleaned", e.Queue, "")
		case event.WorkerRegistered:
			if len(e.Queues) == 0 {
				inc("workers_registered", "*", "")
			}
			for _, q := range e.Queues {
				inc("workers_registered", q, "")
			}
		case event.WorkerDied:
			inc("workers_died", "", "")
		case event.WorkerCleaned:
			inc("workers_cleaned", "", "")
		}
	}
	return out
}

// Shorthands for outboxtest's comparisons.
var (
	outboxEvents    = outboxtest.Events
	truthCounts     = outboxtest.TruthCounts
	projectedCounts = outboxtest.ProjectedCounts
	queryCounts     = outboxtest.Counts
)

// waitCaughtUp polls until the projections' consumer group has consumed the
// last outbox message.
func waitCaughtUp(t testing.TB, db *sqlx.DB) {
	t.Helper()
	outboxtest.WaitCaughtUp(t, db, outbox.ProjectionsGroup)
}
