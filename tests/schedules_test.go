package tests

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/fx"

	"github.com/taskmaster/taskmaster/adapters/postgres/pgtest"
	"github.com/taskmaster/taskmaster/cmd/taskmaster/app"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/ports"
	"github.com/taskmaster/taskmaster/tests/testclient"
	"github.com/taskmaster/taskmaster/tests/testserver"
)

// scheduleJSON is the schedule object of the contract.
type scheduleJSON struct {
	Name         string     `json:"name"`
	Cron         string     `json:"cron"`
	Timezone     string     `json:"timezone"`
	Task         jsonObj    `json:"task"`
	Overlap      string     `json:"overlap"`
	Paused       bool       `json:"paused"`
	NextRunAt    *time.Time `json:"next_run_at"`
	LastTickAt   *time.Time `json:"last_tick_at"`
	LastTaskID   *string    `json:"last_task_id"`
	SkippedTicks int64      `json:"skipped_ticks"`
}

// fastScheduler runs the scheduler every 100 ms.
func fastScheduler(c *app.Config) {
	c.SchedulerInterval = 100 * time.Millisecond
	c.LeaderLeaseTTL = time.Second
}

func getSchedule(t *testing.T, c *testclient.Client, name string) scheduleJSON {
	t.Helper()
	var out scheduleJSON
	c.Do(http.MethodGet, "/schedules/v1/"+name, nil).Expect(t, http.StatusOK, &out)
	return out
}

// tickCounts returns, per tick (RFC 3339, UTC), the tasks of a schedule:
// those the scheduler marked with its name.
func tickCounts(t *testing.T, s *testserver.Server, name string) map[string]int {
	t.Helper()
	var rows []struct {
		Tick time.Time `db:"schedule_tick"`
		N    int       `db:"n"`
	}
	require.NoError(t, s.DB.Select(&rows, `SELECT schedule_tick, count(*) AS n FROM tasks
		WHERE schedule_name = $1 GROUP BY schedule_tick`, name))
	out := map[string]int{}
	for _, r := range rows {
		out[r.Tick.UTC().Format(time.RFC3339Nano)] = r.N
	}
	return out
}

// everyoneLeads is an Elector that makes every instance the leader of every
// job, unfenced: split brain, on purpose.
type everyoneLeads struct{}

func (everyoneLeads) Lead(context.Context, string) (ports.Fence, bool, error) {
	return ports.Fence{}, true, nil
}
func (everyoneLeads) Release(context.Context, ports.Fence) error { return nil }
func (everyoneLeads) TTL() time.Duration                         { return time.Minute }

// An "@every 1s" schedule on three instances creates exactly one task per
// tick, across a change of leader (the leader is stopped in the middle of
// its work), and even when every instance runs the scheduler at once,
// unfenced: each tick's task is counted by its mark.
func TestScheduleThreeInstancesOneTaskPerTick(t *testing.T) {
	t.Parallel()
	t.Run("leader change", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t)
		servers := make([]*testserver.Server, 3)
		schedulers := make([]*app.Scheduler, 3)
		for i := range servers {
			servers[i] = testserver.StartOn(t, url, fastScheduler, fx.Populate(&schedulers[i]))
		}
		c := testclient.New(t, servers[0].URL)
		c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "beat", "cron": "@every 1s", "overlap": "allow",
			"task": jsonObj{"queue": "beats"}}).Expect(t, http.StatusCreated, nil)
		leader := -1
		testclient.Poll(t, 30*time.Second, "three ticks under one leader", func() bool {
			leader = -1
			for i, s := range schedulers {
				if s.Service.Leading() {
					leader = i
				}
			}
			return leader >= 0 && len(tickCounts(t, servers[0], "beat")) >= 3
		})
		before := len(tickCounts(t, servers[0], "beat"))
		servers[leader].Stop() // gives the lease up; its cycle in progress rolls back
		other := servers[(leader+1)%3]
		testclient.Poll(t, 30*time.Second, "three more ticks under a new leader", func() bool {
			return len(tickCounts(t, other, "beat")) >= before+3
		})
		checkOneTaskPerTick(t, other, "beat")
	})
	t.Run("every instance runs the scheduler at once", func(t *testing.T) {
		t.Parallel()
		url := pgtest.NewDatabase(t)
		servers := make([]*testserver.Server, 3)
		for i := range servers {
			servers[i] = testserver.StartOn(t, url, fastScheduler,
				fx.Decorate(func(ports.Elector) ports.Elector { return everyoneLeads{} }))
		}
		c := testclient.New(t, servers[1].URL)
		c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "beat", "cron": "@every 1s", "overlap": "allow",
			"task": jsonObj{"queue": "beats"}}).Expect(t, http.StatusCreated, nil)
		testclient.Poll(t, 30*time.Second, "five ticks", func() bool {
			return len(tickCounts(t, servers[0], "beat")) >= 5
		})
		checkOneTaskPerTick(t, servers[0], "beat")
	})
}

