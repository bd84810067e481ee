package tests

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// The contract's field names; other issues and tools depend on them.
var (
	taskFields = []string{
		"id", "queue", "status", "priority", "payload", "tags", "attempts", "max_attempts",
		"worker_id", "lease_id", "last_error", "dead_reason", "result", "deadline", "run_at",
		"idempotency_key", "created_at", "claimed_at", "finished_at", "updated_at",
		"lease_expires_at", "cancel_requested_at", "unique_key", "retry", "snoozes", "group_key",
		"timeout_seconds", "timeout_at", "metadata", "trace", "progress", "schedule_name", "schedule_tick",
		"workflow_id", "replay_of", "debounce_until",
	}
	workerFields = []string{"id", "queues", "tags", "status", "registered_at", "last_heartbeat_at", "draining"}
	queueFields  = []string{"queue", "pending", "running", "done", "dead", "blocked", "active_workers",
		"oldest_pending_age_seconds", "rates", "totals", "stats_as_of", "paused", "settings"}
	rateWindows = []string{"last_1m", "last_5m", "last_15m"}
	rateFields  = []string{"enqueued", "claimed", "completed", "dead_lettered"}
	totalFields = []string{"submitted", "claimed", "completed", "failed", "dead_lettered", "requeued", "cleaned"}
)

// requireKeys requires the JSON object raw to have exactly the keys want.
func requireKeys(t *testing.T, raw []byte, want []string) {
	t.Helper()
	var m map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &m), "%s", raw)
	got := make([]string, 0, len(m))
	for k := range m {
		got = append(got, k)
	}
	require.ElementsMatch(t, want, got)
}

func TestAPIObjectsCarryTheContractFieldNames(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)

	r := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q"}).Expect(t, http.StatusCreated, nil)
	requireKeys(t, r.Body, taskFields)

	r = c.Do(http.MethodPost, "/workers/v1/register", jsonObj{"id": "w1"}).Expect(t, http.StatusCreated, nil)
	requireKeys(t, r.Body, append(slices.Clone(workerFields), "heartbeat_interval_seconds", "max_heartbeat_tasks"))

	r = c.Do(http.MethodGet, "/workers/v1", nil).Expect(t, http.StatusOK, nil)
	var workers struct{ Workers []json.RawMessage }
	require.NoError(t, json.Unmarshal(r.Body, &workers))
	require.Len(t, workers.Workers, 1)
	requireKeys(t, workers.Workers[0], workerFields)

	// The queue statistics lag the submission by about one outbox poll.
	var queues struct{ Queues []json.RawMessage }
	testclient.Poll(t, 30*time.Second, "the queue to appear in the statistics", func() bool {
		r = c.Do(http.MethodGet, "/queues/v1", nil).Expect(t, http.StatusOK, nil)
		require.NoError(t, json.Unmarshal(r.Body, &queues))
		return len(queues.Queues) > 0
	})
	require.Len(t, queues.Queues, 1)
	requireKeys(t, queues.Queues[0], queueFields)
	var queue struct {
		Rates  map[string]json.RawMessage
		Totals json.RawMessage
	}
	require.NoError(t, json.Unmarshal(queues.Queues[0], &queue))
	require.ElementsMatch(t, rateWindows, slices.Collect(maps.Keys(queue.Rates)))
	for _, rate := range queue.Rates {
		requireKeys(t, rate, rateFields)
	}
	requireKeys(t, queue.Totals, totalFields)

	r = c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w1"}).Expect(t, http.StatusOK, nil)
	requireKeys(t, r.Body, []string{"tasks", "truncated"})
	var claimed struct{ Tasks []json.RawMessage }
	require.NoError(t, json.Unmarshal(r.Body, &claimed))
	require.Len(t, claimed.Tasks, 1)
	requireKeys(t, claimed.Tasks[0], taskFields)

	r = c.Do(http.MethodGet, "/tasks/v1", nil).Expect(t, http.StatusOK, nil)
	requireKeys(t, r.Body, []string{"tasks", "next_cursor", "truncated"})

	// One task read alone shows its dependencies too.
	var listed struct{ Tasks []struct{ ID string } }
	require.NoError(t, json.Unmarshal(r.Body, &listed))
	r = c.Do(http.MethodGet, "/tasks/v1/"+listed.Tasks[0].ID, nil).Expect(t, http.StatusOK, nil)
	requireKeys(t, r.Body, append(slices.Clone(taskFields), "depends_on", "blocked_by"))
}

