package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/backoff"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// SchedulesTable holds the recurring schedules (migrations/0010).
const SchedulesTable = "schedules"

const scheduleColumns = `name, cron, timezone, task, overlap, paused, next_run_at, last_tick_at,
	last_task_id, skipped_ticks, created_at, updated_at`

type scheduleRow struct {
	Name         string        `db:"name"`
	Cron         string        `db:"cron"`
	Timezone     string        `db:"timezone"`
	Task         []byte        `db:"task"`
	Overlap      string        `db:"overlap"`
	Paused       bool          `db:"paused"`
	NextRunAt    sql.NullTime  `db:"next_run_at"`
	LastTickAt   sql.NullTime  `db:"last_tick_at"`
	LastTaskID   uuid.NullUUID `db:"last_task_id"`
	SkippedTicks int64         `db:"skipped_ticks"`
	CreatedAt    time.Time     `db:"created_at"`
	UpdatedAt    time.Time     `db:"updated_at"`
}

func (r *scheduleRow) toDomain() (*schedule.Schedule, error) {
	var tpl templateJSON
	if err := json.Unmarshal(r.Task, &tpl); err != nil {
		return nil, fmt.Errorf("schedule %s: decode task: %w", r.Name, err)
	}
	return schedule.Restore(schedule.Snapshot{
		Name: r.Name, Cron: r.Cron, Timezone: r.Timezone, Task: tpl.params(), Overlap: schedule.Overlap(r.Overlap),
		Paused: r.Paused, NextRunAt: timePtr(r.NextRunAt), LastTickAt: timePtr(r.LastTickAt), LastTaskID: r.LastTaskID.UUID,
		SkippedTicks: r.SkippedTicks, CreatedAt: r.CreatedAt, UpdatedAt: r.UpdatedAt,
	}), nil
}

// templateJSON is a schedule's task as stored: the fields of a submission a
// template may carry.
type templateJSON struct {
	Queue       string          `json:"queue"`
	Payload     json.RawMessage `json:"payload,omitempty"`
	Priority    int             `json:"priority"`
	MaxAttempts *int            `json:"max_attempts,omitempty"`
	Tags        []string        `json:"tags,omitempty"`
	UniqueKey   *string         `json:"unique_key,omitempty"`
	Retry       *retryJSON      `json:"retry,omitempty"`
	// TimeoutSeconds and Metadata: migration 0019 (absent in older rows).
	TimeoutSeconds *int              `json:"timeout_seconds,omitempty"`
	Metadata       map[string]string `json:"metadata,omitempty"`
}

type retryJSON struct {
	BaseSeconds *float64 `json:"base_seconds"`
	MaxSeconds  *float64 `json:"max_seconds,omitempty"`
	Jitter      *string  `json:"jitter,omitempty"`
}

func templateOf(p task.SubmitParams) templateJSON {
	t := templateJSON{Queue: p.Queue, Payload: p.Payload, Priority: p.Priority, MaxAttempts: p.MaxAttempts,
		Tags: p.Tags, UniqueKey: p.UniqueKey, TimeoutSeconds: p.TimeoutSeconds, Metadata: p.Metadata}
	if r := p.Retry; r != nil {
		t.Retry = &retryJSON{BaseSeconds: r.BaseSeconds, MaxSeconds: r.MaxSeconds}
		if r.Jitter != nil {
			j := string(*r.Jitter)
			t.Retry.Jitter = &j
		}
	}
	return t
}

func (t templateJSON) params() task.SubmitParams {
	p := task.SubmitParams{Queue: t.Queue, Payload: t.Payload, Priority: t.Priority, MaxAttempts: t.MaxAttempts,
		Tags: t.Tags, UniqueKey: t.UniqueKey, TimeoutSeconds: t.TimeoutSeconds, Metadata: t.Metadata}
	if r := t.Retry; r != nil {
		p.Retry = &task.RetryParams{BaseSeconds: r.BaseSeconds, MaxSeconds: r.MaxSeconds}
		if r.Jitter != nil {
			j := backoff.Jitter(*r.Jitter)
			p.Retry.Jitter = &j
		}
	}
	return p
}

// ScheduleStore implements ports.ScheduleStore on one transaction.
type ScheduleStore struct {
	st *txState
}

var _ ports.ScheduleStore = (*ScheduleStore)(nil)

// Create implements ports.ScheduleStore.
func (s *ScheduleStore) Create(ctx context.Context, fn ports.ScheduleCreateFunc) (*schedule.Schedule, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return nil, err
	}
	sc, events, err := fn(now)
	if err != nil {
		return nil, err
	}
	v := sc.Snapshot()
	tpl, err := json.Marshal(templateOf(v.Task))
	if err != nil {
		return nil, fmt.Errorf("encode schedule task: %w", err)
	}
	var row scheduleRow
	err = s.st.tx.GetContext(ctx, &row, `
		INSERT INTO `+SchedulesTable+` (name, cron, timezone, task, queue, overlap, paused, next_run_at, created_at, updated_at)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $9)
		ON CONFLICT (name) DO NOTHING
		RETURNING `+scheduleColumns,
		v.Name, v.Cron, v.Timezone, string(tpl), v.Task.Queue, string(v.Overlap), v.Paused, v.NextRunAt, v.CreatedAt)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, schedule.ErrExists
	}
	if err != nil {
		return nil, fmt.Errorf("insert schedule: %w", err)
	}
	s.st.Record(events...)
	return row.toDomain()
}