// checkOneTaskPerTick requires one task per tick key, ticks on whole
// seconds, and as many task.submitted events in the outbox as tasks.
func checkOneTaskPerTick(t *testing.T, s *testserver.Server, name string) {
	t.Helper()
	counts := tickCounts(t, s, name)
	for key, n := range counts {
		require.Equal(t, 1, n, "tick %s", key)
		at, err := time.Parse(time.RFC3339, key)
		require.NoError(t, err, key)
		require.Zero(t, at.Nanosecond(), key)
	}
	var tasks, submitted int
	require.NoError(t, s.DB.Get(&tasks, `SELECT count(*) FROM tasks WHERE schedule_name = $1`, name))
	for _, e := range outboxEvents(t, s) {
		if e.Type == event.TaskSubmitted {
			submitted++
		}
	}
	require.Equal(t, len(counts), tasks)
	require.Equal(t, tasks, submitted, "one submission event per task")
}

// With overlap skip, ticks while the previous task is unfinished create
// nothing and are counted (on the schedule and in the metrics); once it is
// done the next tick creates a task again.
func TestScheduleOverlapSkip(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, fastScheduler)
	c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "report", "cron": "@every 1s", "task": jsonObj{"queue": "reports"}}).
		Expect(t, http.StatusCreated, nil)
	var sc scheduleJSON
	testclient.Poll(t, 30*time.Second, "two skipped ticks", func() bool {
		sc = getSchedule(t, c, "report")
		return sc.SkippedTicks >= 2
	})
	require.Equal(t, "skip", sc.Overlap, "the default")
	require.Len(t, tickCounts(t, s, "report"), 1, "one task while it is unfinished")
	require.NotNil(t, sc.LastTaskID)

	testclient.Poll(t, 30*time.Second, "the skipped ticks in the metrics", func() bool {
		resp := c.Do(http.MethodGet, "/metrics", nil)
		m := regexp.MustCompile(`taskmaster_schedule_ticks_skipped_total\{queue="reports",schedule="report"\} (\d+)`).FindSubmatch(resp.Body)
		if m == nil {
			return false
		}
		n, _ := strconv.Atoi(string(m[1]))
		return n >= 2
	})

	running := submitAndClaimExisting(t, c, "w1", c.Get(*sc.LastTaskID))
	c.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	testclient.Poll(t, 30*time.Second, "a new task once the previous one is done", func() bool {
		return len(tickCounts(t, s, "report")) == 2
	})
	next := getSchedule(t, c, "report")
	require.NotEqual(t, *sc.LastTaskID, *next.LastTaskID)

	var skipped []event.Event
	for _, e := range outboxEvents(t, s) {
		if e.Type == event.ScheduleTickSkipped {
			skipped = append(skipped, e)
		}
	}
	require.GreaterOrEqual(t, len(skipped), 2)
	require.Equal(t, "report", skipped[0].Schedule)
	require.Equal(t, "reports", skipped[0].Queue)
	require.Equal(t, "overlap", skipped[0].Reason)
}

