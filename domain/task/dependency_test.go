package task_test

import (
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
)

var (
	parentA = uuid.MustParse("44444444-4444-4444-8444-444444444444")
	parentB = uuid.MustParse("55555555-5555-4555-8555-555555555555")
)

func TestResolveDependencies(t *testing.T) {
	t.Parallel()
	item := func(i, k int) task.ParentRef { return task.ParentRef{Item: i, Index: k, OnFailure: task.OnFailureFail} }
	existing := func(id uuid.UUID, k int) task.ParentRef {
		return task.ParentRef{Item: -1, ID: id, Index: k, OnFailure: task.OnFailureFail}
	}
	cases := []struct {
		name  string
		specs []task.DependencySpec
		want  [][]task.ParentRef
	}{
		{
			name:  "no dependencies",
			specs: []task.DependencySpec{{}, {Ref: "a"}},
			want:  [][]task.ParentRef{nil, nil},
		},
		{
			name: "a diamond of earlier items, in depends_on order",
			specs: []task.DependencySpec{
				{Ref: "root"},
				{Ref: "left", DependsOn: task.Plain("root")},
				{Ref: "right", DependsOn: task.Plain("root")},
				{DependsOn: task.Plain("right", "left")},
			},
			want: [][]task.ParentRef{nil, {item(0, 0)}, {item(0, 0)}, {item(2, 0), item(1, 1)}},
		},
		{
			name: "existing tasks by id, mixed with items; repeats are dropped",
			specs: []task.DependencySpec{
				{Ref: "fetch"},
				{DependsOn: task.Plain(parentA.String(), "fetch", parentA.String(), "fetch", strings.ToUpper(parentB.String()))},
			},
			want: [][]task.ParentRef{nil, {existing(parentA, 0), item(0, 1), existing(parentB, 4)}},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := task.ResolveDependencies("tasks", c.specs)
			require.NoError(t, err)
			require.Equal(t, c.want, got)
		})
	}
}

func TestResolveDependenciesRefusals(t *testing.T) {
	t.Parallel()
	many := make([]string, task.MaxDependsOn+1)
	for i := range many {
		many[i] = uuid.NewString()
	}
	cases := []struct {
		name   string
		specs  []task.DependencySpec
		fields []string
		says   string
	}{
		{
			name:   "a self reference is a cycle",
			specs:  []task.DependencySpec{{Ref: "a", DependsOn: task.Plain("a")}},
			fields: []string{"tasks[0].depends_on[0]"}, says: "cycle",
		},
		{
			name:   "a forward reference is a cycle",
			specs:  []task.DependencySpec{{Ref: "a", DependsOn: task.Plain("b")}, {Ref: "b", DependsOn: task.Plain("a")}},
			fields: []string{"tasks[0].depends_on[0]"}, says: "not earlier in the list",
		},
		{
			name:   "an unknown ref",
			specs:  []task.DependencySpec{{Ref: "a"}, {DependsOn: task.Plain("a", "nope")}},
			fields: []string{"tasks[1].depends_on[1]"}, says: "names no earlier item",
		},
		{
			name:   "a UUID in another form is not an id",
			specs:  []task.DependencySpec{{DependsOn: task.Plain("{"+parentA.String()+"}", strings.ReplaceAll(parentA.String(), "-", ""))}},
			fields: []string{"tasks[0].depends_on[0]", "tasks[0].depends_on[1]"}, says: "is not a task id",
		},
		{
			name:   "a repeated ref",
			specs:  []task.DependencySpec{{Ref: "a"}, {Ref: "a"}},
			fields: []string{"tasks[1].ref"}, says: "repeats the ref of tasks[0]",
		},
		{
			name:   "a ref that is a UUID",
			specs:  []task.DependencySpec{{Ref: parentA.String()}},
			fields: []string{"tasks[0].ref"}, says: "must not be a UUID",
		},
		{
			name:   "a ref too long or unprintable",
			specs:  []task.DependencySpec{{Ref: strings.Repeat("r", task.MaxRefLength+1)}, {Ref: "a\nb"}},
			fields: []string{"tasks[0].ref", "tasks[1].ref"}, says: "printable",
		},
		{
			name:   "too many parents for one task",
			specs:  []task.DependencySpec{{DependsOn: task.Plain(many...)}},
			fields: []string{"tasks[0].depends_on", "tasks"}, says: "at most 10000",
		},
		{
			name: "too many depends_on entries in one batch",
			specs: func() []task.DependencySpec {
				out := make([]task.DependencySpec, 11)
				for i := range out {
					out[i].DependsOn = task.Plain(many[:1000]...)
				}
				return out
			}(),
			fields: []string{"tasks"}, says: "at most 10000",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := task.ResolveDependencies("tasks", c.specs)
			require.Nil(t, got)
			var verr *validation.Error
			require.ErrorAs(t, err, &verr)
			require.Equal(t, c.fields, fields(verr))
			require.Contains(t, verr.Error(), c.says)
		})
	}
}

