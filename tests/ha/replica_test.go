package ha_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testserver"
	"github.com/taskmaster/taskmaster/tests/workload"
)

// A read replica (a real streaming standby) serves the listings, the queue
// statistics and the dashboard's pages while it keeps up, never claims or
// reads after writes; the primary serves them while it lags more than the
// bound; every page says which.
func TestReadsThatMayLagGoToTheReplica(t *testing.T) {
	t.Parallel()
	c := startCluster(t, false)
	replicaURL := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/taskmaster?sslmode=disable", c.standby.Port())
	var standby *sqlx.DB
	workload.WaitUntil(t, "the database on the standby", func() bool {
		var err error
		standby, err = sqlx.Connect("postgres", replicaURL)
		return err == nil
	})
	t.Cleanup(func() { _ = standby.Close() })
	serve := func(maxLag time.Duration) *testserver.Server {
		return testserver.StartOn(t, c.url, func(cfg *app.Config) {
			cfg.ReadDatabaseURL = replicaURL
			cfg.ReadMaxLag = maxLag
			cfg.Outbox.PollInterval = 20 * time.Millisecond
		})
	}
	// lenient lets the replica be an hour behind; strict, half a second.
	lenient, strict := serve(time.Hour), serve(500*time.Millisecond)
	hc := &http.Client{Timeout: 30 * time.Second}

	submit := func(s *testserver.Server) string {
		code, _, body, err := workload.PostJSON(context.Background(), hc, s.URL+"/tasks/v1", map[string]any{"queue": "replicated", "payload": 1})
		require.NoError(t, err)
		require.Equal(t, http.StatusCreated, code, "%s", body)
		return workload.SubmittedIDs(body, 1)[0]
	}
	listed := func(s *testserver.Server, id string) bool {
		code, body, err := workload.Get(hc, s.URL+"/tasks/v1?queue=replicated")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code, "%s", body)
		return strings.Contains(string(body), id)
	}
	page := func(s *testserver.Server, path string) (int, string) {
		code, body, err := workload.Get(hc, s.URL+path)
		require.NoError(t, err)
		return code, string(body)
	}
	metric := func(s *testserver.Server, line string) bool {
		_, body := page(s, "/metrics")
		return strings.Contains(body, "\n"+line+"\n")
	}

	first := submit(lenient)
	for _, s := range []*testserver.Server{lenient, strict} {
		workload.WaitUntil(t, "the replica caught up", func() bool { return listed(s, first) })
		require.True(t, metric(s, "taskmaster_read_replica_in_use 1"))
		_, body := page(s, "/ui/")
		require.Contains(t, body, "Read from a replica")
	}

	// The replica stops replaying: it receives the next commits and shows
	// none of them.
	_, err := standby.Exec(`SELECT pg_wal_replay_pause()`)
	require.NoError(t, err)
	second := submit(lenient)
	code, body := page(lenient, "/tasks/v1/"+second)
	require.Equal(t, http.StatusOK, code, "a task by id is read from the primary: %s", body)
	require.False(t, listed(lenient, second), "the listing is read from the replica, which lags")
	workload.WaitUntil(t, "the lag shows", func() bool {
		_, body := page(lenient, "/ui/")
		return strings.Contains(body, "Read from a replica, up to")
	})
	code, _ = page(lenient, "/ui/tasks/"+second)
	require.Equal(t, http.StatusNotFound, code, "the dashboard's task page reads from the replica")
	code, body = page(lenient, "/ui/tasks/"+second+"?ok=retried")
	require.Equal(t, http.StatusOK, code, "just after an action, the page reads from the primary")
	require.Contains(t, body, "Read from the primary, to show your change.")

	// Claims never read from the replica: the worker gets both tasks.
	code, _, body2, err := workload.PostJSON(context.Background(), hc, lenient.URL+"/workers/v1/register", map[string]any{"id": "w", "queues": []string{"replicated"}})
	require.NoError(t, err)
	require.Equal(t, http.StatusCreated, code, "%s", body2)
	code, _, body2, err = workload.PostJSON(context.Background(), hc, lenient.URL+"/tasks/v1/claim", map[string]any{"worker_id": "w", "limit": 10})
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "%s", body2)
	require.Contains(t, string(body2), first)
	require.Contains(t, string(body2), second)

	// Past its bound, the strict instance reads from the primary.
	workload.WaitUntil(t, "the strict instance reads from the primary", func() bool { return listed(strict, second) })
	require.True(t, metric(strict, "taskmaster_read_replica_in_use 0"))
	_, body = page(strict, "/ui/workers")
	require.Contains(t, body, "Read from the primary: the replica is")
	require.Contains(t, body, "behind (more than 500ms)")
	require.True(t, metric(lenient, "taskmaster_read_replica_in_use 1"), "within its hour")

	// Replaying again, the replica catches up and serves them again.
	_, err = standby.Exec(`SELECT pg_wal_replay_resume()`)
	require.NoError(t, err)
	workload.WaitUntil(t, "back on the replica", func() bool { return metric(strict, "taskmaster_read_replica_in_use 1") })
	require.True(t, listed(strict, second))
	require.True(t, listed(lenient, second))
}
