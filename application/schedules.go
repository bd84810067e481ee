package application

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/schedule"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// ScheduleService implements ports.ScheduleService. Every change is one
// transaction with its audit event (audit.schedule_*), naming the acting
// key.
type ScheduleService struct {
	tx    ports.TxRunner
	parse schedule.ParseFunc
}

var _ ports.ScheduleService = (*ScheduleService)(nil)

// NewScheduleService returns the schedule use cases over tx; parse reads
// cron expressions (adapters/cron.Parse).
func NewScheduleService(tx ports.TxRunner, parse schedule.ParseFunc) *ScheduleService {
	return &ScheduleService{tx: tx, parse: parse}
}

// scheduleAudit is the audit event of an action on s.
func scheduleAudit(ctx context.Context, typ event.Type, s *schedule.Schedule, now time.Time) event.Event {
	e := event.Audit(typ, auditKeyID(ctx), now)
	e.Schedule, e.Queue = s.Name(), s.Queue()
	return e
}

// Create makes a schedule; its first tick is the expression's first after
// now.
func (s *ScheduleService) Create(ctx context.Context, p schedule.CreateParams) (*schedule.Schedule, error) {
	if err := ports.Principal(ctx).CheckQueue(p.Task.Queue); err != nil && task.ValidQueue(p.Task.Queue) {
		return nil, err
	}
	var out *schedule.Schedule
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var v validation.Errors
		checkJSON(&v, st, "task.payload", p.Task.Payload)
		if err := v.Err(); err != nil {
			return err
		}
		var err error
		out, err = st.Schedules.Create(ctx, func(now time.Time) (*schedule.Schedule, []event.Event, error) {
			sc, err := schedule.Create(p, s.parse, now)
			if err != nil {
				return nil, nil, err
			}
			return sc, []event.Event{scheduleAudit(ctx, event.AuditScheduleCreated, sc, now)}, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("create schedule: %w", err)
	}
	return out, nil
}

// Get returns one schedule; a schedule of a queue the principal may not
// use is not found.
func (s *ScheduleService) Get(ctx context.Context, name string) (*schedule.Schedule, error) {
	var out *schedule.Schedule
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Schedules.Get(ctx, name)
		return err
	})
	if err == nil && !ports.Principal(ctx).QueueAllowed(out.Queue()) {
		err = schedule.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("get schedule: %w", err)
	}
	return out, nil
}

// List returns the schedules of the queues the principal may use, by name.
func (s *ScheduleService) List(ctx context.Context) ([]*schedule.Schedule, error) {
	var out []*schedule.Schedule
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Schedules.List(ctx, ports.Principal(ctx).QueuePatterns())
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	return out, nil
}

