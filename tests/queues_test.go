package tests

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/cli"
	"github.com/taskmaster/taskmaster/tests/testclient"
)

// queueSettings is the settings object of the queue API.
type queueSettings struct {
	Queue              string         `json:"queue"`
	Paused             bool           `json:"paused"`
	MaxRunning         *int           `json:"max_running"`
	RateLimit          map[string]any `json:"rate_limit"`
	MaxRunningPerGroup *int           `json:"max_running_per_group"`
	UpdatedAt          *time.Time     `json:"updated_at"`
}

// queueItem is one item of GET /queues/v1 (and the head of the detail).
type queueItem struct {
	testclient.Queue
	Paused   bool          `json:"paused"`
	Settings queueSettings `json:"settings"`
}

type queuePage struct {
	Queues     []queueItem `json:"queues"`
	NextCursor *string     `json:"next_cursor"`
}

type queueDetail struct {
	queueItem
	Leased       int64 `json:"leased"`
	LeasedSample []struct {
		ID             string    `json:"id"`
		WorkerID       string    `json:"worker_id"`
		ClaimedAt      time.Time `json:"claimed_at"`
		LeaseExpiresAt time.Time `json:"lease_expires_at"`
	} `json:"leased_sample"`
	AvgExecutionSeconds map[string]*float64 `json:"avg_execution_seconds"`
	AvgQueueWaitSeconds map[string]*float64 `json:"avg_queue_wait_seconds"`
}

func patchQueue(t *testing.T, c *testclient.Client, queue string, body string) queueSettings {
	t.Helper()
	var out queueSettings
	c.Do(http.MethodPatch, "/queues/v1/"+queue, body).Expect(t, http.StatusOK, &out)
	return out
}

func listQueues(t *testing.T, c *testclient.Client, query string) queuePage {
	t.Helper()
	var out queuePage
	c.Do(http.MethodGet, "/queues/v1?"+query, nil).Expect(t, http.StatusOK, &out)
	require.NotNil(t, out.Queues)
	return out
}

func names(p queuePage) []string {
	out := make([]string, len(p.Queues))
	for i, q := range p.Queues {
		out[i] = q.Queue.Queue
	}
	return out
}