// A producer restricted to the schedule's queues plants the keys the
// scheduler used to find a tick's task by (schedule:<name>:<tick>), for
// every second of the next forty, with its own payload, before an admin
// creates the schedule: the scheduler takes none of them for a tick's. Each
// tick's task is the schedule's own (its payload, marked with the schedule
// and the tick), the planted tasks stay as they were, and with overlap skip
// (the default) a later tick fires once the schedule's task is done.
func TestAPlantedTickKeyIsNeverTakenForTheSchedulesTask(t *testing.T) {
	t.Parallel()
	s := startSecured(t, fastScheduler)
	producer, _ := s.key(t, jsonObj{"scopes": []string{"produce"}, "queues": []string{"a-*"}})
	var now time.Time
	require.NoError(t, s.DB.Get(&now, `SELECT now()`))
	const planted = 42
	for k := range planted {
		tick := now.Truncate(time.Second).Add(time.Duration(k-1) * time.Second).UTC().Format(time.RFC3339Nano)
		producer.Do(http.MethodPost, "/tasks/v1", jsonObj{"queue": "a-jobs", "payload": jsonObj{"from": "planted"},
			"idempotency_key": "schedule:hijack:" + tick}).Expect(t, http.StatusCreated, nil)
	}
	s.admin.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "hijack", "cron": "@every 1s",
		"task": jsonObj{"queue": "a-jobs", "payload": jsonObj{"from": "schedule"}, "priority": 100}}).Expect(t, http.StatusCreated, nil)

	var sc scheduleJSON
	testclient.Poll(t, 30*time.Second, "the first tick", func() bool {
		sc = getSchedule(t, s.admin, "hijack")
		return sc.LastTaskID != nil
	})
	first := s.admin.Get(*sc.LastTaskID)
	require.JSONEq(t, `{"from":"schedule"}`, string(first.Payload), "the tick's task is the schedule's own, not a planted one")
	require.Nil(t, first.IdempotencyKey)
	require.Equal(t, "hijack", *first.ScheduleName)
	require.True(t, sc.LastTickAt.Equal(*first.ScheduleTick), "marked with its tick")

	running := submitAndClaimExisting(t, s.admin, "w1", first)
	s.admin.Complete(running.ID, jsonObj{"worker_id": "w1", "lease_id": running.Lease()})
	var next scheduleJSON
	testclient.Poll(t, 30*time.Second, "a later tick, once the schedule's task is done", func() bool {
		next = getSchedule(t, s.admin, "hijack")
		return next.LastTaskID != nil && *next.LastTaskID != first.ID
	})
	second := s.admin.Get(*next.LastTaskID)
	require.JSONEq(t, `{"from":"schedule"}`, string(second.Payload))
	require.True(t, second.ScheduleTick.After(*first.ScheduleTick))

	var kept int
	require.NoError(t, s.DB.Get(&kept, `SELECT count(*) FROM tasks
		WHERE payload->>'from' = 'planted' AND status = 'PENDING' AND schedule_name IS NULL`))
	require.Equal(t, planted, kept, "the planted tasks are as they were")
	var own, ticks int
	require.NoError(t, s.DB.Get(&own, `SELECT count(*) FROM tasks WHERE payload->>'from' = 'schedule'`))
	require.NoError(t, s.DB.Get(&ticks, `SELECT count(*) FROM tasks WHERE schedule_name = 'hijack'`))
	require.Equal(t, own, ticks, "every task the schedule made is its own")
}

