package ports

import (
	"context"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
)

// ScheduleCreateFunc builds a new schedule at the database time now, with
// the events of its creation.
type ScheduleCreateFunc func(now time.Time) (*schedule.Schedule, []event.Event, error)

// ScheduleUpdateFunc decides a change to a loaded schedule at the database
// time now and returns its events.
type ScheduleUpdateFunc func(s *schedule.Schedule, now time.Time) ([]event.Event, error)

// ScheduleTickFunc decides a due schedule's tick at the database time now.
// last is the status of the schedule's last task ("" when it has none, or
// the task was deleted). It may create the tick's task on the same
// transaction's Stores, and returns the tick's events.
type ScheduleTickFunc func(s *schedule.Schedule, last task.Status, now time.Time) ([]event.Event, error)

// ScheduleStore persists recurring schedules.
type ScheduleStore interface {
	// Create inserts the schedule fn builds and records fn's events
	// (schedule.ErrExists when the name is taken).
	Create(ctx context.Context, fn ScheduleCreateFunc) (*schedule.Schedule, error)
	// Get loads one schedule (schedule.ErrNotFound when absent).
	Get(ctx context.Context, name string) (*schedule.Schedule, error)
	// List returns the schedules, by name. visible, when not nil, keeps
	// those whose task's queue matches one of these patterns (as
	// BulkBatchParams.Visible).
	List(ctx context.Context, visible []string) ([]*schedule.Schedule, error)
	// Update locks the schedule, lets fn decide at the database time, saves
	// it and records fn's events.
	Update(ctx context.Context, name string, fn ScheduleUpdateFunc) (*schedule.Schedule, error)
	// Delete locks the schedule, lets fn confirm at the database time (an
	// error keeps it), deletes it and records fn's events. It returns the
	// schedule as it was.
	Delete(ctx context.Context, name string, fn ScheduleUpdateFunc) (*schedule.Schedule, error)
	// UpdateDue selects at most limit schedules whose next tick has come
	// at the database time (not paused, next_run_at <= now), earliest
	// first, locking them and skipping rows other transactions hold; fn
	// decides each one's tick; each is saved and fn's events recorded. It
	// returns the schedules it handled.
	UpdateDue(ctx context.Context, limit int, fn ScheduleTickFunc) ([]*schedule.Schedule, error)
}

// ScheduleService is what operators do with recurring schedules.
type ScheduleService interface {
	// Create makes a schedule.
	Create(ctx context.Context, p schedule.CreateParams) (*schedule.Schedule, error)
	// Get returns one schedule.
	Get(ctx context.Context, name string) (*schedule.Schedule, error)
	// List returns every schedule the principal may see, by name.
	List(ctx context.Context) ([]*schedule.Schedule, error)
	// Patch changes a schedule (pause and resume included).
	Patch(ctx context.Context, name string, p schedule.PatchParams) (*schedule.Schedule, error)
	// Delete removes a schedule and returns it as it was. Tasks it created
	// stay.
	Delete(ctx context.Context, name string) (*schedule.Schedule, error)
}

// SnoozeCommand asks for a held task to go back to PENDING for later
// without spending an attempt.
type SnoozeCommand struct {
	TaskID   uuid.UUID
	WorkerID string
	// LeaseID is required: only the current lease may snooze.
	LeaseID *uuid.UUID
	// DelaySeconds is required: whole seconds, task.MinSnoozeSeconds to
	// task.MaxSnoozeSeconds.
	DelaySeconds *int
}
