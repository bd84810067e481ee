package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// The completion of held tasks in one statement (TaskStore.CompleteEach):
// the hot path of every worker, one task at a time or a batch at a time.
//
// The general path (UpdateEach) locks the tasks with one statement, lets
// the domain decide in Go, saves them with a second (an UPDATE over unnest
// arrays of every mutable column) and writes the ended attempts with a
// third. A completion needs no decision that SQL cannot make: it is fenced
// (RUNNING, under the reporter's worker and lease) and then sets what
// task.Task.Complete sets. So completeHeldSQL locks, completes and records
// the attempt at once, and returns each locked row as it was before, with
// whether it was completed; the domain then decides on that row as it
// would have on the general path, and must come to the same verdict
// (TestCompleteStatementAgreesWithTheDomain checks that the rows it writes
// are the ones saveTasks would write).

// completeHeldSQL locks the tasks $1 in id order (as lockTasksByIDSQL),
// completes those RUNNING under the item's worker ($2) and lease ($3) with
// its result ($4, of stored size $5), as task.Task.Complete does (DONE,
// the lease and what only a RUNNING task has cleared, finished now; the
// columns saveTasks writes, timeout_at left as it was), records their
// ended attempts (outcome completed; as insertAttempts would), and returns
// every locked row as it was, with db_now and whether it was completed.
// The fence is checked on the locked row: a row changed since the
// statement's snapshot is locked at its latest version and checked there.
//
// Every join is driven by a primary-key probe or reads one CTE alone: the
// statement runs with a generic plan, which expects ten items, and a join
// of two CTEs (no index) would compare every item with every other (a
// batch of 340 completions took 156 ms).
var completeHeldSQL = `
	WITH locked AS (
		SELECT ` + prefixedTaskColumns + `, now() AS db_now,
			t.status = 'RUNNING' AND t.worker_id = i.worker AND t.lease_id = i.lease AS completed,
			i.result AS new_result, i.bytes AS new_bytes
		FROM unnest($1::uuid[], $2::text[], $3::uuid[], $4::text[], $5::int[]) AS i(id, worker, lease, result, bytes)
		JOIN tasks t ON t.id = i.id
		ORDER BY t.id
		FOR UPDATE OF t
	), done AS (
		UPDATE tasks t SET status = 'DONE', worker_id = NULL, lease_id = NULL,
			result = l.new_result::jsonb, result_bytes = l.new_bytes, finished_at = now(), updated_at = now(),
			lease_seconds = NULL, lease_expires_at = NULL, cancel_requested_at = NULL, claim_request_id = NULL
		FROM locked l
		WHERE t.id = l.id AND l.completed
		RETURNING t.id, l.attempts, l.worker_id, l.claimed_at
	), ended AS (
		INSERT INTO task_attempts (task_id, attempt, worker_id, claimed_at, finished_at, outcome, error)
		SELECT d.id, d.attempts, d.worker_id, d.claimed_at, now(), 'completed', NULL
		FROM done d
		WHERE d.claimed_at IS NOT NULL
		ORDER BY d.id
	)
	SELECT ` + taskColumns + `, db_now, completed FROM locked`

// completedRow is a row completeHeldSQL returned.
type completedRow struct {
	taskRowNow
	Completed bool `db:"completed"`
}

// CompleteEach implements ports.TaskStore with completeHeldSQL.
func (s *TaskStore) CompleteEach(ctx context.Context, items []ports.CompleteRef, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if err := s.st.pinPlans(ctx, reportPlans); err != nil {
		return nil, err
	}
	n := len(items)
	var (
		ids     = make(pq.StringArray, n)
		workers = make(pq.StringArray, n)
		leases  = make(pq.StringArray, n)
		results = make([]sql.NullString, n)
		sizes   = make([]sql.NullInt64, n)
		seen    = make(map[uuid.UUID]bool, n)
		err     error
	)
	for i, it := range items {
		if seen[it.ID] {
			return nil, fmt.Errorf("complete: task %s is named twice", it.ID)
		}
		seen[it.ID] = true
		ids[i], workers[i], leases[i] = it.ID.String(), it.WorkerID, it.LeaseID.String()
		if len(it.Result) > 0 {
			results[i] = sql.NullString{String: string(it.Result), Valid: true}
		}
		if sizes[i], err = jsonBytes(it.Result); err != nil {
			return nil, fmt.Errorf("complete: task %s: result: %w", it.ID, err)
		}
	}
	rows, err := selectRows(ctx, s.st.tx, completedRowFields, completeHeldSQL, ids, workers, leases, nullTexts(results), nullInts(sizes))
	if err != nil {
		return nil, fmt.Errorf("complete: %w", err)
	}
	var now time.Time
	if len(rows) > 0 {
		now = rows[0].Now
		s.st.setNow(now)
	} else if now, err = s.st.Now(ctx); err != nil {
		return nil, err
	}
	found := make(map[uuid.UUID]*completedRow, len(rows))
	for i := range rows {
		found[rows[i].ID] = &rows[i]
	}
	out := make([]ports.TaskResult, n)
	var (
		completed []*task.Task
		events    []event.Event
	)
	for i, it := range items {
		out[i].ID = it.ID
		r, ok := found[it.ID]
		if !ok {
			out[i].Err = task.ErrNotFound
			continue
		}
		t := r.toDomain()
		es, err := fn(i, t, now)
		out[i].Task = t
		switch {
		case r.Completed && err != nil:
			return nil, fmt.Errorf("complete: the statement completed task %s, which the domain refuses: %w", it.ID, err)
		case !r.Completed && err == nil:
			return nil, fmt.Errorf("complete: the domain completes task %s, which the statement left alone", it.ID)
		case err != nil:
			out[i].Err = err // refused: the task as it is
			continue
		}
		if t.Status() != task.StatusDone {
			return nil, fmt.Errorf("complete: the domain moved task %s to %s, the statement to DONE", it.ID, t.Status())
		}
		completed = append(completed, t)
		events = append(events, es...)
	}
	s.st.noteFinished(completed)
	s.st.Record(events...)
	return out, nil
}