// Patch changes a schedule: its expression, zone, task or overlap
// (audit.schedule_updated), and pauses or resumes it
// (audit.schedule_paused, audit.schedule_resumed).
func (s *ScheduleService) Patch(ctx context.Context, name string, p schedule.PatchParams) (*schedule.Schedule, error) {
	principal := ports.Principal(ctx)
	if p.Task != nil && task.ValidQueue(p.Task.Queue) {
		if err := principal.CheckQueue(p.Task.Queue); err != nil {
			return nil, err
		}
	}
	var out *schedule.Schedule
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		if p.Task != nil {
			var v validation.Errors
			checkJSON(&v, st, "task.payload", p.Task.Payload)
			if err := v.Err(); err != nil {
				return err
			}
		}
		var err error
		out, err = st.Schedules.Update(ctx, name, func(sc *schedule.Schedule, now time.Time) ([]event.Event, error) {
			if !principal.QueueAllowed(sc.Queue()) {
				return nil, schedule.ErrNotFound
			}
			c, err := sc.Patch(p, s.parse, now)
			if err != nil {
				return nil, err
			}
			var events []event.Event
			if c.Updated {
				events = append(events, scheduleAudit(ctx, event.AuditScheduleUpdated, sc, now))
			}
			if c.Paused {
				events = append(events, scheduleAudit(ctx, event.AuditSchedulePaused, sc, now))
			}
			if c.Resumed {
				events = append(events, scheduleAudit(ctx, event.AuditScheduleResumed, sc, now))
			}
			return events, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("update schedule: %w", err)
	}
	return out, nil
}

// Delete removes a schedule (audit.schedule_deleted). The tasks it made
// stay; a tick in progress on another instance either committed before
// (its task exists) or finds the schedule gone.
func (s *ScheduleService) Delete(ctx context.Context, name string) (*schedule.Schedule, error) {
	principal := ports.Principal(ctx)
	var out *schedule.Schedule
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Schedules.Delete(ctx, name, func(sc *schedule.Schedule, now time.Time) ([]event.Event, error) {
			if !principal.QueueAllowed(sc.Queue()) {
				return nil, schedule.ErrNotFound
			}
			return []event.Event{scheduleAudit(ctx, event.AuditScheduleDeleted, sc, now)}, nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("delete schedule: %w", err)
	}
	return out, nil
}

// DefaultSchedulerBatchSize is how many due schedules one scheduler
// transaction ticks.
const DefaultSchedulerBatchSize = 100

// SchedulerReport is what one scheduler cycle did.
type SchedulerReport struct {
	// Created counts ticks that created their task.
	Created int
	// Skipped counts due ticks that created none (overlap, unique key).
	Skipped int
}

// Idle reports whether the cycle ticked nothing.
func (r SchedulerReport) Idle() bool { return r.Created == 0 && r.Skipped == 0 }

// Fields are the cycle's counts, for its log line.
func (r SchedulerReport) Fields() []zap.Field {
	return []zap.Field{zap.Int("ticks_created", r.Created), zap.Int("ticks_skipped", r.Skipped)}
}

// Scheduler runs the due ticks of the recurring schedules: a background
// job, led by one instance at a time. Each batch is one transaction (fenced
// by the leader's term, like every background job's) that locks the due
// schedules, creates each tick's task marked with the schedule and the tick
// (schedule.Schedule.TickTask) or skips the tick, and advances the
// schedules' next tick, so a tick's task and the schedule's advance commit
// together or not at all. A former leader's transaction fails its fence;
// two instances ticking at once (no leadership) lock different schedules,
// and the mark's unique index would turn a repeat into the same task: each
// tick creates one task. Only the scheduler marks tasks, so no task a
// producer submits is taken for a tick's.
type Scheduler struct {
	tx    ports.TxRunner
	parse schedule.ParseFunc
	batch int
}

// NewScheduler returns the scheduler over tx; batchSize bounds the
// schedules of one transaction (DefaultSchedulerBatchSize when 0).
func NewScheduler(tx ports.TxRunner, parse schedule.ParseFunc, batchSize int) *Scheduler {
	if batchSize <= 0 {
		batchSize = DefaultSchedulerBatchSize
	}
	return &Scheduler{tx: tx, parse: parse, batch: batchSize}
}

// Run runs one cycle: batches, each in its own transaction, until one comes
// back short.
func (s *Scheduler) Run(ctx context.Context) (SchedulerReport, error) {
	var rep SchedulerReport
	err := inBatches(ctx, s.tx, s.batch, func(ctx context.Context, st ports.Stores) (SchedulerReport, int, error) {
		var r SchedulerReport
		handled, err := st.Schedules.UpdateDue(ctx, s.batch, func(sc *schedule.Schedule, last task.Status, now time.Time) ([]event.Event, error) {
			created, events, err := s.tick(ctx, st, sc, last, now)
			switch {
			case err != nil:
			case created:
				r.Created++
			case len(events) > 0:
				r.Skipped++
			}
			return events, err
		})
		return r, len(handled), err
	}, func(r SchedulerReport) {
		rep.Created += r.Created
		rep.Skipped += r.Skipped
	})
	if err != nil {
		return rep, fmt.Errorf("run schedules: %w", err)
	}
	return rep, nil
}

// tick runs sc's due tick on st: it skips it (overlap), or creates the
// tick's task. created says a task was made; a skip returns its event.
func (s *Scheduler) tick(ctx context.Context, st ports.Stores, sc *schedule.Schedule, last task.Status, now time.Time) (bool, []event.Event, error) {
	tick, err := sc.DueTick(s.parse, now)
	if errors.Is(err, schedule.ErrNotDue) {
		return false, nil, nil // changed since it was selected
	}
	if err != nil {
		return false, nil, err
	}
	if sc.Overlaps(last) {
		e, err := sc.Skip(tick, schedule.SkipOverlap, s.parse, now)
		return false, []event.Event{e}, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return false, nil, fmt.Errorf("new task id: %w", err)
	}
	t, created, err := st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
		return sc.TickTask(tick, id, now)
	})
	if err != nil {
		return false, nil, fmt.Errorf("schedule %s: tick %s: %w", sc.Name(), tick.Format(time.RFC3339), err)
	}
	if !created && !t.IsTick(sc.Name(), tick) {
		// An unfinished task held the template's unique key: the
		// submission returned it. It is not the tick's, whoever made it.
		e, err := sc.Skip(tick, schedule.SkipUniqueKey, s.parse, now)
		return false, []event.Event{e}, err
	}
	// A task found by its mark (created false) is the tick's own: one
	// made before the schedule was deleted and created again.
	return created, nil, sc.Ran(tick, t.ID(), s.parse, now)
}
