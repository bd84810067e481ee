package application

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/validation"
	"github.com/taskmaster/taskmaster/ports"
)

// MaxGraphTasks is the most tasks of a run the dashboard's graph draws.
const MaxGraphTasks = 5000

// WorkflowService implements ports.WorkflowService: runs as a whole. A key
// limited to some queues sees and changes only the run's tasks in its
// queues; a run with none of them is not found.
type WorkflowService struct {
	tx   ports.TxRunner
	bulk *BulkService
	// maxBytes caps a page of a run's tasks.
	maxBytes int64
}

var _ ports.WorkflowService = (*WorkflowService)(nil)

// NewWorkflowService returns the run use cases over tx; cancels run in
// bulk's batches, pages of tasks are capped as cfg's listings are.
func NewWorkflowService(tx ports.TxRunner, bulk *BulkService, cfg Config) *WorkflowService {
	return &WorkflowService{tx: tx, bulk: bulk, maxBytes: cfg.maxResponseBytes()}
}

// visible is the queue patterns the principal may see (nil: every queue).
func visible(ctx context.Context) []string {
	if k := ports.Principal(ctx); k.Restricted() {
		return k.QueuePatterns()
	}
	return nil
}

// Workflow returns a run's summary and a page of its tasks, oldest first.
func (s *WorkflowService) Workflow(ctx context.Context, q ports.WorkflowQuery) (ports.WorkflowPage, error) {
	var v validation.Errors
	limit := optionalCount(&v, "limit", q.Limit, DefaultListLimit, MaxListLimit)
	if err := v.Err(); err != nil {
		return ports.WorkflowPage{}, err
	}
	vis := visible(ctx)
	var out ports.WorkflowPage
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		sum, err := st.Workflows.Summary(ctx, q.ID, vis)
		if err != nil {
			return err
		}
		out.WorkflowSummary = *sum
		p := ports.BulkBatchParams{Filter: task.Filter{WorkflowID: q.ID}, Visible: vis, After: q.After, Limit: limit, OldestFirst: true}
		if out.Tasks, out.Truncated, err = st.Bulk.Search(ctx, p, s.maxBytes); err != nil {
			return err
		}
		return hideLeases(ctx, st, out.Tasks)
	})
	if err != nil {
		return ports.WorkflowPage{}, fmt.Errorf("workflow: %w", err)
	}
	if n := len(out.Tasks); n > 0 && (n == limit || out.Truncated) {
		last := out.Tasks[n-1].ID()
		out.Next = &last
	}
	return out, nil
}

// Graph returns a run's summary, its first limit tasks (at most
// MaxGraphTasks) and the edges among them.
func (s *WorkflowService) Graph(ctx context.Context, id uuid.UUID, limit int) (*ports.WorkflowSummary, ports.WorkflowGraph, error) {
	limit = min(max(limit, 1), MaxGraphTasks)
	vis := visible(ctx)
	var (
		sum *ports.WorkflowSummary
		g   ports.WorkflowGraph
	)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		var err error
		if sum, err = st.Workflows.Summary(ctx, id, vis); err != nil {
			return err
		}
		g, err = st.Workflows.Graph(ctx, id, vis, limit)
		return err
	})
	if err != nil {
		return nil, ports.WorkflowGraph{}, fmt.Errorf("workflow graph: %w", err)
	}
	return sum, g, nil
}

// Cancel cancels every unfinished task of a run, as the single cancel does
// each (PENDING and BLOCKED tasks end DEAD cancelled; the holders of
// RUNNING ones are asked to stop them, and learn it from their heartbeats;
// a task asked to stop spawns nothing more). It runs as a bulk cancel
// does, in batches that skip rows other transactions hold, passes
// included, with two differences: the BLOCKED tasks go first, so that no
// dependant is released (an ignore edge) or failed (dependency_failed) by
// the cancellation of its parents before it is cancelled itself; and tasks
// the run gains while the cancel runs (spawned, enqueued) are cancelled
// too, since ids only grow and the walk goes in id order. It is audited
// (audit.workflow_cancelled).
func (s *WorkflowService) Cancel(ctx context.Context, id uuid.UUID) (ports.WorkflowResult, error) {
	out, err := s.cancel(ctx, id)
	if err != nil {
		return out, fmt.Errorf("cancel workflow: %w", err)
	}
	return out, nil
}