// A paused schedule creates nothing while another one ticks; resumed, it
// ticks again, from then on.
func TestSchedulePausedCreatesNothing(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, fastScheduler)
	var paused scheduleJSON
	c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "quiet", "cron": "@every 1s", "paused": true, "overlap": "allow",
		"task": jsonObj{"queue": "q"}}).Expect(t, http.StatusCreated, &paused)
	require.True(t, paused.Paused)
	require.Nil(t, paused.NextRunAt)
	c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "busy", "cron": "@every 1s", "overlap": "allow",
		"task": jsonObj{"queue": "q"}}).Expect(t, http.StatusCreated, nil)
	testclient.Poll(t, 30*time.Second, "the running schedule ticks twice", func() bool {
		return len(tickCounts(t, s, "busy")) >= 2
	})
	require.Empty(t, tickCounts(t, s, "quiet"))

	var resumed scheduleJSON
	c.Do(http.MethodPatch, "/schedules/v1/quiet", jsonObj{"paused": false}).Expect(t, http.StatusOK, &resumed)
	require.NotNil(t, resumed.NextRunAt)
	testclient.Poll(t, 30*time.Second, "the resumed schedule ticks", func() bool {
		return len(tickCounts(t, s, "quiet")) >= 1
	})
	c.Do(http.MethodPatch, "/schedules/v1/busy", jsonObj{"paused": true}).Expect(t, http.StatusOK, nil)
	n := len(tickCounts(t, s, "busy"))
	testclient.Poll(t, 30*time.Second, "the other schedule ticks twice more", func() bool {
		return len(tickCounts(t, s, "quiet")) >= 3
	})
	require.Equal(t, n, len(tickCounts(t, s, "busy")), "paused again: nothing more")
}

// After an outage (no scheduler ran for years), only the latest missed tick
// runs. A yearly schedule keeps the test free of the clock: its latest missed
// tick is this year's first instant, and the next one is a year away, so no
// later tick can run (or be skipped) while the test looks.
func TestScheduleMissedTicksCollapseToTheLatest(t *testing.T) {
	t.Parallel()
	s, c := startAPI(t, fastScheduler)
	c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "yearly", "cron": "0 0 1 1 *", "task": jsonObj{"queue": "q"}}).
		Expect(t, http.StatusCreated, nil)
	stage(t, s, `UPDATE schedules SET next_run_at = date_trunc('year', now()) - interval '10 years' WHERE name = 'yearly'`)
	var sc scheduleJSON
	testclient.Poll(t, 30*time.Second, "the missed ticks' run", func() bool {
		sc = getSchedule(t, c, "yearly")
		return sc.LastTickAt != nil
	})
	var thisYear time.Time
	require.NoError(t, s.DB.Get(&thisYear, `SELECT date_trunc('year', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'`))
	ticks := tickCounts(t, s, "yearly")
	require.Equal(t, map[string]int{thisYear.UTC().Format(time.RFC3339): 1}, ticks,
		"eleven ticks were due; only the latest ran")
	require.True(t, thisYear.Equal(*sc.LastTickAt), "last tick %s", sc.LastTickAt)
	require.True(t, thisYear.AddDate(1, 0, 0).Equal(*sc.NextRunAt), "next run %s", sc.NextRunAt)
	require.Zero(t, sc.SkippedTicks)
}

