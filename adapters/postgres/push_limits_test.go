package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/queue"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// setPush makes queue a push queue delivering at most inFlight at once
// (the API's PATCH writes the same columns).
func (f *storeFixture) setPush(queueName string, inFlight int) {
	f.t.Helper()
	f.setQueue(queueName, fmt.Sprintf(`push_url = 'http://127.0.0.1:1/', push_timeout_seconds = 5, push_max_in_flight = %d,
		push_header_names = '{}', push_non_retryable_statuses = '{404}', push_secret = 'plain:', push_secret_rotated_at = now()`, inFlight))
}

// putLimit stages a named limit (PUT /limits/v1/{name} writes the same).
func (f *storeFixture) putLimit(name, set string) {
	f.t.Helper()
	f.exec(`INSERT INTO named_limits (name, max_running, created_at, updated_at) VALUES ($1, 1000000, now(), now())
		ON CONFLICT DO NOTHING`, name)
	f.exec(`UPDATE named_limits SET `+set+`, tokens = NULL, tokens_at = NULL WHERE name = $1`, name)
}

func queuesOf(ts []*task.Task) map[string]int {
	out := map[string]int{}
	for _, t := range ts {
		out[t.Queue()]++
	}
	return out
}

// A push queue's tasks go to its dispatchers only: workers' claims pass it
// by (named or from any queue), dispatchers' claims take nothing from other
// queues, and take the push queue's tasks whatever their tags.
func TestPushQueuesAreClaimedByDispatchersOnly(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("hooks", "", 3)
	tagged := f.submit(task.SubmitParams{Queue: "hooks", Tags: []string{"gpu"}})
	f.submitMany("plain", "", 2)
	f.setPush("hooks", 100)

	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"hooks"}, WorkerTags: []string{"gpu"}}), "a worker naming the push queue")
	require.Equal(t, map[string]int{"plain": 2}, queuesOf(f.claim(ports.ClaimParams{WorkerID: "w2"})), "a worker claiming from any queue")
	f.submitMany("plain", "", 1)
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"plain"}, Push: true}), "a dispatcher naming another queue")
	require.Empty(t, f.claim(ports.ClaimParams{Push: true}), "a dispatcher names its queue")

	got := f.claim(ports.ClaimParams{Queues: []string{"hooks"}, Push: true, WorkerID: "push:a"})
	require.Len(t, got, 4)
	require.Contains(t, taskIDs(got), tagged.ID(), "tags do not hold a push delivery back")

	f.exec(`UPDATE queue_settings SET push_url = NULL, push_timeout_seconds = NULL, push_max_in_flight = NULL,
		push_secret = NULL, push_secret_rotated_at = NULL WHERE queue = 'hooks'`)
	f.submitMany("hooks", "", 1)
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"hooks"}, WorkerID: "w3"}), 1, "push off: workers claim it again")
}

