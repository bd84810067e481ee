package application_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// statusOf reads a task's status from the database, outside any use case.
func statusOf(t *testing.T, s services, id uuid.UUID) string {
	t.Helper()
	var status string
	require.NoError(t, s.db.Get(&status, `SELECT status FROM tasks WHERE id = $1`, id))
	return status
}

// Completes, fails and a batch report of several workers that arrive while
// a report transaction runs are served together by the next one (group
// commit): each item is fenced on its own, each request gets its own
// outcome, and none is answered before the transaction that holds its
// change committed.
func TestConcurrentReportsShareOneTransactionAnsweredAfterItsCommit(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	first := claimed(t, s, "first").Snapshot()
	a := claimed(t, s, "a").Snapshot()
	b := claimed(t, s, "b").Snapshot()
	stale := claimed(t, s, "stale").Snapshot()
	c1 := claimed(t, s, "c").Snapshot()
	_, _, err := s.tasks.Submit(ctx, task.SubmitParams{Queue: "c"})
	require.NoError(t, err)
	c2s, err := claimedTasks(s.tasks.Claim(ctx, ports.ClaimCommand{WorkerID: "c", Queue: "c"}))
	require.NoError(t, err)
	c2 := c2s[0].Snapshot()
	tasks, g := gatedTasks(s)

	type answer struct {
		name string
		err  error
		res  []ports.TaskResult
	}
	answers := make(chan answer, 8)
	send := func(name string, do func(ctx context.Context) ([]ports.TaskResult, error)) {
		go func() {
			res, err := do(ports.WithCorrelationID(ctx, "cid-"+name))
			answers <- answer{name, err, res}
		}()
	}
	complete := func(v task.Snapshot, lease uuid.UUID) func(context.Context) ([]ports.TaskResult, error) {
		return func(ctx context.Context) ([]ports.TaskResult, error) {
			_, err := tasks.Complete(ctx, ports.CompleteCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &lease, Result: json.RawMessage(`1`)})
			return nil, err
		}
	}
	send("first", complete(first, first.LeaseID))
	<-g.paused // the first report's transaction is open, before its commit
	send("a", complete(a, a.LeaseID))
	send("b", func(ctx context.Context) ([]ports.TaskResult, error) {
		_, err := tasks.Fail(ctx, ports.FailCommand{TaskID: b.ID, WorkerID: "b", LeaseID: &b.LeaseID, Error: "boom", Retryable: true})
		return nil, err
	})
	send("stale", complete(stale, uuid.New()))
	send("c", func(ctx context.Context) ([]ports.TaskResult, error) {
		return tasks.CompleteBatch(ctx, "c", []ports.CompleteItem{
			{TaskID: c1.ID, LeaseID: &c1.LeaseID}, {TaskID: c2.ID, LeaseID: &c2.LeaseID}, {TaskID: uuid.New(), LeaseID: &c2.LeaseID},
		})
	})
	require.Eventually(t, func() bool { _, n := tasks.Queued(); return n == 4 }, 10*time.Second, time.Millisecond)
	select {
	case a := <-answers:
		t.Fatalf("%s answered before its transaction committed", a.name)
	default:
	}
	require.Equal(t, "RUNNING", statusOf(t, s, first.ID), "nothing committed yet")
	close(g.release)

	got := map[string]answer{}
	for range 5 {
		a := <-answers
		got[a.name] = a
	}
	require.Equal(t, int64(2), g.runs.Load(), "the first report's transaction, then one for the four others")
	require.NoError(t, got["first"].err)
	require.NoError(t, got["a"].err)
	require.NoError(t, got["b"].err)
	var lost *task.LeaseError
	require.ErrorAs(t, got["stale"].err, &lost, "fenced on its own lease")
	require.NoError(t, got["c"].err)
	require.Len(t, got["c"].res, 3)
	require.NoError(t, got["c"].res[0].Err)
	require.NoError(t, got["c"].res[1].Err)
	require.ErrorIs(t, got["c"].res[2].Err, task.ErrNotFound)

	require.Equal(t, "DONE", statusOf(t, s, first.ID))
	require.Equal(t, "DONE", statusOf(t, s, a.ID))
	require.Equal(t, "PENDING", statusOf(t, s, b.ID), "retried after backoff")
	require.Equal(t, "RUNNING", statusOf(t, s, stale.ID))
	require.Equal(t, "DONE", statusOf(t, s, c1.ID))
	require.Equal(t, "DONE", statusOf(t, s, c2.ID))

	var payload json.RawMessage
	require.NoError(t, s.db.Get(&payload, `SELECT payload FROM watermill_taskmaster_events ORDER BY "offset" DESC LIMIT 1`))
	var env struct{ Events []event.Event }
	require.NoError(t, json.Unmarshal(payload, &env))
	require.Len(t, env.Events, 4, "a, b and c's two in one message")
	for _, e := range env.Events {
		require.Equal(t, "cid-"+e.WorkerID, e.CorrelationID)
	}
}

// failingCommit runs transactions but fails each at its commit, as a
// database that goes away (or a process killed) between the statements and
// the commit: nothing is saved, and the outcome is unknown to the caller.
type failingCommit struct {
	inner ports.TxRunner
	fail  bool
}

var errCommit = errors.New("commit lost")

func (f *failingCommit) Run(ctx context.Context, fn func(ctx context.Context, st ports.Stores) error) error {
	return f.inner.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if err := fn(ctx, st); err != nil {
			return err
		}
		if f.fail {
			return errCommit // rolls the transaction back
		}
		return nil
	})
}

// A shared transaction that does not commit answers every request in it
// with the error and saves none of them; the reports succeed when sent
// again.
func TestReportsOfAFailedSharedTransactionAreAllRefusedAndNothingSaved(t *testing.T) {
	t.Parallel()
	s := setup(t)
	ctx := t.Context()
	var vs []task.Snapshot
	for _, w := range []string{"x", "y", "z"} {
		vs = append(vs, claimed(t, s, w).Snapshot())
	}
	f := &failingCommit{inner: s.tx, fail: true}
	tasks := gatedTasksOver(f)
	errs := make(chan error, len(vs))
	for _, v := range vs {
		go func() {
			_, err := tasks.Complete(ctx, ports.CompleteCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID})
			errs <- err
		}()
	}
	for range vs {
		require.ErrorIs(t, <-errs, errCommit)
	}
	for _, v := range vs {
		require.Equal(t, "RUNNING", statusOf(t, s, v.ID))
	}
	f.fail = false
	for _, v := range vs {
		_, err := tasks.Complete(ctx, ports.CompleteCommand{TaskID: v.ID, WorkerID: v.WorkerID, LeaseID: &v.LeaseID})
		require.NoError(t, err)
		require.Equal(t, "DONE", statusOf(t, s, v.ID))
	}
}
