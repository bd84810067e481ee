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

// Dependencies: an item of a batch submission (or of a complete's enqueue,
// or of a spawn) may name (depends_on) earlier items of the same list, by
// their ref, and existing tasks, by id. It starts BLOCKED while any of
// those parents is unresolved, becomes PENDING in the transaction that
// resolves the last one (ParentsFinished), and, as soon as one of them ends
// DEAD, ends as that edge's failure policy says: DEAD dependency_failed
// (fail, the default), DEAD dependency_skipped (skip), or not at all
// (ignore: the parent counts as resolved). A dependant that dies passes
// its end on to its own dependants, recursively.
//
// Because an item may only name earlier items and tasks that already exist,
// the parents of a task always exist before it: the graph is acyclic by
// construction. A reference to the item itself or to a later one is the
// only way to write a cycle, and is refused.

// Limits on dependencies.
const (
	// MaxRefLength is the longest ref.
	MaxRefLength = 128
	// MaxDependsOn is the most parents one task may name: a join over
	// the children of ten spawns of 1,000.
	MaxDependsOn = 10000
	// MaxBatchDependencies is the most depends_on entries one request may
	// carry in total.
	MaxBatchDependencies = 10000
)

// UnblockedReason is the reason of a task.unblocked event.
const UnblockedReason = "dependencies_done"

// OnFailure is what a parent ending DEAD means for a dependant: the
// failure policy of one dependency (one edge).
type OnFailure string

const (
	// OnFailureFail (the default): the dependant ends DEAD
	// dependency_failed.
	OnFailureFail OnFailure = "fail"
	// OnFailureIgnore: the parent counts as finished; the dependant runs
	// once its other parents allow it, and sees the parent's status and
	// dead reason among its parents.
	OnFailureIgnore OnFailure = "ignore"
	// OnFailureSkip: the dependant ends DEAD dependency_skipped, as a
	// cancelled task does: it was not run, which is not a failure.
	OnFailureSkip OnFailure = "skip"
)

// OnFailures lists every failure policy, in the order the API documents
// them.
var OnFailures = []OnFailure{OnFailureFail, OnFailureIgnore, OnFailureSkip}

// Valid reports whether o is a failure policy ("" is not: absent means
// OnFailureFail, which callers fill in).
func (o OnFailure) Valid() bool { return slices.Contains(OnFailures, o) }

// How a depends_on entry names its parent (DependsOn.As).
const (
	// NameEither: a plain string, an earlier item's ref when one has it,
	// else an existing task's id.
	NameEither = ""
	// NameRef: {"ref": ...}, an earlier item's ref only.
	NameRef = "ref"
	// NameID: {"id": ...}, an existing task's id only.
	NameID = "id"
)

// DependsOn is one entry of an item's depends_on.
type DependsOn struct {
	// Name names the parent (see As).
	Name string
	// As is NameEither, NameRef or NameID.
	As string
	// OnFailure is the edge's failure policy ("" is OnFailureFail).
	OnFailure OnFailure
}

// Plain returns depends_on entries naming each of names as a plain string
// would, with the default failure policy.
func Plain(names ...string) []DependsOn {
	out := make([]DependsOn, len(names))
	for i, n := range names {
		out[i] = DependsOn{Name: n}
	}
	return out
}

// DependencySpec is what a batch item says about its place in the graph.
type DependencySpec struct {
	// Ref names the item for later items' DependsOn (optional).
	Ref string
	// DependsOn lists the item's parents: refs of earlier items of the
	// batch, or ids of existing tasks.
	DependsOn []DependsOn
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
	// OnFailure is the edge's failure policy (never "").
	OnFailure OnFailure
}