// PATCH /queues/v1/{queue}: an absent field leaves its setting, null clears
// it; bad values are 422s naming the field; a queue without tasks keeps its
// settings and is listed; a changed rate limit starts with a full bucket.
func TestQueueSettingsPatch(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Do(http.MethodGet, "/queues/v1/fresh", nil).Problem(t, http.StatusNotFound, "queue-not-found")

	got := patchQueue(t, c, "fresh", `{"max_running": 5, "rate_limit": {"per_second": 10, "burst": 20}}`)
	require.Equal(t, "fresh", got.Queue)
	require.False(t, got.Paused)
	require.Equal(t, 5, *got.MaxRunning)
	require.Equal(t, map[string]any{"per_second": 10.0, "burst": 20.0}, got.RateLimit)
	require.Nil(t, got.MaxRunningPerGroup)
	require.NotNil(t, got.UpdatedAt)

	// Absent leaves, null clears.
	got = patchQueue(t, c, "fresh", `{"paused": true, "max_running_per_group": 2}`)
	require.True(t, got.Paused)
	require.Equal(t, 5, *got.MaxRunning)
	require.Equal(t, 2, *got.MaxRunningPerGroup)
	require.NotNil(t, got.RateLimit)
	stage(t, s, `UPDATE queue_settings SET tokens = 0.5, tokens_at = now() WHERE queue = 'fresh'`)
	got = patchQueue(t, c, "fresh", `{"max_running": null}`)
	require.Nil(t, got.MaxRunning)
	require.True(t, got.Paused)
	require.Equal(t, 2, *got.MaxRunningPerGroup)
	var tokens *float64
	require.NoError(t, s.DB.Get(&tokens, `SELECT tokens FROM queue_settings WHERE queue = 'fresh'`))
	require.NotNil(t, tokens, "a patch that leaves the rate limit leaves its bucket")
	got = patchQueue(t, c, "fresh", `{"rate_limit": {"per_second": 2.5}}`)
	require.Equal(t, map[string]any{"per_second": 2.5, "burst": 3.0}, got.RateLimit, "burst defaults to one second's tokens")
	require.NoError(t, s.DB.Get(&tokens, `SELECT tokens FROM queue_settings WHERE queue = 'fresh'`))
	require.Nil(t, tokens, "a changed rate limit starts with a full bucket")

	// The settings are kept for the queue without tasks: detail and listing.
	var d queueDetail
	c.Do(http.MethodGet, "/queues/v1/fresh", nil).Expect(t, http.StatusOK, &d)
	require.True(t, d.Paused)
	require.True(t, d.Settings.Paused)
	require.Equal(t, 2, *d.Settings.MaxRunningPerGroup)
	require.Zero(t, d.Pending+d.Running+d.Done+d.Dead+d.Blocked+d.Leased)
	require.Empty(t, d.LeasedSample)
	require.Equal(t, map[string]*float64{"last_5m": nil, "last_15m": nil}, d.AvgExecutionSeconds)
	page := listQueues(t, c, "")
	require.Equal(t, []string{"fresh"}, names(page))
	require.True(t, page.Queues[0].Paused)
	require.Nil(t, page.NextCursor)

	got = patchQueue(t, c, "fresh", `{"paused": false, "rate_limit": null, "max_running_per_group": null}`)
	require.Equal(t, queueSettings{Queue: "fresh", UpdatedAt: got.UpdatedAt}, got)

	for body, field := range map[string]string{
		`{}`:                                            "settings",
		`{"paused": null}`:                              "paused",
		`{"paused": "yes"}`:                             "paused",
		`{"max_running": 0}`:                            "max_running",
		`{"max_running": 2.5}`:                          "max_running",
		`{"max_running": "5"}`:                          "max_running",
		`{"max_running_per_group": 1000001}`:            "max_running_per_group",
		`{"rate_limit": 5}`:                             "rate_limit",
		`{"rate_limit": {"burst": 3}}`:                  "rate_limit.per_second",
		`{"rate_limit": {"per_second": 0}}`:             "rate_limit.per_second",
		`{"rate_limit": {"per_second": 1, "burst": 0}}`: "rate_limit.burst",
		`{"rate_limit": {"per_second": 1, "x": 1}}`:     "rate_limit",
	} {
		p := c.Do(http.MethodPatch, "/queues/v1/fresh", body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{field}, p.Fields(), body)
	}
	c.Do(http.MethodPatch, "/queues/v1/fresh", `{"max": 1}`).Problem(t, http.StatusBadRequest, "malformed-request")
	p := c.Do(http.MethodPatch, "/queues/v1/bad%20name", `{"paused": true}`).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	require.Equal(t, []string{"queue"}, p.Fields())
	c.Do(http.MethodGet, "/queues/v1/bad%20name", nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	var rows int
	require.NoError(t, s.DB.Get(&rows, `SELECT count(*) FROM queue_settings`))
	require.Equal(t, 1, rows, "refused patches create nothing")
}

// Changing settings takes the admin scope and is audited with the key; a
// key limited to some queues sees only those.
func TestQueueSettingsAdminScopeAndAudit(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	var adminKeyID string
	require.NoError(t, s.DB.Get(&adminKeyID, `SELECT id FROM api_keys`))
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read"}})
	p := forbiddenProblem(t, reader.Do(http.MethodPatch, "/queues/v1/audited", `{"paused": true}`))
	require.Equal(t, []any{"admin"}, p["required_scopes"])

	events := readEventsUntil(t, s.admin, s.URL, "type=audit.*", func() {
		patchQueue(t, s.admin, "audited", `{"paused": true, "max_running": 3}`)
	}, func(data string) bool { return strings.Contains(data, `"audit.queue_settings_changed"`) })
	var audit struct {
		Type     string        `json:"type"`
		KeyID    string        `json:"key_id"`
		Queue    string        `json:"queue"`
		Settings queueSettings `json:"settings"`
	}
	require.NoError(t, json.Unmarshal([]byte(events[len(events)-1]), &audit))
	require.Equal(t, "audit.queue_settings_changed", audit.Type)
	require.Equal(t, adminKeyID, audit.KeyID)
	require.Equal(t, "audited", audit.Queue)
	require.True(t, audit.Settings.Paused)
	require.Equal(t, 3, *audit.Settings.MaxRunning)

	// The reader sees it; a key limited to other queues does not.
	var d queueDetail
	reader.Do(http.MethodGet, "/queues/v1/audited", nil).Expect(t, http.StatusOK, &d)
	require.True(t, d.Paused)
	limited, _ := s.key(t, jsonObj{"scopes": []string{"read"}, "queues": []string{"team-*"}})
	patchQueue(t, s.admin, "team-a", `{"paused": true}`)
	require.Equal(t, []string{"team-a"}, names(listQueues(t, limited, "")))
	require.Equal(t, []string{"audited", "team-a"}, names(listQueues(t, reader, "")))
	forbiddenProblem(t, limited.Do(http.MethodGet, "/queues/v1/audited", nil))
	limited.Do(http.MethodGet, "/queues/v1/team-a", nil).Expect(t, http.StatusOK, &d)
	require.Equal(t, "team-a", d.Queue.Queue)
}

// GET /queues/v1 with 100,000 queues: pages by name with an opaque cursor,
// filters by prefix, glob, pending count and pause, lists queues with
// settings but no tasks, and counts each queue's active workers.
func TestQueueListingAt100000Queues(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	// q-000001 .. q-100000: i % 10 PENDING tasks (so every tenth queue has
	// none: it is not listed); every thousandth paused; one queue with
	// settings only; two names that tell "_" from any character.
	stage(t, s, `INSERT INTO queue_status_counts (queue, status, count)
		SELECT 'q-' || lpad(i::text, 6, '0'), 'PENDING', i % 10 FROM generate_series(1, 100000) AS i
		UNION ALL SELECT 'q-' || lpad(i::text, 6, '0'), 'DONE', 0 FROM generate_series(1, 100000) AS i
		UNION ALL VALUES ('a_b', 'DONE', 1), ('axb', 'DONE', 1)`)
	stage(t, s, `INSERT INTO queue_settings (queue, paused, updated_at)
		SELECT 'q-' || lpad(i::text, 6, '0'), true, now() FROM generate_series(1, 100000, 1000) AS i`)
	stage(t, s, `INSERT INTO queue_settings (queue, max_running, updated_at) VALUES ('settings-only', 4, now())`)
	// As autovacuum would soon after such a load: plans need the tables'
	// sizes.
	stage(t, s, `ANALYZE queue_status_counts, queue_settings`)
	c.Register(jsonObj{"id": "w-one", "queues": []string{"q-000001"}})
	c.Register(jsonObj{"id": "w-any"})
	listed := func(i int) bool { return i%10 != 0 }
	name := func(i int) string { return fmt.Sprintf("q-%06d", i) }

	first := listQueues(t, c, "")
	require.Len(t, first.Queues, 100, "the default page")
	require.Equal(t, []string{"a_b", "axb", "q-000001", "q-000002"}, names(first)[:4])
	require.Equal(t, int64(2), first.Queues[2].ActiveWorkers)
	require.Equal(t, int64(1), first.Queues[3].ActiveWorkers)
	require.True(t, first.Queues[2].Paused)
	require.Equal(t, int64(1), first.Queues[2].Pending)
	require.NotNil(t, first.NextCursor)
	second := listQueues(t, c, "cursor="+*first.NextCursor)
	require.Greater(t, names(second)[0], names(first)[99])

	// A deep page: the cursor is opaque, but keyset by name.
	deep := listQueues(t, c, "limit=3&cursor="+base64.RawURLEncoding.EncodeToString([]byte(name(90000))))
	require.Equal(t, []string{name(90001), name(90002), name(90003)}, names(deep))
	last := listQueues(t, c, "cursor="+base64.RawURLEncoding.EncodeToString([]byte(name(99990))))
	require.Equal(t, "settings-only", names(last)[len(last.Queues)-1])
	require.Equal(t, 4, *last.Queues[len(last.Queues)-1].Settings.MaxRunning)
	require.Nil(t, last.NextCursor)

	// Filters, each read to its end.
	all := func(query string) []string {
		var out []string
		for cursor := ""; ; {
			p := listQueues(t, c, query+"&limit=1000&cursor="+cursor)
			out = append(out, names(p)...)
			if p.NextCursor == nil {
				return out
			}
			cursor = *p.NextCursor
		}
	}
	expect := func(keep func(i int) bool) []string {
		var out []string
		for i := 1; i <= 100000; i++ {
			if listed(i) && keep(i) {
				out = append(out, name(i))
			}
		}
		return out
	}
	require.Equal(t, expect(func(i int) bool { return i >= 1000 && i < 2000 }), all("prefix=q-001"))
	glob := regexp.MustCompile(`^q-0.1.3.$`)
	require.Equal(t, expect(func(i int) bool { return glob.MatchString(name(i)) }), all("pattern=q-0?1?3?"))
	require.Equal(t, []string{"a_b"}, all("pattern=a_*"), `"_" in a pattern is itself`)
	require.Equal(t, []string{"a_b"}, all("prefix=a_"))
	require.Equal(t, []string{"a_b", "axb"}, all("pattern=a?b"))
	require.Equal(t, expect(func(i int) bool { return i%1000 == 1 }), all("paused=true"))
	require.Equal(t, expect(func(i int) bool { return i < 1000 && i != 1 }), all("paused=false&prefix=q-000"))
	require.Equal(t, expect(func(i int) bool { return i >= 10000 && i < 20000 && i%10 == 9 }), all("min_pending=9&prefix=q-01"))
	nine := listQueues(t, c, "min_pending=9")
	require.Equal(t, expect(func(i int) bool { return i%10 == 9 })[:100], names(nine))
	require.Equal(t, expect(func(i int) bool { return i%10 >= 8 && i%1000 == 1 }), all("min_pending=8&paused=true"))
	require.Contains(t, all("min_pending=0&prefix=s"), "settings-only")
	require.Empty(t, all("min_pending=1&prefix=s"))

	for query, field := range map[string]string{
		"limit=0": "limit", "limit=1001": "limit", "min_pending=-1": "min_pending", "min_pending=x": "min_pending",
		"paused=maybe": "paused", "cursor=***": "cursor", "prefix=a%20b": "prefix", "pattern=a%25": "pattern",
	} {
		p := c.Do(http.MethodGet, "/queues/v1?"+query, nil).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, []string{field}, p.Fields(), query)
	}
}

