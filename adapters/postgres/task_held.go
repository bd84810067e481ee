package postgres

import (
	"context"
	"fmt"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// heldTasksSQL selects the tasks RUNNING under a worker ($1), in id order. It
// walks tasks_running_by_worker.
const heldTasksSQL = `
	SELECT ` + heldTaskColumns + `, now() AS db_now FROM tasks
	WHERE status = 'RUNNING' AND worker_id = $1
	ORDER BY id`

// Held implements ports.TaskStore.
func (s *TaskStore) Held(ctx context.Context, workerID string) ([]*task.Task, error) {
	rows, err := s.selectHeld(ctx, workerID, heldTasksSQL)
	if err != nil {
		return nil, err
	}
	out := make([]*task.Task, len(rows))
	for i := range rows {
		out[i] = rows[i].toDomain()
	}
	return out, nil
}

// UpdateHeld implements ports.TaskStore. The rows are locked in id order,
// like every other multi-row lock of tasks, and before the heartbeat locks
// the worker's row, like the reports that lock a task and then touch its
// worker, so the two cannot deadlock.
func (s *TaskStore) UpdateHeld(ctx context.Context, workerID string, fn ports.TaskDecideFunc) ([]*task.Task, error) {
	rows, err := s.selectHeld(ctx, workerID, heldTasksSQL+` FOR UPDATE`)
	if err != nil {
		return nil, err
	}
	now, err := s.st.nowOf(ctx, rows)
	if err != nil {
		return nil, err
	}
	out := make([]*task.Task, len(rows))
	var (
		changed []*task.Task
		events  []event.Event
	)
	for i := range rows {
		t := rows[i].toDomain()
		es, ok, err := fn(t, now)
		if err != nil {
			return nil, err
		}
		out[i] = t
		if ok {
			changed = append(changed, t)
			events = append(events, es...)
		}
	}
	if err := saveTasks(ctx, s.st, changed); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return out, nil
}

func (s *TaskStore) selectHeld(ctx context.Context, workerID, query string) ([]taskRowNow, error) {
	if !storableText(workerID) {
		return nil, nil // no worker has such an id
	}
	var rows []taskRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, query, workerID); err != nil {
		return nil, fmt.Errorf("select held tasks: %w", err)
	}
	return rows, nil
}
