package postgres_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// lockedPending counts, from a session of its own, the PENDING rows of the
// queues that another transaction holds locked: the rows FOR UPDATE SKIP
// LOCKED cannot take. (A claim's rows are still PENDING to everyone else
// until it commits.)
func lockedPending(t *testing.T, db *sqlx.DB, queues []string) int {
	t.Helper()
	ctx := t.Context()
	tx, err := db.BeginTxx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	var all, free int
	require.NoError(t, tx.GetContext(ctx, &all, `SELECT count(*) FROM tasks WHERE status = 'PENDING' AND queue = ANY($1)`, queues))
	require.NoError(t, tx.GetContext(ctx, &free, `
		SELECT count(*) FROM (SELECT id FROM tasks WHERE status = 'PENDING' AND queue = ANY($1) FOR UPDATE SKIP LOCKED) s`, queues))
	return all - free
}

// claimHolding claims with p and, before its transaction commits, returns
// what probe reports (probe runs on other connections).
func (f *storeFixture) claimHolding(p ports.ClaimParams, probe func()) []*task.Task {
	f.t.Helper()
	var out []*task.Task
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, _, err = st.Tasks.Claim(ctx, claimDefaults(p))
		if err == nil {
			probe()
		}
		return err
	})
	return out
}

func queueNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

// A claim locks exactly the rows it returns: one queue, fifty queues (the
// former statement locked the limit in every queue before cutting: 250 rows
// for a claim of 5 across 50), or any queue.
func TestClaimLocksOnlyTheRowsItClaims(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	queues := queueNames("lock-", 50)
	for round := range 10 {
		for _, q := range queues {
			f.submit(task.SubmitParams{Queue: q, Priority: round % 3})
		}
	}
	cases := []struct {
		name   string
		queues []string
		limit  int
	}{
		{"one queue", queues[:1], 3},
		{"fifty queues", queues, 5},
		{"fifty queues, more than one per queue", queues, 120},
		{"any queue", nil, 7},
	}
	for _, c := range cases {
		var locked int
		got := f.claimHolding(ports.ClaimParams{Queues: c.queues, Limit: c.limit}, func() {
			locked = lockedPending(t, f.db, queues)
		})
		require.Len(t, got, c.limit, c.name)
		require.Equal(t, c.limit, locked, "%s: rows locked while the claim's transaction is open", c.name)
	}
}

// Two claims on the same fifty queues at once both get full batches: the
// second walks past the rows the first holds instead of coming back empty.
func TestConcurrentClaimsAcrossQueuesBothGetFullBatches(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	queues := queueNames("both-", 50)
	for _, q := range queues {
		f.submit(task.SubmitParams{Queue: q})
	}
	var second []*task.Task
	first := f.claimHolding(ports.ClaimParams{WorkerID: "w1", Queues: queues, Limit: 5}, func() {
		second = f.claim(ports.ClaimParams{WorkerID: "w2", Queues: queues, Limit: 5})
	})
	require.Len(t, first, 5)
	require.Len(t, second, 5)
	seen := map[uuid.UUID]bool{}
	for _, c := range append(first, second...) {
		require.False(t, seen[c.ID()], "a task claimed twice")
		seen[c.ID()] = true
	}
}

