package tests

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// limitJSON is the named limit of the contract.
type limitJSON struct {
	Name       string   `json:"name"`
	PerSecond  *float64 `json:"per_second"`
	Burst      *int     `json:"burst"`
	MaxRunning *int     `json:"max_running"`
	Queues     []string `json:"queues"`
	Running    int      `json:"running"`
	Tokens     *float64 `json:"tokens"`
}

// Named limits: PUT creates (201) then replaces (200), GET and the listing
// show the queues naming a limit, a queue may name only existing limits,
// a limit named by a queue cannot be deleted (409), bad values are 422s.
func TestNamedLimitsAPI(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	var l limitJSON
	c.Do(http.MethodPut, "/limits/v1/tenant-api", jsonObj{"per_second": 2.5}).Expect(t, http.StatusCreated, &l)
	require.Equal(t, 2.5, *l.PerSecond)
	require.Equal(t, 3, *l.Burst, "a second's tokens")
	require.Nil(t, l.MaxRunning)
	require.Equal(t, 3.0, *l.Tokens)
	require.Equal(t, []string{}, l.Queues)
	c.Do(http.MethodPut, "/limits/v1/tenant-api", jsonObj{"per_second": 5, "burst": 10, "max_running": 4}).Expect(t, http.StatusOK, &l)
	require.Equal(t, 4, *l.MaxRunning)

	c.Do(http.MethodPatch, "/queues/v1/billing", jsonObj{"limits": []string{"tenant-api"}}).Expect(t, http.StatusOK, nil)
	c.Do(http.MethodPatch, "/queues/v1/crm", jsonObj{"limits": []string{"tenant-api"}, "rate_limit_per_group": jsonObj{"per_second": 1}}).
		Expect(t, http.StatusOK, nil)
	c.Do(http.MethodGet, "/limits/v1/tenant-api", nil).Expect(t, http.StatusOK, &l)
	require.Equal(t, []string{"billing", "crm"}, l.Queues)
	var queue struct {
		Settings struct {
			Limits            []string `json:"limits"`
			RateLimitPerGroup *struct {
				PerSecond float64 `json:"per_second"`
				Burst     int     `json:"burst"`
			} `json:"rate_limit_per_group"`
		} `json:"settings"`
	}
	c.Do(http.MethodGet, "/queues/v1/crm", nil).Expect(t, http.StatusOK, &queue)
	require.Equal(t, []string{"tenant-api"}, queue.Settings.Limits)
	require.Equal(t, 1, queue.Settings.RateLimitPerGroup.Burst)

	c.Do(http.MethodPut, "/limits/v1/db", jsonObj{"max_running": 2}).Expect(t, http.StatusCreated, nil)
	var list struct {
		Limits []limitJSON `json:"limits"`
	}
	c.Do(http.MethodGet, "/limits/v1", nil).Expect(t, http.StatusOK, &list)
	require.Len(t, list.Limits, 2)
	require.Equal(t, "db", list.Limits[0].Name)
	require.Nil(t, list.Limits[0].Tokens)

	p := c.Do(http.MethodDelete, "/limits/v1/tenant-api", nil).Problem(t, http.StatusConflict, "limit-in-use")
	require.Contains(t, p.Detail, "billing, crm")
	c.Do(http.MethodPatch, "/queues/v1/billing", jsonObj{"limits": nil}).Expect(t, http.StatusOK, nil)
	c.Do(http.MethodPatch, "/queues/v1/crm", jsonObj{"limits": []string{}}).Expect(t, http.StatusOK, nil)
	var deleted limitJSON
	c.Do(http.MethodDelete, "/limits/v1/tenant-api", nil).Expect(t, http.StatusOK, &deleted)
	require.Equal(t, 4, *deleted.MaxRunning)
	c.Do(http.MethodGet, "/limits/v1/tenant-api", nil).Problem(t, http.StatusNotFound, "limit-not-found")
	c.Do(http.MethodDelete, "/limits/v1/tenant-api", nil).Problem(t, http.StatusNotFound, "limit-not-found")
	p = c.Do(http.MethodPatch, "/queues/v1/crm", jsonObj{"limits": []string{"db", "tenant-api"}}).
		Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"limits[1]"}, p.Fields())

	for body, fields := range map[string][]string{
		`{}`:                                  {"limit"},
		`{"burst": 3, "max_running": 1}`:      {"burst"},
		`{"per_second": -1}`:                  {"per_second"},
		`{"max_running": 0}`:                  {"max_running"},
		`{"per_second": 1, "burst": 2000000}`: {"burst"},
	} {
		var raw any
		require.NoError(t, json.Unmarshal([]byte(body), &raw))
		p := c.Do(http.MethodPut, "/limits/v1/x", raw).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, fields, p.Fields(), body)
	}
	c.Do(http.MethodPut, "/limits/v1/x", jsonObj{"per_second": "fast"}).Problem(t, http.StatusBadRequest, "malformed-request")
	c.Do(http.MethodPut, "/limits/v1/x", jsonObj{"max_running": 1, "other": 1}).Problem(t, http.StatusBadRequest, "malformed-request")
	c.Do(http.MethodGet, "/limits/v1/x", nil).Problem(t, http.StatusNotFound, "limit-not-found")
}