// max_in_flight caps a push queue's RUNNING tasks, across claims.
func TestPushMaxInFlightCapsRunningTasks(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("hooks", "", 20)
	f.setPush("hooks", 5)
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"hooks"}, Push: true, Limit: 3}), 3)
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"hooks"}, Push: true, Limit: 100, WorkerID: "push:b"}), 2)
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"hooks"}, Push: true, WorkerID: "push:c"}))
	f.setQueue("hooks", "max_running = 4")
	f.exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE id IN (
		SELECT id FROM tasks WHERE queue = 'hooks' AND status = 'RUNNING' LIMIT 2)`)
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"hooks"}, Push: true, WorkerID: "push:c"}), 1,
		"the least of max_running and max_in_flight")
}

// rate_limit_per_group: each group has a bucket of its own (burst at once,
// then the rate), tasks without a group are not limited, and a group out
// of tokens does not hold the others back.
func TestGroupRateLimitGivesEachGroupItsOwnBucket(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, g := range []string{"a", "b", "c"} {
		f.submitMany("tenants", g, 30)
	}
	f.submitMany("tenants", "", 4)
	f.setQueue("tenants", "group_rate_per_second = 2, group_rate_burst = 3")
	got := f.claim(ports.ClaimParams{Queues: []string{"tenants"}, Limit: 100})
	count := map[string]int{}
	for _, g := range groupsOf(got) {
		count[g]++
	}
	require.Equal(t, map[string]int{"a": 3, "b": 3, "c": 3, "": 4}, count)
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"tenants"}, WorkerID: "w2"}), "every group's bucket is empty")
	var buckets int
	require.NoError(t, f.db.Get(&buckets, `SELECT count(*) FROM queue_group_buckets WHERE queue = 'tenants'`))
	require.Equal(t, 3, buckets)

	f.submitMany("tenants", "d", 5)
	require.Equal(t, []string{"d", "d", "d"}, groupsOf(f.claim(ports.ClaimParams{Queues: []string{"tenants"}, WorkerID: "w3"})),
		"a new group has a full bucket")

	deadline := time.Now().Add(5 * time.Second)
	var refilled []*task.Task
	for len(refilled) == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
		refilled = f.claim(ports.ClaimParams{Queues: []string{"tenants"}, WorkerID: "w4", Limit: 1})
	}
	require.Len(t, refilled, 1, "a token refills in half a second")
}

// The claims of three queues naming one limit share its budget: its
// max_running counts the RUNNING tasks of all three, its bucket every task
// they take.
func TestNamedLimitIsSharedByTheQueuesNamingIt(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, q := range []string{"api-a", "api-b", "api-c", "other"} {
		f.submitMany(q, "", 10)
	}
	f.putLimit("tenant-api", "max_running = 4")
	for _, q := range []string{"api-a", "api-b", "api-c"} {
		f.setQueue(q, "limits = '{tenant-api}'")
	}
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"api-a"}, Limit: 3}), 3)
	got := f.claim(ports.ClaimParams{Queues: []string{"api-b", "api-c", "other"}, Limit: 100, WorkerID: "w2"})
	q := queuesOf(got)
	require.Equal(t, 10, q["other"], "a queue naming no limit is not held back")
	require.Equal(t, 1, q["api-b"]+q["api-c"], "one left of the shared four")
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"api-c"}, WorkerID: "w3"}))

	// A rate: burst 2 for all three queues.
	f.exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE status = 'RUNNING'`)
	f.putLimit("tenant-api", "max_running = NULL, rate_per_second = 0.001, rate_burst = 2")
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"api-a", "api-b", "api-c"}, WorkerID: "w4"}), 2)
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"api-b"}, WorkerID: "w5"}))
	var tokens float64
	require.NoError(t, f.db.Get(&tokens, `SELECT tokens FROM named_limits WHERE name = 'tenant-api'`))
	require.InDelta(t, 0, tokens, 0.01)
}

// A named limit's max_running holds while sixteen claimers take from the
// three queues naming it and finish tasks, as three instances' claims
// would: a sampler never sees more RUNNING tasks in the three together
// than the limit, and every task is claimed once.
func TestNamedLimitHoldsUnderConcurrentClaims(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	queues := []string{"shared-a", "shared-b", "shared-c"}
	const perQueue, limit = 80, 5
	for _, q := range queues {
		f.submitMany(q, "", perQueue)
		f.setQueue(q, "limits = '{budget}'")
	}
	f.putLimit("budget", fmt.Sprintf("max_running = %d", limit))
	total := int64(perQueue * len(queues))
	claimed, peak := f.claimUnderACap(total, queues, func(w int) []string {
		if w%4 == 0 {
			return queues // some claim from all three at once
		}
		return []string{queues[w%3]}
	})
	require.EqualValues(t, total, claimed)
	require.LessOrEqual(t, peak, int64(limit))
	require.Positive(t, peak)
}

