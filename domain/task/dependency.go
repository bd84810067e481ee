package task

import (
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/validation"
)

// Dependencies: an item of a batch submission may name (depends_on) earlier
// items of the same batch, by their ref, and existing tasks, by id. It
// starts BLOCKED while any of those parents is not DONE, becomes PENDING in
// the transaction that completes the last one (ParentsFinished), and ends
// DEAD dependency_failed as soon as one of them ends DEAD, which in turn ends
// its own dependants, recursively.
//
// Because an item may only name earlier items and tasks that already exist,
// the parents of a task always exist before it: the graph is acyclic by
// construction. A reference to the item itself or to a later one is the
// only way to write a cycle, and is refused.

// Limits on dependencies.
const (
	// MaxRefLength is the longest ref.
	MaxRefLength = 128
	// MaxDependsOn is the most parents one task may name.
	MaxDependsOn = 1000
	// MaxBatchDependencies is the most depends_on entries one batch may
	// carry in total.
	MaxBatchDependencies = 10000
)

// UnblockedReason is the reason of a task.unblocked event.
const UnblockedReason = "dependencies_done"

// DependencySpec is what a batch item says about its place in the graph.
type DependencySpec struct {
	// Ref names the item for later items' DependsOn (optional).
	Ref string
	// DependsOn lists the item's parents: refs of earlier items of the
	// batch, or ids of existing tasks.
	DependsOn []string
}

// ParentRef is one parent of a batch item: an earlier item of the batch, or
// an existing task.
type ParentRef struct {
	// Item is the index of the earlier item, or -1 for an existing task.
	Item int
	// ID is the existing task's id (uuid.Nil for an item).
	ID uuid.UUID
	// Index is the entry's place in the item's depends_on (the first, when
	// the entry repeats).
	Index int
}