// The schedules API: validation, conflicts, patch, delete.
func TestScheduleAPI(t *testing.T) {
	t.Parallel()
	_, c := startAPI(t, nil)
	var created scheduleJSON
	r := c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "nightly", "cron": "30 2 * * *", "timezone": "Europe/Paris",
		"task": jsonObj{"queue": "reports", "payload": jsonObj{"full": true}, "priority": 3, "unique_key": "nightly",
			"retry": jsonObj{"base_seconds": 10}}}).Expect(t, http.StatusCreated, &created)
	require.Equal(t, "/schedules/v1/nightly", r.Header.Get("Location"))
	require.Equal(t, "Europe/Paris", created.Timezone)
	require.Equal(t, "skip", created.Overlap)
	loc, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	local := created.NextRunAt.In(loc)
	require.Equal(t, []int{2, 30}, []int{local.Hour(), local.Minute()}, "02:30 in Paris")
	require.EqualValues(t, 3, created.Task["max_attempts"], "the default is shown")
	require.Equal(t, "nightly", created.Task["unique_key"])

	c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "nightly", "cron": "@daily", "task": jsonObj{"queue": "q"}}).
		Problem(t, http.StatusConflict, "schedule-exists")
	for body, fields := range map[string][]string{
		`{"name":"bad name","cron":"@daily","task":{"queue":"q"}}`:                         {"name"},
		`{"name":"x","cron":"0 0 31 2 *","task":{"queue":"q"}}`:                            {"cron"},
		`{"name":"x","cron":"* * * * * *","task":{"queue":"q"}}`:                           {"cron"},
		`{"name":"x","cron":"@every 100ms","task":{"queue":"q"}}`:                          {"cron"},
		`{"name":"x","cron":"@daily","timezone":"Mars/Base","task":{"queue":"q"}}`:         {"timezone"},
		`{"name":"x","cron":"@daily","task":{"queue":"q"},"overlap":"queue"}`:              {"overlap"},
		`{"name":"x","cron":"@daily"}`:                                                     {"task"},
		`{"name":"x","cron":"@daily","task":{"queue":"","run_at":"2030-01-01T00:00:00Z"}}`: {"task.run_at", "task.queue"},
		`{"name":"x","cron":"@daily","task":{"queue":"q","idempotency_key":"k"}}`:          {"task.idempotency_key"},
		`{"name":"x","cron":"@daily","task":{"queue":"q","payload":"\u0000"}}`:             {"task.payload"},
		`{"name":"x","cron":"@daily","task":{"queue":"q","retry":{"base_seconds":0}}}`:     {"task.retry.base_seconds"},
	} {
		p := c.Do(http.MethodPost, "/schedules/v1", body).Problem(t, http.StatusUnprocessableEntity, "validation-error")
		require.Equal(t, fields, p.Fields(), body)
	}
	c.Do(http.MethodPost, "/schedules/v1", `{"name":"x","cron":"@daily","task":{"queue":"q"},"bogus":1}`).Problem(t, http.StatusBadRequest, "malformed-request")

	var patched scheduleJSON
	c.Do(http.MethodPatch, "/schedules/v1/nightly", jsonObj{"cron": "@every 1h", "timezone": "UTC", "overlap": "allow",
		"task": jsonObj{"queue": "reports-v2"}}).Expect(t, http.StatusOK, &patched)
	require.Equal(t, "@every 1h", patched.Cron)
	require.Equal(t, "reports-v2", patched.Task["queue"])
	require.Nil(t, patched.Task["unique_key"], "the task is replaced whole")
	c.Do(http.MethodPatch, "/schedules/v1/nightly", jsonObj{"name": "daily"}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	c.Do(http.MethodPatch, "/schedules/v1/nightly", jsonObj{"cron": "never"}).Problem(t, http.StatusUnprocessableEntity, "validation-error")
	c.Do(http.MethodPatch, "/schedules/v1/none", jsonObj{"paused": true}).Problem(t, http.StatusNotFound, "schedule-not-found")

	var list struct {
		Schedules []scheduleJSON `json:"schedules"`
	}
	c.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "a-first", "cron": "@daily", "task": jsonObj{"queue": "q"}}).Expect(t, http.StatusCreated, nil)
	c.Do(http.MethodGet, "/schedules/v1", nil).Expect(t, http.StatusOK, &list)
	require.Len(t, list.Schedules, 2)
	require.Equal(t, "a-first", list.Schedules[0].Name, "by name")

	var deleted scheduleJSON
	c.Do(http.MethodDelete, "/schedules/v1/nightly", nil).Expect(t, http.StatusOK, &deleted)
	require.Equal(t, "nightly", deleted.Name)
	c.Do(http.MethodGet, "/schedules/v1/nightly", nil).Problem(t, http.StatusNotFound, "schedule-not-found")
	c.Do(http.MethodDelete, "/schedules/v1/nightly", nil).Problem(t, http.StatusNotFound, "schedule-not-found")
}

