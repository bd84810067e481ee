package application

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// Await returns the task with its dependencies (as Describe) once it is
// DONE or DEAD, or as it is when cmd.WaitMillis have passed (or the
// caller went away); a task already finished, or a wait of 0, answers at
// once. The waiter holds no database connection while it waits: it
// subscribes to the task's end (TaskNotifier.WaitFinished), then marks the
// task awaited, so that the transaction that finishes it, on any instance,
// announces the end when it commits; it looks again when woken, and at the
// safety interval (Config.AwaitSafetyInterval; the waiters of an instance
// look together, with one statement). Without a notifier it polls
// (Config.ClaimPollInterval).
func (s *TaskService) Await(ctx context.Context, cmd ports.AwaitCommand) (ports.TaskDetail, error) {
	wait, err := awaitDuration(cmd.WaitMillis)
	if err != nil {
		return ports.TaskDetail{}, err
	}
	if wait == 0 {
		return s.Describe(ctx, cmd.TaskID)
	}
	return s.await(ctx, cmd.TaskID, time.Now().Add(wait), false)
}

// SubmitAndAwait submits a task (as Submit: created false when a key named
// an existing task) and returns it as Await does. A wait that is out of
// range is refused before anything is submitted. A new task is stored
// awaited (no second write to mark it).
func (s *TaskService) SubmitAndAwait(ctx context.Context, p task.SubmitParams, waitMillis *int64) (*task.Task, bool, error) {
	wait, err := awaitDuration(waitMillis)
	if err != nil {
		return nil, false, err
	}
	deadline := time.Now().Add(wait)
	p.Awaited = wait > 0
	t, created, err := s.Submit(ctx, p)
	if err != nil || wait == 0 || !t.Status().Unfinished() {
		return t, created, err
	}
	d, err := s.await(ctx, t.ID(), deadline, true)
	if err != nil {
		return nil, false, err
	}
	return d.Task, created, nil
}

// awaitDuration validates a wait in milliseconds (absent: 0).
func awaitDuration(ms *int64) (time.Duration, error) {
	if ms == nil {
		return 0, nil
	}
	if *ms < 0 || *ms > MaxAwait.Milliseconds() {
		var v validation.Errors
		v.Add("wait_ms", fmt.Sprintf("must be between 0 and %d", MaxAwait.Milliseconds()))
		return 0, v.Err()
	}
	return time.Duration(*ms) * time.Millisecond, nil
}

// await waits until deadline for task id to finish and describes it then.
// marked says the task was stored awaited already.
func (s *TaskService) await(ctx context.Context, id uuid.UUID, deadline time.Time, marked bool) (ports.TaskDetail, error) {
	var sub ports.FinishWait
	if s.notifier != nil {
		// Subscribe before marking and reading: an end committed after
		// the read is announced to this subscription.
		sub = s.notifier.WaitFinished(id)
		defer sub.Close()
	}
	d, err := s.describeAwaited(ctx, id, !marked && sub != nil)
	if err != nil || !d.Task.Status().Unfinished() {
		return d, err
	}
	end := time.NewTimer(time.Until(deadline))
	defer end.Stop()
	for {
		var (
			wake <-chan struct{}
			next time.Duration
		)
		if sub != nil {
			wake = sub.C()
			// Every waiter of the instance at the same instants: their
			// checks share a statement.
			next = s.cfg.AwaitSafetyInterval - time.Duration(time.Now().UnixNano()%int64(s.cfg.AwaitSafetyInterval))
		} else {
			next = s.cfg.ClaimPollInterval
		}
		check := time.NewTimer(next)
		select {
		case _, open := <-wake:
			check.Stop()
			if !open { // shutting down: answer with the task as it is
				return s.Describe(ctx, id)
			}
			// An end was announced (or announcements may have been lost).
			if d, err = s.Describe(ctx, id); err != nil || !d.Task.Status().Unfinished() {
				return d, err
			}
		case <-check.C:
			finished, err := s.finished.do(ctx, id)
			if err != nil {
				return ports.TaskDetail{}, fmt.Errorf("await task: %w", err)
			}
			if finished {
				return s.Describe(ctx, id)
			}
		case <-end.C:
			check.Stop()
			return s.Describe(ctx, id)
		case <-ctx.Done():
			check.Stop()
			return ports.TaskDetail{}, fmt.Errorf("await task: %w", ctx.Err())
		}
	}
}

// describeAwaited describes the task (as Describe, visibility included)
// and, when mark is set and the task is unfinished, marks it awaited
// first, in the same transaction.
func (s *TaskService) describeAwaited(ctx context.Context, id uuid.UUID, mark bool) (ports.TaskDetail, error) {
	if !mark {
		return s.Describe(ctx, id)
	}
	var out ports.TaskDetail
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		t, err := visibleTask(ctx, st, id)
		if err != nil {
			return err
		}
		if t.Status().Unfinished() && !t.Awaited() {
			if t, err = st.Tasks.MarkAwaited(ctx, id); err != nil {
				return err
			}
		}
		out, err = describeTask(ctx, st, t)
		return err
	})
	if err != nil {
		return ports.TaskDetail{}, fmt.Errorf("await task: %w", err)
	}
	return out, nil
}

// finishedBatch reads, with one statement, whether each waiter's task is
// finished (DONE, DEAD) or gone.
func (s *TaskService) finishedBatch(ctx context.Context, batch []*pending[uuid.UUID, bool]) error {
	ids := make([]uuid.UUID, len(batch))
	for i, p := range batch {
		ids[i] = p.req
	}
	var statuses map[uuid.UUID]task.Status
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		statuses, err = st.Tasks.Statuses(ctx, ids)
		return err
	})
	if err != nil {
		return err
	}
	for _, p := range batch {
		status, ok := statuses[p.req]
		p.res = !ok || !status.Unfinished()
	}
	return nil
}
