package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/adapters/postgres"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// LockTasks returns a task named by id that a concurrent transaction
// changed while it waited for the row's lock: the locking read rechecks the
// row's newest version, which is still the named task. Under the plans a
// shared transaction of reports pins (generic plans; a complete with a join
// in its enqueue locks the join's parents there), the recheck of the
// statement's old shape (the id inside a UNION ALL semi-join) dropped such
// rows, and a workflow's join failed with "depends_on names no task"
// naming children a concurrent batch had just completed.
func TestLockTasksKeepsRowsChangedWhileItWaited(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, pinned := range []bool{false, true} {
		a := f.submit(task.SubmitParams{Queue: "recheck", Payload: []byte(`{}`)})
		b := f.submit(task.SubmitParams{Queue: "recheck", Payload: []byte(`{}`), IdempotencyKey: "k-" + uuid.NewString()})

		other, err := f.db.BeginTxx(t.Context(), nil)
		require.NoError(t, err)
		_, err = other.Exec(`UPDATE tasks SET updated_at = now() WHERE id = ANY($1::uuid[])`, []string{a.ID().String(), b.ID().String()})
		require.NoError(t, err)

		got := make(chan []*task.Task, 1)
		errs := make(chan error, 1)
		go func() {
			errs <- f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
				if pinned {
					if _, err := postgres.TxOf(st).ExecContext(ctx, postgres.ReportPlanSettings); err != nil {
						return err
					}
				}
				ts, err := st.Tasks.LockTasks(ctx, ports.LockParams{
					IDs:  []uuid.UUID{a.ID()},
					Keys: []ports.IdempotencyKey{{Queue: "recheck", Key: b.Snapshot().IdempotencyKey}},
				})
				got <- ts
				return err
			})
		}()
		f.awaitALockWait("LockTasks")
		require.NoError(t, other.Commit())
		require.NoError(t, <-errs)
		ids := map[uuid.UUID]bool{}
		for _, tk := range <-got {
			ids[tk.ID()] = true
		}
		require.Equal(t, map[uuid.UUID]bool{a.ID(): true, b.ID(): true}, ids, "pinned plans %v: both tasks, by id and by key", pinned)
	}
}

// A completion under the plans of a shared transaction of reports still
// completes its task, and still unblocks the task's dependant, when a
// concurrent transaction changed either row while the completion waited
// for its lock (another parent's completion counting the same join down,
// a heartbeat, a progress report).
func TestCompletionKeepsRowsChangedWhileItWaited(t *testing.T) {
	t.Parallel()
	f := newStoreFixture(t)
	for _, contended := range []string{"parent and child", "child"} {
		parent := f.submit(task.SubmitParams{Queue: "recheck-complete", Payload: []byte(`{}`)})
		child := f.submit(task.SubmitParams{Queue: "recheck-complete", Payload: []byte(`{}`)})
		lease := uuid.New()
		_, err := f.db.Exec(`UPDATE tasks SET status = 'RUNNING', worker_id = 'w', lease_id = $2, claimed_at = now(), attempts = 1,
			lease_seconds = 60, lease_expires_at = now() + interval '1 minute', has_dependants = true WHERE id = $1`, parent.ID(), lease)
		require.NoError(t, err)
		_, err = f.db.Exec(`UPDATE tasks SET status = 'BLOCKED', blockers = 1 WHERE id = $1`, child.ID())
		require.NoError(t, err)
		_, err = f.db.Exec(`INSERT INTO task_dependencies (parent_id, child_id, position) VALUES ($1, $2, 0)`, parent.ID(), child.ID())
		require.NoError(t, err)

		locked := []string{child.ID().String()}
		if contended == "parent and child" {
			locked = append(locked, parent.ID().String())
		}
		other, err := f.db.BeginTxx(t.Context(), nil)
		require.NoError(t, err)
		_, err = other.Exec(`UPDATE tasks SET updated_at = now() WHERE id = ANY($1::uuid[])`, locked)
		require.NoError(t, err)

		results := make(chan []ports.TaskResult, 1)
		errs := make(chan error, 1)
		go func() {
			errs <- f.tx.Run(context.Background(), func(ctx context.Context, st ports.Stores) error {
				refs := []ports.CompleteRef{{ID: parent.ID(), WorkerID: "w", LeaseID: lease, Result: []byte(`1`)}}
				res, err := st.Tasks.CompleteEach(ctx, refs, func(_ int, tk *task.Task, now time.Time) ([]event.Event, error) {
					e, err := tk.Complete(task.CompleteParams{WorkerID: "w", LeaseID: lease, Result: []byte(`1`)}, now)
					return []event.Event{e}, err
				})
				results <- res
				return err
			})
		}()
		f.awaitALockWait("the completion, " + contended)
		require.NoError(t, other.Commit())
		require.NoError(t, <-errs, contended)
		res := <-results
		require.Len(t, res, 1)
		require.NoError(t, res[0].Err, "%s: the completion", contended)
		var statuses []string
		require.NoError(t, f.db.Select(&statuses, `SELECT status FROM tasks WHERE id IN ($1, $2) ORDER BY id = $1 DESC`, parent.ID(), child.ID()))
		require.Equal(t, []string{"DONE", "PENDING"}, statuses, "%s: the parent, then its dependant", contended)
	}
}

// awaitALockWait waits until a session of the test's database waits for a
// lock (what, the statement that should).
func (f *storeFixture) awaitALockWait(what string) {
	f.t.Helper()
	require.Eventually(f.t, func() bool {
		var waiting int
		require.NoError(f.t, f.db.Get(&waiting, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = current_database()`))
		return waiting > 0
	}, 10*time.Second, 5*time.Millisecond, "%s waits for the other transaction's row locks", what)
}
