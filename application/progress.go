package application

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/application/lifecycle"
	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// ReportProgress stores a holder's progress report on its task (fenced
// like a completion: another worker's or a stale lease's report is a
// lease-lost error) and counts it as the worker's sign of life. It is no
// transition: the task stays RUNNING. A task.progress event announces it,
// unless the task's last one is less than a second old: the report is then
// announced a second after that one (by this instance's ProgressFlusher),
// with the values then stored, unless a later report did it first.
func (s *TaskService) ReportProgress(ctx context.Context, cmd ports.ProgressCommand) (*task.Task, error) {
	var v validation.Errors
	checkReporter(&v, cmd.WorkerID)
	checkLease(&v, "lease_id", cmd.LeaseID)
	checkProgressReport(&v, "", cmd.ProgressReport)
	if err := v.Err(); err != nil {
		return nil, err
	}
	check := func(st ports.Stores) error {
		var v validation.Errors
		checkDetails(&v, st, "details", cmd.Details)
		return v.Err()
	}
	if err := ports.Principal(ctx).CheckWorkerID(cmd.WorkerID); err != nil {
		return nil, err
	}
	decide := visibleTaskFunc(ctx, func(t *task.Task, now time.Time) ([]event.Event, error) {
		return reportProgress(t, progressParams(cmd.ProgressReport, cmd.WorkerID, *cmd.LeaseID), now)
	})
	out, err := s.reports.do(ctx, report{
		workerID: cmd.WorkerID, ids: []uuid.UUID{cmd.TaskID}, progress: true,
		refuse: func(st ports.Stores) []error { return []error{check(st)} },
		decide: func(_ int, t *task.Task, now time.Time) ([]event.Event, error) { return decide(t, now) },
	})
	if err != nil {
		return nil, fmt.Errorf("report progress: %w", err)
	}
	if out[0].Err != nil {
		return nil, fmt.Errorf("report progress: %w", out[0].Err)
	}
	s.progress.ScheduleFor(out[0].Task)
	return out[0].Task, nil
}

// reportProgress is the domain's decision on a progress report: its event,
// when it makes one now.
func reportProgress(t *task.Task, p task.ProgressParams, now time.Time) ([]event.Event, error) {
	e, ok, err := t.ReportProgress(p, now)
	if err != nil || !ok {
		return nil, err
	}
	return []event.Event{e}, nil
}

// DefaultProgressFlushBatch bounds the tasks one announcement transaction
// of the ProgressFlusher handles.
const DefaultProgressFlushBatch = 500

// ProgressFlusher announces the progress reports that came within a second
// of their task's previous task.progress event, once that second is over
// (task.Task.FlushProgress), so that the events of a task's progress keep
// to one a second and the last report is announced all the same. It holds
// the announcements due in this instance's memory: a report's announcement
// is lost if the instance stops before it is due (the report itself is
// stored, and shown on every view of the task). It is a lifecycle.Service;
// until it is started, and after it stops, nothing is held.
type ProgressFlusher struct {
	lifecycle.Base
	tx     ports.TxRunner
	logger *zap.Logger

	mu      sync.Mutex
	running bool
	due     map[uuid.UUID]time.Time // application clock
	kick    chan struct{}
}

var _ lifecycle.Service = (*ProgressFlusher)(nil)

// NewProgressFlusher returns a stopped flusher over tx.
func NewProgressFlusher(tx ports.TxRunner, logger *zap.Logger) *ProgressFlusher {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &ProgressFlusher{tx: tx, logger: logger.Named("progress"), due: map[uuid.UUID]time.Time{}, kick: make(chan struct{}, 1)}
}

// ScheduleFor holds the announcement of t's last progress report, when t
// has one to announce (task.Task.ProgressDue): its due time, on the
// database clock, is converted to this instance's by the report's own
// time. A nil flusher, or one not running, holds nothing.
func (f *ProgressFlusher) ScheduleFor(t *task.Task) {
	if f == nil || t == nil {
		return
	}
	at, ok := t.ProgressDue()
	if !ok {
		return
	}
	// The report's time and at are both the database's: wait the
	// difference on this clock, plus a margin for clocks that tick at
	// slightly different rates.
	wait := at.Sub(t.Snapshot().Progress.UpdatedAt) + 5*time.Millisecond
	f.schedule(t.ID(), time.Now().Add(max(wait, 0)))
}

