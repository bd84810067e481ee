package application

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/apikey"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// SubmitGraph is SubmitBatch for a batch whose items may depend on earlier
// items (by ref) and on existing tasks (by id): specs[i] is item i's ref and
// depends_on. An item with parents starts BLOCKED until they are all DONE
// (PENDING at once when they already are; DEAD dependency_failed when one is
// DEAD: task.SubmitAfter). Validation is all-or-nothing, and covers the
// graph: a reference to the item itself or to a later one (the only way to
// write a cycle), a ref that names nothing, and an id that names no task the
// principal may see are 422s naming "tasks[i].depends_on[k]". An item whose
// idempotency key names an existing task (or an earlier item) is that task,
// as it is: its depends_on is not applied, and its dependants depend on
// that task. So is, failing that, an item whose unique key an unfinished
// task of its queue holds (existing, or an earlier item of the batch that
// was created unfinished), as a plain submission's is. Everything commits
// in one transaction, which first locks the parents it names and the
// holders of its keys (in id order), so a parent cannot finish unnoticed
// while its dependants are being added, nor a holder finish while items
// are resolved to it; a key a concurrent submission took in between runs
// the transaction again (CreateGraph), which then finds the new holder.
func (s *TaskService) SubmitGraph(ctx context.Context, ps []task.SubmitParams, specs []task.DependencySpec) ([]*task.Task, []bool, error) {
	if len(specs) != len(ps) {
		return nil, nil, fmt.Errorf("submit graph: %d dependency specs for %d tasks", len(specs), len(ps))
	}
	var v validation.Errors
	if err := prepareBatch(ps, &v); err != nil {
		return nil, nil, err
	}
	parents, err := task.ResolveDependencies("tasks", specs)
	if err != nil {
		v.Merge("", err.(*validation.Error))
	}
	if err := v.Err(); err != nil {
		return nil, nil, err
	}
	if err := checkBatchQueues(ctx, ps); err != nil {
		return nil, nil, err
	}
	var (
		out     []*task.Task
		created []bool
	)
	err = s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if err := checkPayloads(st, "tasks", ps); err != nil {
			return err
		}
		var err error
		out, created, err = createGraph(ctx, st, "tasks", ps, parents)
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("submit batch: %w", err)
	}
	return out, created, nil
}

// createGraph creates, in st's transaction, the submissions ps of a list
// (a batch, a complete's enqueue, a spawn; fields "<list>[i]...") with
// their parents (task.ResolveDependencies). It first locks the existing
// parents it names and the holders of its keys, in id order (only in the
// queues the principal may see: naming another queue's task is refused,
// without waiting for or holding up that task's writers), so that a
// parent cannot finish unnoticed while its dependants are added, nor a
// holder finish while items are resolved to it. A task the transaction
// locked already (a completing or spawning task) may be named: it is
// read as the transaction left it. Items without a run join the run the
// list names (their WorkflowID), else the first new item's.
func createGraph(ctx context.Context, st ports.Stores, list string, ps []task.SubmitParams, parents [][]task.ParentRef) ([]*task.Task, []bool, error) {
	var (
		ids    []uuid.UUID
		keys   []ports.IdempotencyKey
		unique []ports.UniqueKey
	)
	seen := map[uuid.UUID]bool{}
	for i, p := range ps {
		for _, ref := range parents[i] {
			if ref.Item < 0 && !seen[ref.ID] {
				seen[ref.ID] = true
				ids = append(ids, ref.ID)
			}
		}
		if p.IdempotencyKey != "" {
			keys = append(keys, ports.IdempotencyKey{Queue: p.Queue, Key: p.IdempotencyKey})
		}
		if p.UniqueKey != nil {
			unique = append(unique, ports.UniqueKey{Queue: p.Queue, Key: *p.UniqueKey})
		}
	}
	locked, err := st.Tasks.LockTasks(ctx, ports.LockParams{IDs: ids, Keys: keys, Unique: unique,
		Visible: ports.Principal(ctx).QueuePatterns()})
	if err != nil {
		return nil, nil, err
	}
	g := newGraph(list, ps, parents, locked)
	// A shared report transaction has no correlation id of its own: the
	// events carry their request's.
	g.cid = ports.CorrelationID(ctx)
	if err := g.checkParents(ports.Principal(ctx)); err != nil {
		return nil, nil, err
	}
	stored, err := st.Tasks.CreateGraph(ctx, g.build)
	if err != nil {
		return nil, nil, err
	}
	out, created := g.results(stored)
	if err := hideLeases(ctx, st, out); err != nil { // existing tasks may be RUNNING
		return nil, nil, err
	}
	return out, created, nil
}

// graph builds a batch with dependencies.
type graph struct {
	// list names the submissions in fields ("tasks", "enqueue", ...).
	list string
	// cid is the correlation id of the request that creates them.
	cid     string
	ps      []task.SubmitParams
	parents [][]task.ParentRef
	byID    map[uuid.UUID]*task.Task
	byKey   map[ports.IdempotencyKey]*task.Task
	// byUnique: the locked unfinished holders of the batch's unique keys.
	byUnique map[ports.UniqueKey]*task.Task
	// items[i] is item i's task once built: new, or the existing one its
	// idempotency key or unique key named; created[i] says which.
	items   []*task.Task
	created []bool
}