// GET /queues/v1/{queue}: the listing's statistics plus the RUNNING tasks
// (counted and sampled now) and the average durations of the last minutes,
// from the projection.
func TestQueueDetail(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	for range 3 {
		c.Submit(jsonObj{"queue": "detail"})
	}
	c.Register(jsonObj{"id": "w-detail", "queues": []string{"detail"}})
	claimed := c.Claim(jsonObj{"worker_id": "w-detail", "limit": 2})
	require.Len(t, claimed, 2)
	c.Complete(claimed[0].ID, jsonObj{"worker_id": "w-detail", "lease_id": claimed[0].Lease()})

	var d queueDetail
	testclient.Poll(t, 30*time.Second, "the detail shows the completion and its execution time", func() bool {
		c.Do(http.MethodGet, "/queues/v1/detail", nil).Expect(t, http.StatusOK, &d)
		return d.Done == 1 && d.AvgExecutionSeconds["last_5m"] != nil
	})
	require.Equal(t, int64(1), d.Pending)
	require.Equal(t, int64(1), d.Running)
	require.Equal(t, int64(1), d.Leased)
	require.Len(t, d.LeasedSample, 1)
	require.Equal(t, claimed[1].ID, d.LeasedSample[0].ID)
	require.Equal(t, "w-detail", d.LeasedSample[0].WorkerID)
	require.True(t, d.LeasedSample[0].LeaseExpiresAt.After(d.LeasedSample[0].ClaimedAt))
	require.Equal(t, int64(1), d.ActiveWorkers)
	require.NotNil(t, d.OldestPendingAgeSeconds)
	for _, w := range []string{"last_5m", "last_15m"} {
		require.NotNil(t, d.AvgExecutionSeconds[w], w)
		require.GreaterOrEqual(t, *d.AvgExecutionSeconds[w], 0.0)
		require.NotNil(t, d.AvgQueueWaitSeconds[w], w)
		require.GreaterOrEqual(t, *d.AvgQueueWaitSeconds[w], 0.0)
	}
	require.Greater(t, d.Rates["last_5m"].Claimed, 0.0)
	require.False(t, d.Paused)
}