func TestAPISubmitCreatesAPendingTaskWithDefaults(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)

	got := c.Submit(jsonObj{"queue": "emails", "payload": jsonObj{"to": "a@b.c", "n": []int{1, 2}}})
	_, err := uuid.Parse(got.ID)
	require.NoError(t, err)
	require.Equal(t, "emails", got.Queue)
	require.Equal(t, "PENDING", got.Status)
	require.Zero(t, got.Priority)
	require.JSONEq(t, `{"to": "a@b.c", "n": [1, 2]}`, string(got.Payload))
	require.Equal(t, []string{}, got.Tags)
	require.Zero(t, got.Attempts)
	require.Equal(t, 3, got.MaxAttempts)
	require.Nil(t, got.WorkerID)
	require.Nil(t, got.LeaseID)
	require.Nil(t, got.LastError)
	require.Nil(t, got.DeadReason)
	require.JSONEq(t, `null`, string(got.Result))
	require.Nil(t, got.Deadline)
	require.Nil(t, got.IdempotencyKey)
	require.Nil(t, got.ClaimedAt)
	require.Nil(t, got.FinishedAt)
	require.Equal(t, got.CreatedAt, got.RunAt, "claimable at once")
	require.Equal(t, got.CreatedAt, got.UpdatedAt)
	require.Equal(t, time.UTC, got.CreatedAt.Location())

	require.Equal(t, got, c.Get(got.ID))
}

func TestAPISubmitKeepsEveryGivenField(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	runAt := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	deadline := runAt.Add(24 * time.Hour)

	got := c.Submit(jsonObj{
		"queue": "reports", "payload": "plain string", "priority": -7, "max_attempts": 100,
		"tags": []string{"gpu", "eu", "gpu"}, "deadline": deadline, "run_at": runAt, "idempotency_key": "r-1",
	})
	require.Equal(t, -7, got.Priority)
	require.JSONEq(t, `"plain string"`, string(got.Payload))
	require.Equal(t, 100, got.MaxAttempts)
	require.Equal(t, []string{"gpu", "eu"}, got.Tags, "duplicate tags are dropped")
	require.Equal(t, deadline, *got.Deadline)
	require.Equal(t, runAt, got.RunAt)
	require.Equal(t, "r-1", *got.IdempotencyKey)
	require.Equal(t, got, c.Get(got.ID))
}

func TestAPISubmitWithAKnownIdempotencyKeyReturnsTheExistingTask(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	first := c.Submit(jsonObj{"queue": "q", "idempotency_key": "k", "payload": 1})

	var again testclient.Task
	r := c.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "q", "idempotency_key": "k", "payload": 2}).
		Expect(t, http.StatusOK, &again)
	require.Equal(t, first, again, "the existing task, unchanged")
	require.Empty(t, r.Header.Get("Location"))

	other := c.Submit(jsonObj{"queue": "other", "idempotency_key": "k"})
	require.NotEqual(t, first.ID, other.ID, "keys are per queue")

	var n int
	require.NoError(t, s.DB.Get(&n, `SELECT count(*) FROM tasks`))
	require.Equal(t, 2, n)
}

func TestAPIGetUnknownOrMalformedTaskIs404(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	c.Do(http.MethodGet, "/tasks/v1/"+uuid.NewString(), nil).Problem(t, http.StatusNotFound, "task-not-found")
	c.Do(http.MethodGet, "/tasks/v1/not-a-uuid", nil).Problem(t, http.StatusNotFound, "task-not-found")
}