// A worker on fifty queues gets tasks from all of them in one claim order:
// priority first, then the queues take turns (each task's round-robin rank
// is its place among its queue's waiting tasks), then submission order.
func TestClaimAcrossFiftyQueuesFollowsPriorityOrder(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	queues := queueNames("order-", 50)
	rng := rand.New(rand.NewPCG(7, 12))
	type sub struct {
		id       uuid.UUID
		priority int
		place    int // its place in its queue: queues take turns within a priority
		n        int
	}
	var subs []sub
	places := map[string]int{}
	for i := range 300 {
		p, q := rng.IntN(7)-3, queues[rng.IntN(len(queues))]
		tk := f.submit(task.SubmitParams{Queue: q, Priority: p})
		subs = append(subs, sub{id: tk.ID(), priority: p, place: places[q], n: i})
		places[q]++
	}
	sort.SliceStable(subs, func(i, j int) bool {
		if subs[i].priority != subs[j].priority {
			return subs[i].priority > subs[j].priority
		}
		return subs[i].place < subs[j].place
	})
	var got []uuid.UUID
	fromQueues := map[string]bool{}
	for len(got) < len(subs) {
		batch := f.claim(ports.ClaimParams{Queues: queues, Limit: 1 + rng.IntN(9)})
		require.NotEmpty(t, batch)
		for _, c := range batch {
			got = append(got, c.ID())
			fromQueues[c.Queue()] = true
		}
	}
	want := make([]uuid.UUID, len(subs))
	for i, s := range subs {
		want[i] = s.id
	}
	require.Equal(t, want, got)
	require.Len(t, fromQueues, len(queues), "every queue served")
	require.Empty(t, f.claim(ports.ClaimParams{Queues: queues, Limit: 10}))
}

// One statement serves several workers' claims: the rows, in claim order,
// go round-robin to the requests (each up to its limit), each request keeps
// what fits its byte cap, and nothing it did not keep is claimed.
func TestClaimGroupDealsRowsRoundRobinWithinEachCap(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	var ids []uuid.UUID
	for i := range 10 {
		payload := json.RawMessage(`{"n":` + fmt.Sprint(i) + `}`)
		if i == 5 { // a large task, dealt to the third request second
			payload = json.RawMessage(`"` + strings.Repeat("x", 100<<10) + `"`)
		}
		ids = append(ids, f.submit(task.SubmitParams{Queue: "g", Payload: payload}).ID())
	}
	var out []ports.ClaimOutcome
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Tasks.ClaimGroup(ctx, ports.ClaimGroupParams{Queues: []string{"g"}, Requests: []ports.ClaimRequest{
			{WorkerID: "a", Limit: 2, LeaseSeconds: 60},
			{WorkerID: "b", Limit: 1, LeaseSeconds: 60, RequestID: "rb"},
			{WorkerID: "c", Limit: 3, LeaseSeconds: 90, MaxBytes: 64 << 10},
		}})
		return err
	})
	require.Len(t, out, 3)
	// Slots in claim order: a b c a c c -> rows 0..5; row 5 (large) does
	// not fit c's cap after row 2 and row 4.
	require.Equal(t, []uuid.UUID{ids[0], ids[3]}, taskIDs(out[0].Tasks))
	require.Equal(t, []uuid.UUID{ids[1]}, taskIDs(out[1].Tasks))
	require.Equal(t, []uuid.UUID{ids[2], ids[4]}, taskIDs(out[2].Tasks))
	require.False(t, out[0].Truncated)
	require.False(t, out[1].Truncated)
	require.True(t, out[2].Truncated, "c's cap cut it")
	for i, o := range out {
		for _, c := range o.Tasks {
			s := f.get(c.ID())
			require.Equal(t, c.Snapshot(), s)
			require.Equal(t, []string{"a", "b", "c"}[i], s.WorkerID)
		}
	}
	require.Equal(t, "rb", f.get(ids[1]).ClaimRequestID)
	require.Equal(t, 90, f.get(ids[2]).LeaseSeconds)
	require.Equal(t, task.StatusPending, f.get(ids[5]).Status, "left unclaimed")
	require.Equal(t, []uuid.UUID{ids[5], ids[6]}, taskIDs(f.claim(ports.ClaimParams{Queues: []string{"g"}, Limit: 2})))
}

