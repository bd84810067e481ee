package task_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// depends_on entries written as objects name their parent as a ref or an
// id only, and carry the edge's failure policy; plain strings keep fail.
func TestResolveDependenciesFailurePolicies(t *testing.T) {
	t.Parallel()
	got, err := task.ResolveDependencies("enqueue", []task.DependencySpec{
		{Ref: "a"},
		{Ref: "b"},
		{DependsOn: []task.DependsOn{
			{Name: "a", As: task.NameRef, OnFailure: task.OnFailureIgnore},
			{Name: "b"},
			{Name: parentA.String(), As: task.NameID, OnFailure: task.OnFailureSkip},
			{Name: parentA.String(), As: task.NameID, OnFailure: task.OnFailureSkip}, // the same again: dropped
		}},
	})
	require.NoError(t, err)
	require.Equal(t, [][]task.ParentRef{nil, nil, {
		{Item: 0, Index: 0, OnFailure: task.OnFailureIgnore},
		{Item: 1, Index: 1, OnFailure: task.OnFailureFail},
		{Item: -1, ID: parentA, Index: 2, OnFailure: task.OnFailureSkip},
	}}, got)

	_, err = task.ResolveDependencies("spawn", []task.DependencySpec{
		{Ref: "a"},
		{DependsOn: []task.DependsOn{
			{Name: "a", OnFailure: "maybe"},
			{Name: parentA.String(), As: task.NameRef},
			{Name: "a", As: task.NameID},
			{Name: "a", OnFailure: task.OnFailureSkip},
			{Name: "a", OnFailure: task.OnFailureIgnore},
		}},
	})
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	require.Equal(t, []string{"spawn[1].depends_on[0].on_failure", "spawn[1].depends_on[1]", "spawn[1].depends_on[2]",
		"spawn[1].depends_on[4]"}, fields(verr))
	require.Contains(t, verr.Error(), "repeats depends_on[3] with another on_failure")
}

// A spawn is fenced like a report and refused to a task an operator asked
// to cancel; it changes nothing of the task.
func TestCheckSpawn(t *testing.T) {
	t.Parallel()
	tk := task.Restore(running(1))
	require.NoError(t, tk.CheckSpawn(holder, leaseID))
	require.Equal(t, running(1), tk.Snapshot())
	require.ErrorIs(t, tk.CheckSpawn(holder, uuid.New()), task.ErrLeaseLost)
	require.ErrorIs(t, tk.CheckSpawn("someone-else", leaseID), task.ErrLeaseLost)
	require.ErrorIs(t, task.Restore(cancelRequested(1)).CheckSpawn(holder, leaseID), task.ErrCancelRequested)
	var terr *task.TransitionError
	require.ErrorAs(t, task.Restore(done()).CheckSpawn(holder, leaseID), &terr)
	require.ErrorIs(t, task.Restore(pending()).CheckSpawn(holder, leaseID), task.ErrLeaseLost)
}

// A task is its own run unless it joins one; its events name the run only
// then, and the filter selects by run.
func TestWorkflowID(t *testing.T) {
	t.Parallel()
	alone, e, err := task.Submit(task.SubmitParams{ID: taskID, Queue: "q"}, base)
	require.NoError(t, err)
	require.Equal(t, taskID, alone.WorkflowID())
	require.Empty(t, e.WorkflowID)
	require.Equal(t, taskID, task.Restore(task.Snapshot{ID: taskID}).WorkflowID(), "stored NULL reads as the task's own id")

	run := uuid.MustParse("66666666-6666-4666-8666-666666666666")
	joined, e, err := task.Submit(task.SubmitParams{ID: parentA, Queue: "q", WorkflowID: run}, base)
	require.NoError(t, err)
	require.Equal(t, run, joined.WorkflowID())
	require.Equal(t, run.String(), e.WorkflowID)
	claimed, err := joined.Claim(task.ClaimParams{WorkerID: holder, LeaseID: leaseID, LeaseSeconds: 60}, base)
	require.NoError(t, err)
	require.Equal(t, run.String(), claimed.WorkflowID, "every event of the task names its run")

	require.True(t, task.Filter{WorkflowID: run}.Matches(joined))
	require.False(t, task.Filter{WorkflowID: run}.Matches(alone))
	require.True(t, task.Filter{WorkflowID: taskID}.Matches(alone), "a run's first task is in it")
	require.Equal(t, map[string]string{"workflow_id": run.String()}, task.Filter{WorkflowID: run}.Fields())
}

