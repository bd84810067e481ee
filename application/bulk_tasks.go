package application

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/leadership"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// BulkConfig tunes the bulk actions and purges.
type BulkConfig struct {
	// BatchSize is how many tasks one transaction changes or removes
	// (0: DefaultBulkBatchSize): short transactions, which hold their rows
	// (and delay outbox delivery) only briefly.
	BatchSize int
	// PurgeSyncLimit is the most matching tasks a purge removes before it
	// answers (0: DefaultPurgeSyncLimit); a larger purge is accepted as a
	// background job.
	PurgeSyncLimit int64
	// MaxPasses bounds the passes over the matching tasks (0:
	// DefaultBulkPasses): a pass that met tasks other transactions held is
	// followed by another, PassPause later, to take them.
	MaxPasses int
	// PassPause is the pause between two passes of a run that answers
	// (0: DefaultBulkPassPause).
	PassPause time.Duration
	// PurgeBatchesPerCycle bounds the batches one cycle of the purge-jobs
	// service runs (0: DefaultPurgeBatchesPerCycle).
	PurgeBatchesPerCycle int
}

// Defaults of BulkConfig.
const (
	DefaultBulkBatchSize        = 500
	DefaultPurgeSyncLimit       = 10_000
	DefaultBulkPasses           = 5
	DefaultBulkPassPause        = 100 * time.Millisecond
	DefaultPurgeBatchesPerCycle = 200
)

// DefaultBulkConfig returns the defaults.
func DefaultBulkConfig() BulkConfig {
	return BulkConfig{
		BatchSize: DefaultBulkBatchSize, PurgeSyncLimit: DefaultPurgeSyncLimit, MaxPasses: DefaultBulkPasses,
		PassPause: DefaultBulkPassPause, PurgeBatchesPerCycle: DefaultPurgeBatchesPerCycle,
	}
}

func (c BulkConfig) withDefaults() BulkConfig {
	d := DefaultBulkConfig()
	if c.BatchSize <= 0 {
		c.BatchSize = d.BatchSize
	}
	if c.PurgeSyncLimit <= 0 {
		c.PurgeSyncLimit = d.PurgeSyncLimit
	}
	if c.MaxPasses <= 0 {
		c.MaxPasses = d.MaxPasses
	}
	if c.PassPause <= 0 {
		c.PassPause = d.PassPause
	}
	if c.PurgeBatchesPerCycle <= 0 {
		c.PurgeBatchesPerCycle = d.PurgeBatchesPerCycle
	}
	return c
}

// BulkService implements ports.BulkService: bulk retry and cancel by
// filter, and queue purges (small ones at once, large ones as jobs that
// RunPurgeJobs runs).
type BulkService struct {
	tx  ports.TxRunner
	cfg BulkConfig
}

var _ ports.BulkService = (*BulkService)(nil)

// NewBulkService returns the bulk use cases over tx.
func NewBulkService(tx ports.TxRunner, cfg BulkConfig) *BulkService {
	return &BulkService{tx: tx, cfg: cfg.withDefaults()}
}

// checkBulkQueue applies a key's queue limits to a bulk action: a key
// limited to some queues must name one of them (403 otherwise); other keys
// may act on every queue at once.
func checkBulkQueue(ctx context.Context, queue string) error {
	p := ports.Principal(ctx)
	if !p.Restricted() {
		return nil
	}
	var queues []string
	if queue != "" {
		queues = []string{queue}
	}
	return p.CheckQueues(queues)
}

// BulkRetry retries every DEAD task the filter matches, as the single
// retry does (attempts reset, task.retried), skipping the tasks whose
// unique key another unfinished task holds. It is audited
// (audit.tasks_bulk_retried).
func (s *BulkService) BulkRetry(ctx context.Context, cmd ports.BulkCommand) (ports.BulkResult, error) {
	out, err := s.bulk(ctx, task.BulkRetry, event.AuditTasksBulkRetried, cmd)
	if err != nil {
		return out, fmt.Errorf("bulk retry: %w", err)
	}
	return out, nil
}