// The claim runs without JIT compilation, whatever the session allows: its
// generic plan is costed as if it read a tenth of the table, which on a
// large backlog passes every JIT threshold, and compiling the plan at every
// execution cost ~1-3 s per claim of one task on a 1M backlog.
func TestClaimRunsWithoutJIT(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.submit(task.SubmitParams{Queue: "q"})
	var jit string
	f.run(func(ctx context.Context, st ports.Stores) error {
		tx := postgres.TxOf(st)
		// A session that would compile every plan.
		if _, err := tx.ExecContext(ctx, `SELECT set_config('jit', 'on', true), set_config('jit_above_cost', '0', true)`); err != nil {
			return err
		}
		got, _, err := st.Tasks.Claim(ctx, claimDefaults(ports.ClaimParams{WorkerID: "w", Queues: []string{"q"}}))
		if err != nil {
			return err
		}
		require.Len(t, got, 1)
		return tx.GetContext(ctx, &jit, `SELECT current_setting('jit')`)
	})
	require.Equal(t, "off", jit)
}

// A claim across several queues reads about as many rows as it claims, even
// on a table bulk-loaded since its last ANALYZE (the statistics then say it
// is nearly empty): it looks each candidate up by its id. As a plain join,
// the planner scanned every pending row per claim.
func TestClaimAcrossQueuesReadsOnlyTheHeadOfAnUnanalyzedTable(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	f.exec(`INSERT INTO tasks (id, queue, status, priority, max_attempts, run_at, created_at, updated_at)
		SELECT gen_random_uuid(), 'q' || (i % 4), 'PENDING', i % 3, 3, now(), now(), now() FROM generate_series(1, 4000) AS i`)
	var fetched int64
	f.run(func(ctx context.Context, st ports.Stores) error {
		got, _, err := st.Tasks.Claim(ctx, claimDefaults(ports.ClaimParams{WorkerID: "w", Queues: []string{"q0", "q1", "q2", "q3"}, Limit: 10}))
		if err != nil {
			return err
		}
		require.Len(t, got, 10)
		return postgres.TxOf(st).GetContext(ctx, &fetched,
			`SELECT coalesce(sum(idx_tup_fetch), 0) FROM pg_stat_xact_user_tables WHERE relname = 'tasks'`)
	})
	require.Less(t, fetched, int64(200), "rows fetched through indexes for a claim of 10 of 4,000")
}

// A claim from one queue must walk the claim index from the queue's head
// whatever the statistics say. Without them (a table that filled up since
// its last ANALYZE), every index on the queue looks as cheap for one row,
// and when another index on the queue (tasks_group_rank) was the smaller
// one, the planner read and sorted every pending row of the queue through
// it instead: 25-50 ms per claim of 5 on a 12k queue in the single
// scenario, and the claim index, which no claim then walked, kept every
// dead entry of its head until a vacuum. Here ranks fall as tasks arrive,
// which packs tasks_group_rank (ordered by rank descending) and splits the
// claim index's pages.
func TestClaimFromOneQueueWalksTheClaimIndexWithoutStatistics(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for b := 0; b < 80; b++ {
		f.exec(fmt.Sprintf(`INSERT INTO tasks (id, queue, status, priority, max_attempts, run_at, created_at, updated_at, grank)
			SELECT gen_random_uuid(), 'q', 'PENDING', 0, 3, now(), now(), now(), 100000 - (%d * 500 + i)
			FROM generate_series(1, 500) AS i`, b))
	}
	for _, limit := range []int{1, 5} {
		var fetched int64
		f.run(func(ctx context.Context, st ports.Stores) error {
			got, _, err := st.Tasks.Claim(ctx, claimDefaults(ports.ClaimParams{WorkerID: "w", Queues: []string{"q"}, Limit: limit}))
			if err != nil {
				return err
			}
			require.Len(t, got, limit)
			return postgres.TxOf(st).GetContext(ctx, &fetched,
				`SELECT coalesce(sum(idx_tup_fetch), 0) FROM pg_stat_xact_user_tables WHERE relname = 'tasks'`)
		})
		require.Less(t, fetched, int64(100), "rows fetched through indexes for a claim of %d of 40,000", limit)
	}
}
