package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// group_key travels through single and batch submissions, shows on the
// task, is validated, and claims take turns across a queue's groups.
func TestGroupKeysAreKeptAndClaimsTakeTurns(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	big := make([]any, 200)
	for i := range big {
		big[i] = jsonObj{"queue": "tenants", "group_key": "big"}
	}
	c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": big}).Expect(t, http.StatusCreated, nil)
	small := c.Submit(jsonObj{"queue": "tenants", "group_key": "small"})
	require.Equal(t, "small", *small.GroupKey)
	require.Equal(t, "small", *c.Get(small.ID).GroupKey)
	plain := c.Submit(jsonObj{"queue": "plain"})
	require.Nil(t, plain.GroupKey)

	for _, bad := range []any{"", strings.Repeat("g", 129), "a\x00b"} {
		p := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "tenants", "group_key": bad}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"group_key"}, p.Fields())
	}
	p := c.Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": []any{jsonObj{"queue": "q"}, jsonObj{"queue": "q", "group_key": ""}}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks[1].group_key"}, p.Fields())

	c.Register(jsonObj{"id": "w", "queues": []string{"tenants"}})
	got := c.Claim(jsonObj{"worker_id": "w", "limit": 3})
	groups := make([]string, len(got))
	for i, tk := range got {
		groups[i] = *tk.GroupKey
	}
	require.Equal(t, []string{"big", "small", "big"}, groups, "the small group waits one turn, not 200 tasks")
}

// max_running and a rate limit hold across three instances whose workers
// claim at once: a sampler never sees more RUNNING tasks than the cap, and
// no window of time holds more claims of the rate-limited queue than the
// bucket allows.
func TestQueueLimitsHoldAcrossThreeInstances(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	servers := []*testserver.Server{testserver.StartOn(t, dbURL, nil), testserver.StartOn(t, dbURL, nil), testserver.StartOn(t, dbURL, nil)}
	clients := make([]*testclient.Client, len(servers))
	for i, s := range servers {
		clients[i] = testclient.New(t, s.URL)
	}
	const capped, rated, capN, burst, rate, tasks = "capped", "rated", 4, 5, 20.0, 120
	db := servers[0].DB
	_, err := db.Exec(`INSERT INTO queue_settings (queue, max_running, updated_at) VALUES ($1, $2, now())`, capped, capN)
	require.NoError(t, err)
	_, err = db.Exec(`INSERT INTO queue_settings (queue, rate_per_second, rate_burst, updated_at) VALUES ($1, $2, $3, now())`, rated, rate, burst)
	require.NoError(t, err)
	for _, q := range []string{capped, rated} {
		items := make([]any, tasks)
		for i := range items {
			items[i] = jsonObj{"queue": q}
		}
		clients[0].Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items}).Expect(t, http.StatusCreated, nil)
	}

	var (
		peak atomic.Int64
		done = make(chan struct{})
		wg   sync.WaitGroup
	)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			var n int64
			if err := db.Get(&n, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'RUNNING'`, capped); err == nil && n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	start := time.Now()
	deadline := start.Add(4 * time.Second)
	for i := range 12 {
		c := clients[i%len(clients)]
		id := fmt.Sprintf("w%d", i)
		c.Register(jsonObj{"id": id, "queues": []string{capped, rated}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(deadline) {
				r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": id, "limit": 10, "wait_ms": 200}, nil)
				if err != nil || r.Status != http.StatusOK {
					t.Errorf("claim: %v %v", err, r)
					return
				}
				var out struct {
					Tasks []testclient.Task `json:"tasks"`
				}
				if err := json.Unmarshal(r.Body, &out); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(5 * time.Millisecond) // hold them RUNNING a while
				for _, tk := range out.Tasks {
					if r, err := c.Send(http.MethodPost, "/tasks/v1/"+tk.ID+"/complete", jsonObj{"worker_id": id, "lease_id": tk.Lease()}, nil); err != nil || r.Status != http.StatusOK {
						t.Errorf("complete: %v %v", err, r)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)

	require.LessOrEqual(t, peak.Load(), int64(capN), "max_running exceeded")
	require.Positive(t, peak.Load())
	var cappedDone int
	require.NoError(t, db.Get(&cappedDone, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'DONE'`, capped))
	require.Greater(t, cappedDone, capN, "the capped queue kept moving")

	// Claim times of the rated queue, on the database clock: any window
	// [a, b] holds at most burst + rate x (b - a) claims (plus one task of
	// slack for the clock the claim stamps, taken at its transaction's
	// start, before it waited for the queue's lock).
	var claimed []time.Time
	require.NoError(t, db.Select(&claimed, `SELECT claimed_at FROM tasks WHERE queue = $1 AND claimed_at IS NOT NULL ORDER BY claimed_at`, rated))
	require.NotEmpty(t, claimed)
	span := claimed[len(claimed)-1].Sub(claimed[0]).Seconds()
	require.LessOrEqual(t, float64(len(claimed)), burst+rate*span+1, "rate limit exceeded over the run")
	for i := range claimed {
		for j := i; j < len(claimed); j++ {
			window := claimed[j].Sub(claimed[i]).Seconds()
			require.LessOrEqualf(t, float64(j-i+1), burst+rate*(window+0.1)+1, "window %d..%d of %.3fs", i, j, window)
		}
	}
	require.GreaterOrEqual(t, float64(len(claimed)), rate*2, "the rated queue kept moving")
}