// ps are parent states under edges of policy o.
func ps(o task.OnFailure, statuses ...task.Status) []task.ParentState {
	out := make([]task.ParentState, len(statuses))
	for i, st := range statuses {
		out[i] = task.ParentState{Status: st, OnFailure: o}
	}
	return out
}

func TestSubmitAfter(t *testing.T) {
	t.Parallel()
	params := func() task.SubmitParams { return task.SubmitParams{ID: taskID, Queue: "emails"} }
	submitted := func(to task.Status) event.Event {
		return taskEvent(event.TaskSubmitted, "", to, "", 0, "", base)
	}
	died := func(reason string) event.Event {
		e := taskEvent(event.TaskDeadLettered, task.StatusBlocked, task.StatusDead, reason, 0, "", base)
		e.EndToEndSeconds = secs(0)
		return e
	}
	fail, ignore, skip := task.OnFailureFail, task.OnFailureIgnore, task.OnFailureSkip
	cases := []struct {
		name     string
		parents  []task.ParentState
		status   task.Status
		reason   task.DeadReason
		blockers int
		events   []event.Event
	}{
		{
			name: "every parent DONE: PENDING at once", parents: ps(fail, task.StatusDone, task.StatusDone),
			status: task.StatusPending, events: []event.Event{submitted(task.StatusPending)},
		},
		{
			name:    "parents not yet DONE block it, each counted",
			parents: ps(fail, task.StatusDone, task.StatusPending, task.StatusRunning, task.StatusBlocked),
			status:  task.StatusBlocked, blockers: 3, events: []event.Event{submitted(task.StatusBlocked)},
		},
		{
			name:    "a parent already DEAD: DEAD dependency_failed, as if it had died just after",
			parents: ps(fail, task.StatusPending, task.StatusDead),
			status:  task.StatusDead, reason: task.DeadDependencyFailed, blockers: 2,
			events: []event.Event{submitted(task.StatusBlocked), died("dependency_failed")},
		},
		{
			name:    "a parent DEAD under an ignore edge is resolved: PENDING once the others are DONE",
			parents: append(ps(ignore, task.StatusDead), ps(fail, task.StatusDone)...),
			status:  task.StatusPending, events: []event.Event{submitted(task.StatusPending)},
		},
		{
			name:    "an ignore edge to an unfinished parent blocks like any",
			parents: append(ps(ignore, task.StatusRunning, task.StatusDead), ps(fail, task.StatusPending)...),
			status:  task.StatusBlocked, blockers: 2, events: []event.Event{submitted(task.StatusBlocked)},
		},
		{
			name:    "a parent DEAD under a skip edge: DEAD dependency_skipped",
			parents: append(ps(skip, task.StatusDead), ps(fail, task.StatusPending)...),
			status:  task.StatusDead, reason: task.DeadDependencySkipped, blockers: 2,
			events: []event.Event{submitted(task.StatusBlocked), died("dependency_skipped")},
		},
		{
			name:    "a mixed fan-in: fail wins over skip, ignore counts for nothing",
			parents: append(append(ps(skip, task.StatusDead), ps(ignore, task.StatusDead)...), ps(fail, task.StatusDead)...),
			status:  task.StatusDead, reason: task.DeadDependencyFailed, blockers: 2,
			events: []event.Event{submitted(task.StatusBlocked), died("dependency_failed")},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk, events, err := task.SubmitAfter(params(), c.parents, base)
			require.NoError(t, err)
			s := tk.Snapshot()
			require.Equal(t, c.status, s.Status)
			require.True(t, s.HasParents)
			require.Equal(t, c.blockers, s.Blockers)
			require.Equal(t, c.events, events)
			require.Equal(t, c.status == task.StatusDead, tk.Finished())
			require.Equal(t, c.reason, s.DeadReason)
			if c.status == task.StatusDead {
				require.Equal(t, &base, s.FinishedAt)
			}
			_, ended := tk.EndedAttempt()
			require.False(t, ended, "a new task has no attempt to end")
		})
	}
	_, _, err := task.SubmitAfter(task.SubmitParams{ID: taskID, Queue: ""}, ps(fail, task.StatusDone), base)
	var verr *validation.Error
	require.ErrorAs(t, err, &verr)
	require.Equal(t, []string{"queue"}, fields(verr))
}

