package application

import (
	"context"
	"fmt"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// Describe returns one task, with its parents and those not DONE yet, read
// in one transaction. A task submitted without dependencies costs no more
// than Get.
func (s *TaskService) Describe(ctx context.Context, id uuid.UUID) (ports.TaskDetail, error) {
	var out ports.TaskDetail
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		t, err := visibleTask(ctx, st, id)
		if err != nil {
			return err
		}
		out, err = describeTask(ctx, st, t)
		return err
	})
	if err != nil {
		return ports.TaskDetail{}, fmt.Errorf("get task: %w", err)
	}
	return out, nil
}

// describeTask is the detail of t, a task the principal may see, as
// loaded in st's transaction.
func describeTask(ctx context.Context, st ports.Stores, t *task.Task) (ports.TaskDetail, error) {
	out := ports.TaskDetail{DependsOn: []uuid.UUID{}, BlockedBy: []uuid.UUID{}}
	var err error
	if out.Task, err = hideLease(ctx, st, t); err != nil {
		return out, err
	}
	if !t.Snapshot().HasParents {
		return out, nil
	}
	parents, err := st.Tasks.DependsOn(ctx, t.ID())
	if err != nil {
		return out, err
	}
	for _, p := range parents {
		out.DependsOn = append(out.DependsOn, p.ID)
		if !(task.ParentState{Status: p.Status, OnFailure: p.OnFailure}).Resolved() {
			out.BlockedBy = append(out.BlockedBy, p.ID)
		}
	}
	return out, nil
}

// Parents returns a page of the parents of a task the principal may see,
// with their results, in the order the task named them: what a worker of
// the task reads as its input (a join over 10,000 children reads ten
// pages). The parents are shown whatever their queue: the producer that
// linked them could see both (SubmitGraph), so the link is the grant. Their
// lease ids are hidden as everywhere else.
func (s *TaskService) Parents(ctx context.Context, id uuid.UUID, q ports.ParentsQuery) (ports.ParentsPage, error) {
	var v validation.Errors
	limit := optionalCount(&v, "limit", q.Limit, MaxListLimit, MaxListLimit)
	if q.After != nil && *q.After < 0 {
		v.Add("cursor", "is not a cursor this API returned")
	}
	if err := v.Err(); err != nil {
		return ports.ParentsPage{}, err
	}
	var out ports.ParentsPage
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if _, err := visibleTask(ctx, st, id); err != nil {
			return err
		}
		var err error
		if out, err = st.Tasks.Parents(ctx, id, ports.PageParams{After: q.After, Limit: limit, MaxBytes: s.cfg.maxResponseBytes()}); err != nil {
			return err
		}
		return hideLeases(ctx, st, out.Parents)
	})
	if err != nil {
		return ports.ParentsPage{}, fmt.Errorf("task parents: %w", err)
	}
	return out, nil
}

// Attempts returns every attempt of a task the principal may see, oldest
// first: those that ended, kept with the transitions that ended them, and
// the running one, read from the task, last.
func (s *TaskService) Attempts(ctx context.Context, id uuid.UUID) ([]task.Attempt, error) {
	var out []task.Attempt
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		t, err := visibleTask(ctx, st, id)
		if err != nil {
			return err
		}
		if out, err = st.Tasks.Attempts(ctx, id); err != nil {
			return err
		}
		if a, ok := t.RunningAttempt(); ok {
			out = append(out, a)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("task attempts: %w", err)
	}
	return out, nil
}

// visibleTask loads a task, which is not found when it lies in a queue the
// principal may not see.
func visibleTask(ctx context.Context, st ports.Stores, id uuid.UUID) (*task.Task, error) {
	t, err := st.Tasks.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	if !ports.Principal(ctx).QueueAllowed(t.Queue()) {
		return nil, task.ErrNotFound // never tell a key of tasks it may not see
	}
	return t, nil
}