func newGraph(list string, ps []task.SubmitParams, parents [][]task.ParentRef, locked []*task.Task) *graph {
	g := &graph{
		list: list, ps: ps, parents: parents,
		byID:     make(map[uuid.UUID]*task.Task, len(locked)),
		byKey:    make(map[ports.IdempotencyKey]*task.Task, len(locked)),
		byUnique: make(map[ports.UniqueKey]*task.Task, len(locked)),
		items:    make([]*task.Task, len(ps)),
		created:  make([]bool, len(ps)),
	}
	for _, t := range locked {
		g.byID[t.ID()] = t
		if k := t.Snapshot().IdempotencyKey; k != "" {
			g.byKey[ports.IdempotencyKey{Queue: t.Queue(), Key: k}] = t
		}
		if k := t.Snapshot().UniqueKey; k != "" && t.Status().Unfinished() {
			g.byUnique[ports.UniqueKey{Queue: t.Queue(), Key: k}] = t
		}
	}
	return g
}

// checkParents refuses ids that name no task the principal may see.
func (g *graph) checkParents(p *apikey.Key) error {
	var v validation.Errors
	for i := range g.ps {
		for _, ref := range g.parents[i] {
			if ref.Item >= 0 {
				continue
			}
			if t, ok := g.byID[ref.ID]; !ok || !p.QueueAllowed(t.Queue()) {
				v.Add(fmt.Sprintf("%s[%d].depends_on[%d]", g.list, i, ref.Index), "names no task")
			}
		}
	}
	return v.Err()
}

// build decides every item at the database time now, in batch order, so
// that each item's parents are decided before it.
func (g *graph) build(now time.Time) (ports.TaskGraph, error) {
	var (
		out       ports.TaskGraph
		v         validation.Errors
		newKeys   = map[ports.IdempotencyKey]*task.Task{}
		newUnique = map[ports.UniqueKey]*task.Task{}
		// run is the list's run: the one it names, else its first new
		// task's.
		run uuid.UUID
	)
	for _, p := range g.ps {
		if p.WorkflowID != uuid.Nil {
			run = p.WorkflowID
			break
		}
	}
	for i, p := range g.ps {
		if t := g.holder(p, newKeys, newUnique); t != nil {
			g.items[i] = t
			continue
		}
		if p.WorkflowID == uuid.Nil {
			if run == uuid.Nil {
				run = p.ID
			}
			p.WorkflowID = run
		}
		parents := make([]*task.Task, len(g.parents[i]))
		states := make([]task.ParentState, len(parents))
		for j, ref := range g.parents[i] {
			if ref.Item >= 0 {
				parents[j] = g.items[ref.Item]
			} else {
				parents[j] = g.byID[ref.ID]
			}
			if parents[j] == nil { // an earlier item that failed validation
				continue
			}
			states[j] = task.ParentState{Status: parents[j].Status(), OnFailure: ref.OnFailure}
		}
		var (
			t      *task.Task
			events []event.Event
			err    error
		)
		if len(parents) == 0 {
			var e event.Event
			t, e, err = task.Submit(p, now)
			events = []event.Event{e}
		} else {
			t, events, err = task.SubmitAfter(p, states, now)
		}
		if err != nil {
			// Only rules that need the database time can fail here (a
			// deadline already past).
			v.Merge(fmt.Sprintf("%s[%d].", g.list, i), asValidation(err))
			continue
		}
		for k := range events {
			if events[k].CorrelationID == "" {
				events[k].CorrelationID = g.cid
			}
		}
		g.items[i], g.created[i] = t, true
		if p.IdempotencyKey != "" {
			newKeys[ports.IdempotencyKey{Queue: p.Queue, Key: p.IdempotencyKey}] = t
		}
		if p.UniqueKey != nil && t.Status().Unfinished() { // born DEAD, it holds nothing
			newUnique[ports.UniqueKey{Queue: p.Queue, Key: *p.UniqueKey}] = t
		}
		out.Tasks = append(out.Tasks, t)
		out.Events = append(out.Events, events...)
		for j, ref := range g.parents[i] {
			parent := parents[j]
			if parent == nil {
				continue
			}
			out.Dependencies = append(out.Dependencies, ports.Dependency{Parent: parent.ID(), Child: t.ID(), Position: ref.Index, OnFailure: ref.OnFailure})
			if parent.AddDependant() && !g.isNew(parent) {
				out.Dependants = append(out.Dependants, parent.ID())
			}
		}
	}
	if err := v.Err(); err != nil {
		return ports.TaskGraph{}, err
	}
	return out, nil
}

// holder returns the task that item p is, when its keys name one (in the
// order a plain submission looks them up): the task with its
// idempotency key, existing or new in this batch, else the unfinished
// holder of its unique key, existing or new in this batch; else nil.
func (g *graph) holder(p task.SubmitParams, newKeys map[ports.IdempotencyKey]*task.Task, newUnique map[ports.UniqueKey]*task.Task) *task.Task {
	if p.IdempotencyKey != "" {
		k := ports.IdempotencyKey{Queue: p.Queue, Key: p.IdempotencyKey}
		if t := g.byKey[k]; t != nil {
			return t
		}
		if t := newKeys[k]; t != nil {
			return t
		}
	}
	if p.UniqueKey != nil {
		k := ports.UniqueKey{Queue: p.Queue, Key: *p.UniqueKey}
		if t := g.byUnique[k]; t != nil {
			return t
		}
		if t := newUnique[k]; t != nil {
			return t
		}
	}
	return nil
}

// isNew reports whether t is one of the batch's new tasks (every existing
// task it involves was locked, so is in byID).
func (g *graph) isNew(t *task.Task) bool {
	_, existing := g.byID[t.ID()]
	return !existing
}

// results are the batch's tasks in request order, the new ones as stored.
func (g *graph) results(stored []*task.Task) ([]*task.Task, []bool) {
	byID := make(map[uuid.UUID]*task.Task, len(stored))
	for _, t := range stored {
		byID[t.ID()] = t
	}
	out := make([]*task.Task, len(g.items))
	for i, t := range g.items {
		if s, ok := byID[t.ID()]; ok {
			out[i] = s
		} else {
			out[i] = t
		}
	}
	return out, g.created
}