func TestParentsFinished(t *testing.T) {
	t.Parallel()
	now := at(time.Minute)
	withBlockers := func(n int) task.Snapshot {
		s := blocked()
		s.Blockers = n
		return s
	}
	died := func(reason task.DeadReason) (func(s *task.Snapshot), []event.Event) {
		e := taskEvent(event.TaskDeadLettered, task.StatusBlocked, task.StatusDead, string(reason), 0, "", now)
		e.EndToEndSeconds = secs(60)
		return func(s *task.Snapshot) { endRun(s, task.StatusDead, reason, now) }, []event.Event{e}
	}
	failedWant, failedEvents := died(task.DeadDependencyFailed)
	skippedWant, skippedEvents := died(task.DeadDependencySkipped)
	unblocked := []event.Event{taskEvent(event.TaskUnblocked, task.StatusBlocked, task.StatusPending, "dependencies_done", 0, "", now)}
	cases := []struct {
		name    string
		start   task.Snapshot
		ends    task.ParentEnds
		changed bool
		want    func(s *task.Snapshot)
		events  []event.Event
	}{
		{
			name: "one of two parents done: one blocker left, no event", start: withBlockers(2), ends: task.ParentEnds{Done: 1}, changed: true,
			want: func(s *task.Snapshot) { s.Blockers, s.UpdatedAt = 1, now },
		},
		{
			name: "the last parent done: PENDING, task.unblocked", start: withBlockers(1), ends: task.ParentEnds{Done: 1}, changed: true,
			want:   func(s *task.Snapshot) { s.Status, s.Blockers, s.UpdatedAt = task.StatusPending, 0, now },
			events: unblocked,
		},
		{
			name: "several parents done at once (a batch report)", start: withBlockers(3), ends: task.ParentEnds{Done: 3}, changed: true,
			want:   func(s *task.Snapshot) { s.Status, s.Blockers, s.UpdatedAt = task.StatusPending, 0, now },
			events: unblocked,
		},
		{
			name: "a parent DEAD under an ignore edge counts down like a DONE one", start: withBlockers(2),
			ends: task.ParentEnds{Done: 1, Ignored: 1}, changed: true,
			want:   func(s *task.Snapshot) { s.Status, s.Blockers, s.UpdatedAt = task.StatusPending, 0, now },
			events: unblocked,
		},
		{
			name: "a parent DEAD: DEAD dependency_failed", start: withBlockers(2), ends: task.ParentEnds{Failed: 1}, changed: true,
			want: failedWant, events: failedEvents,
		},
		{
			name: "a parent DEAD under a skip edge: DEAD dependency_skipped", start: withBlockers(2), ends: task.ParentEnds{Skipped: 1}, changed: true,
			want: skippedWant, events: skippedEvents,
		},
		{
			name: "a parent DEAD wins over others done in the same transaction", start: withBlockers(2),
			ends: task.ParentEnds{Done: 1, Failed: 1}, changed: true, want: failedWant, events: failedEvents,
		},
		{
			name: "a mixed fan-in: fail wins over skip and ignore", start: withBlockers(3),
			ends: task.ParentEnds{Failed: 1, Skipped: 1, Ignored: 1}, changed: true, want: failedWant, events: failedEvents,
		},
		{
			name: "skip wins over ignore and done", start: withBlockers(3),
			ends: task.ParentEnds{Done: 1, Skipped: 1, Ignored: 1}, changed: true, want: skippedWant, events: skippedEvents,
		},
		{name: "nothing finished: unchanged", start: withBlockers(2), want: func(*task.Snapshot) {}},
		{name: "already DEAD (another parent failed): unchanged", start: dead(), ends: task.ParentEnds{Done: 1}, want: func(*task.Snapshot) {}},
		{name: "already DEAD: a second failure changes nothing", start: dead(), ends: task.ParentEnds{Failed: 1}, want: func(*task.Snapshot) {}},
		{name: "retried out of DEAD by an operator, PENDING: unchanged", start: pending(), ends: task.ParentEnds{Done: 1}, want: func(*task.Snapshot) {}},
		{name: "RUNNING: unchanged", start: running(1), ends: task.ParentEnds{Failed: 1}, want: func(*task.Snapshot) {}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			tk := task.Restore(c.start)
			events, changed := tk.ParentsFinished(c.ends, now)
			require.Equal(t, c.changed, changed)
			require.Equal(t, c.events, events)
			want := task.Restore(c.start).Snapshot()
			c.want(&want)
			require.Equal(t, want, tk.Snapshot())
			require.Equal(t, want.Status == task.StatusDead && c.changed, tk.Finished())
		})
	}
}

