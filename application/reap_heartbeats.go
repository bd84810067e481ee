package application

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// DefaultReaperBatchSize is how many rows one reaper transaction changes at
// most: enough to amortise the commit, small enough to keep the transaction
// (and the row locks it holds) short.
const DefaultReaperBatchSize = 500

// errRuleMismatch: storage selected a row that the domain rule it encodes
// does not select. It is a bug; the batch is not saved.
var errRuleMismatch = errors.New("storage selected a row the domain rule does not")

// HeartbeatReport is what one heartbeat reaper cycle did.
type HeartbeatReport struct {
	// Stale counts workers that went ACTIVE -> STALE.
	Stale int
	// Dead counts workers that went ACTIVE or STALE -> DEAD.
	Dead int
	// Requeued counts tasks taken back from dead workers to PENDING.
	Requeued int
	// DeadLettered counts tasks of dead workers that had no attempts left
	// (DEAD, worker_dead).
	DeadLettered int
}

// Idle reports whether the cycle changed nothing.
func (r HeartbeatReport) Idle() bool { return r == HeartbeatReport{} }

// Fields are the cycle's counts, for its log line.
func (r HeartbeatReport) Fields() []zap.Field {
	return []zap.Field{
		zap.Int("workers_stale", r.Stale), zap.Int("workers_dead", r.Dead),
		zap.Int("tasks_requeued", r.Requeued), zap.Int("tasks_dead_lettered", r.DeadLettered),
	}
}

func (r *HeartbeatReport) add(o HeartbeatReport) {
	r.Stale += o.Stale
	r.Dead += o.Dead
	r.Requeued += o.Requeued
	r.DeadLettered += o.DeadLettered
}

func (r *HeartbeatReport) countReleased(ts []*task.Task) {
	for _, t := range ts {
		if t.Status() == task.StatusPending {
			r.Requeued++
		} else {
			r.DeadLettered++
		}
	}
}

// HeartbeatReaper applies the liveness thresholds: ACTIVE -> STALE after the
// stale threshold of silence, ACTIVE or STALE -> DEAD after the dead one,
// and takes back the tasks dead workers held (PENDING again with the attempt
// counted, or DEAD worker_dead when none is left).
type HeartbeatReaper struct {
	tx       ports.TxRunner
	liveness worker.LivenessConfig
	batch    int
}

// NewHeartbeatReaper returns the heartbeat reaper over tx; batchSize bounds
// the rows of one transaction (DefaultReaperBatchSize when 0).
func NewHeartbeatReaper(tx ports.TxRunner, liveness worker.LivenessConfig, batchSize int) *HeartbeatReaper {
	if batchSize <= 0 {
		batchSize = DefaultReaperBatchSize
	}
	return &HeartbeatReaper{tx: tx, liveness: liveness, batch: batchSize}
}

// Reap runs one cycle, in batches until one comes back short, each batch in
// its own short transaction. A batch changes silent workers and, in the same
// transaction, takes back the tasks that no live worker holds: those of the
// workers it just declared dead, and any still RUNNING under a DEAD (or
// deleted) worker, such as a task a claim committed under a worker while it
// was being declared dead, or one whose row was locked at the time. It
// returns what the committed transactions did.
func (r *HeartbeatReaper) Reap(ctx context.Context) (HeartbeatReport, error) {
	var rep HeartbeatReport
	err := inBatches(ctx, r.tx, r.batch, func(ctx context.Context, st ports.Stores) (HeartbeatReport, int, error) {
		var b HeartbeatReport
		ws, err := st.Reaper.UpdateSilentWorkers(ctx, r.liveness, r.batch, r.checkLiveness)
		if err != nil {
			return b, 0, fmt.Errorf("silent workers: %w", err)
		}
		for _, w := range ws {
			if w.Status() == worker.StatusDead {
				b.Dead++
			} else {
				b.Stale++
			}
		}
		ts, err := st.Reaper.UpdateOrphanedTasks(ctx, r.batch, releaseFromDeadWorker)
		if err != nil {
			return b, 0, fmt.Errorf("tasks of dead workers: %w", err)
		}
		b.countReleased(ts)
		return b, max(len(ws), len(ts)), nil
	}, rep.add)
	if err != nil {
		return rep, fmt.Errorf("reap heartbeats: %w", err)
	}
	return rep, nil
}

func (r *HeartbeatReaper) checkLiveness(w *worker.Worker, now time.Time) ([]event.Event, error) {
	e, changed := w.CheckLiveness(r.liveness, now)
	if !changed {
		return nil, fmt.Errorf("worker %s (%s): %w", w.ID(), w.Status(), errRuleMismatch)
	}
	return []event.Event{e}, nil
}

// releaseFromDeadWorker takes a task back from the holder the sweep judged
// dead, and leaves it alone when another holder has it by now.
func releaseFromDeadWorker(t *task.Task, judged task.Holder, now time.Time) ([]event.Event, bool, error) {
	e, err := t.ReleaseFromDeadWorker(judged, now)
	switch {
	case errors.Is(err, task.ErrLeaseLost):
		return nil, false, nil
	case err != nil:
		return nil, false, err
	}
	return []event.Event{e}, true, nil
}