// Get implements ports.ScheduleStore.
func (s *ScheduleStore) Get(ctx context.Context, name string) (*schedule.Schedule, error) {
	if !storableText(name) {
		return nil, schedule.ErrNotFound
	}
	var row scheduleRow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+scheduleColumns+` FROM `+SchedulesTable+` WHERE name = $1`, name)
	if err != nil {
		return nil, notFound(err, schedule.ErrNotFound)
	}
	return row.toDomain()
}

// List implements ports.ScheduleStore.
func (s *ScheduleStore) List(ctx context.Context, visible []string) ([]*schedule.Schedule, error) {
	q := `SELECT ` + scheduleColumns + ` FROM ` + SchedulesTable + ` t`
	var args []any
	if visible != nil {
		exact, prefixes := queuePatterns(visible)
		args = append(args, exact, prefixes)
		q += ` WHERE ` + fmt.Sprintf(visibleQueues, 1, 2)
	}
	var rows []scheduleRow
	if err := s.st.tx.SelectContext(ctx, &rows, q+` ORDER BY name`, args...); err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return schedulesOf(rows)
}

// Update implements ports.ScheduleStore.
func (s *ScheduleStore) Update(ctx context.Context, name string, fn ports.ScheduleUpdateFunc) (*schedule.Schedule, error) {
	sc, now, err := s.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	events, err := fn(sc, now)
	if err != nil {
		return nil, err
	}
	if err := s.save(ctx, sc); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return sc, nil
}

// Delete implements ports.ScheduleStore.
func (s *ScheduleStore) Delete(ctx context.Context, name string, fn ports.ScheduleUpdateFunc) (*schedule.Schedule, error) {
	sc, now, err := s.lock(ctx, name)
	if err != nil {
		return nil, err
	}
	events, err := fn(sc, now)
	if err != nil {
		return nil, err
	}
	if _, err := s.st.tx.ExecContext(ctx, `DELETE FROM `+SchedulesTable+` WHERE name = $1`, name); err != nil {
		return nil, fmt.Errorf("delete schedule: %w", err)
	}
	s.st.Record(events...)
	return sc, nil
}

// lock loads and locks one schedule, with the transaction's now().
func (s *ScheduleStore) lock(ctx context.Context, name string) (*schedule.Schedule, time.Time, error) {
	if !storableText(name) {
		return nil, time.Time{}, schedule.ErrNotFound
	}
	var row struct {
		scheduleRow
		Now time.Time `db:"db_now"`
	}
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+scheduleColumns+`, now() AS db_now FROM `+SchedulesTable+` WHERE name = $1 FOR UPDATE`, name)
	if err != nil {
		return nil, time.Time{}, notFound(err, schedule.ErrNotFound)
	}
	s.st.setNow(row.Now)
	sc, err := row.toDomain()
	return sc, row.Now, err
}

// dueSchedulesSQL selects the due schedules (next_run_at reached; a paused
// one has none) earliest first, locked, skipping the rows other
// transactions hold, each with the status of its last task (NULL when it
// has none or it was deleted) and now(). It walks schedules_due.
var dueSchedulesSQL = `
	SELECT ` + prefixed("s.", scheduleColumns) + `, t.status AS last_status, now() AS db_now
	FROM (
		SELECT ` + scheduleColumns + ` FROM ` + SchedulesTable + `
		WHERE next_run_at IS NOT NULL AND next_run_at <= now()
		ORDER BY next_run_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	) s
	LEFT JOIN tasks t ON t.id = s.last_task_id`

// UpdateDue implements ports.ScheduleStore.
func (s *ScheduleStore) UpdateDue(ctx context.Context, limit int, fn ports.ScheduleTickFunc) ([]*schedule.Schedule, error) {
	var rows []struct {
		scheduleRow
		LastStatus sql.NullString `db:"last_status"`
		Now        time.Time      `db:"db_now"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, dueSchedulesSQL, limit); err != nil {
		return nil, fmt.Errorf("select due schedules: %w", err)
	}
	out := make([]*schedule.Schedule, 0, len(rows))
	for i := range rows {
		s.st.setNow(rows[i].Now)
		sc, err := rows[i].toDomain()
		if err != nil {
			return nil, err
		}
		events, err := fn(sc, task.Status(rows[i].LastStatus.String), rows[i].Now)
		if err != nil {
			return nil, err
		}
		if err := s.save(ctx, sc); err != nil {
			return nil, err
		}
		s.st.Record(events...)
		out = append(out, sc)
	}
	return out, nil
}

// save writes every mutable column of sc.
func (s *ScheduleStore) save(ctx context.Context, sc *schedule.Schedule) error {
	v := sc.Snapshot()
	tpl, err := json.Marshal(templateOf(v.Task))
	if err != nil {
		return fmt.Errorf("encode schedule task: %w", err)
	}
	_, err = s.st.tx.ExecContext(ctx, `
		UPDATE `+SchedulesTable+` SET cron = $2, timezone = $3, task = $4, queue = $5, overlap = $6, paused = $7,
			next_run_at = $8, last_tick_at = $9, last_task_id = $10, skipped_ticks = $11, updated_at = $12
		WHERE name = $1`,
		v.Name, v.Cron, v.Timezone, string(tpl), v.Task.Queue, string(v.Overlap), v.Paused,
		v.NextRunAt, v.LastTickAt, nullUUID(v.LastTaskID), v.SkippedTicks, v.UpdatedAt)
	if err != nil {
		return fmt.Errorf("save schedule: %w", err)
	}
	return nil
}

func schedulesOf(rows []scheduleRow) ([]*schedule.Schedule, error) {
	out := make([]*schedule.Schedule, len(rows))
	for i := range rows {
		sc, err := rows[i].toDomain()
		if err != nil {
			return nil, err
		}
		out[i] = sc
	}
	return out, nil
}