// A task gains dependants whatever its status (retention keeps a finished
// parent while a dependant is unfinished); the first time says the flag
// must be saved, later times do not.
func TestAddDependant(t *testing.T) {
	t.Parallel()
	for _, status := range allStatuses {
		tk := task.Restore(snapshotIn(status))
		require.True(t, tk.AddDependant(), status)
		require.True(t, tk.Snapshot().HasDependants, status)
		require.False(t, tk.AddDependant(), "%s: already marked", status)
		require.True(t, tk.Snapshot().HasDependants, status)
	}
}

// Every transition into DONE or DEAD says so (storage then passes the end
// on to the task's dependants); the others do not.
func TestFinished(t *testing.T) {
	t.Parallel()
	for _, op := range operations {
		for _, status := range op.accepts {
			start := snapshotIn(status)
			start.Deadline = ptr(at(time.Minute))
			if op.name == "Claim" {
				start.Deadline = nil
			}
			tk := task.Restore(start)
			require.False(t, tk.Finished())
			ev, err := op.call(tk)
			require.NoError(t, err, "%s from %s", op.name, status)
			terminal := ev.To == string(task.StatusDone) || ev.To == string(task.StatusDead)
			require.Equal(t, terminal, tk.Finished(), "%s from %s", op.name, status)
		}
	}
}

// Every way out of RUNNING ends the running attempt, with one of the
// listed outcomes; no other transition ends one.
func TestEveryExitFromRunningEndsTheAttempt(t *testing.T) {
	t.Parallel()
	for _, op := range operations {
		for _, status := range op.accepts {
			for _, start := range []task.Snapshot{snapshotIn(status), cancelRequested(1)} {
				if start.Status != status {
					continue
				}
				start.Deadline = ptr(at(time.Minute))
				if op.name == "Claim" {
					start.Deadline = nil
				}
				tk := task.Restore(start)
				ev, err := op.call(tk)
				require.NoError(t, err)
				a, ended := tk.EndedAttempt()
				leaves := status == task.StatusRunning && ev.To != string(task.StatusRunning)
				require.Equal(t, leaves, ended, "%s from %s", op.name, status)
				if ended {
					require.Contains(t, task.Outcomes, a.Outcome, "%s from %s", op.name, status)
					require.Equal(t, start.Attempts, a.Number)
					require.Equal(t, *start.ClaimedAt, a.ClaimedAt)
					require.NotNil(t, a.FinishedAt)
				}
			}
		}
	}
}

func TestRunningAttempt(t *testing.T) {
	t.Parallel()
	a, ok := task.Restore(running(2)).RunningAttempt()
	require.True(t, ok)
	require.Equal(t, task.Attempt{TaskID: taskID, Number: 2, WorkerID: holder, ClaimedAt: at(5 * time.Second)}, a)
	for _, status := range []task.Status{task.StatusPending, task.StatusDone, task.StatusDead, task.StatusBlocked} {
		_, ok := task.Restore(snapshotIn(status)).RunningAttempt()
		require.False(t, ok, status)
	}
	require.Equal(t, []task.Outcome{"completed", "failed", "lease_expired", "orphaned", "worker_dead", "cancelled", "snoozed", "released", "timed_out"}, task.Outcomes)
}