// BulkCancel cancels every PENDING or BLOCKED task the filter matches and
// asks the holders of the RUNNING ones to stop them, as the single cancel
// does. It is audited (audit.tasks_bulk_cancelled).
func (s *BulkService) BulkCancel(ctx context.Context, cmd ports.BulkCommand) (ports.BulkResult, error) {
	out, err := s.bulk(ctx, task.BulkCancel, event.AuditTasksBulkCancelled, cmd)
	if err != nil {
		return out, fmt.Errorf("bulk cancel: %w", err)
	}
	return out, nil
}

// bulk runs a bulk action. It first counts the matching tasks (a dry run
// stops there). The run then covers the tasks that matched at the count:
// created before it, and for a retry not changed since (a task retried by
// the run that dies again is not retried twice). It walks them in id
// order, a batch per transaction (see run). The first batch's transaction
// also records the action's audit event, with the acting key, the filter
// and the count, so no task changes without it. A run cut short (the
// client went away, the database failed) keeps the batches it committed;
// running it again changes only what still matches.
func (s *BulkService) bulk(ctx context.Context, a task.BulkAction, audited event.Type, cmd ports.BulkCommand) (ports.BulkResult, error) {
	f, err := cmd.Filter.ForBulk(a)
	if err != nil {
		return ports.BulkResult{}, err
	}
	if err := checkBulkQueue(ctx, f.Queue); err != nil {
		return ports.BulkResult{}, err
	}
	out, asOf, err := s.count(ctx, f)
	if err != nil || cmd.DryRun {
		return out, err
	}
	audit := event.Audit(audited, auditKeyID(ctx), asOf)
	audit.Queue, audit.Filter, audit.Matched = f.Queue, f.Fields(), &out.Matched
	run := f
	bound := asOf.Add(time.Microsecond)
	if run.CreatedBefore == nil || bound.Before(*run.CreatedBefore) {
		run.CreatedBefore = &bound
	}
	if a == task.BulkRetry {
		run.UpdatedBefore = &bound
	}
	decide := func(t *task.Task, now time.Time) ([]event.Event, error) {
		if !run.Matches(t) { // storage selected it by the same rule: never expected
			return nil, fmt.Errorf("task %s does not match the filter", t.ID())
		}
		e, err := a.Apply(t, now)
		if err != nil {
			return nil, err
		}
		return []event.Event{e}, nil
	}
	changed, err := s.run(ctx, audit, func(ctx context.Context, st ports.Stores, p ports.BulkBatchParams) (ports.BulkBatch, error) {
		p.Filter = run
		return st.Bulk.UpdateMatching(ctx, p, decide)
	})
	finish(&out, changed)
	return out, err
}

// count counts the tasks f matches, at the returned database time.
func (s *BulkService) count(ctx context.Context, f task.Filter) (ports.BulkResult, time.Time, error) {
	var (
		out  ports.BulkResult
		asOf time.Time
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out.Matched, asOf, err = st.Bulk.Count(ctx, f)
		return err
	})
	return out, asOf, err
}

// finish fills in what a run that changed changed tasks did.
func finish(out *ports.BulkResult, changed int64) {
	skipped := max(out.Matched-changed, 0)
	out.Changed, out.Skipped = &changed, &skipped
}

// batchFunc runs one batch of a run in st.
type batchFunc func(ctx context.Context, st ports.Stores, p ports.BulkBatchParams) (ports.BulkBatch, error)

// walk is where a run over the matching tasks stands: passes in id order,
// each batch after the last task id the previous one considered; a pass
// that met tasks other transactions held (SKIP LOCKED) is followed by
// another, up to a limit, which takes those that still match. A task a
// batch changed no longer matches, so no pass changes it twice.
type walk struct {
	cursor *uuid.UUID
	pass   int
	locked int64
}

// next moves the walk past batch b. more reports that another batch
// follows; restarted that it begins a new pass.
func (w *walk) next(b ports.BulkBatch, maxPasses int) (more, restarted bool) {
	w.locked += int64(b.Locked)
	if b.Full && b.Last != nil {
		w.cursor = b.Last
		return true, false
	}
	if w.locked > 0 && w.pass+1 < maxPasses {
		w.cursor, w.pass, w.locked = nil, w.pass+1, 0
		return true, true
	}
	return false, false
}