func TestAPIListPagesThroughEveryTaskNewestFirst(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	const n = 250
	want := make([]string, 0, n) // newest first
	for i := range n {
		want = append(want, c.Submit(jsonObj{"queue": "q", "payload": i}).ID)
	}
	slices.Reverse(want)

	var got []string
	var sizes []int
	var last time.Time
	query := "limit=100"
	for page := 0; ; page++ {
		require.Less(t, page, 10, "the cursor chain must end")
		p := c.List(query)
		sizes = append(sizes, len(p.Tasks))
		for _, task := range p.Tasks {
			if len(got) > 0 {
				require.False(t, task.CreatedAt.After(last), "newest first")
			}
			last = task.CreatedAt
			got = append(got, task.ID)
		}
		if p.NextCursor == nil {
			break
		}
		query = "limit=100&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	require.Equal(t, []int{100, 100, 50}, sizes)
	require.Equal(t, want, got, "every task once, none missing, newest first")

	p := c.List("")
	require.Len(t, p.Tasks, 100, "the default page is 100")
	require.NotNil(t, p.NextCursor)
	require.Len(t, c.List("limit=1000").Tasks, n)
	one := c.List("limit=1")
	require.Equal(t, want[:1], []string{one.Tasks[0].ID})
}

func TestAPIListFiltersByQueueAndStatus(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	a1 := c.Submit(jsonObj{"queue": "a"})
	a2 := c.Submit(jsonObj{"queue": "a"})
	b1 := c.Submit(jsonObj{"queue": "b"})
	c.Register(jsonObj{"id": "w1", "queues": []string{"a"}})
	require.Len(t, c.Claim(jsonObj{"worker_id": "w1"}), 1) // a1

	listIDs := func(query string) []string {
		var out []string
		for _, task := range c.List(query).Tasks {
			out = append(out, task.ID)
		}
		return out
	}
	require.Equal(t, []string{a2.ID, a1.ID}, listIDs("queue=a"))
	require.Equal(t, []string{b1.ID}, listIDs("queue=b"))
	require.Equal(t, []string{a1.ID}, listIDs("status=RUNNING"))
	require.Equal(t, []string{b1.ID, a2.ID}, listIDs("status=PENDING"))
	require.Equal(t, []string{a2.ID}, listIDs("queue=a&status=PENDING"))
	require.Empty(t, listIDs("queue=none"))
	require.Empty(t, listIDs("status=DONE"))
}

func TestAPIListRejectsBadParameters(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for query, field := range map[string]string{
		"limit=0":         "limit",
		"limit=1001":      "limit",
		"limit=-1":        "limit",
		"limit=abc":       "limit",
		"status=FINISHED": "status",
		"status=pending":  "status",
		"cursor=%21%21":   "cursor",
		"cursor=YWJj":     "cursor", // base64 of "abc": not an id
	} {
		t.Run(query, func(t *testing.T) {
			p := c.Do(http.MethodGet, "/tasks/v1?"+query, nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
			require.Equal(t, []string{field}, p.Fields())
		})
	}
}

// claimOne claims for worker and requires exactly one task.
func claimOne(t *testing.T, c *testclient.Client, worker string) testclient.Task {
	t.Helper()
	got := c.Claim(jsonObj{"worker_id": worker})
	require.Len(t, got, 1)
	return got[0]
}

func TestAPIClaimDefaultsToOneTaskFromTheWorkersQueues(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	a1 := c.Submit(jsonObj{"queue": "a"})
	a2 := c.Submit(jsonObj{"queue": "a"})
	b1 := c.Submit(jsonObj{"queue": "b"})
	c.Register(jsonObj{"id": "only-a", "queues": []string{"a"}})

	got := claimOne(t, c, "only-a")
	require.Equal(t, a1.ID, got.ID)
	require.Equal(t, "RUNNING", got.Status)
	require.Equal(t, "only-a", got.Holder())
	_, err := uuid.Parse(got.Lease())
	require.NoError(t, err)
	require.Equal(t, 1, got.Attempts)
	require.NotNil(t, got.ClaimedAt)
	require.Equal(t, *got.ClaimedAt, got.UpdatedAt)
	require.Equal(t, got, c.Get(a1.ID))

	require.Equal(t, a2.ID, claimOne(t, c, "only-a").ID)
	require.Empty(t, c.Claim(jsonObj{"worker_id": "only-a"}), "b is not among its queues")
	explicit := c.Claim(jsonObj{"worker_id": "only-a", "queue": "b"})
	require.Len(t, explicit, 1, "an explicit queue overrides the registration")
	require.Equal(t, b1.ID, explicit[0].ID)

	c1 := c.Submit(jsonObj{"queue": "c"})
	c.Register(jsonObj{"id": "any"})
	require.Equal(t, c1.ID, claimOne(t, c, "any").ID, "a worker without queues takes any queue")
}

func TestAPIClaimTakesAnyQueueWhenTheWorkerRegisteredNone(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	var want []string
	for _, q := range []string{"x", "y", "z"} {
		want = append(want, c.Submit(jsonObj{"queue": q}).ID)
	}
	c.Register(jsonObj{"id": "w"})
	var got []string
	for _, task := range c.Claim(jsonObj{"worker_id": "w", "limit": 10}) {
		got = append(got, task.ID)
	}
	require.Equal(t, want, got)
}

func TestAPIClaimOrdersByPriorityThenFIFO(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	low1 := c.Submit(jsonObj{"queue": "q"})
	high1 := c.Submit(jsonObj{"queue": "q", "priority": 10})
	low2 := c.Submit(jsonObj{"queue": "q"})
	high2 := c.Submit(jsonObj{"queue": "q", "priority": 10})
	neg := c.Submit(jsonObj{"queue": "q", "priority": -1})
	mid := c.Submit(jsonObj{"queue": "q", "priority": 5})
	c.Register(jsonObj{"id": "w"})

	require.Equal(t, high1.ID, claimOne(t, c, "w").ID)
	var got []string
	for _, task := range c.Claim(jsonObj{"worker_id": "w", "limit": 10}) {
		got = append(got, task.ID)
	}
	require.Equal(t, []string{high2.ID, mid.ID, low1.ID, low2.ID, neg.ID}, got)
}

func TestAPIClaimGivesOnlyTasksWhoseTagsTheWorkerHas(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	untagged := c.Submit(jsonObj{"queue": "q"})
	gpu := c.Submit(jsonObj{"queue": "q", "tags": []string{"gpu"}})
	gpuLinux := c.Submit(jsonObj{"queue": "q", "tags": []string{"gpu", "linux"}})
	arm := c.Submit(jsonObj{"queue": "q", "tags": []string{"arm"}})
	c.Register(jsonObj{"id": "plain"})
	c.Register(jsonObj{"id": "gpu", "tags": []string{"gpu", "x86"}})
	c.Register(jsonObj{"id": "big", "tags": []string{"linux", "gpu", "arm", "more"}})

	claimIDs := func(worker string) []string {
		var out []string
		for _, task := range c.Claim(jsonObj{"worker_id": worker, "limit": 10}) {
			out = append(out, task.ID)
		}
		return out
	}
	require.Equal(t, []string{untagged.ID}, claimIDs("plain"), "untagged tasks match any worker; tagged ones need the tags")
	require.Equal(t, []string{gpu.ID}, claimIDs("gpu"), "a task needs every one of its tags")
	require.Equal(t, []string{gpuLinux.ID, arm.ID}, claimIDs("big"), "the worker may have more tags than the task")
}

func TestAPIClaimErrors(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Submit(jsonObj{"queue": "q"})
	c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "nobody"}).Problem(t, http.StatusNotFound, "worker-not-found")

	c.Register(jsonObj{"id": "w"})
	for _, limit := range []any{0, -1, 1001} {
		p := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "limit": limit}).
			Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"limit"}, p.Fields(), "limit %v", limit)
	}
	p := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"worker_id"}, p.Fields())

	stage(t, s, `UPDATE workers SET status = 'DEAD' WHERE id = 'w'`)
	c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w"}).Problem(t, http.StatusConflict, "worker-dead")

	var pending int
	require.NoError(t, s.DB.Get(&pending, `SELECT count(*) FROM tasks WHERE status = 'PENDING'`))
	require.Equal(t, 1, pending, "no failed claim took the task")

	c.Register(jsonObj{"id": "w"})
	require.Len(t, c.Claim(jsonObj{"worker_id": "w", "limit": 1000}), 1,
		"re-registered, the worker claims again, up to the largest limit")
}