func TestRetryRun(t *testing.T) {
	t.Parallel()
	now := at(time.Hour)
	id := func(n byte) uuid.UUID { return uuid.UUID{15: n, 6: 0x70, 8: 0x80} }
	deadTask := func(n byte, reason task.DeadReason, parents bool) *task.Task {
		s := dead()
		s.ID, s.WorkflowID, s.DeadReason, s.HasParents = id(n), id(1), reason, parents
		return task.Restore(s)
	}
	// A run: 1 (DONE) -> 2 (DEAD exhausted) -> 3 (dependency_failed) -> 4
	// (dependency_failed); 2 -> 5 under ignore (DONE: it ran); 6 (DEAD,
	// unique key taken) -> 7 (dependency_failed); 8 (DEAD) depends on an
	// outside parent that stays DEAD under skip; 9 depends on 2 and on a
	// RUNNING outside parent.
	outsideDead, outsideRunning := uuid.New(), uuid.New()
	six := dead()
	six.ID, six.UniqueKey = id(6), "k"
	dead := []*task.Task{
		deadTask(4, task.DeadDependencyFailed, true), deadTask(2, task.DeadExhausted, true), deadTask(3, task.DeadDependencyFailed, true),
		task.Restore(six), deadTask(7, task.DeadDependencyFailed, true), deadTask(8, task.DeadNonRetryable, true),
		deadTask(9, task.DeadDependencyFailed, true),
	}
	edges := map[uuid.UUID][]task.Edge{
		id(2): {{Parent: id(1), OnFailure: task.OnFailureFail}},
		id(3): {{Parent: id(2), OnFailure: task.OnFailureFail}},
		id(4): {{Parent: id(3), OnFailure: task.OnFailureSkip}},
		id(7): {{Parent: id(6), OnFailure: task.OnFailureFail}},
		id(8): {{Parent: outsideDead, OnFailure: task.OnFailureSkip}},
		id(9): {{Parent: id(2), OnFailure: task.OnFailureIgnore}, {Parent: outsideRunning, OnFailure: task.OnFailureFail}},
	}
	parents := map[uuid.UUID]task.Status{id(1): task.StatusDone, outsideDead: task.StatusDead, outsideRunning: task.StatusRunning}
	taken := func(t *task.Task) bool { return t.Snapshot().UniqueKey == "k" }
	got := task.RetryRun(dead, edges, parents, taken, now)

	status := map[uuid.UUID]task.Status{}
	blockers := map[uuid.UUID]int{}
	for _, tk := range got.Retried {
		s := tk.Snapshot()
		status[s.ID], blockers[s.ID] = s.Status, s.Blockers
		require.Zero(t, s.Attempts)
		require.Empty(t, s.DeadReason)
		require.Nil(t, s.FinishedAt)
	}
	require.Equal(t, map[uuid.UUID]task.Status{
		id(2): task.StatusPending, id(3): task.StatusBlocked, id(4): task.StatusBlocked, id(9): task.StatusBlocked,
	}, status)
	require.Equal(t, map[uuid.UUID]int{id(2): 0, id(3): 1, id(4): 1, id(9): 2}, blockers)
	var skipped []uuid.UUID
	for _, tk := range got.Skipped {
		skipped = append(skipped, tk.ID())
		require.Equal(t, task.StatusDead, tk.Status())
	}
	require.Equal(t, []uuid.UUID{id(6), id(7), id(8)}, skipped, "a taken key, its dependant, a parent that stays DEAD")
	require.Len(t, got.Events, 4)
	for i, e := range got.Events {
		require.Equal(t, event.TaskRetried, e.Type)
		require.Equal(t, "DEAD", e.From)
		require.Equal(t, string(got.Retried[i].Status()), e.To)
		require.Equal(t, "retried", e.Reason)
		require.Equal(t, id(1).String(), e.WorkflowID)
	}

	// A retried task blocked again is unblocked by its parent's end, as
	// any: the counting machinery is the same.
	three := got.Retried[1]
	require.Equal(t, id(3), three.ID())
	events, changed := three.ParentsFinished(task.ParentEnds{Done: 1}, now)
	require.True(t, changed)
	require.Equal(t, task.StatusPending, three.Status())
	require.Len(t, events, 1)
}