// LimitStore: put creates then replaces (a changed rate refills the
// bucket), get and list show the queues naming a limit and their running
// tasks, a limit named by a queue cannot be deleted, Missing names the
// limits that do not exist.
func TestLimitStore(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	put := func(l queue.Limit) (ports.LimitInfo, bool) {
		var (
			info    ports.LimitInfo
			created bool
		)
		f.run(func(ctx context.Context, st ports.Stores) error {
			var err error
			info, created, err = st.Limits.Put(ctx, l.Name, func(before *queue.Limit, now time.Time) (queue.Limit, []event.Event, error) {
				e := event.Audit(event.AuditLimitSet, "", now)
				e.Limit = &l
				return l, []event.Event{e}, nil
			})
			return err
		})
		return info, created
	}
	info, created := put(queue.Limit{Name: "api", RateLimit: &queue.RateLimit{PerSecond: 5, Burst: 10}})
	require.True(t, created)
	require.Equal(t, 10.0, *info.Tokens, "a new bucket is full")
	require.Empty(t, info.Queues)
	f.exec(`UPDATE named_limits SET tokens = 1, tokens_at = now() WHERE name = 'api'`)
	info, created = put(queue.Limit{Name: "api", RateLimit: &queue.RateLimit{PerSecond: 5, Burst: 10}, MaxRunning: ptr(3)})
	require.False(t, created)
	require.Less(t, *info.Tokens, 2.0, "the same rate keeps its bucket")
	info, _ = put(queue.Limit{Name: "api", RateLimit: &queue.RateLimit{PerSecond: 6, Burst: 10}, MaxRunning: ptr(3)})
	require.Equal(t, 10.0, *info.Tokens, "a changed rate starts full")
	put(queue.Limit{Name: "db", MaxRunning: ptr(2)})

	f.submitMany("qa", "", 2)
	f.setQueue("qa", "limits = '{api,db}'")
	f.setQueue("qb", "limits = '{api}'")
	f.claim(ports.ClaimParams{Queues: []string{"qa"}})
	f.run(func(ctx context.Context, st ports.Stores) error {
		got, err := st.Limits.Get(ctx, "api")
		require.NoError(t, err)
		require.Equal(t, []string{"qa", "qb"}, got.Queues)
		require.Equal(t, 2, got.Running)
		all, err := st.Limits.List(ctx)
		require.NoError(t, err)
		require.Equal(t, []string{"api", "db"}, []string{all[0].Limit.Name, all[1].Limit.Name})
		require.Nil(t, all[1].Tokens)
		_, err = st.Limits.Get(ctx, "nope")
		require.ErrorIs(t, err, queue.ErrLimitNotFound)
		missing, err := st.Limits.Missing(ctx, []string{"db", "nope", "api", "gone"})
		require.NoError(t, err)
		require.Equal(t, []string{"nope", "gone"}, missing)
		return nil
	})
	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Limits.Delete(ctx, "api", func(queue.Limit, time.Time) ([]event.Event, error) { return nil, nil })
		return err
	})
	var inUse *queue.LimitInUseError
	require.ErrorAs(t, err, &inUse)
	require.Equal(t, []string{"qa", "qb"}, inUse.Queues)
	f.setQueue("qa", "limits = '{db}'")
	f.setQueue("qb", "limits = '{}'")
	f.run(func(ctx context.Context, st ports.Stores) error {
		l, err := st.Limits.Delete(ctx, "api", func(l queue.Limit, now time.Time) ([]event.Event, error) {
			e := event.Audit(event.AuditLimitDeleted, "", now)
			e.Limit = &l
			return []event.Event{e}, nil
		})
		require.NoError(t, err)
		require.Equal(t, 3, *l.MaxRunning)
		_, err = st.Limits.Delete(ctx, "api", func(queue.Limit, time.Time) ([]event.Event, error) { return nil, nil })
		require.ErrorIs(t, err, queue.ErrLimitNotFound)
		return nil
	})
	types := []event.Type{}
	for _, m := range f.outbox() {
		for _, e := range m.Events {
			types = append(types, e.Type)
		}
	}
	require.Equal(t, 4, countOf(types, event.AuditLimitSet))
	require.Equal(t, 1, countOf(types, event.AuditLimitDeleted))
}

func countOf[T comparable](list []T, v T) int {
	n := 0
	for _, x := range list {
		if x == v {
			n++
		}
	}
	return n
}

