package postgres_test

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// One rule, one place: the partial index that keeps unique keys lists
// exactly the domain's unfinished statuses.
func TestUniqueActiveIndexMatchesUnfinishedStatuses(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	var def string
	require.NoError(t, f.db.Get(&def, `SELECT indexdef FROM pg_indexes WHERE indexname = $1`, postgres.UniqueActiveIndex))
	require.Contains(t, def, "UNIQUE")
	require.Contains(t, def, "(queue, unique_key)")
	var inIndex []string
	for _, m := range regexp.MustCompile(`'([A-Z]+)'::text`).FindAllStringSubmatch(def, -1) {
		inIndex = append(inIndex, m[1])
	}
	var domain []string
	for _, s := range task.UnfinishedStatuses {
		domain = append(domain, string(s))
	}
	require.Equal(t, domain, inIndex, "index %s: %s", postgres.UniqueActiveIndex, def)
}

func TestCreateWithAUniqueKeyReturnsTheUnfinishedHolder(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	first, created := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("report")})
	require.True(t, created)
	again, created := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("report")})
	require.False(t, created)
	require.Equal(t, first.ID(), again.ID())
	other, created := f.create(task.SubmitParams{Queue: "other", UniqueKey: ptr("report")})
	require.True(t, created, "keys are per queue")
	require.NotEqual(t, first.ID(), other.ID())

	f.exec(`UPDATE tasks SET status = 'RUNNING' WHERE id = $1`, first.ID())
	again, created = f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("report")})
	require.False(t, created, "held while RUNNING")
	require.Equal(t, first.ID(), again.ID())

	for _, finished := range []string{"DONE", "DEAD"} {
		f.exec(`UPDATE tasks SET status = $1, finished_at = now() WHERE unique_key = 'report' AND queue = 'q' AND status IN ('PENDING', 'RUNNING')`,
			finished)
		next, created := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("report")})
		require.True(t, created, "free again once %s", finished)
		require.Equal(t, "report", next.Snapshot().UniqueKey)
	}
	// Only the first submission recorded an event per created task.
	var submitted int
	for _, m := range f.outbox() {
		for _, e := range m.Events {
			if e.Type == event.TaskSubmitted {
				submitted++
			}
		}
	}
	require.Equal(t, 4, submitted)
}

// With both keys, the idempotency key decides first: the queue's task with
// it, whatever its status; else the unfinished holder of the unique key.
func TestCreateWithBothKeys(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	holder, _ := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("u")})
	byUnique, created := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("u"), IdempotencyKey: "i1"})
	require.False(t, created)
	require.Equal(t, holder.ID(), byUnique.ID(), "the unique key's holder; i1 names no task")

	f.exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE id = $1`, holder.ID())
	withBoth, created := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("u"), IdempotencyKey: "i1"})
	require.True(t, created)
	f.exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE id = $1`, withBoth.ID())
	repeat, created := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("u"), IdempotencyKey: "i1"})
	require.False(t, created, "the idempotency key names a task for as long as it is kept")
	require.Equal(t, withBoth.ID(), repeat.ID())
}

func TestCreateManyWithUniqueKeys(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	held, _ := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("a")})
	ps := []task.SubmitParams{
		{Queue: "q", UniqueKey: ptr("a")},                       // the held one
		{Queue: "q", UniqueKey: ptr("b")},                       // new
		{Queue: "q", UniqueKey: ptr("b")},                       // a repeat within the batch
		{Queue: "q", UniqueKey: ptr("c"), IdempotencyKey: "i"},  // new
		{Queue: "q", UniqueKey: ptr("zz"), IdempotencyKey: "i"}, // the idempotency key of the item before
		{Queue: "q"},
	}
	var (
		out     []*task.Task
		created []bool
	)
	f.run(func(ctx context.Context, st ports.Stores) error {
		var err error
		out, created, err = st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			ts := make([]*task.Task, len(ps))
			es := make([]event.Event, len(ps))
			for i, p := range ps {
				p.ID = uuid.Must(uuid.NewV7())
				var err error
				if ts[i], es[i], err = task.Submit(p, now); err != nil {
					return nil, nil, err
				}
			}
			return ts, es, nil
		})
		return err
	})
	require.Equal(t, []bool{false, true, false, true, false, true}, created)
	require.Equal(t, held.ID(), out[0].ID())
	require.Equal(t, out[1].ID(), out[2].ID())
	require.Equal(t, out[3].ID(), out[4].ID())
	var n int
	require.NoError(t, f.db.Get(&n, `SELECT count(*) FROM tasks`))
	require.Equal(t, 4, n)
}