// ResolveDependencies checks the refs and depends_on of a list of
// submissions (specs[i] is item i; field names are "<list>[i].ref" and
// "<list>[i].depends_on[k]") and returns each item's parents, in depends_on
// order, without repeats. A ref must be unique in the list, printable, and
// not a UUID (a UUID in depends_on names an existing task). A depends_on
// entry that names the item itself or a later item is a cycle (only earlier
// items may be named); one that is neither an earlier item's ref nor a UUID
// names nothing; one that repeats a parent with another failure policy is
// ambiguous. Whether the named tasks exist is for storage to say.
func ResolveDependencies(list string, specs []DependencySpec) ([][]ParentRef, error) {
	var v validation.Errors
	refs := make(map[string]int, len(specs))
	for i, s := range specs {
		if s.Ref == "" {
			continue
		}
		field := fmt.Sprintf("%s[%d].ref", list, i)
		switch n := utf8.RuneCountInString(s.Ref); {
		case n > MaxRefLength || !validText(s.Ref):
			v.Add(field, fmt.Sprintf("must be 1 to %d printable characters", MaxRefLength))
			continue
		case isUUID(s.Ref):
			v.Add(field, "must not be a UUID: a UUID in depends_on names an existing task")
			continue
		}
		if j, ok := refs[s.Ref]; ok {
			v.Add(field, fmt.Sprintf("repeats the ref of %s[%d]", list, j))
			continue
		}
		refs[s.Ref] = i
	}
	out := make([][]ParentRef, len(specs))
	total := 0
	for i, s := range specs {
		total += len(s.DependsOn)
		if len(s.DependsOn) > MaxDependsOn {
			v.Add(fmt.Sprintf("%s[%d].depends_on", list, i), fmt.Sprintf("must name at most %d tasks", MaxDependsOn))
			continue
		}
		seenItem := map[int]int{}
		seenID := map[uuid.UUID]int{}
		for k, d := range s.DependsOn {
			field := fmt.Sprintf("%s[%d].depends_on[%d]", list, i, k)
			policy := d.OnFailure
			if policy == "" {
				policy = OnFailureFail
			}
			if !policy.Valid() {
				v.Add(field+".on_failure", "must be fail, ignore or skip")
				continue
			}
			// repeat records parent p (an item, or an id) once, refusing
			// a repeat that asks for another policy.
			repeat := func(at int, seen bool) bool {
				if !seen {
					return false
				}
				if prev := out[i][at]; prev.OnFailure != policy {
					v.Add(field, fmt.Sprintf("repeats depends_on[%d] with another on_failure (%s, not %s)", prev.Index, prev.OnFailure, policy))
				}
				return true
			}
			if j, ok := refs[d.Name]; ok && d.As != NameID {
				if j >= i {
					v.Add(field, fmt.Sprintf("names %s[%d], which is not earlier in the list: "+
						"a task may depend only on earlier items and existing tasks, so this would allow a cycle", list, j))
					continue
				}
				at, seen := seenItem[j]
				if !repeat(at, seen) {
					seenItem[j] = len(out[i])
					out[i] = append(out[i], ParentRef{Item: j, Index: k, OnFailure: policy})
				}
				continue
			}
			switch {
			case d.As == NameRef:
				v.Add(field, "names no earlier item's ref in the list")
				continue
			case !isUUID(d.Name) && d.As == NameID:
				v.Add(field, "is not a task id")
				continue
			case !isUUID(d.Name):
				v.Add(field, "names no earlier item's ref in the list and is not a task id")
				continue
			}
			id := uuid.MustParse(d.Name)
			at, seen := seenID[id]
			if !repeat(at, seen) {
				seenID[id] = len(out[i])
				out[i] = append(out[i], ParentRef{Item: -1, ID: id, Index: k, OnFailure: policy})
			}
		}
	}
	if total > MaxBatchDependencies {
		v.Add(list, fmt.Sprintf("must carry at most %d depends_on entries in total", MaxBatchDependencies))
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

// ParentState is a parent as a dependant sees it: its status, and the
// failure policy of the edge between them.
type ParentState struct {
	Status    Status
	OnFailure OnFailure
}

// Resolved reports whether the parent no longer holds its dependant
// back: it is DONE, or DEAD under an ignore edge.
func (p ParentState) Resolved() bool {
	return p.Status == StatusDone || (p.Status == StatusDead && p.OnFailure == OnFailureIgnore)
}

// kills returns the end a parent's state imposes on its dependant: a DEAD
// parent under a fail edge kills it dependency_failed, under a skip edge
// dependency_skipped; otherwise "".
func (p ParentState) kills() DeadReason {
	if p.Status != StatusDead {
		return ""
	}
	switch p.OnFailure {
	case OnFailureIgnore:
		return ""
	case OnFailureSkip:
		return DeadDependencySkipped
	default:
		return DeadDependencyFailed
	}
}

// SubmitAfter creates a task that depends on parents (their states now, at
// least one): BLOCKED while any of them is unresolved (not DONE, nor DEAD
// under an ignore edge), PENDING when all are resolved. A parent already
// DEAD under a fail edge makes the task DEAD dependency_failed at once,
// under a skip edge DEAD dependency_skipped (fail wins when both apply):
// the end it would have met had it been submitted just before that parent
// died (task.submitted, then task.dead_lettered); this way the outcome of
// a pipeline does not depend on which of the two came first.
func SubmitAfter(p SubmitParams, parents []ParentState, now time.Time) (*Task, []event.Event, error) {
	t, e, err := Submit(p, now)
	if err != nil {
		return nil, nil, err
	}
	t.s.HasParents = true
	var end DeadReason
	for _, ps := range parents {
		if !ps.Resolved() {
			t.s.Blockers++
		}
		if k := ps.kills(); k == DeadDependencyFailed || (k != "" && end == "") {
			end = k
		}
	}
	if t.s.Blockers == 0 {
		return t, []event.Event{e}, nil
	}
	t.s.Status = StatusBlocked
	e.To = string(StatusBlocked)
	if end == "" {
		return t, []event.Event{e}, nil
	}
	return t, []event.Event{e, t.die(event.TaskDeadLettered, end, now)}, nil
}

// ParentEnds counts how parents of a task ended in one transaction.
type ParentEnds struct {
	// Done counts the parents that ended DONE.
	Done int
	// Failed, Skipped and Ignored count those that ended DEAD, by the
	// failure policy of their edge (fail, skip, ignore).
	Failed, Skipped, Ignored int
}

// ParentsFinished passes on to a task that parents of it ended (see
// ParentEnds). A BLOCKED task with a parent DEAD under a fail edge ends
// DEAD dependency_failed; failing that, with one DEAD under a skip edge,
// DEAD dependency_skipped; otherwise its blockers go down by the parents
// DONE and those DEAD under an ignore edge, and when none is left it
// becomes PENDING (task.unblocked). A task in any other status is left
// alone (changed false): it died already (dependency_failed, cancelled,
// deadline), or an operator retried it out of DEAD, which lets it run
// whatever its parents do.
func (t *Task) ParentsFinished(ends ParentEnds, now time.Time) (events []event.Event, changed bool) {
	if t.s.Status != StatusBlocked || ends == (ParentEnds{}) {
		return nil, false
	}
	switch {
	case ends.Failed > 0:
		return []event.Event{t.die(event.TaskDeadLettered, DeadDependencyFailed, now)}, true
	case ends.Skipped > 0:
		return []event.Event{t.die(event.TaskDeadLettered, DeadDependencySkipped, now)}, true
	}
	t.s.Blockers = max(t.s.Blockers-ends.Done-ends.Ignored, 0)
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