// run walks the matching tasks, a batch per transaction (the first one
// records audit, unless it is the zero event), pausing between passes, and
// returns how many tasks the committed batches changed.
func (s *BulkService) run(ctx context.Context, audit event.Event, batch batchFunc) (int64, error) {
	var (
		changed int64
		w       walk
		first   = true
	)
	for {
		var b ports.BulkBatch
		err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
			var err error
			b, err = batch(ctx, st, ports.BulkBatchParams{After: w.cursor, Limit: s.cfg.BatchSize})
			if err == nil && first && audit.Type != "" {
				st.Outbox.Record(audit)
			}
			return err
		})
		if err != nil {
			return changed, err
		}
		first = false
		changed += int64(b.Changed)
		more, restarted := w.next(b, s.cfg.MaxPasses)
		if !more {
			return changed, nil
		}
		if restarted {
			select {
			case <-ctx.Done():
				return changed, ctx.Err()
			case <-time.After(s.cfg.PassPause):
			}
		}
	}
}

// Purge removes a queue's tasks of one status (PENDING by default: RUNNING
// tasks stay with their holders; or DEAD), each with its task.purged
// event; their dependants end DEAD dependency_failed, as a DEAD parent's
// do. It first counts them (a dry run stops there). Up to
// BulkConfig.PurgeSyncLimit it removes them at once, in batches that skip
// rows other transactions hold (no claim waits for a purge); beyond, it
// stores a purge job, which the purge-jobs background service runs
// (RunPurgeJobs), and returns it. It is audited (audit.queue_purged, in
// the first batch's transaction or the job's).
func (s *BulkService) Purge(ctx context.Context, cmd ports.PurgeCommand) (ports.BulkResult, error) {
	out, err := s.purge(ctx, cmd)
	if err != nil {
		return out, fmt.Errorf("purge queue: %w", err)
	}
	return out, nil
}

func (s *BulkService) purge(ctx context.Context, cmd ports.PurgeCommand) (ports.BulkResult, error) {
	if cmd.Status == "" {
		cmd.Status = task.StatusPending
	}
	f, err := task.ForPurge(cmd.Queue, cmd.Status)
	if err != nil {
		return ports.BulkResult{}, err
	}
	if err := checkBulkQueue(ctx, f.Queue); err != nil {
		return ports.BulkResult{}, err
	}
	out, asOf, err := s.count(ctx, f)
	if err != nil || cmd.DryRun {
		return out, err
	}
	id, err := uuid.NewV7()
	if err != nil {
		return out, fmt.Errorf("job id: %w", err)
	}
	job := &task.PurgeJob{
		ID: id, Queue: cmd.Queue, Status: cmd.Status, State: task.PurgeRunning, Matched: out.Matched,
		AsOf: asOf, StartedAt: asOf, KeyID: auditKeyID(ctx),
	}
	audit := event.Audit(event.AuditQueuePurged, job.KeyID, asOf)
	audit.Queue, audit.Filter, audit.Matched = job.Queue, f.Fields(), &out.Matched
	if out.Matched > s.cfg.PurgeSyncLimit {
		err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
			st.Outbox.Record(audit)
			return st.Bulk.CreatePurgeJob(ctx, job)
		})
		if err != nil {
			return out, err
		}
		out.Job = job
		return out, nil
	}
	run := job.Filter()
	removed, err := s.run(ctx, audit, func(ctx context.Context, st ports.Stores, p ports.BulkBatchParams) (ports.BulkBatch, error) {
		p.Filter = run
		return st.Bulk.PurgeMatching(ctx, p, purgeDecision(run))
	})
	finish(&out, removed)
	return out, err
}

// purgeDecision is a purge's decision about one locked task.
func purgeDecision(run task.Filter) ports.TaskUpdateFunc {
	return func(t *task.Task, now time.Time) ([]event.Event, error) {
		if !run.Matches(t) { // storage selected it by the same rule: never expected
			return nil, fmt.Errorf("task %s does not match the purge", t.ID())
		}
		e, err := t.Purge(now)
		if err != nil {
			return nil, err
		}
		return []event.Event{e}, nil
	}
}

