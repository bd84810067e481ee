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

// Replay creates a new task from a DONE or DEAD one the principal may see
// (task.Replay: the same queue, payload and settings, with cmd's
// overrides), linked to it by replay_of, in a run of its own. A task
// another unfinished task's unique key would collide with is refused
// (*task.UniqueKeyError), as an operator's retry is. The replay is audited
// (audit.task_replayed).
func (s *TaskService) Replay(ctx context.Context, cmd ports.ReplayCommand) (*task.Task, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return nil, fmt.Errorf("new task id: %w", err)
	}
	p := cmd.Params
	p.ID = id
	var out *task.Task
	err = s.tx.Run(ctx, func(ctx context.Context, st ports.Stores) error {
		orig, err := visibleTask(ctx, st, cmd.TaskID)
		if err != nil {
			return err
		}
		var v validation.Errors
		checkJSON(&v, st, "payload", p.Payload)
		if err := v.Err(); err != nil {
			return err
		}
		t, created, err := st.Tasks.Create(ctx, func(now time.Time) (*task.Task, event.Event, error) {
			return task.Replay(orig, p, now)
		})
		if err != nil {
			return err
		}
		if !created {
			v := orig.Snapshot()
			return &task.UniqueKeyError{ID: v.ID, Queue: v.Queue, Key: v.UniqueKey}
		}
		audit := event.Audit(event.AuditTaskReplayed, auditKeyID(ctx), t.Snapshot().CreatedAt)
		audit.TaskID, audit.Queue, audit.ReplayOf = t.ID().String(), t.Queue(), orig.ID().String()
		st.Outbox.Record(audit)
		out = t
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("replay task: %w", err)
	}
	return out, nil
}

// MaxReplayBatchBytes caps the stored payloads one batch of a bulk replay
// reads and copies (at least one task: a batch of large payloads is
// smaller than BulkConfig.BatchSize).
const MaxReplayBatchBytes = DefaultMaxResponseBytes

// BulkReplay replays every DONE or DEAD task the filter matches (by default
// both), as the single replay does each: a new task linked by replay_of,
// skipping those whose unique key an unfinished task holds. It first
// counts them (a dry run stops there), then walks them once, in id order,
// a batch per transaction (BulkConfig.BatchSize tasks, MaxReplayBatchBytes
// of payloads at most), reading them without locks (finished tasks do not
// change, but for retention and retries). It covers the tasks that matched
// at the count (created before it): the replays themselves never match.
// It is audited (audit.tasks_bulk_replayed).
func (s *BulkService) BulkReplay(ctx context.Context, cmd ports.BulkCommand) (ports.BulkResult, error) {
	out, err := s.bulkReplay(ctx, cmd)
	if err != nil {
		return out, fmt.Errorf("bulk replay: %w", err)
	}
	return out, nil
}

func (s *BulkService) bulkReplay(ctx context.Context, cmd ports.BulkCommand) (ports.BulkResult, error) {
	f, err := cmd.Filter.ForBulk(task.BulkReplay)
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
	audit := event.Audit(event.AuditTasksBulkReplayed, auditKeyID(ctx), asOf)
	audit.Queue, audit.Filter, audit.Matched = f.Queue, f.Fields(), &out.Matched
	run := f
	if bound := asOf.Add(time.Microsecond); run.CreatedBefore == nil || bound.Before(*run.CreatedBefore) {
		run.CreatedBefore = &bound
	}
	changed, err := s.run(ctx, audit, func(ctx context.Context, st ports.Stores, p ports.BulkBatchParams) (ports.BulkBatch, error) {
		p.Filter, p.OldestFirst = run, true
		origs, truncated, err := st.Bulk.Search(ctx, p, MaxReplayBatchBytes)
		if err != nil || len(origs) == 0 {
			return ports.BulkBatch{}, err
		}
		last := origs[len(origs)-1].ID()
		b := ports.BulkBatch{Last: &last, Full: len(origs) == p.Limit || truncated}
		_, created, err := st.Tasks.CreateMany(ctx, func(now time.Time) ([]*task.Task, []event.Event, error) {
			ts := make([]*task.Task, len(origs))
			es := make([]event.Event, len(origs))
			for i, o := range origs {
				id, err := uuid.NewV7()
				if err != nil {
					return nil, nil, fmt.Errorf("new task id: %w", err)
				}
				if ts[i], es[i], err = task.Replay(o, task.ReplayParams{ID: id}, now); err != nil {
					return nil, nil, err // every one matched DONE or DEAD
				}
			}
			return ts, es, nil
		})
		for _, c := range created {
			if c {
				b.Changed++
			} else {
				b.Refused++
			}
		}
		return b, err
	})
	finish(&out, changed)
	return out, err
}