func TestDebounce(t *testing.T) {
	t.Parallel()
	key := "digest:7"
	params := func(payload string, seconds int, maxSeconds *int) task.SubmitParams {
		return task.SubmitParams{ID: taskID, Queue: "q", UniqueKey: &key, Payload: json.RawMessage(payload),
			Debounce: &task.DebounceParams{Seconds: seconds, MaxSeconds: maxSeconds}}
	}
	first, e, err := task.Submit(params(`1`, 10, ptr(30)), base)
	require.NoError(t, err)
	s := first.Snapshot()
	require.Equal(t, at(10*time.Second), s.RunAt, "the first submission waits its debounce")
	require.Equal(t, ptr(at(30*time.Second)), s.DebounceUntil)
	require.Equal(t, event.TaskSubmitted, e.Type)

	p := params(`2`, 10, nil)
	require.NoError(t, task.ValidateSubmit(&p))
	require.Equal(t, 100, *p.Debounce.MaxSeconds, "the bound defaults to ten windows")
	e, changed := first.Debounce(p, at(5*time.Second))
	require.True(t, changed)
	s = first.Snapshot()
	require.Equal(t, json.RawMessage(`2`), s.Payload)
	require.Equal(t, at(15*time.Second), s.RunAt, "pushed on")
	require.Equal(t, event.TaskDebounced, e.Type)
	require.Equal(t, "PENDING", e.From)
	require.Equal(t, "PENDING", e.To)
	require.Equal(t, "debounced", e.Reason)
	require.Equal(t, secs(10), e.DelaySeconds)

	// A submission that started earlier but was served later never moves
	// run_at back; the bound of the first submission caps it.
	_, changed = first.Debounce(params(`3`, 10, ptr(30)), at(2*time.Second))
	require.True(t, changed)
	require.Equal(t, at(15*time.Second), first.Snapshot().RunAt)
	require.Equal(t, json.RawMessage(`3`), first.Snapshot().Payload, "the last served wins")
	_, changed = first.Debounce(params(`4`, 10, ptr(30)), at(25*time.Second))
	require.True(t, changed)
	require.Equal(t, at(30*time.Second), first.Snapshot().RunAt, "bounded by the first submission's max")

	// A holder that is not PENDING is answered as it is.
	for _, st := range []task.Snapshot{running(1), blocked()} {
		tk := task.Restore(st)
		_, changed := tk.Debounce(params(`5`, 10, ptr(30)), at(time.Minute))
		require.False(t, changed)
		require.Equal(t, task.Restore(st).Snapshot(), tk.Snapshot())
	}
	// A PENDING holder submitted without debounce is bounded from its
	// creation.
	plain := task.Restore(pending())
	_, changed = plain.Debounce(params(`6`, 60, ptr(90)), at(time.Minute))
	require.True(t, changed)
	require.Equal(t, at(90*time.Second), plain.Snapshot().RunAt)

	// Refusals.
	bad := []struct {
		p      task.SubmitParams
		fields []string
	}{
		{task.SubmitParams{Queue: "q", Debounce: &task.DebounceParams{Seconds: 5}}, []string{"debounce_seconds"}},
		{task.SubmitParams{Queue: "q", UniqueKey: &key, Debounce: &task.DebounceParams{Seconds: 0}}, []string{"debounce_seconds"}},
		{task.SubmitParams{Queue: "q", UniqueKey: &key, Debounce: &task.DebounceParams{Seconds: 10, MaxSeconds: ptr(5)}}, []string{"debounce_max_seconds"}},
		{task.SubmitParams{Queue: "q", UniqueKey: &key, RunAt: ptr(base), Debounce: &task.DebounceParams{Seconds: 10}}, []string{"run_at"}},
		{task.SubmitParams{Queue: "q", ThrottleSeconds: ptr(5)}, []string{"throttle_seconds"}},
		{task.SubmitParams{Queue: "q", UniqueKey: &key, ThrottleSeconds: ptr(task.MaxWindowSeconds + 1)}, []string{"throttle_seconds"}},
	}
	for _, b := range bad {
		err := task.ValidateSubmit(&b.p)
		var verr *validation.Error
		require.ErrorAs(t, err, &verr)
		require.Equal(t, b.fields, fields(verr))
	}
}