// Per-group rate limits and a named limit hold across three instances
// whose workers claim at once: each group of the tenants queue, and the
// three queues sharing a named limit together, never take more than their
// bucket allows in any window of time, and the named limit's max_running
// caps the three queues' RUNNING tasks together.
func TestGroupAndNamedLimitsHoldAcrossThreeInstances(t *testing.T) {
	t.Parallel()
	dbURL := pgtest.NewDatabase(t)
	servers := []*testserver.Server{testserver.StartOn(t, dbURL, nil), testserver.StartOn(t, dbURL, nil), testserver.StartOn(t, dbURL, nil)}
	clients := make([]*testclient.Client, len(servers))
	for i, s := range servers {
		clients[i] = testclient.New(t, s.URL)
	}
	const (
		groupBurst, groupRate   = 2, 8.0
		sharedBurst, sharedRate = 4, 15.0
		sharedMax               = 3
		perQueue                = 120
	)
	shared := []string{"api-a", "api-b", "api-c"}
	groups := []string{"g1", "g2", "g3"}
	db := servers[0].DB
	clients[1].Do(http.MethodPatch, "/queues/v1/tenants", jsonObj{"rate_limit_per_group": jsonObj{"per_second": groupRate, "burst": groupBurst}}).
		Expect(t, http.StatusOK, nil)
	clients[2].Do(http.MethodPut, "/limits/v1/shared", jsonObj{"per_second": sharedRate, "burst": sharedBurst, "max_running": sharedMax}).
		Expect(t, http.StatusCreated, nil)
	for i, q := range shared {
		clients[i].Do(http.MethodPatch, "/queues/v1/"+q, jsonObj{"limits": []string{"shared"}}).Expect(t, http.StatusOK, nil)
	}
	submit := func(queue, group string) {
		items := make([]any, perQueue)
		for i := range items {
			item := jsonObj{"queue": queue}
			if group != "" {
				item["group_key"] = group
			}
			items[i] = item
		}
		clients[0].Do(http.MethodPost, "/tasks/v1/batch", jsonObj{"tasks": items}).Expect(t, http.StatusCreated, nil)
	}
	for _, g := range groups {
		submit("tenants", g)
	}
	for _, q := range shared {
		submit(q, "")
	}

	var (
		peak   atomic.Int64
		done   = make(chan struct{})
		wg     sync.WaitGroup
		mu     sync.Mutex
		byKey  = map[string][]claimTime{} // a group, or "shared"
		queues = append([]string{"tenants"}, shared...)
	)
	go func() {
		for {
			select {
			case <-done:
				return
			case <-time.After(2 * time.Millisecond):
			}
			var n int64
			if err := db.Get(&n, `SELECT count(*) FROM tasks WHERE queue = ANY($1) AND status = 'RUNNING'`, pq.StringArray(shared)); err == nil {
				raise(&peak, n)
			}
		}
	}()
	deadline := time.Now().Add(4 * time.Second)
	for i := range 12 {
		c := clients[i%len(clients)]
		id := fmt.Sprintf("w%d", i)
		c.Register(jsonObj{"id": id, "queues": queues})
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
				counts := map[string]int{}
				for _, tk := range out.Tasks {
					if tk.Queue == "tenants" {
						counts[*tk.GroupKey]++
					} else {
						counts["shared"]++
					}
				}
				mu.Lock()
				for k, n := range counts {
					byKey[k] = append(byKey[k], claimTime{sent, answered, n})
				}
				mu.Unlock()
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

	require.LessOrEqual(t, peak.Load(), int64(sharedMax), "the named limit's max_running exceeded")
	require.Positive(t, peak.Load())
	// Each bucket refilled and was taken from again (more than its burst):
	// the limits held the claims back, they did not stop them.
	for _, g := range groups {
		n := requireWithinBucket(t, byKey[g], groupBurst, groupRate)
		require.Greater(t, n, groupBurst, "group %s kept moving", g)
	}
	n := requireWithinBucket(t, byKey["shared"], sharedBurst, sharedRate)
	require.Greater(t, n, sharedBurst, "the shared queues kept moving")
	var claimed int
	require.NoError(t, db.Get(&claimed, `SELECT count(*) FROM tasks WHERE queue = ANY($1) AND claimed_at IS NOT NULL`, pq.StringArray(shared)))
	require.Equal(t, n, claimed)
}
