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

// MaxEnqueue is the most tasks one report may enqueue: the enqueue of a
// complete, or the enqueues of all the items of a batch complete together.
const MaxEnqueue = 1000

// CompleteEnqueue completes a held task and creates cmd.Enqueue in the same
// transaction, or does neither: the atomic step from one stage of a
// pipeline to the next. The completion is fenced like Complete, so a stale
// holder's report creates nothing. The enqueued tasks are submissions like
// POST /tasks/v1's (an idempotency key that names an existing task gives
// that task), in the completed task's run; validation is all-or-nothing
// ("enqueue[3].queue"). With cmd.EnqueueGraph they may depend on each
// other and on existing tasks, the completed one included (a join: see
// createGraph). Enqueuing is producing: the principal needs the produce
// scope as well as work, and may enqueue only into queues it may use (403
// otherwise).
func (s *TaskService) CompleteEnqueue(ctx context.Context, cmd ports.CompleteCommand) (ports.Completion, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	if len(cmd.Enqueue) > MaxEnqueue {
		v.Add("enqueue", fmt.Sprintf("must hold at most %d tasks", MaxEnqueue))
	} else if err := prepareEnqueue("enqueue", cmd.Enqueue, &v); err != nil {
		return ports.Completion{}, err
	}
	parents, err := resolveGraph(&v, "enqueue", cmd.Enqueue, cmd.EnqueueGraph)
	if err != nil {
		return ports.Completion{}, err
	}
	if err := v.Err(); err != nil {
		return ports.Completion{}, err
	}
	if err := checkEnqueueAccess(ctx, cmd.Enqueue); err != nil {
		return ports.Completion{}, err
	}
	check := func(st ports.Stores) error {
		var v validation.Errors
		j := newStoredJSON(st)
		j.check(&v, "result", cmd.Result)
		j.payloads(&v, "enqueue", cmd.Enqueue)
		j.total(&v, "enqueue")
		return v.Err()
	}
	var (
		built    enqueue
		enqueued []*task.Task
	)
	decide := func(t *task.Task, now time.Time) ([]event.Event, error) {
		joinRun(cmd.Enqueue, t)
		var err error
		if built, err = buildEnqueue(cmd.Enqueue, "enqueue", now); err != nil {
			return nil, err
		}
		return completeFunc(cmd)(t, now)
	}
	then := func(ctx context.Context, st ports.Stores) error {
		var err error
		if parents != nil {
			enqueued, _, err = createGraph(ctx, st, "enqueue", cmd.Enqueue, parents)
			return err
		}
		if enqueued, err = built.create(ctx, st); err != nil {
			return err
		}
		return hideLeases(ctx, st, enqueued) // existing tasks may be RUNNING
	}
	out, err := s.updateReported(ctx, cmd.TaskID, cmd.WorkerID, check, decide, then)
	if err != nil {
		return ports.Completion{}, fmt.Errorf("complete task: %w", err)
	}
	if enqueued == nil {
		enqueued = []*task.Task{}
	}
	return ports.Completion{Task: out, Enqueued: enqueued}, nil
}

// prepareEnqueue adds to v what is wrong with the submissions ps
// ("<field>[j].queue"), fills their defaults and gives each an id.
func prepareEnqueue(field string, ps []task.SubmitParams, v *validation.Errors) error {
	for j := range ps {
		checkSingleOnly(v, fmt.Sprintf("%s[%d].", field, j), ps[j])
		if err := task.ValidateSubmit(&ps[j]); err != nil {
			v.Merge(fmt.Sprintf("%s[%d].", field, j), err.(*validation.Error))
			continue
		}
		if ps[j].ID == uuid.Nil {
			id, err := uuid.NewV7()
			if err != nil {
				return fmt.Errorf("new task id: %w", err)
			}
			ps[j].ID = id
		}
	}
	return nil
}

// resolveGraph checks the refs and depends_on of the submissions ps of a
// list (specs[j] is ps[j]'s; nil: none), adding what is wrong to v, and
// returns their parents (nil without specs).
func resolveGraph(v *validation.Errors, list string, ps []task.SubmitParams, specs []task.DependencySpec) ([][]task.ParentRef, error) {
	if specs == nil {
		return nil, nil
	}
	if len(specs) != len(ps) {
		return nil, fmt.Errorf("%s: %d dependency specs for %d tasks", list, len(specs), len(ps))
	}
	parents, err := task.ResolveDependencies(list, specs)
	if err != nil {
		v.Merge("", err.(*validation.Error))
		return nil, nil
	}
	return parents, nil
}

// joinRun puts the submissions ps in the run of t, the task that reports
// them (a complete's enqueue, a spawn).
func joinRun(ps []task.SubmitParams, t *task.Task) {
	for j := range ps {
		ps[j].WorkflowID = t.WorkflowID()
	}
}

// checkEnqueueAccess refuses an enqueue the principal may not make: it must
// hold the produce scope, and may use every queue named.
func checkEnqueueAccess(ctx context.Context, lists ...[]task.SubmitParams) error {
	p := ports.Principal(ctx)
	for _, ps := range lists {
		if len(ps) == 0 {
			continue
		}
		if err := p.Allows(apikey.ScopeProduce); err != nil {
			err.(*apikey.ForbiddenError).Reason += ": enqueuing tasks is producing them"
			return err
		}
		for _, t := range ps {
			if err := p.CheckQueue(t.Queue); err != nil {
				return err
			}
		}
	}
	return nil
}

// enqueue is the tasks a completion enqueues, built, and their events.
type enqueue struct {
	tasks  []*task.Task
	events []event.Event
}

// buildEnqueue builds the tasks ps describe at the database time now (the
// only rule left to break: a deadline already past, "<field>[j].deadline").
func buildEnqueue(ps []task.SubmitParams, field string, now time.Time) (enqueue, error) {
	out := enqueue{tasks: make([]*task.Task, 0, len(ps)), events: make([]event.Event, 0, len(ps))}
	var v validation.Errors
	for j, p := range ps {
		t, e, err := task.Submit(p, now)
		if err != nil {
			v.Merge(fmt.Sprintf("%s[%d].", field, j), asValidation(err))
			continue
		}
		out.tasks, out.events = append(out.tasks, t), append(out.events, e)
	}
	return out, v.Err()
}

// create inserts the built tasks (one statement) and returns them in order,
// the existing ones for repeated idempotency keys (whose events are not
// recorded).
func (q enqueue) create(ctx context.Context, st ports.Stores) ([]*task.Task, error) {
	if len(q.tasks) == 0 {
		return []*task.Task{}, nil
	}
	// A shared report transaction has no correlation id of its own: the
	// events carry their request's.
	cid := ports.CorrelationID(ctx)
	for k := range q.events {
		if q.events[k].CorrelationID == "" {
			q.events[k].CorrelationID = cid
		}
	}
	out, _, err := st.Tasks.CreateMany(ctx, func(time.Time) ([]*task.Task, []event.Event, error) {
		return q.tasks, q.events, nil
	})
	return out, err
}