func (f *ProgressFlusher) schedule(id uuid.UUID, at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.running {
		return
	}
	if old, ok := f.due[id]; ok && !at.Before(old) {
		return
	}
	f.due[id] = at
	select {
	case f.kick <- struct{}{}:
	default:
	}
}

// Pending returns how many announcements the flusher holds.
func (f *ProgressFlusher) Pending() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.due)
}

// Start begins announcing.
func (f *ProgressFlusher) Start(ctx context.Context) error {
	return f.StartLoop(ctx, "progress flusher", func(context.Context) (lifecycle.LoopFunc, error) {
		f.mu.Lock()
		f.running = true
		f.mu.Unlock()
		return f.loop, nil
	})
}

// Stop stops announcing (what is held is dropped) and waits for the
// announcement in progress.
func (f *ProgressFlusher) Stop(ctx context.Context) error {
	f.mu.Lock()
	f.running = false
	f.due = map[uuid.UUID]time.Time{}
	f.mu.Unlock()
	return f.StopLoop(ctx)
}

func (f *ProgressFlusher) loop(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		next, ids := f.take(time.Now())
		if len(ids) > 0 {
			f.flush(ctx, ids)
			continue
		}
		timer.Reset(next)
		select {
		case <-ctx.Done():
			return
		case <-f.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-timer.C:
		}
	}
}

// take removes and returns the announcements due at now (at most a
// batch), or how long until the next one.
func (f *ProgressFlusher) take(now time.Time) (time.Duration, []uuid.UUID) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := time.Hour
	var ids []uuid.UUID
	for id, at := range f.due {
		if d := at.Sub(now); d > 0 {
			next = min(next, d)
			continue
		}
		if len(ids) < DefaultProgressFlushBatch {
			ids = append(ids, id)
			delete(f.due, id)
		}
	}
	return next, ids
}

// flush announces the reports of ids in one transaction; a task whose
// report is not due yet on the database's clock is held again.
func (f *ProgressFlusher) flush(ctx context.Context, ids []uuid.UUID) {
	var again []*task.Task
	err := f.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		again = again[:0]
		res, err := st.Tasks.UpdateProgress(ctx, ids, func(_ int, t *task.Task, now time.Time) ([]event.Event, error) {
			e, ok := t.FlushProgress(now)
			if !ok {
				again = append(again, t)
				return nil, nil
			}
			return []event.Event{e}, nil
		})
		_ = res // a task gone since has nothing to announce
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			f.logger.Warn("announce progress", zap.Int("tasks", len(ids)), zap.Error(err))
		}
		return
	}
	for _, t := range again {
		f.ScheduleFor(t)
	}
}

// progressParams is r as the domain's report of workerID under leaseID.
func progressParams(r ports.ProgressReport, workerID string, leaseID uuid.UUID) task.ProgressParams {
	p := task.ProgressParams{WorkerID: workerID, LeaseID: leaseID, Message: r.Message, Details: r.Details}
	if r.Percent != nil {
		p.Percent = *r.Percent
	}
	return p
}

// checkProgressReport adds to v, naming fields with prefix, what is wrong
// with r (its percent is required) and what storage cannot hold of its
// details (st nil: not checked yet).
func checkProgressReport(v *validation.Errors, prefix string, r ports.ProgressReport) {
	if r.Percent == nil {
		v.Add(prefix+"percent", "is required: a number from 0 to 100")
	}
	task.CheckProgress(v, prefix, progressParams(r, "", uuid.Nil))
}

// checkDetails adds to v, on field, why storage cannot hold the details.
func checkDetails(v *validation.Errors, st ports.Stores, field string, details json.RawMessage) {
	checkJSON(v, st, field, details)
}