// With more queues than TASKMASTER_METRICS_MAX_QUEUES, the busiest keep
// series of their own and the rest are summed under queue="_other"; a queue
// never moves between the two, so every counter only grows.
func TestMetricsCapPerQueueSeries(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, func(cfg *app.Config) { cfg.MetricsMaxQueues = 3 })
	submit := func(queue string, n int) {
		for range n {
			c.Submit(jsonObj{"queue": queue})
		}
	}
	submit("m-a", 5)
	submit("m-b", 4)
	submit("m-c", 3)
	submit("m-d", 2)
	submit("m-e", 1)
	c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool {
		return len(qs) == 5 && qs[4].Pending == 1
	})
	scrape := func() map[string]float64 {
		out := map[string]float64{}
		for _, line := range strings.Split(string(c.Do(http.MethodGet, "/metrics", nil).Expect(t, http.StatusOK, nil).Body), "\n") {
			if rest, ok := strings.CutPrefix(line, "taskmaster_tasks_submitted_total{queue="); ok {
				var v float64
				q, val, _ := strings.Cut(rest, "} ")
				_, err := fmt.Sscan(val, &v)
				require.NoError(t, err, line)
				out[strings.Trim(q, `"`)] = v
			}
		}
		return out
	}
	require.Equal(t, map[string]float64{"m-a": 5, "m-b": 4, "m-c": 3, "_other": 3}, scrape())

	// m-d becomes the busiest, m-f is new: both stay under _other.
	submit("m-d", 6)
	submit("m-f", 2)
	c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool {
		return len(qs) == 6 && qs[3].Pending == 8 && qs[5].Pending == 2
	})
	require.Equal(t, map[string]float64{"m-a": 5, "m-b": 4, "m-c": 3, "_other": 11}, scrape())
	body := string(c.Do(http.MethodGet, "/metrics", nil).Body)
	require.Contains(t, body, `taskmaster_tasks{queue="_other",status="PENDING"} 11`)
	require.NotContains(t, body, `queue="m-d"`)
}