// Scopes: admin changes schedules, read reads them; a key limited to some
// queues sees only their schedules. Every change is an audit event with the
// acting key, on the event stream.
func TestScheduleScopesAndAudit(t *testing.T) {
	t.Parallel()
	s := startSecured(t, nil)
	reader, _ := s.key(t, jsonObj{"scopes": []string{"read"}})
	limited, _ := s.key(t, jsonObj{"scopes": []string{"read"}, "queues": []string{"mine"}})
	operator, operatorID := s.key(t, jsonObj{"scopes": []string{"admin"}})

	body := jsonObj{"name": "n", "cron": "@daily", "task": jsonObj{"queue": "theirs"}}
	forbiddenProblem(t, reader.Do(http.MethodPost, "/schedules/v1", body))
	operator.Do(http.MethodPost, "/schedules/v1", body).Expect(t, http.StatusCreated, nil)
	operator.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "m", "cron": "@daily", "task": jsonObj{"queue": "mine"}}).Expect(t, http.StatusCreated, nil)
	forbiddenProblem(t, reader.Do(http.MethodPatch, "/schedules/v1/n", jsonObj{"paused": true}))
	forbiddenProblem(t, reader.Do(http.MethodDelete, "/schedules/v1/n", nil))
	reader.Do(http.MethodGet, "/schedules/v1/n", nil).Expect(t, http.StatusOK, nil)

	var list struct {
		Schedules []scheduleJSON `json:"schedules"`
	}
	limited.Do(http.MethodGet, "/schedules/v1", nil).Expect(t, http.StatusOK, &list)
	require.Len(t, list.Schedules, 1)
	require.Equal(t, "m", list.Schedules[0].Name)
	limited.Do(http.MethodGet, "/schedules/v1/n", nil).Problem(t, http.StatusNotFound, "schedule-not-found")

	operator.Do(http.MethodPatch, "/schedules/v1/n", jsonObj{"paused": true, "cron": "@hourly"}).Expect(t, http.StatusOK, nil)
	operator.Do(http.MethodPatch, "/schedules/v1/n", jsonObj{"paused": false}).Expect(t, http.StatusOK, nil)
	operator.Do(http.MethodDelete, "/schedules/v1/n", nil).Expect(t, http.StatusOK, nil)

	var audits []event.Event
	for _, e := range outboxEvents(t, s.Server) {
		if e.Schedule == "n" {
			audits = append(audits, e)
		}
	}
	var types []event.Type
	for _, e := range audits {
		types = append(types, e.Type)
		require.Equal(t, operatorID, e.KeyID, e.Type)
		require.Equal(t, "theirs", e.Queue)
	}
	require.Equal(t, []event.Type{event.AuditScheduleCreated, event.AuditScheduleUpdated, event.AuditSchedulePaused,
		event.AuditScheduleResumed, event.AuditScheduleDeleted}, types)

	// On the event stream, to a reader.
	req, err := http.NewRequest(http.MethodGet, s.URL+"/events/v1?type=audit.schedule_*", nil)
	require.NoError(t, err)
	req.Header = reader.Header()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	operator.Do(http.MethodPost, "/schedules/v1", jsonObj{"name": "late", "cron": "@daily", "task": jsonObj{"queue": "q"}}).Expect(t, http.StatusCreated, nil)
	var seen strings.Builder
	buf := make([]byte, 4096)
	// The stream replays the earlier audit events first: read until the
	// new schedule's event arrives (or the 30 s are up).
	for !strings.Contains(seen.String(), `"schedule":"late"`) {
		n, err := resp.Body.Read(buf)
		seen.Write(buf[:n])
		if err == io.EOF || ctx.Err() != nil {
			break
		}
	}
	require.Contains(t, seen.String(), `"schedule":"late"`)
	require.Contains(t, seen.String(), `"key_id":"`+operatorID+`"`)
}