// A change naming a limit holds it against deletion until it commits: the
// delete waits, then sees the queue naming it.
func TestALimitNamedByAnUncommittedChangeIsNotDeleted(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.putLimit("api", "max_running = 1")
	naming := make(chan struct{})
	release := make(chan struct{})
	go func() {
		_ = f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
			if _, err := st.Limits.Missing(ctx, []string{"api"}); err != nil {
				return err
			}
			close(naming)
			<-release
			_, _, err := st.QueueSettings.Update(ctx, "q", func(s queue.Settings, _ time.Time) (queue.Settings, []event.Event, error) {
				s.Limits = []string{"api"}
				return s, nil, nil
			})
			return err
		})
	}()
	<-naming
	deleted := make(chan error, 1)
	go func() {
		deleted <- f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
			_, err := st.Limits.Delete(ctx, "api", func(queue.Limit, time.Time) ([]event.Event, error) { return nil, nil })
			return err
		})
	}()
	select {
	case err := <-deleted:
		t.Fatalf("the delete did not wait for the change naming the limit: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(release)
	var inUse *queue.LimitInUseError
	require.ErrorAs(t, <-deleted, &inUse)
}

// PushStore.Queues reads every push queue with its sealed secrets, leaving
// out a previous secret whose overlap is over; delivery statistics are
// replaced per instance and merged per queue.
func TestPushStore(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.setPush("hooks", 7)
	f.exec(`UPDATE queue_settings SET push_secret = 'new', push_previous_secret = 'old',
		push_previous_secret_expires_at = now() + interval '1 hour', push_headers = 'h' WHERE queue = 'hooks'`)
	f.setPush("expired", 1)
	f.exec(`UPDATE queue_settings SET paused = true, push_previous_secret = 'old',
		push_previous_secret_expires_at = now() - interval '1 second' WHERE queue = 'expired'`)
	f.setQueue("pull", "max_running = 3")
	var qs []ports.PushQueue
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		qs, err = st.Push.Queues(ctx)
		return err
	})
	require.Len(t, qs, 2)
	require.Equal(t, "expired", qs[0].Queue)
	require.True(t, qs[0].Paused)
	require.Empty(t, qs[0].Push.Sealed.PreviousSecret)
	require.Equal(t, queue.PushSealed{Secret: "new", PreviousSecret: "old", Headers: "h"}, qs[1].Push.Sealed)
	require.Equal(t, 7, qs[1].Push.MaxInFlight)
	require.Equal(t, []int{404}, qs[1].Push.NonRetryableStatuses)

	save := func(instance string, stats ...ports.DeliveryStats) {
		f.run(func(ctx context.Context, st ports.Stores) error {
			return st.Push.SaveDeliveryStats(ctx, instance, stats)
		})
	}
	save("i1", ports.DeliveryStats{Queue: "hooks", InFlight: 2, Statuses: []int{200, 500, 0}, LatencyMillis: []int{10, 30, 5000}},
		ports.DeliveryStats{Queue: "expired", Statuses: []int{200}, LatencyMillis: []int{1}})
	save("i2", ports.DeliveryStats{Queue: "hooks", InFlight: 1, Statuses: []int{200}, LatencyMillis: []int{20}})
	save("i1", ports.DeliveryStats{Queue: "hooks", InFlight: 2, Statuses: []int{503, 200, 500, 0}, LatencyMillis: []int{40, 10, 30, 5000}})
	var sum *ports.DeliverySummary
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		sum, err = postgres.ReadDeliverySummary(ctx, postgres.TxOf(st), "hooks")
		return err
	})
	require.Equal(t, 3, sum.InFlight)
	require.Equal(t, 5, sum.Count)
	require.Equal(t, map[int]int{200: 2, 500: 1, 503: 1, 0: 1}, sum.Statuses)
	require.Equal(t, 503, sum.LastStatus, "the last writer's newest")
	require.Equal(t, 30*time.Millisecond, sum.LatencyP50)
	require.Equal(t, 5*time.Second, sum.LatencyP99)
	var rows []string
	require.NoError(t, f.db.Select(&rows, `SELECT queue || '/' || instance FROM push_delivery_stats ORDER BY 1`))
	require.Equal(t, []string{"hooks/i1", "hooks/i2"}, rows, "a queue missing from an instance's write is deleted")
	f.exec(`UPDATE push_delivery_stats SET updated_at = now() - interval '2 hours' WHERE instance = 'i2'`)
	f.run(func(ctx context.Context, st ports.Stores) error { return st.Push.PruneDeliveryStats(ctx, time.Hour) })
	require.NoError(t, f.db.Select(&rows, `SELECT queue || '/' || instance FROM push_delivery_stats ORDER BY 1`))
	require.Equal(t, []string{"hooks/i1"}, rows)
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		sum, err = postgres.ReadDeliverySummary(ctx, postgres.TxOf(st), "pull")
		return err
	})
	require.Nil(t, sum)
}

