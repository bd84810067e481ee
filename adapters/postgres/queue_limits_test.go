package postgres_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// submitMany creates n tasks of queue (in group when not empty) in one
// transaction, through TaskStore.CreateMany as batch submissions do.
func (f *storeFixture) submitMany(queue, group string, n int) []*task.Task {
	f.t.Helper()
	var out []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, _, err = st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			ts, es := make([]*task.Task, n), make([]event.Event, n)
			for i := range ts {
				p := task.SubmitParams{ID: uuid.Must(uuid.NewV7()), Queue: queue}
				if group != "" {
					p.GroupKey = &group
				}
				var err error
				if ts[i], es[i], err = task.Submit(p, now); err != nil {
					return nil, nil, err
				}
			}
			return ts, es, nil
		})
		return err
	})
	return out
}

// setQueue stages a queue's settings row (the API's PATCH writes the same).
func (f *storeFixture) setQueue(queue, set string) {
	f.t.Helper()
	f.exec(`INSERT INTO queue_settings (queue, updated_at) VALUES ($1, now()) ON CONFLICT DO NOTHING`, queue)
	f.exec(`UPDATE queue_settings SET `+set+`, tokens = NULL, tokens_at = NULL WHERE queue = $1`, queue)
}

func (f *storeFixture) running(queue string) int {
	f.t.Helper()
	var n int
	require.NoError(f.t, f.db.GetContext(f.t.Context(), &n, `SELECT count(*) FROM tasks WHERE queue = $1 AND status = 'RUNNING'`, queue))
	return n
}

func groupsOf(ts []*task.Task) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Snapshot().GroupKey
	}
	return out
}

// A paused queue hands out nothing, to claims that name it and to claims
// from any queue; resumed, it hands out its tasks again.
func TestClaimTakesNothingFromAPausedQueue(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("paused", "", 3)
	f.submitMany("open", "", 2)
	f.setQueue("paused", "paused = true")
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"paused"}}))
	got := f.claim(ports.ClaimParams{Queues: []string{"paused", "open"}, WorkerID: "w2"})
	require.Len(t, got, 2)
	require.Empty(t, f.claim(ports.ClaimParams{WorkerID: "w3"}), "a claim from any queue skips the paused one")
	f.setQueue("paused", "paused = false")
	require.Len(t, f.claim(ports.ClaimParams{WorkerID: "w4"}), 3)
}