func (s *WorkflowService) cancel(ctx context.Context, id uuid.UUID) (ports.WorkflowResult, error) {
	out := ports.WorkflowResult{ID: id}
	vis := visible(ctx)
	var asOf time.Time
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		sum, err := st.Workflows.Summary(ctx, id, vis)
		if err != nil {
			return err
		}
		for _, status := range task.UnfinishedStatuses {
			out.Matched += sum.Counts[status]
		}
		asOf = sum.AsOf
		return nil
	})
	if err != nil || out.Matched == 0 {
		return out, err
	}
	audit := event.Audit(event.AuditWorkflowCancelled, auditKeyID(ctx), asOf)
	audit.WorkflowID, audit.Matched = id.String(), &out.Matched
	decide := func(t *task.Task, now time.Time) ([]event.Event, error) {
		e, err := t.Cancel(now)
		if err != nil {
			return nil, err
		}
		return []event.Event{e}, nil
	}
	phases := [][]task.Status{{task.StatusBlocked}, task.BulkCancel.Statuses()}
	for i, statuses := range phases {
		f := task.Filter{WorkflowID: id, Statuses: statuses, WithoutCancelRequest: true}
		if i > 0 {
			audit = event.Event{} // recorded with the first batch
		}
		changed, err := s.bulk.run(ctx, audit, func(ctx context.Context, st ports.Stores, p ports.BulkBatchParams) (ports.BulkBatch, error) {
			p.Filter, p.Visible = f, vis
			return st.Bulk.UpdateMatching(ctx, p, decide)
		})
		out.Changed += changed
		if err != nil {
			return out, err
		}
	}
	out.Skipped = max(out.Matched-out.Changed, 0)
	return out, nil
}

// Retry moves a run's DEAD tasks out of DEAD in one transaction, as
// task.RetryRun decides: what failed and what failed with it run again,
// each BLOCKED behind its parents that run again (or are not yet done), or
// PENDING; DONE tasks are left alone, and so are tasks another unfinished
// task's unique key, or a parent staying DEAD, would keep from running. The
// transaction locks the run's DEAD tasks and share-locks their other
// parents, so none of those finishes unnoticed by a dependant it re-blocks.
// It is audited (audit.workflow_retried).
func (s *WorkflowService) Retry(ctx context.Context, id uuid.UUID) (ports.WorkflowResult, error) {
	out := ports.WorkflowResult{ID: id}
	vis := visible(ctx)
	err := s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		out = ports.WorkflowResult{ID: id}
		run, err := st.Workflows.LockForRetry(ctx, id, vis)
		if err != nil {
			return err
		}
		if len(run.Dead) == 0 {
			_, err := st.Workflows.Summary(ctx, id, vis) // not found, or nothing to retry
			return err
		}
		now := run.Now
		taken := func(t *task.Task) bool {
			v := t.Snapshot()
			return run.Taken[ports.UniqueKey{Queue: v.Queue, Key: v.UniqueKey}]
		}
		decided := task.RetryRun(run.Dead, run.Edges, run.Parents, taken, now)
		if err := st.Workflows.SaveRetried(ctx, decided.Retried); err != nil {
			return err
		}
		out.Matched = int64(len(run.Dead))
		out.Changed, out.Skipped = int64(len(decided.Retried)), int64(len(decided.Skipped))
		for _, t := range decided.Retried {
			if t.Status() == task.StatusBlocked {
				out.Blocked++
			}
		}
		audit := event.Audit(event.AuditWorkflowRetried, auditKeyID(ctx), now)
		audit.WorkflowID, audit.Matched = id.String(), &out.Changed
		st.Outbox.Record(append(decided.Events, audit)...)
		return nil
	})
	if err != nil {
		return out, fmt.Errorf("retry workflow: %w", err)
	}
	return out, nil
}
