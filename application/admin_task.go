package application

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// Retry moves a DEAD task back to PENDING with its attempts reset. The
// operator's action is audited (audit.task_retried).
func (s *TaskService) Retry(ctx context.Context, id uuid.UUID) (*task.Task, error) {
	out, err := s.update(ctx, id, (*task.Task).Retry, event.AuditTaskRetried)
	if err != nil {
		return nil, fmt.Errorf("retry task: %w", err)
	}
	return out, nil
}

// Cancel moves a PENDING task to DEAD with reason cancelled. On a RUNNING
// task it records the request: the holder learns it from its heartbeats and
// should fail the task (DEAD cancelled); if it does not, the task ends DEAD
// cancelled when the service takes it back (its lease runs out, its worker
// dies, or its heartbeat no longer lists it). The operator's action is
// audited (audit.task_cancelled).
func (s *TaskService) Cancel(ctx context.Context, id uuid.UUID) (*task.Task, error) {
	out, err := s.update(ctx, id, (*task.Task).Cancel, event.AuditTaskCancelled)
	if err != nil {
		return nil, fmt.Errorf("cancel task: %w", err)
	}
	return out, nil
}

// update applies an operator's single-event transition to a task in its own
// transaction, with the audit event of the action.
func (s *TaskService) update(ctx context.Context, id uuid.UUID, transition func(*task.Task, time.Time) (event.Event, error), audited event.Type) (*task.Task, error) {
	var out *task.Task
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Tasks.Update(ctx, id, visibleTaskFunc(ctx, func(t *task.Task, now time.Time) ([]event.Event, error) {
			e, err := transition(t, now)
			audit := event.Audit(audited, auditKeyID(ctx), now)
			audit.TaskID, audit.Queue = t.ID().String(), t.Queue()
			return []event.Event{e, audit}, err
		}))
		return err
	})
	return out, err
}