// max_running caps the queue's RUNNING tasks: a claim of 100 with 3 slots
// left gets 3, a full queue gives nothing, a finished task frees a slot.
func TestClaimOfAHundredWithThreeSlotsLeftGetsThree(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("capped", "", 20)
	f.setQueue("capped", "max_running = 5")
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"capped"}, Limit: 2}), 2)
	got := f.claim(ports.ClaimParams{Queues: []string{"capped"}, Limit: 100, WorkerID: "w2"})
	require.Len(t, got, 3)
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"capped"}, WorkerID: "w3"}))
	f.exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE id = $1`, got[0].ID())
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"capped"}, WorkerID: "w3"}), 1)
	require.Equal(t, 5, f.running("capped"))
}

// max_running holds while many claimers (here sixteen transactions at once,
// as three instances' claims would be) claim and finish tasks: a sampler
// never sees more than the cap RUNNING, and every task is claimed once.
func TestMaxRunningHoldsUnderConcurrentClaims(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	const tasks, limit = 300, 7
	f.submitMany("burst", "", tasks)
	f.setQueue("burst", fmt.Sprintf("max_running = %d", limit))
	claimed, peak := f.claimUnderACap(tasks, []string{"burst"}, func(int) []string { return []string{"burst"} })
	require.EqualValues(t, tasks, claimed)
	require.LessOrEqual(t, peak, int64(limit))
	require.Positive(t, peak)
}

// The rate limit is a token bucket: a burst at once, then the rate.
func TestClaimRateLimitIsATokenBucket(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("rated", "", 100)
	f.setQueue("rated", "rate_per_second = 20, rate_burst = 5")
	start := time.Now()
	require.Len(t, f.claim(ports.ClaimParams{Queues: []string{"rated"}}), 5)
	total := 5
	for time.Since(start) < time.Second {
		total += len(f.claim(ports.ClaimParams{Queues: []string{"rated"}}))
		time.Sleep(20 * time.Millisecond)
	}
	elapsed := time.Since(start).Seconds()
	// 5 at once, then 20 a second: never more than the bucket allows.
	require.LessOrEqual(t, float64(total), 5+20*elapsed+1)
	require.GreaterOrEqual(t, float64(total), 5+20*(elapsed-0.2))
}

// Within a queue, claims take turns across groups: ten tasks of a small
// group submitted after a million-strong... here a thousand-strong group
// come out interleaved with the big group's, not after it; tasks without a
// group form a group of their own.
func TestClaimsTakeTurnsAcrossGroups(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("fair", "big", 1000)
	small := f.submitMany("fair", "small", 10)
	f.submitMany("fair", "", 5)
	got := f.claim(ports.ClaimParams{Queues: []string{"fair"}, Limit: 30})
	require.Len(t, got, 30)
	groups := groupsOf(got)
	require.Equal(t, []string{"big", "small", "", "big", "small", ""}, groups[:6])
	count := map[string]int{}
	for _, g := range groups {
		count[g]++
	}
	require.Equal(t, map[string]int{"big": 15, "small": 10, "": 5}, count)
	require.Equal(t, small[0].ID(), got[1].ID(), "the small group's first task comes second")
	// A group that had nothing waiting joins the current round.
	late := f.submitMany("fair", "late", 2)
	next := f.claim(ports.ClaimParams{Queues: []string{"fair"}, Limit: 2})
	require.Equal(t, []string{"big", "late"}, groupsOf(next))
	require.Equal(t, late[0].ID(), next[1].ID())
}

// max_running_per_group: no group exceeds the cap, tasks without a group
// are not capped, and a group at its cap does not stop the others.
func TestClaimCapsEachGroup(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submitMany("tenants", "a", 50)
	f.submitMany("tenants", "b", 50)
	f.submitMany("tenants", "c", 1)
	f.submitMany("tenants", "", 3)
	f.setQueue("tenants", "max_running_per_group = 2")
	got := f.claim(ports.ClaimParams{Queues: []string{"tenants"}, Limit: 100})
	count := map[string]int{}
	for _, g := range groupsOf(got) {
		count[g]++
	}
	require.Equal(t, map[string]int{"a": 2, "b": 2, "c": 1, "": 3}, count)
	require.Empty(t, f.claim(ports.ClaimParams{Queues: []string{"tenants"}, WorkerID: "w2"}))
	f.submitMany("tenants", "d", 5)
	require.Equal(t, []string{"d", "d"}, groupsOf(f.claim(ports.ClaimParams{Queues: []string{"tenants"}, WorkerID: "w3"})))
}

// A claim of a queue capped per group looks past a window full of capped
// groups' tasks: here 200 higher-priority tasks of one group, capped at 1,
// stand before the other group's.
func TestClaimCappedPerGroupLooksPastCappedGroups(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, _, err := st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			var ts []*task.Task
			var es []event.Event
			for i := range 201 {
				g, p := "hot", 1
				if i == 200 {
					g, p = "cold", 0
				}
				tk, e, err := task.Submit(task.SubmitParams{ID: uuid.Must(uuid.NewV7()), Queue: "window", GroupKey: &g, Priority: p}, now)
				if err != nil {
					return nil, nil, err
				}
				ts, es = append(ts, tk), append(es, e)
			}
			return ts, es, nil
		})
		return err
	})
	f.setQueue("window", "max_running_per_group = 1")
	require.Equal(t, []string{"hot", "cold"}, groupsOf(f.claim(ports.ClaimParams{Queues: []string{"window"}, Limit: 5})))
}

// claimUnderACap has 16 workers claim (three tasks at a time, each from
// the queues queuesOf gives it) and finish tasks until total were claimed,
// while a sampler watches how many of queues' tasks are RUNNING at once.
// It returns how many were claimed (a task claimed twice fails the test)
// and the most the sampler saw RUNNING.
func (f *storeFixture) claimUnderACap(total int64, queues []string, queuesOf func(worker int) []string) (claimed, peak int64) {
	t := f.t
	var (
		count atomic.Int64
		most  atomic.Int64
		wg    sync.WaitGroup
		done  = make(chan struct{})
		seen  sync.Map
	)
	go func() { // the sampler
		for {
			select {
			case <-done:
				return
			default:
			}
			var n int64
			if err := f.db.Get(&n, `SELECT count(*) FROM tasks WHERE queue = ANY($1) AND status = 'RUNNING'`, pq.StringArray(queues)); err == nil && n > most.Load() {
				most.Store(n)
			}
		}
	}()
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for count.Load() < total {
				var got []*task.Task
				err := f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
					var err error
					got, _, err = st.Tasks.Claim(ctx, claimDefaults(ports.ClaimParams{Queues: queuesOf(w), WorkerID: fmt.Sprintf("w%d", w), Limit: 3}))
					return err
				})
				if err != nil {
					t.Error(err)
					return
				}
				for _, tk := range got {
					if _, dup := seen.LoadOrStore(tk.ID(), true); dup {
						t.Errorf("task %s claimed twice", tk.ID())
					}
					count.Add(1)
				}
				time.Sleep(5 * time.Millisecond) // hold the tasks RUNNING a while
				for _, tk := range got {
					if _, err := f.db.Exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE id = $1`, tk.ID()); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	return count.Load(), most.Load()
}
