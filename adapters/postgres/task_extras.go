package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// Metadata, progress and the awaited flag (migrations/0019).

// metadataJSON encodes metadata for the metadata column (NULL: none).
func metadataJSON(m map[string]string) any {
	if len(m) == 0 {
		return nil
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil // a map of strings always encodes
	}
	return string(b)
}

// metadataOf decodes the metadata column (nil: none). Only string values
// are metadata; the API writes nothing else.
func metadataOf(raw []byte) map[string]string {
	if len(raw) == 0 {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil || len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		if s, ok := v.(string); ok {
			out[k] = s
		}
	}
	return out
}

// progressColumn is the progress column's JSON.
type progressColumn struct {
	Percent   float64         `json:"percent"`
	Message   string          `json:"message"`
	Details   json.RawMessage `json:"details,omitempty"`
	UpdatedAt time.Time       `json:"updated_at"`
	EventAt   *time.Time      `json:"event_at,omitempty"`
}

// progressJSON encodes p for the progress column (NULL: none).
func progressJSON(p *task.Progress) (sql.NullString, error) {
	if p == nil {
		return sql.NullString{}, nil
	}
	c := progressColumn{Percent: p.Percent, Message: p.Message, Details: p.Details, UpdatedAt: p.UpdatedAt.UTC()}
	if !p.EventAt.IsZero() {
		e := p.EventAt.UTC()
		c.EventAt = &e
	}
	b, err := json.Marshal(c)
	if err != nil {
		return sql.NullString{}, fmt.Errorf("encode progress: %w", err)
	}
	return sql.NullString{String: string(b), Valid: true}, nil
}

// progressOf decodes the progress column (nil: none).
func progressOf(raw []byte) *task.Progress {
	if len(raw) == 0 {
		return nil
	}
	var c progressColumn
	if err := json.Unmarshal(raw, &c); err != nil {
		return nil
	}
	p := &task.Progress{Percent: c.Percent, Message: c.Message, Details: c.Details, UpdatedAt: c.UpdatedAt}
	if c.EventAt != nil {
		p.EventAt = *c.EventAt
	}
	return p
}

// saveProgressSQL writes the progress of tasks ($1, $2: ids and progress
// JSON texts).
const saveProgressSQL = `
	UPDATE tasks t SET progress = u.progress::jsonb
	FROM unnest($1::uuid[], $2::text[]) AS u(id, progress)
	WHERE t.id = u.id`

// saveProgress writes the progress of the tasks whose progress changed, with
// one statement (none when none did). Progress is not among the columns the
// other saves write, so that reports and renewals of the tasks that never
// report any pay nothing for it.
func saveProgress(ctx context.Context, st *txState, ts []*task.Task) error {
	var ids, texts pq.StringArray
	for _, t := range ts {
		if !t.ProgressChanged() {
			continue
		}
		p, err := progressJSON(t.Snapshot().Progress)
		if err != nil {
			return err
		}
		ids, texts = append(ids, t.ID().String()), append(texts, p.String)
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := st.tx.ExecContext(ctx, saveProgressSQL, ids, texts); err != nil {
		return fmt.Errorf("save progress: %w", err)
	}
	return nil
}

// lockTasksByIDSQL locks the tasks $1 in id order.
var lockTasksByIDSQL = `
	SELECT ` + taskColumns + `, now() AS db_now FROM tasks WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`

// UpdateProgress implements ports.TaskStore: the tasks are locked in id
// order, fn decides each, and only the progress of the changed ones is
// written (one statement).
func (s *TaskStore) UpdateProgress(ctx context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out, changed, events, err := s.decideEach(ctx, ids, fn, func(before task.Snapshot, t *task.Task) error {
		if after := t.Snapshot(); after.Status != before.Status || after.LeaseID != before.LeaseID {
			return fmt.Errorf("update progress of task %s: only progress may change", t.ID())
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := saveProgress(ctx, s.st, changed); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return out, nil
}

// MarkAwaited implements ports.TaskStore: it sets the awaited flag of the
// task when it is unfinished and the flag is not set yet (a write only for
// the first waiter), then reads the task. A transaction that finishes the
// task either committed before the update (which then finds it finished
// and sets nothing; the read sees it finished) or locked the row after it
// and reads the flag set: it announces the end.
func (s *TaskStore) MarkAwaited(ctx context.Context, id uuid.UUID) (*task.Task, error) {
	if _, err := s.st.tx.ExecContext(ctx, `
		UPDATE tasks SET awaited = true
		WHERE id = $1 AND NOT awaited AND status IN `+unfinishedSQL, id); err != nil {
		return nil, fmt.Errorf("mark awaited: %w", err)
	}
	return s.Get(ctx, id)
}

// Statuses implements ports.TaskStore. It walks the primary key.
func (s *TaskStore) Statuses(ctx context.Context, ids []uuid.UUID) (map[uuid.UUID]task.Status, error) {
	var rows []struct {
		ID     uuid.UUID `db:"id"`
		Status string    `db:"status"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, `SELECT id, status FROM tasks WHERE id = ANY($1::uuid[])`, uuidArray(ids)); err != nil {
		return nil, fmt.Errorf("select task statuses: %w", err)
	}
	out := make(map[uuid.UUID]task.Status, len(rows))
	for _, r := range rows {
		out[r.ID] = task.Status(r.Status)
	}
	return out, nil
}

// timedOutUnderSQL returns, of the tasks $1, those whose last attempt
// under worker $2 ended timed_out. It walks the primary key of
// task_attempts by task.
const timedOutUnderSQL = `
	SELECT task_id FROM (
		SELECT DISTINCT ON (a.task_id) a.task_id, a.outcome FROM task_attempts a
		WHERE a.task_id = ANY($1::uuid[]) AND a.worker_id = $2
		ORDER BY a.task_id, a.seq DESC
	) last
	WHERE outcome = 'timed_out'`

// TimedOutUnder implements ports.TaskStore.
func (s *TaskStore) TimedOutUnder(ctx context.Context, workerID string, ids []uuid.UUID) ([]uuid.UUID, error) {
	if len(ids) == 0 || !storableText(workerID) {
		return nil, nil
	}
	var out []uuid.UUID
	if err := s.st.tx.SelectContext(ctx, &out, timedOutUnderSQL, uuidArray(ids), workerID); err != nil {
		return nil, fmt.Errorf("select timed-out attempts: %w", err)
	}
	return out, nil
}
