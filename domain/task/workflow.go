package task

import (
	"bytes"
	"errors"
	"slices"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
)

// Workflows: every task belongs to a run (Snapshot.WorkflowID), its own
// unless it was created by a complete's enqueue, a spawn or a batch
// graph. Operators see, cancel and retry a run as a whole.

// ErrCancelRequested: an operator asked to cancel the task, which may not
// spawn more work (its holder should fail it).
var ErrCancelRequested = errors.New("an operator asked to cancel the task")

// CheckSpawn checks that workerID holds t under leaseID (the fence of a
// report: a *LeaseError or *TransitionError otherwise) and that t may
// spawn tasks: it has no cancel request (ErrCancelRequested). A spawn
// changes nothing of t, which stays RUNNING.
func (t *Task) CheckSpawn(workerID string, leaseID uuid.UUID) error {
	if err := t.fence(workerID, leaseID, ""); err != nil {
		return err
	}
	if t.s.CancelRequestedAt != nil {
		return ErrCancelRequested
	}
	return nil
}

// Edge is one dependency of a task: its parent and the edge's failure
// policy.
type Edge struct {
	Parent    uuid.UUID
	OnFailure OnFailure
}

// RunRetry is what an operator's retry of a run decided.
type RunRetry struct {
	// Retried are the tasks moved out of DEAD: PENDING, or BLOCKED until
	// their parents finish again, in id order.
	Retried []*Task
	// Events are their task.retried events.
	Events []event.Event
	// Skipped are the DEAD tasks left DEAD: another unfinished task holds
	// their unique key, or a parent that stays DEAD would kill them again
	// at once (fail or skip edge).
	Skipped []*Task
}

// RetryRun decides, at now, the retry of a run whose DEAD tasks are dead
// (every one of them, in any order). edges[id] are the dependencies of
// each dead task that has parents, parents the statuses of the tasks they
// name (the parents outside dead; those inside are being retried with
// it), and taken(t) reports whether another unfinished task of t's queue
// holds t's unique key.
//
// A dead task is retried unless its unique key is taken (by a task
// outside the run, or by an earlier dead task of the run with the same
// key, by id), or one of its parents stays DEAD under a fail or skip edge
// (it would die again at once): a task left DEAD that way leaves its own
// dependants DEAD too, and so on. Each retried task has its attempts
// reset, as Retry does, and starts again BLOCKED, counting the parents
// not yet resolved (the retried ones among them: they will run again), or
// PENDING when there is none. DONE tasks are never run again: a run's
// retry re-runs what failed and what failed with it.
func RetryRun(dead []*Task, edges map[uuid.UUID][]Edge, parents map[uuid.UUID]Status, taken func(*Task) bool, now time.Time) RunRetry {
	dead = slices.Clone(dead)
	slices.SortFunc(dead, func(a, b *Task) int { return bytes.Compare(a.s.ID[:], b.s.ID[:]) })
	retried := make(map[uuid.UUID]bool, len(dead))
	inRun := make(map[uuid.UUID]bool, len(dead))
	for _, t := range dead {
		inRun[t.s.ID] = true
	}
	// state is parent e as its dependant sees it once the run is retried
	// (not asked of the retried ones, which are unresolved).
	state := func(e Edge) ParentState {
		if inRun[e.Parent] {
			return ParentState{Status: StatusDead, OnFailure: e.OnFailure}
		}
		return ParentState{Status: parents[e.Parent], OnFailure: e.OnFailure}
	}
	keys := map[[2]string]bool{}
	for _, t := range dead {
		if t.s.Status != StatusDead {
			continue
		}
		if k := t.s.UniqueKey; k != "" {
			key := [2]string{t.s.Queue, k}
			if keys[key] || (taken != nil && taken(t)) {
				continue
			}
			keys[key] = true
		}
		retried[t.s.ID] = true
	}
	// Leave DEAD, until nothing changes, every task a parent that stays
	// DEAD would kill again.
	for changed := true; changed; {
		changed = false
		for _, t := range dead {
			if !retried[t.s.ID] {
				continue
			}
			for _, e := range edges[t.s.ID] {
				if retried[e.Parent] {
					continue
				}
				if state(e).kills() != "" {
					retried[t.s.ID], changed = false, true
					break
				}
			}
		}
	}
	var out RunRetry
	for _, t := range dead {
		if !retried[t.s.ID] {
			out.Skipped = append(out.Skipped, t)
			continue
		}
		blockers := 0
		for _, e := range edges[t.s.ID] {
			if retried[e.Parent] || !state(e).Resolved() {
				blockers++
			}
		}
		e, err := t.Retry(now)
		if err != nil {
			out.Skipped = append(out.Skipped, t) // not DEAD: never here
			continue
		}
		if blockers > 0 {
			t.s.Status, t.s.Blockers = StatusBlocked, blockers
			e.To = string(StatusBlocked)
		} else if t.s.HasParents {
			t.s.Blockers = 0
		}
		out.Retried = append(out.Retried, t)
		out.Events = append(out.Events, e)
	}
	return out
}