// ResolveDependencies checks the refs and depends_on of a batch (specs[i]
// is item i; field names are "tasks[i].ref" and "tasks[i].depends_on[k]")
// and returns each item's parents, in depends_on order, without repeats. A
// ref must be unique in the batch, printable, and not a UUID (a UUID in
// depends_on names an existing task). A depends_on entry that names the
// item itself or a later item is a cycle (only earlier items may be named);
// one that is neither an earlier item's ref nor a UUID names nothing.
// Whether the named tasks exist is for storage to say.
func ResolveDependencies(specs []DependencySpec) ([][]ParentRef, error) {
	var v validation.Errors
	refs := make(map[string]int, len(specs))
	for i, s := range specs {
		if s.Ref == "" {
			continue
		}
		field := fmt.Sprintf("tasks[%d].ref", i)
		switch n := utf8.RuneCountInString(s.Ref); {
		case n > MaxRefLength || !validText(s.Ref):
			v.Add(field, fmt.Sprintf("must be 1 to %d printable characters", MaxRefLength))
			continue
		case isUUID(s.Ref):
			v.Add(field, "must not be a UUID: a UUID in depends_on names an existing task")
			continue
		}
		if j, ok := refs[s.Ref]; ok {
			v.Add(field, fmt.Sprintf("repeats the ref of tasks[%d]", j))
			continue
		}
		refs[s.Ref] = i
	}
	out := make([][]ParentRef, len(specs))
	total := 0
	for i, s := range specs {
		total += len(s.DependsOn)
		if len(s.DependsOn) > MaxDependsOn {
			v.Add(fmt.Sprintf("tasks[%d].depends_on", i), fmt.Sprintf("must name at most %d tasks", MaxDependsOn))
			continue
		}
		seenItem := map[int]bool{}
		seenID := map[uuid.UUID]bool{}
		for k, name := range s.DependsOn {
			field := fmt.Sprintf("tasks[%d].depends_on[%d]", i, k)
			if j, ok := refs[name]; ok {
				if j >= i {
					v.Add(field, fmt.Sprintf("names tasks[%d], which is not earlier in the batch: "+
						"a task may depend only on earlier items and existing tasks, so this would allow a cycle", j))
					continue
				}
				if !seenItem[j] {
					seenItem[j] = true
					out[i] = append(out[i], ParentRef{Item: j, Index: k})
				}
				continue
			}
			if !isUUID(name) {
				v.Add(field, "names no earlier item's ref in the batch and is not a task id")
				continue
			}
			id := uuid.MustParse(name)
			if !seenID[id] {
				seenID[id] = true
				out[i] = append(out[i], ParentRef{Item: -1, ID: id, Index: k})
			}
		}
	}
	if total > MaxBatchDependencies {
		v.Add("tasks", fmt.Sprintf("must carry at most %d depends_on entries in total", MaxBatchDependencies))
	}
	if err := v.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// isUUID reports whether s is a UUID in its 36-character textual form
// (uuid.Parse also accepts other forms, which depends_on reads as refs).
func isUUID(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// SubmitAfter creates a task that depends on parents (their statuses now, at
// least one): BLOCKED while any of them is not DONE, PENDING when all are.
// A parent already DEAD makes the task DEAD dependency_failed at once, the
// same end it would have met had it been submitted just before that parent
// died (task.submitted, then task.dead_lettered); this way the outcome of a
// pipeline does not depend on which of the two came first.
func SubmitAfter(p SubmitParams, parents []Status, now time.Time) (*Task, []event.Event, error) {
	t, e, err := Submit(p, now)
	if err != nil {
		return nil, nil, err
	}
	t.s.HasParents = true
	for _, s := range parents {
		if s != StatusDone {
			t.s.Blockers++
		}
	}
	if t.s.Blockers == 0 {
		return t, []event.Event{e}, nil
	}
	t.s.Status = StatusBlocked
	e.To = string(StatusBlocked)
	if !slices.Contains(parents, StatusDead) {
		return t, []event.Event{e}, nil
	}
	return t, []event.Event{e, t.die(event.TaskDeadLettered, DeadDependencyFailed, now)}, nil
}

// ParentsFinished passes on to a task that parents of it ended: done of
// them DONE and failed of them DEAD. A BLOCKED task with a failed parent
// ends DEAD dependency_failed; otherwise its blockers go down by done, and
// when none is left it becomes PENDING (task.unblocked). A task in any other
// status is left alone (changed false): it died already (dependency_failed,
// cancelled, deadline), or an operator retried it out of DEAD, which lets it
// run whatever its parents do.
func (t *Task) ParentsFinished(done, failed int, now time.Time) (events []event.Event, changed bool) {
	if t.s.Status != StatusBlocked || done+failed == 0 {
		return nil, false
	}
	if failed > 0 {
		return []event.Event{t.die(event.TaskDeadLettered, DeadDependencyFailed, now)}, true
	}
	t.s.Blockers = max(t.s.Blockers-done, 0)
	t.s.UpdatedAt = now
	if t.s.Blockers > 0 {
		return nil, true
	}
	e := t.event(event.TaskUnblocked, StatusBlocked, UnblockedReason, now)
	t.s.Status = StatusPending
	e.To = string(StatusPending)
	return []event.Event{e}, true
}

// AddDependant records that a task was submitted depending on this one
// (HasDependants), whatever this task's status: an unfinished task passes
// its end on to its dependants, and retention keeps a finished one while a
// dependant is unfinished (its worker may still read this task's result).
// It returns true when the flag was not set yet: storage must save it.
func (t *Task) AddDependant() bool {
	if t.s.HasDependants {
		return false
	}
	t.s.HasDependants = true
	return true
}

// Finished reports whether a transition of this task (since it was restored
// or created) moved it into DONE or DEAD: storage then passes the end on to
// its dependants, if it has any, in the same transaction.
func (t *Task) Finished() bool { return t.finished }

// HasDependants reports whether some task depends on this one (see
// Snapshot.HasDependants).
func (t *Task) HasDependants() bool { return t.s.HasDependants }

// Awaited reports whether a producer waited for the task to finish (see
// Snapshot.Awaited).
func (t *Task) Awaited() bool { return t.s.Awaited }