// taskmaster queue list|show|pause|resume|set, through the CLI.
func TestCLIQueue(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, nil)
	c.Submit(jsonObj{"queue": "cli-a"})
	c.QueuesEventually(30*time.Second, func(qs []testclient.Queue) bool { return len(qs) == 1 })

	out := mustCLI(t, s.URL, "queue", "pause", "cli-a")
	require.Equal(t, "queue cli-a: paused\n", out)
	out = mustCLI(t, s.URL, "queue", "set", "cli-b", "--max-running", "4", "--rate", "120/m", "--max-running-per-group", "2")
	require.Equal(t, "queue cli-b: max running 4, rate 2/s burst 2, max running per group 2\n", out)
	out = mustCLI(t, s.URL, "queue", "set", "cli-b", "--rate", "50/s", "--burst", "100", "--max-running", "none", "--json")
	var set queueSettings
	require.NoError(t, json.Unmarshal([]byte(out), &set), out)
	require.Nil(t, set.MaxRunning)
	require.Equal(t, map[string]any{"per_second": 50.0, "burst": 100.0}, set.RateLimit)
	require.Equal(t, 2, *set.MaxRunningPerGroup)

	out = mustCLI(t, s.URL, "queue", "list")
	require.Regexp(t, `(?m)^cli-a\s+1\s+0\s+0\s+0\s+0\s+0\s+\S+\s+paused$`, out)
	require.Regexp(t, `(?m)^cli-b\s+0\s+0\s+0\s+0\s+0\s+0\s+-\s+rate 50/s burst 100, max running per group 2$`, out)
	out = mustCLI(t, s.URL, "queue", "list", "--paused", "--json")
	var page queuePage
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Equal(t, []string{"cli-a"}, names(page))
	out = mustCLI(t, s.URL, "queue", "list", "--paused=false", "--limit", "1", "--pattern", "cli-?")
	require.Contains(t, out, "cli-b")
	require.NotContains(t, out, "cli-a")
	require.NotContains(t, out, "more:")

	out = mustCLI(t, s.URL, "queue", "resume", "cli-a")
	require.Equal(t, "queue cli-a: -\n", out)
	out = mustCLI(t, s.URL, "queue", "show", "cli-a")
	require.Regexp(t, `(?m)^queue\s+cli-a$`, out)
	require.Regexp(t, `(?m)^tasks\s+pending 1, running 0, done 0, dead 0, blocked 0$`, out)

	_, err := runCLI(t, context.Background(), s.URL, "", "queue", "show", "nowhere")
	require.ErrorContains(t, err, "queue-not-found")
	for _, args := range [][]string{
		{"queue"}, {"queue", "frob"}, {"queue", "set", "q"}, {"queue", "set", "q", "--rate", "fast"},
		{"queue", "set", "q", "--max-running", "many"}, {"queue", "set", "q", "--burst", "3", "--max-running", "1"},
		{"queue", "pause"}, {"queue", "list", "extra"},
	} {
		_, err := runCLI(t, context.Background(), s.URL, "", args...)
		require.ErrorIs(t, err, cli.ErrUsage, args)
	}
	_, err = runCLI(t, context.Background(), s.URL, "", "queue", "set", "q", "--max-running", "0")
	require.ErrorContains(t, err, "max_running")
}
