package tests

import (
	"net/http"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

func TestAPIRegisterCreatesThenUpdatesAWorker(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)

	var created testclient.Worker
	c.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w-1", "queues": []string{"a", "b", "a"}, "tags": []string{"gpu"}}).
		Expect(t, http.StatusCreated, &created)
	require.Equal(t, "w-1", created.ID)
	require.Equal(t, []string{"a", "b"}, created.Queues)
	require.Equal(t, []string{"gpu"}, created.Tags)
	require.Equal(t, "ACTIVE", created.Status)
	require.Equal(t, created.RegisteredAt, created.LastHeartbeatAt)
	require.NotNil(t, created.HeartbeatIntervalSeconds)
	require.Equal(t, 10.0, *created.HeartbeatIntervalSeconds, "a third of the 30 s stale threshold")

	var again testclient.Worker
	c.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w-1", "queues": []string{"c"}}).
		Expect(t, http.StatusOK, &again)
	require.Equal(t, []string{"c"}, again.Queues, "queues are replaced")
	require.Equal(t, []string{}, again.Tags, "tags are replaced")
	require.Equal(t, created.RegisteredAt, again.RegisteredAt)
	require.False(t, again.LastHeartbeatAt.Before(created.LastHeartbeatAt))

	var n int
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM workers`))
	require.Equal(t, 1, n)
}

func TestAPIRegisteringADeadWorkerRevivesIt(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w"})
	stage(t, s, `UPDATE workers SET status = 'DEAD', last_heartbeat_at = now() - interval '1 hour' WHERE id = 'w'`)
	c.Do(http.MethodPost, "/workers/v1/w/heartbeat", nil).Problem(t, http.StatusConflict, "worker-dead")

	var back testclient.Worker
	c.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w"}).Expect(t, http.StatusOK, &back)
	require.Equal(t, "ACTIVE", back.Status)
	require.WithinDuration(t, back.RegisteredAt, back.LastHeartbeatAt, time.Minute)
	var heartbeat testclient.Worker
	c.Do(http.MethodPost, "/workers/v1/w/heartbeat", nil).Expect(t, http.StatusOK, &heartbeat)
	require.Equal(t, "ACTIVE", heartbeat.Status)
}

func TestAPIRegisterGeneratesAnIDWhenAbsent(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	valid := regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)
	var ids []string
	for _, body := range []any{nil, jsonObj{}, jsonObj{"queues": []string{"q"}}} {
		var w testclient.Worker
		c.Do(http.MethodPost, "/workers/v1/register", body).Expect(t, http.StatusCreated, &w)
		require.Regexp(t, valid, w.ID)
		require.NotContains(t, ids, w.ID)
		ids = append(ids, w.ID)
	}
}

func TestAPIRegisterRejectsBadIDs(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for _, id := range []string{"has space", "slash/no", "ünï", "semi;colon", strings.Repeat("x", 129)} {
		p := c.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": id}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"id"}, p.Fields(), "id %q", id)
	}
	w := c.Register(jsonObj{"id": "A-z_0.9:" + strings.Repeat("x", 120)})
	require.Len(t, w.ID, 128, "every allowed character, at the longest length")
}

func TestAPIHeartbeatIntervalIsAThirdOfTheStaleThreshold(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) { cfg.App.Liveness.StaleAfter = 4500 * time.Millisecond })
	w := c.Register(jsonObj{"id": "w"})
	require.Equal(t, 1.5, *w.HeartbeatIntervalSeconds)
}

func TestAPIHeartbeat(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	registered := c.Register(jsonObj{"id": "w", "queues": []string{"q"}})

	var beat testclient.Worker
	c.Do(http.MethodPost, "/workers/v1/w/heartbeat", nil).Expect(t, http.StatusOK, &beat)
	require.Equal(t, "ACTIVE", beat.Status)
	require.Equal(t, registered.Queues, beat.Queues)
	require.False(t, beat.LastHeartbeatAt.Before(registered.LastHeartbeatAt))
	require.Nil(t, beat.HeartbeatIntervalSeconds)

	stage(t, s, `UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '40 seconds' WHERE id = 'w'`)
	var revived testclient.Worker
	c.Do(http.MethodPost, "/workers/v1/w/heartbeat", "").Expect(t, http.StatusOK, &revived)
	require.Equal(t, "ACTIVE", revived.Status, "a heartbeat revives a STALE worker")
	require.False(t, revived.LastHeartbeatAt.Before(beat.LastHeartbeatAt), "refreshed from 40 s ago to now")

	c.Do(http.MethodPost, "/workers/v1/nobody/heartbeat", nil).Problem(t, http.StatusNotFound, "worker-not-found")
	stage(t, s, `UPDATE workers SET status = 'DEAD' WHERE id = 'w'`)
	c.Do(http.MethodPost, "/workers/v1/w/heartbeat", nil).Problem(t, http.StatusConflict, "worker-dead")
}

func TestAPIListWorkers(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	var empty struct {
		Workers []testclient.Worker `json:"workers"`
	}
	c.Do(http.MethodGet, "/workers/v1", nil).Expect(t, http.StatusOK, &empty)
	require.NotNil(t, empty.Workers, "an empty array, not null")
	require.Empty(t, empty.Workers)

	want := map[string]testclient.Worker{}
	for _, id := range []string{"c", "a", "b"} {
		w := c.Register(jsonObj{"id": id, "queues": []string{"q-" + id}, "tags": []string{"t"}})
		w.HeartbeatIntervalSeconds, w.MaxHeartbeatTasks = nil, nil // registration's own members
		want[id] = w
	}
	stage(t, s, `UPDATE workers SET status = 'DEAD' WHERE id = 'b'`)
	dead := want["b"]
	dead.Status = "DEAD"
	want["b"] = dead

	var got struct {
		Workers []testclient.Worker `json:"workers"`
	}
	c.Do(http.MethodGet, "/workers/v1", nil).Expect(t, http.StatusOK, &got)
	byID := map[string]testclient.Worker{}
	for _, w := range got.Workers {
		byID[w.ID] = w
	}
	require.Equal(t, want, byID)
}

func TestAPIQueueStatistics(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	require.Empty(t, c.Queues())

	c.Register(jsonObj{"id": "on-a", "queues": []string{"a"}})
	c.Register(jsonObj{"id": "anywhere"})
	c.Register(jsonObj{"id": "on-b-dead", "queues": []string{"b"}})
	stage(t, s, `UPDATE workers SET status = 'DEAD' WHERE id = 'on-b-dead'`)
	for range 4 {
		c.Submit(jsonObj{"queue": "a"})
	}
	c.Submit(jsonObj{"queue": "b"})
	c.Submit(jsonObj{"queue": "b"})
	claimed := c.Claim(jsonObj{"worker_id": "on-a", "limit": 3})
	require.Len(t, claimed, 3)
	c.Complete(claimed[0].ID, jsonObj{"worker_id": "on-a", "lease_id": claimed[0].Lease()})
	last := c.Fail(claimed[1].ID, jsonObj{"worker_id": "on-a", "lease_id": claimed[1].Lease(), "retryable": false})

	// The statistics are projected from the outbox: they catch up with the
	// writes within about one poll interval. Ordered by queue name.
	want := []testclient.QueueCounts{
		{Queue: "a", Pending: 1, Running: 1, Done: 1, Dead: 1, ActiveWorkers: 2},
		{Queue: "b", Pending: 2, ActiveWorkers: 1},
	}
	got := c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool {
		return slices.Equal(want, testclient.Counts(qs))
	})
	require.Equal(t, want, testclient.Counts(got))

	a, b := got[0], got[1]
	require.Equal(t, testclient.QueueTotals{
		Submitted: 4, Claimed: 3, Completed: 1, Failed: 1,
		DeadLettered: map[string]int64{"non_retryable": 1}, Requeued: map[string]int64{},
	}, a.Totals)
	require.Equal(t, testclient.QueueTotals{Submitted: 2, DeadLettered: map[string]int64{}, Requeued: map[string]int64{}}, b.Totals)
	// Every event happened within the last 5 minutes, so those windows
	// count all of them: events per minute = count / window.
	for _, w := range []struct {
		name    string
		minutes float64
	}{{"last_5m", 5}, {"last_15m", 15}} {
		require.InDelta(t, 4/w.minutes, a.Rates[w.name].Enqueued, 1e-9, w.name)
		require.InDelta(t, 3/w.minutes, a.Rates[w.name].Claimed, 1e-9, w.name)
		require.InDelta(t, 1/w.minutes, a.Rates[w.name].Completed, 1e-9, w.name)
		require.InDelta(t, 1/w.minutes, a.Rates[w.name].DeadLettered, 1e-9, w.name)
		require.InDelta(t, 2/w.minutes, b.Rates[w.name].Enqueued, 1e-9, w.name)
	}
	require.Len(t, a.Rates, 3)
	require.Contains(t, a.Rates, "last_1m")
	for _, q := range got {
		require.NotNil(t, q.OldestPendingAgeSeconds, q.Queue)
		require.GreaterOrEqual(t, *q.OldestPendingAgeSeconds, 0.0, q.Queue)
		require.NotNil(t, q.StatsAsOf, q.Queue)
		require.False(t, q.StatsAsOf.Before(last.UpdatedAt), "%s: stats as of %s, before the last write at %s", q.Queue, q.StatsAsOf, last.UpdatedAt)
	}
	ages := map[string]float64{}
	stage(t, s, `UPDATE tasks SET created_at = now() - interval '1 hour' WHERE queue = 'b'`)
	for _, q := range c.Queues() {
		ages[q.Queue] = *q.OldestPendingAgeSeconds
	}
	require.GreaterOrEqual(t, ages["b"], 3600.0, "the oldest pending age is read live")
	require.Less(t, ages["a"], 3600.0)
}

func TestAPIHealthAndReadiness(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	for _, path := range []string{"/healthz", "/readyz"} {
		r := c.Do(http.MethodGet, path, nil)
		require.Equal(t, http.StatusOK, r.Status, "%s", r)
	}

	stage(t, s, `DELETE FROM schema_migrations`)
	c.Do(http.MethodGet, "/readyz", nil).Problem(t, http.StatusServiceUnavailable, "unavailable")
	require.Equal(t, http.StatusOK, c.Do(http.MethodGet, "/healthz", nil).Status, "alive, though not ready")
}

// Registration advertises how many tasks one heartbeat may list; a longer
// list is a 422 that changes nothing: no lease renewed, no task taken back
// as orphaned, the worker's last heartbeat as it was.
func TestAPIHeartbeatListingMoreThanTheCapIs422AndChangesNothing(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	w := c.Register(jsonObj{"id": "w", "queues": []string{"q"}})
	require.NotNil(t, w.MaxHeartbeatTasks)
	limit := *w.MaxHeartbeatTasks
	require.Equal(t, 10000, limit)
	c.Submit(jsonObj{"queue": "q"})
	held := c.Claim(jsonObj{"worker_id": "w", "lease_seconds": 60})
	require.Len(t, held, 1)
	// Old enough to be taken back as orphaned by any list that leaves it out.
	stage(t, s, `UPDATE tasks SET claimed_at = now() - interval '1 hour' WHERE id = $1`, held[0].ID)
	stage(t, s, `UPDATE workers SET last_heartbeat_at = now() - interval '5 seconds' WHERE id = 'w'`)
	before := c.Get(held[0].ID)
	var worker struct {
		LastHeartbeatAt time.Time `db:"last_heartbeat_at"`
	}
	require.NoError(t, s.DB.Get(&worker, `SELECT last_heartbeat_at FROM workers WHERE id = 'w'`))

	refs := make([]testclient.LeaseRef, limit+1)
	for i := range refs {
		refs[i] = testclient.LeaseRef{ID: uuid.NewString(), LeaseID: uuid.NewString()}
	}
	p := c.Do(http.MethodPost, "/workers/v1/w/heartbeat", jsonObj{"tasks": refs}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"tasks"}, p.Fields())
	require.Equal(t, before, c.Get(held[0].ID), "not renewed, not orphaned")
	var after struct {
		LastHeartbeatAt time.Time `db:"last_heartbeat_at"`
	}
	require.NoError(t, s.DB.Get(&after, `SELECT last_heartbeat_at FROM workers WHERE id = 'w'`))
	require.Equal(t, worker.LastHeartbeatAt, after.LastHeartbeatAt, "not a sign of life")

	// The longest list is taken: listing the held task renews it.
	refs = append(refs[:limit-1], held[0].Ref())
	beat := c.Heartbeat("w", jsonObj{"tasks": refs})
	require.Len(t, beat.Lost, limit-1)
	require.True(t, c.Get(held[0].ID).LeaseExpiresAt.After(*before.LeaseExpiresAt))
}

// A heartbeat that names a claim in flight (its answer not yet received)
// does not take that claim's tasks back as orphaned, however old the
// claim; the same heartbeat without the name does. Names that are not
// request ids, or too many of them, are a 422 that changes nothing.
func TestAPIHeartbeatKeepsTheTasksOfClaimsInFlight(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w", "queues": []string{"q"}})
	c.Submit(jsonObj{"queue": "q"})
	held := c.Claim(jsonObj{"worker_id": "w", "lease_seconds": 60, "request_id": "c-late"})
	require.Len(t, held, 1)
	// Older than any grace: its absence from a list would orphan it.
	stage(t, s, `UPDATE tasks SET claimed_at = now() - interval '1 hour' WHERE id = $1`, held[0].ID)
	before := c.Get(held[0].ID)

	for _, bad := range []jsonObj{
		{"tasks": []any{}, "claims_in_flight": []string{"has space"}},
		{"tasks": []any{}, "claims_in_flight": []string{""}},
		{"tasks": []any{}, "claims_in_flight": make([]string, 101)},
	} {
		p := c.Do(http.MethodPost, "/workers/v1/w/heartbeat", bad).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.NotEmpty(t, p.Fields())
		require.Contains(t, p.Fields()[0], "claims_in_flight")
		require.Equal(t, before, c.Get(held[0].ID), "nothing changed")
	}

	beat := c.Heartbeat("w", jsonObj{"tasks": []any{}, "claims_in_flight": []string{"c-other", "c-late"}})
	require.Empty(t, beat.Lost)
	require.Equal(t, "RUNNING", c.Get(held[0].ID).Status, "its claim is in flight: not orphaned")

	c.Heartbeat("w", jsonObj{"tasks": []any{}, "claims_in_flight": []string{"c-other"}})
	require.Equal(t, "PENDING", c.Get(held[0].ID).Status, "named no more: orphaned")
}