// A push delivery's attempt keeps its HTTP status.
func TestAttemptsKeepTheirHTTPStatus(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	tk := f.submit(task.SubmitParams{Queue: "hooks"})
	f.setPush("hooks", 5)
	got := f.claim(ports.ClaimParams{Queues: []string{"hooks"}, Push: true, WorkerID: "push:a"})
	require.Len(t, got, 1)
	lease := got[0].Snapshot().LeaseID
	wait := time.Minute
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, tk.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Fail(task.FailParams{WorkerID: "push:a", LeaseID: lease, Error: "HTTP 503", Retryable: true, HTTPStatus: 503, RetryAfter: &wait}, backoff.Policy{Base: time.Second, Cap: time.Second}, now)
			return []event.Event{e}, err
		})
		return err
	})
	var attempts []task.Attempt
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		attempts, err = st.Tasks.Attempts(ctx, tk.ID())
		return err
	})
	require.Len(t, attempts, 1)
	require.Equal(t, 503, attempts[0].HTTPStatus)
	s := f.get(tk.ID())
	require.WithinDuration(t, s.UpdatedAt.Add(time.Minute), s.RunAt, time.Millisecond, "retried after Retry-After")
}

// QueueSettingsStore.Update saves and reads back every setting of issue
// 27, sealed secrets included; a changed rate_limit_per_group empties the
// groups' buckets.
func TestQueueSettingsStoreKeepsPushAndLimits(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.putLimit("api", "max_running = 2")
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Microsecond)
	want := queue.Settings{
		RateLimitPerGroup: &queue.RateLimit{PerSecond: 2, Burst: 4},
		Limits:            []string{"api"},
		Push: &queue.Push{URL: "https://hooks.example.com/x?y=1", TimeoutSeconds: 12, MaxInFlight: 3,
			HeaderNames: []string{"Authorization"}, NonRetryableStatuses: []int{400, 410},
			SecretRotatedAt: until.Add(-time.Hour), PreviousSecretExpiresAt: &until,
			Sealed: queue.PushSealed{Secret: "s1", PreviousSecret: "s0", Headers: "h"}},
	}
	update := func(fn func(queue.Settings) queue.Settings) (before queue.Settings) {
		f.run(func(ctx context.Context, st ports.Stores) error {
			_, _, err := st.QueueSettings.Update(ctx, "hooks", func(s queue.Settings, _ time.Time) (queue.Settings, []event.Event, error) {
				before = s
				return fn(s), nil, nil
			})
			return err
		})
		return before
	}
	update(func(queue.Settings) queue.Settings { return want })
	got := update(func(s queue.Settings) queue.Settings { return s })
	require.True(t, got.Push.SecretRotatedAt.Equal(want.Push.SecretRotatedAt))
	got.Push.SecretRotatedAt = want.Push.SecretRotatedAt
	require.True(t, got.Push.PreviousSecretExpiresAt.Equal(until))
	got.Push.PreviousSecretExpiresAt = &until
	require.Equal(t, want, got)

	f.exec(`INSERT INTO queue_group_buckets VALUES ('hooks', 'g', 0, now())`)
	update(func(s queue.Settings) queue.Settings { return s })
	var n int
	require.NoError(t, f.db.Get(&n, `SELECT count(*) FROM queue_group_buckets`))
	require.Equal(t, 1, n, "an unchanged group rate keeps the buckets")
	update(func(s queue.Settings) queue.Settings {
		s.RateLimitPerGroup = &queue.RateLimit{PerSecond: 3, Burst: 4}
		s.Push = nil
		return s
	})
	require.NoError(t, f.db.Get(&n, `SELECT count(*) FROM queue_group_buckets`))
	require.Zero(t, n, "a changed group rate starts every group full")
	got = update(func(s queue.Settings) queue.Settings { return s })
	require.Nil(t, got.Push)
	var secret *string
	require.NoError(t, f.db.Get(&secret, `SELECT push_secret FROM queue_settings WHERE queue = 'hooks'`))
	require.Nil(t, secret, "push off forgets the secrets")
}
