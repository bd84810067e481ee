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
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
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
	clients[1].Do(http.MethodPatch, "/queues/v1/"+capped, jsonObj{"max_running": capN}).Expect(t, http.StatusOK, nil)
	clients[2].Do(http.MethodPatch, "/queues/v1/"+rated, jsonObj{"rate_limit": jsonObj{"per_second": rate, "burst": burst}}).Expect(t, http.StatusOK, nil)
	for _, q := range []string{capped, rated} {
		items := make([]any, tasks)
		for i := range items {
			items[i] = jsonObj{"queue": q}
		}
		clients[0].Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items}).Expect(t, http.StatusCreated, nil)
	}

	// ratedHits are the claims that took tasks of the rated queue.
	var (
		peak      atomic.Int64
		done      = make(chan struct{})
		wg        sync.WaitGroup
		timesMu   sync.Mutex
		ratedHits []claimTime
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
				sent := time.Now()
				r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": id, "limit": 10, "wait_ms": 200}, nil)
				answered := time.Now()
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
				n := 0
				for _, tk := range out.Tasks {
					if tk.Queue == rated {
						n++
					}
				}
				if n > 0 {
					timesMu.Lock()
					ratedHits = append(ratedHits, claimTime{sent, answered, n})
					timesMu.Unlock()
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

	total := requireWithinBucket(t, ratedHits, burst, rate)
	var claimed int
	require.NoError(t, db.Get(&claimed, `SELECT count(*) FROM tasks WHERE queue = $1 AND claimed_at IS NOT NULL`, rated))
	require.Equal(t, total, claimed)
	require.GreaterOrEqual(t, float64(claimed), rate*2, "the rated queue kept moving")
}

// claimTime is a claim that took tasks of a rate-limited bucket: when it
// was sent and answered, and how many of them it took. The bucket charged
// the claim at a moment between the two.
type claimTime struct {
	sent, answered time.Time
	n              int
}

// requireWithinBucket checks claims against a token bucket (burst, rate a
// second): any set of claims sent at or after a and answered by b was
// charged within [a, b], so together they took at most burst + rate x
// (b - a). It returns how many tasks the claims took.
func requireWithinBucket(t *testing.T, hits []claimTime, burst, rate float64) int {
	t.Helper()
	total := 0
	for _, h := range hits {
		total += h.n
	}
	for _, first := range hits {
		for _, last := range hits {
			if last.answered.Before(first.sent) {
				continue
			}
			n := 0
			for _, h := range hits {
				if !h.sent.Before(first.sent) && !h.answered.After(last.answered) {
					n += h.n
				}
			}
			window := last.answered.Sub(first.sent).Seconds()
			require.LessOrEqualf(t, float64(n), burst+rate*window, "%d claims in %.3fs", n, window)
		}
	}
	return total
}

// A paused queue hands out nothing: a long poll on it keeps waiting while
// tasks arrive, and wakes with them as soon as the queue is resumed, well
// before the poll interval would have looked again.
func TestPausedQueueLongPollWakesOnResume(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) { cfg.App.ClaimPollInterval = 10 * time.Second })
	c.Register(jsonObj{"id": "w", "queues": []string{"held"}})
	c.Do(http.MethodPatch, "/queues/v1/held", jsonObj{"paused": true}).Expect(t, http.StatusOK, nil)
	c.Submit(jsonObj{"queue": "held"})
	require.Empty(t, c.Claim(jsonObj{"worker_id": "w", "wait_ms": 300}), "paused: nothing handed out")

	type answer struct {
		tasks []testclient.Task
		at    time.Time
	}
	got := make(chan answer, 1)
	go func() {
		r, err := c.Send(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "wait_ms": 8000}, nil)
		var out struct {
			Tasks []testclient.Task `json:"tasks"`
		}
		if err == nil {
			err = json.Unmarshal(r.Body, &out)
		}
		if err != nil {
			t.Error(err)
		}
		got <- answer{out.Tasks, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond)
	select {
	case a := <-got:
		t.Fatalf("the long poll answered while paused: %+v", a.tasks)
	default:
	}
	resumed := time.Now()
	c.Do(http.MethodPatch, "/queues/v1/held", jsonObj{"paused": false}).Expect(t, http.StatusOK, nil)
	a := <-got
	require.Len(t, a.tasks, 1)
	require.Less(t, a.at.Sub(resumed), 2*time.Second, "woken by the resume, not by the poll interval")
}