func TestAPIClaimByAStaleWorkerRevivesIt(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w"})
	stage(t, s, `UPDATE workers SET status = 'STALE', last_heartbeat_at = now() - interval '40 seconds' WHERE id = 'w'`)
	require.Empty(t, c.Claim(jsonObj{"worker_id": "w"}))

	var status string
	require.NoError(t, s.DB.Get(&status, `SELECT status FROM workers WHERE id = 'w'`))
	require.Equal(t, "ACTIVE", status, "a claim is a sign of life")
}

// A claim may carry a request_id: repeating it (same worker) while tasks of
// that claim are still held by the worker returns those same tasks under the
// same leases and claims nothing more. Once none is held, a repeat claims
// anew (the worker never saw the first one's tasks, or reported them all).
func TestAPIARepeatedClaimReturnsTheSameTasksAndClaimsNothingMore(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Register(jsonObj{"id": "w", "queues": []string{"q"}})
	c.Register(jsonObj{"id": "other", "queues": []string{"q"}})
	var submitted []testclient.Task
	for i := range 4 {
		submitted = append(submitted, c.Submit(jsonObj{"queue": "q", "priority": 10 - i}))
	}
	claim := jsonObj{"worker_id": "w", "limit": 2, "request_id": "claim-7f3a"}
	first := c.Claim(claim)
	require.Len(t, first, 2)
	require.Equal(t, []string{submitted[0].ID, submitted[1].ID}, ids(first))

	again := c.Claim(claim)
	require.Equal(t, first, again, "the same tasks, the same leases")
	// The other fields of a repeat are not compared: the id names the claim.
	require.Equal(t, first, c.Claim(jsonObj{"worker_id": "w", "limit": 1, "queue": "q", "request_id": "claim-7f3a"}))
	var claimedEvents, running int
	require.NoError(t, s.DB.Get(&claimedEvents, `SELECT count(*) FROM watermill_taskmaster_events m, json_array_elements(m.payload->'events') e WHERE e->>'type' = 'task.claimed'`))
	require.Equal(t, 2, claimedEvents, "a repeat claims nothing")
	require.NoError(t, s.DB.Get(&running, `SELECT count(*) FROM tasks WHERE status = 'RUNNING'`))
	require.Equal(t, 2, running)
	for _, tk := range first {
		require.Equal(t, 1, c.Get(tk.ID).Attempts)
	}

	// Another worker's claim with the same id is its own claim.
	theirs := c.Claim(jsonObj{"worker_id": "other", "request_id": "claim-7f3a"})
	require.Len(t, theirs, 1)
	require.Equal(t, submitted[2].ID, theirs[0].ID)

	// Reported tasks are no longer returned; once none is held, claim anew.
	c.Complete(first[0].ID, jsonObj{"worker_id": "w", "lease_id": first[0].Lease()})
	require.Equal(t, first[1:], c.Claim(claim))
	c.Complete(first[1].ID, jsonObj{"worker_id": "w", "lease_id": first[1].Lease()})
	anew := c.Claim(claim)
	require.Equal(t, []string{submitted[3].ID}, ids(anew))
	require.Equal(t, anew, c.Claim(claim))

	for _, bad := range []any{"", strings.Repeat("r", 129), "has space", "tab\t", "é", 7} {
		r := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "request_id": bad})
		if _, isString := bad.(string); !isString {
			r.Problem(t, http.StatusBadRequest, "malformed-request")
			continue
		}
		p := r.Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{"request_id"}, p.Fields(), "%q", bad)
	}
	require.Len(t, c.Claim(jsonObj{"worker_id": "w", "request_id": strings.Repeat("~", 128)}), 0, "128 printable characters")
}

