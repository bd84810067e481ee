package tests

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// scrape reads the unlabelled or labelled sample name (as printed, e.g.
// `taskmaster_claim_wakeups_total{reason="notified"}`) from base's /metrics.
func scrape(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err, line)
			return f
		}
	}
	t.Fatalf("no sample %s in /metrics", name)
	return 0
}

// waitingClaims starts n workers' long polls (limit 1, wait ms) on queue and
// returns a channel of what each got, once all of them wait.
func waitingClaims(t *testing.T, s *testserver.Server, queue string, n, wait int) <-chan []map[string]any {
	t.Helper()
	api := throughputAPI{t, s.URL}
	got := make(chan []map[string]any, n)
	var started sync.WaitGroup
	for i := range n {
		id := fmt.Sprintf("%s-w%d", queue, i)
		api.register(id, queue)
		started.Add(1)
		go func() {
			started.Done()
			got <- api.claim(id, 1, wait)
		}()
	}
	started.Wait()
	require.Eventually(t, func() bool { return scrape(t, s.URL, "taskmaster_claims_waiting") == float64(n) },
		10*time.Second, 20*time.Millisecond, "every claim waits")
	return got
}

// A task submitted while many claims wait on its queue wakes one of them,
// not all: the notification says how many tasks came, and the notifier
// wakes that many waiters (oldest first); the others keep waiting without
// looking again.
func TestOneTaskWakesOneWaiter(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.ClaimSafetyInterval = time.Minute })
	const waiters = 20
	got := waitingClaims(t, s, "one-wake", waiters, 20000)
	before := scrape(t, s.URL, `taskmaster_claim_wakeups_total{reason="notified"}`)
	api := throughputAPI{t, s.URL}
	code, _ := api.do(http.MethodPost, "/tasks/v1", map[string]any{"queue": "one-wake"})
	require.Equal(t, http.StatusCreated, code)
	select {
	case tasks := <-got:
		require.Len(t, tasks, 1)
	case <-time.After(10 * time.Second):
		t.Fatal("no waiting claim got the task")
	}
	time.Sleep(300 * time.Millisecond) // a wake-up of more waiters would have come by now
	require.Equal(t, before+1, scrape(t, s.URL, `taskmaster_claim_wakeups_total{reason="notified"}`), "one task, one wake-up")
	require.Equal(t, float64(waiters-1), scrape(t, s.URL, "taskmaster_claims_waiting"))

	// A batch of three wakes three more.
	code, _ = api.do(http.MethodPost, "/tasks/v1/batch", map[string]any{"tasks": []map[string]any{{"queue": "one-wake"}, {"queue": "one-wake"}, {"queue": "one-wake"}}})
	require.Equal(t, http.StatusCreated, code)
	for range 3 {
		select {
		case tasks := <-got:
			require.Len(t, tasks, 1)
		case <-time.After(10 * time.Second):
			t.Fatal("a task of the batch was not handed to a waiting claim")
		}
	}
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, before+4, scrape(t, s.URL, `taskmaster_claim_wakeups_total{reason="notified"}`), "three tasks, three wake-ups")
	require.Equal(t, float64(waiters-4), scrape(t, s.URL, "taskmaster_claims_waiting"))
}

// Claims waiting on empty queues write nothing: only a request's first
// attempt is a sign of life of its worker; the later ones (here the safety
// polls, every 200 ms) read and claim nothing.
func TestWaitingClaimsWriteNothing(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) { c.App.ClaimSafetyInterval = 200 * time.Millisecond })
	waitingClaims(t, s, "write-nothing", 10, 20000)
	// Make the workers' last sign of life older than worker.RefreshInterval,
	// after which any further sign of life would be saved.
	time.Sleep(1200 * time.Millisecond)
	type counters struct {
		Updates int64 `db:"n_tup_upd"`
		Commits int64 `db:"xact_commit"`
	}
	read := func() counters {
		_, err := s.DB.Exec(`SELECT pg_stat_clear_snapshot()`)
		require.NoError(t, err)
		var c counters
		require.NoError(t, s.DB.Get(&c, `SELECT
			(SELECT n_tup_upd FROM pg_stat_user_tables WHERE relname = 'workers') AS n_tup_upd,
			(SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()) AS xact_commit`))
		return c
	}
	c0 := read()
	time.Sleep(2500 * time.Millisecond) // backends publish their counters within a second
	c1 := read()
	require.Equal(t, c0.Updates, c1.Updates, "waiting claims updated workers")
	require.Greater(t, c1.Commits-c0.Commits, int64(5), "the waiting claims looked again (safety polls)")
	var beats int
	require.NoError(t, s.DB.Get(&beats, `SELECT count(*) FROM workers WHERE last_heartbeat_at > now() - interval '1 second'`))
	require.Zero(t, beats, "no worker's sign of life was refreshed while it waited")
}

// A waiting claim gets a delayed task when it falls due, without polling
// for it: the submission's notification carries the delay, and the
// notifier wakes a waiter then.
func TestDelayedTaskWakesWaiterWhenDue(t *testing.T) {
	t.Parallel()
	s := testserver.Start(t, func(c *app.Config) {
		c.App.ClaimPollInterval, c.App.ClaimSafetyInterval = time.Minute, time.Minute
	})
	got := waitingClaims(t, s, "due-wake", 3, 20000)
	api := throughputAPI{t, s.URL}
	var runAt time.Time
	require.NoError(t, s.DB.Get(&runAt, `SELECT now() + interval '1500 milliseconds'`))
	code, body := api.do(http.MethodPost, "/tasks/v1", map[string]any{"queue": "due-wake", "run_at": runAt.Format(time.RFC3339Nano)})
	require.Equal(t, http.StatusCreated, code, body)
	select {
	case tasks := <-got:
		require.Len(t, tasks, 1)
		var claimedAt time.Time
		require.NoError(t, s.DB.Get(&claimedAt, `SELECT claimed_at FROM tasks WHERE queue = 'due-wake'`))
		require.False(t, claimedAt.Before(runAt), "claimed at %v, before its run_at %v", claimedAt, runAt)
		require.Less(t, claimedAt.Sub(runAt), 5*time.Second, "claimed when due, not at a poll a minute later")
	case <-time.After(15 * time.Second):
		t.Fatal("the delayed task did not wake a waiting claim")
	}
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, float64(1), scrape(t, s.URL, `taskmaster_claim_wakeups_total{reason="due"}`))
	require.Equal(t, float64(2), scrape(t, s.URL, "taskmaster_claims_waiting"))
}