func TestThrottles(t *testing.T) {
	t.Parallel()
	finished := done() // at base+15s
	require.True(t, task.Restore(finished).Throttles(10, at(24*time.Second)))
	require.False(t, task.Restore(finished).Throttles(10, at(25*time.Second)), "the window is over")
	require.True(t, task.Restore(dead()).Throttles(10, at(20*time.Second)), "DEAD counts too")
	for _, st := range []task.Snapshot{pending(), running(1), blocked()} {
		require.False(t, task.Restore(st).Throttles(10, base))
	}
}

func TestReplay(t *testing.T) {
	t.Parallel()
	now := at(time.Hour)
	newID := uuid.MustParse("77777777-7777-4777-8777-777777777777")
	orig := dead()
	orig.Metadata = map[string]string{"tenant": "acme"}
	orig.TimeoutSeconds = 30
	orig.IdempotencyKey = "order-1"
	orig.Deadline = ptr(at(time.Minute))
	orig.Trace = task.Trace{Parent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}
	orig.WorkflowID = parentB
	tk, e, err := task.Replay(task.Restore(orig), task.ReplayParams{ID: newID}, now)
	require.NoError(t, err)
	s := tk.Snapshot()
	require.Equal(t, task.StatusPending, s.Status)
	require.Equal(t, orig.Queue, s.Queue)
	require.Equal(t, orig.Payload, s.Payload)
	require.Equal(t, orig.Priority, s.Priority)
	require.Equal(t, orig.Tags, s.Tags)
	require.Equal(t, orig.MaxAttempts, s.MaxAttempts)
	require.Equal(t, orig.Metadata, s.Metadata)
	require.Equal(t, 30, s.TimeoutSeconds)
	require.Equal(t, orig.Trace, s.Trace)
	require.Equal(t, taskID, s.ReplayOf)
	require.Equal(t, newID, s.WorkflowID, "a run of its own")
	require.Empty(t, s.IdempotencyKey)
	require.Nil(t, s.Deadline)
	require.Zero(t, s.Attempts)
	require.Equal(t, now, s.RunAt)
	require.Equal(t, taskID.String(), e.ReplayOf)
	require.Equal(t, event.TaskSubmitted, e.Type)

	trace := task.Trace{Parent: "00-11111111111111111111111111111111-2222222222222222-01"}
	tk, _, err = task.Replay(task.Restore(done()), task.ReplayParams{
		ID: newID, Payload: json.RawMessage(`{"again":true}`), Priority: ptr(9), Tags: []string{}, Metadata: map[string]string{},
		Trace: trace,
	}, now)
	require.NoError(t, err)
	s = tk.Snapshot()
	require.Equal(t, json.RawMessage(`{"again":true}`), s.Payload)
	require.Equal(t, 9, s.Priority)
	require.Empty(t, s.Tags)
	require.Empty(t, s.Metadata)
	require.Equal(t, trace, s.Trace)

	for _, st := range []task.Snapshot{pending(), running(1), blocked()} {
		_, _, err := task.Replay(task.Restore(st), task.ReplayParams{ID: newID}, now)
		var rerr *task.ReplayError
		require.ErrorAs(t, err, &rerr)
		require.Equal(t, st.Status, rerr.Status)
	}
	_, _, err = task.Replay(task.Restore(done()), task.ReplayParams{ID: newID, MaxAttempts: ptr(0)}, now)
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	require.Equal(t, []string{"max_attempts"}, fields(verr))
}