// PurgeJob returns a purge job of a queue (a key limited to some queues
// sees only theirs).
func (s *BulkService) PurgeJob(ctx context.Context, queue string, id uuid.UUID) (*task.PurgeJob, error) {
	if err := checkBulkQueue(ctx, queue); err != nil {
		return nil, err
	}
	var out *task.PurgeJob
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		out, err = st.Bulk.PurgeJob(ctx, queue, id)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("purge job: %w", err)
	}
	return out, nil
}

// PurgeReport is what one cycle of the purge-jobs service did.
type PurgeReport struct {
	// Batches counts the batches committed.
	Batches int
	// Removed counts the tasks they removed.
	Removed int64
	// Finished counts the jobs that ended (done or failed).
	Finished int
}

// Idle reports whether the cycle did nothing.
func (r PurgeReport) Idle() bool { return r == PurgeReport{} }

// Fields are the cycle's counts, for its log line.
func (r PurgeReport) Fields() []zap.Field {
	return []zap.Field{zap.Int("batches", r.Batches), zap.Int64("tasks_purged", r.Removed), zap.Int("jobs_finished", r.Finished)}
}

// RunPurgeJobs is one cycle of the purge-jobs background service: it runs
// the batches of the running purge jobs, oldest job first, up to
// BulkConfig.PurgeBatchesPerCycle. Each batch's transaction locks the
// job's row, removes the batch and saves the job's progress (cursor,
// count, state), so a job resumes where its last committed batch left it,
// on whichever instance leads the service next. A job moves on to a new
// pass at the next cycle. A batch that fails other than by an outage or a
// lost leadership ends its job failed.
func (s *BulkService) RunPurgeJobs(ctx context.Context) (PurgeReport, error) {
	var rep PurgeReport
	for rep.Batches < s.cfg.PurgeBatchesPerCycle {
		var (
			job       *task.PurgeJob
			b         ports.BulkBatch
			restarted bool
		)
		err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
			var err error
			if job, err = st.Bulk.LockRunningPurgeJob(ctx); err != nil || job == nil {
				return err
			}
			run := job.Filter()
			b, err = st.Bulk.PurgeMatching(ctx, ports.BulkBatchParams{Filter: run, After: job.Cursor, Limit: s.cfg.BatchSize}, purgeDecision(run))
			if err != nil {
				return err
			}
			w := walk{cursor: job.Cursor, pass: job.Pass, locked: job.Locked}
			var more bool
			more, restarted = w.next(b, s.cfg.MaxPasses)
			job.Cursor, job.Pass, job.Locked = w.cursor, w.pass, w.locked
			job.Removed += int64(b.Changed)
			if !more {
				job.State, job.FinishedAt = task.PurgeDone, &b.Now
			}
			return st.Bulk.SavePurgeJob(ctx, job)
		})
		if err != nil {
			if job == nil || ctx.Err() != nil || errors.Is(err, ports.ErrUnavailable) || errors.Is(err, leadership.ErrLost) {
				return rep, err
			}
			if ferr := s.failPurgeJob(ctx, job); ferr != nil {
				return rep, errors.Join(err, ferr)
			}
			rep.Finished++
			return rep, fmt.Errorf("purge job %s failed: %w", job.ID, err) // logged by the service
		}
		if job == nil {
			return rep, nil
		}
		rep.Batches++
		rep.Removed += int64(b.Changed)
		if job.State != task.PurgeRunning {
			rep.Finished++
		}
		if restarted {
			return rep, nil // the next pass starts at the next cycle
		}
	}
	return rep, nil
}

// failPurgeJob ends a job failed, keeping what its batches removed. The
// cause goes to the server's log, not to the job (whose progress the API
// shows).
func (s *BulkService) failPurgeJob(ctx context.Context, failed *task.PurgeJob) error {
	return s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		job, err := st.Bulk.PurgeJob(ctx, failed.Queue, failed.ID)
		if err != nil || job.State != task.PurgeRunning {
			return err
		}
		job.State, job.Error = task.PurgeFailed, "a batch failed; the server's log has the cause"
		return st.Bulk.SavePurgeJob(ctx, job)
	})
}