// A claim or listing of many ~1 MiB tasks is not buffered whole: it stops
// adding tasks before the estimated answer exceeds
// TASKMASTER_MAX_RESPONSE_BYTES and says so (truncated). Tasks a claim left
// out are not claimed at all; a listing's next_cursor continues after its
// last task. One task is always handed out, even one over the cap alone.
func TestAPIClaimAndListStopAtTheResponseByteCap(t *testing.T) {
	t.Parallel()
	const limit = 4 << 20
	s, c := startAPI(t, func(cfg *app.Config) { cfg.App.MaxResponseBytes = limit })
	c.Register(jsonObj{"id": "w", "queues": []string{"big"}})
	const n = 10
	submitted := map[string]bool{}
	for i := range n {
		tk := c.Submit(jsonObj{"queue": "big", "payload": fmt.Sprintf("%d:%s", i, strings.Repeat("x", 1_000_000))})
		submitted[tk.ID] = true
	}
	type claimAnswer struct {
		Tasks     []testclient.Task `json:"tasks"`
		Truncated bool              `json:"truncated"`
	}
	claimed := map[string]bool{}
	for _, want := range []struct {
		n         int
		truncated bool
	}{{4, true}, {4, true}, {2, false}} {
		var got claimAnswer
		r := c.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "limit": n}).Expect(t, http.StatusOK, &got)
		require.Len(t, got.Tasks, want.n)
		require.Equal(t, want.truncated, got.Truncated)
		require.LessOrEqual(t, len(r.Body), limit, "the answer is within the cap")
		for _, tk := range got.Tasks {
			require.False(t, claimed[tk.ID])
			claimed[tk.ID] = true
			require.Greater(t, len(tk.Payload), 1_000_000)
		}
		var running int
		require.NoError(t, s.DB.Get(&running, `SELECT count(*) FROM tasks WHERE status = 'RUNNING'`))
		require.Equal(t, len(claimed), running, "what the cap left out was not claimed")
	}
	require.Equal(t, submitted, claimed)

	listed := map[string]bool{}
	query := "queue=big&limit=10"
	for page := 0; ; page++ {
		require.Less(t, page, 4)
		var got struct {
			testclient.Page
			Truncated bool `json:"truncated"`
		}
		r := c.Do(http.MethodGet, "/tasks/v1?"+query, nil).Expect(t, http.StatusOK, &got)
		require.LessOrEqual(t, len(r.Body), limit)
		require.NotEmpty(t, got.Tasks)
		for _, tk := range got.Tasks {
			require.False(t, listed[tk.ID], "each task once")
			listed[tk.ID] = true
		}
		if got.NextCursor == nil {
			require.False(t, got.Truncated)
			break
		}
		require.True(t, got.Truncated, "a page cut short by the cap, not by its limit")
		query = "queue=big&limit=10&cursor=" + *got.NextCursor
	}
	require.Equal(t, submitted, listed)

	// A cap smaller than one task: one task, and the rest stay PENDING.
	_, small := startAPI(t, func(cfg *app.Config) { cfg.App.MaxResponseBytes = 64 << 10 })
	small.Register(jsonObj{"id": "w"})
	for range 2 {
		small.Submit(jsonObj{"queue": "big", "payload": strings.Repeat("y", 1_000_000)})
	}
	var got claimAnswer
	small.Do(http.MethodPost, "/tasks/v1/claim", jsonObj{"worker_id": "w", "limit": 2}).Expect(t, http.StatusOK, &got)
	require.Len(t, got.Tasks, 1)
	require.True(t, got.Truncated)
	require.Len(t, small.List("status=PENDING").Tasks, 1)
}