// An operator's retry of a DEAD task whose unique key another unfinished
// task holds is refused, and changes nothing.
func TestRetryOfATaskWhoseUniqueKeyIsTaken(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	old, _ := f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("k")})
	f.exec(`UPDATE tasks SET status = 'DEAD', dead_reason = 'cancelled', finished_at = now() WHERE id = $1`, old.ID())
	f.create(task.SubmitParams{Queue: "q", UniqueKey: ptr("k")})
	err := f.tx.Run(t.Context(), func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, old.ID(), func(tk *task.Task, now time.Time) ([]event.Event, error) {
			e, err := tk.Retry(now)
			return []event.Event{e}, err
		})
		return err
	})
	var kerr *task.UniqueKeyError
	require.ErrorAs(t, err, &kerr)
	require.Equal(t, "k", kerr.Key)
	require.Equal(t, task.StatusDead, f.get(old.ID()).Status)
}

func TestRetryPolicyAndSnoozesAreStored(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	full := backoff.JitterFull
	tk := f.submit(task.SubmitParams{Queue: "q", Retry: &task.RetryParams{BaseSeconds: ptr(0.25), MaxSeconds: ptr(3600.5), Jitter: &full}})
	want := &backoff.Policy{Base: 250 * time.Millisecond, Cap: 3600500 * time.Millisecond, Jitter: backoff.JitterFull}
	require.Equal(t, want, f.get(tk.ID()).Retry)
	require.Nil(t, f.submit(task.SubmitParams{Queue: "q"}).Snapshot().Retry)

	claimed := f.claim(ports.ClaimParams{Queues: []string{"q"}, Limit: 1})
	require.Len(t, claimed, 1)
	lease := claimed[0].Snapshot().LeaseID
	f.run(func(ctx context.Context, st ports.Stores) error {
		_, err := st.Tasks.Update(ctx, tk.ID(), func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := t.Snooze(task.SnoozeParams{WorkerID: "w1", LeaseID: lease, DelaySeconds: 60}, now)
			return []event.Event{e}, err
		})
		return err
	})
	got := f.get(tk.ID())
	require.Equal(t, task.StatusPending, got.Status)
	require.Equal(t, 0, got.Attempts)
	require.Equal(t, 1, got.Snoozes)
	require.Equal(t, want, got.Retry)
}

// LockTasks finds tasks by id, by idempotency key, and by unique key only
// while the holder is unfinished (BLOCKED included), each kind by its index.
func TestLockTasksFindsUnfinishedUniqueKeyHolders(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	byID := f.submit(task.SubmitParams{Queue: "q"})
	byKey := f.submit(task.SubmitParams{Queue: "q", IdempotencyKey: "i"})
	pending := f.submit(task.SubmitParams{Queue: "q", UniqueKey: ptr("p")})
	blocked := f.submit(task.SubmitParams{Queue: "q", UniqueKey: ptr("b")})
	f.exec(`UPDATE tasks SET status = 'BLOCKED', blockers = 1 WHERE id = $1`, blocked.ID())
	done := f.submit(task.SubmitParams{Queue: "q", UniqueKey: ptr("d")})
	f.exec(`UPDATE tasks SET status = 'DONE', finished_at = now() WHERE id = $1`, done.ID())
	f.submit(task.SubmitParams{Queue: "other", UniqueKey: ptr("o")})

	var got []uuid.UUID
	f.run(func(ctx context.Context, st ports.Stores) error {
		locked, err := st.Tasks.LockTasks(ctx, ports.LockParams{IDs: []uuid.UUID{byID.ID()},
			Keys:   []ports.IdempotencyKey{{Queue: "q", Key: "i"}},
			Unique: []ports.UniqueKey{{Queue: "q", Key: "p"}, {Queue: "q", Key: "b"}, {Queue: "q", Key: "d"}, {Queue: "q", Key: "o"}, {Queue: "q", Key: "\x00"}}})
		for _, tk := range locked {
			got = append(got, tk.ID())
		}
		return err
	})
	want := []uuid.UUID{byID.ID(), byKey.ID(), pending.ID(), blocked.ID()}
	slices.SortFunc(want, func(a, b uuid.UUID) int { return strings.Compare(a.String(), b.String()) })
	require.Equal(t, want, got, "in id order; not the DONE holder, not another queue's")
}
