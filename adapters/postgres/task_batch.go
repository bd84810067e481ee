package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jmoiron/sqlx"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// insertTasksSQL inserts new tasks, in the status the domain gave them,
// from parallel arrays in one statement (newTaskArrays): every batch of new
// tasks, with dependencies or not. Per-row arrays (tags) and nullable values
// travel as text and are cast per row; lib/pq has no array-of-arrays or
// nullable-array encoding otherwise.
const insertTasksSQL = `
	INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts,
		deadline, run_at, idempotency_key, created_at, updated_at, payload_bytes,
		blockers, has_dependants, dead_reason, finished_at)
	SELECT u.id, u.queue, u.status, u.priority, u.payload::jsonb, u.tags::text[], 0, u.max_attempts,
		u.deadline::timestamptz, u.run_at::timestamptz, u.idempotency_key, $10, $10, u.payload_bytes,
		u.blockers, u.has_dependants, u.dead_reason, u.finished_at::timestamptz
	FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::int[],
		$7::text[], $8::text[], $9::text[], $11::int[], $12::text[], $13::int[], $14::bool[], $15::text[], $16::text[])
		AS u(id, queue, priority, payload, tags, max_attempts, deadline, run_at, idempotency_key, payload_bytes,
			status, blockers, has_dependants, dead_reason, finished_at)
	ON CONFLICT (queue, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING
	RETURNING ` + taskColumns

// newTaskArrays are the columns of new tasks as the parallel arrays of
// insertTasksSQL.
type newTaskArrays struct {
	ids, queues, tags, runAts, statuses pq.StringArray
	priorities, maxAtt                  pq.Int64Array
	payloads, deadlines, keys           []sql.NullString
	deadReasons, finishedAts            []sql.NullString
	sizes, blockers                     []sql.NullInt64
	dependants                          pq.BoolArray
}

func newTaskArraysOf(ts []*task.Task) (newTaskArrays, error) {
	n := len(ts)
	a := newTaskArrays{
		ids: make(pq.StringArray, n), queues: make(pq.StringArray, n), tags: make(pq.StringArray, n),
		runAts: make(pq.StringArray, n), statuses: make(pq.StringArray, n),
		priorities: make(pq.Int64Array, n), maxAtt: make(pq.Int64Array, n),
		payloads: make([]sql.NullString, n), deadlines: make([]sql.NullString, n), keys: make([]sql.NullString, n),
		deadReasons: make([]sql.NullString, n), finishedAts: make([]sql.NullString, n),
		sizes: make([]sql.NullInt64, n), blockers: make([]sql.NullInt64, n), dependants: make(pq.BoolArray, n),
	}
	for i, t := range ts {
		v := t.Snapshot()
		a.ids[i], a.queues[i], a.priorities[i], a.maxAtt[i], a.runAts[i] = v.ID.String(), v.Queue, int64(v.Priority), int64(v.MaxAttempts), timeText(v.RunAt)
		if len(v.Payload) > 0 {
			a.payloads[i] = sql.NullString{String: string(v.Payload), Valid: true}
		}
		var err error
		if a.sizes[i], err = jsonBytes(v.Payload); err != nil {
			return newTaskArrays{}, fmt.Errorf("insert tasks: tasks[%d].payload: %w", i, err)
		}
		lit, err := pq.StringArray(v.Tags).Value()
		if err != nil {
			return newTaskArrays{}, fmt.Errorf("encode tags: %w", err)
		}
		a.tags[i] = lit.(string)
		a.deadlines[i] = nullTimeText(v.Deadline)
		a.keys[i] = nullString(v.IdempotencyKey)
		a.statuses[i] = string(v.Status)
		a.blockers[i] = sql.NullInt64{Int64: int64(v.Blockers), Valid: v.HasParents}
		a.dependants[i] = v.HasDependants
		a.deadReasons[i] = nullString(string(v.DeadReason))
		a.finishedAts[i] = nullTimeText(v.FinishedAt)
	}
	return a, nil
}

// insert runs insertTasksSQL at the transaction's time now and returns the
// rows inserted (not those whose idempotency key was taken).
func (a newTaskArrays) insert(ctx context.Context, tx sqlx.QueryerContext, now time.Time) ([]taskRow, error) {
	var rows []taskRow
	err := sqlx.SelectContext(ctx, tx, &rows, insertTasksSQL,
		a.ids, a.queues, a.priorities, pq.Array(a.payloads), a.tags, a.maxAtt,
		pq.Array(a.deadlines), a.runAts, pq.Array(a.keys), now, pq.Array(a.sizes),
		a.statuses, pq.Array(a.blockers), a.dependants, pq.Array(a.deadReasons), pq.Array(a.finishedAts))
	if err != nil {
		return nil, fmt.Errorf("insert tasks: %w", err)
	}
	return rows, nil
}

// CreateMany implements ports.TaskStore.
func (s *TaskStore) CreateMany(ctx context.Context, fn ports.TaskCreateManyFunc) ([]*task.Task, []bool, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return nil, nil, err
	}
	ts, events, err := fn(now)
	if err != nil {
		return nil, nil, err
	}
	n := len(ts)
	arrays, err := newTaskArraysOf(ts)
	if err != nil {
		return nil, nil, err
	}
	rows, err := arrays.insert(ctx, s.st.tx, now)
	if err != nil {
		return nil, nil, err
	}
	inserted := make(map[uuid.UUID]*taskRow, len(rows))
	for i := range rows {
		inserted[rows[i].ID] = &rows[i]
	}
	out := make([]*task.Task, n)
	created := make([]bool, n)
	var recorded []event.Event
	var missing []int
	for i, t := range ts {
		if r, ok := inserted[t.ID()]; ok {
			out[i], created[i] = r.toDomain(), true
			recorded = append(recorded, events[i])
			s.st.notify(r.Queue)
			continue
		}
		missing = append(missing, i)
	}
	if err := s.loadExisting(ctx, ts, missing, out); err != nil {
		return nil, nil, err
	}
	s.st.Record(recorded...)
	return out, created, nil
}

// loadExisting fills out[i] for the items whose idempotency key already
// existed (in the table, or earlier in the same batch).
func (s *TaskStore) loadExisting(ctx context.Context, ts []*task.Task, missing []int, out []*task.Task) error {
	if len(missing) == 0 {
		return nil
	}
	queues := make(pq.StringArray, len(missing))
	keys := make(pq.StringArray, len(missing))
	for j, i := range missing {
		v := ts[i].Snapshot()
		queues[j], keys[j] = v.Queue, v.IdempotencyKey
	}
	var rows []taskRow
	err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT `+prefixed("t.", taskColumns)+` FROM tasks t
		JOIN unnest($1::text[], $2::text[]) AS k(queue, key) ON t.queue = k.queue AND t.idempotency_key = k.key`,
		queues, keys)
	if err != nil {
		return fmt.Errorf("load tasks by idempotency key: %w", err)
	}
	byKey := make(map[[2]string]*taskRow, len(rows))
	for i := range rows {
		byKey[[2]string{rows[i].Queue, rows[i].IdempotencyKey.String}] = &rows[i]
	}
	for _, i := range missing {
		v := ts[i].Snapshot()
		r, ok := byKey[[2]string{v.Queue, v.IdempotencyKey}]
		if !ok {
			return fmt.Errorf("task %s was neither inserted nor found by its idempotency key", v.ID)
		}
		out[i] = r.toDomain()
	}
	return nil
}

// UpdateEach implements ports.TaskStore.
func (s *TaskStore) UpdateEach(ctx context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	var rows []taskRowNow
	// Lock in id order so concurrent batches cannot deadlock each other.
	err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT `+taskColumns+`, now() AS db_now FROM tasks WHERE id = ANY($1::uuid[]) ORDER BY id FOR UPDATE`, uuidArray(ids))
	if err != nil {
		return nil, fmt.Errorf("lock tasks: %w", err)
	}
	found := make(map[uuid.UUID]*task.Task, len(rows))
	now, err := s.st.nowOf(ctx, rows)
	if err != nil {
		return nil, err
	}
	for i := range rows {
		found[rows[i].ID] = rows[i].toDomain()
	}
	out := make([]ports.TaskResult, len(ids))
	var changed []*task.Task
	var events []event.Event
	for i, id := range ids {
		out[i].ID = id
		t, ok := found[id]
		if !ok {
			out[i].Err = task.ErrNotFound
			continue
		}
		es, err := fn(i, t, now)
		out[i].Task = t
		if err != nil {
			out[i].Err = err
			// The domain refused and changed nothing; show the stored state.
			continue
		}
		changed = append(changed, t)
		events = append(events, es...)
	}
	if err := saveTasks(ctx, s.st, changed); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return out, nil
}

// saveTasks writes every mutable column of ts with one statement, in id
// order, and asks for a wake-up of the queues that got PENDING tasks. Batch
// reports and the reapers save through it.
func saveTasks(ctx context.Context, st *txState, ts []*task.Task) error {
	if len(ts) == 0 {
		return nil
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i].ID().String() < ts[j].ID().String() })
	n := len(ts)
	var (
		ids         = make(pq.StringArray, n)
		statuses    = make(pq.StringArray, n)
		attempts    = make(pq.Int64Array, n)
		workers     = make([]sql.NullString, n)
		leases      = make([]sql.NullString, n)
		lastErrors  = make([]sql.NullString, n)
		deadReasons = make([]sql.NullString, n)
		results     = make([]sql.NullString, n)
		runAts      = make(pq.StringArray, n)
		claimedAts  = make([]sql.NullString, n)
		finishedAts = make([]sql.NullString, n)
		updatedAts  = make(pq.StringArray, n)
		leaseSecs   = make([]sql.NullInt64, n)
		leaseEnds   = make([]sql.NullString, n)
		cancelAts   = make([]sql.NullString, n)
		requestIDs  = make([]sql.NullString, n)
		resultSizes = make([]sql.NullInt64, n)
		err         error
	)
	for i, t := range ts {
		v := t.Snapshot()
		ids[i], statuses[i], attempts[i], runAts[i], updatedAts[i] = v.ID.String(), string(v.Status), int64(v.Attempts), timeText(v.RunAt), timeText(v.UpdatedAt)
		workers[i] = nullString(v.WorkerID)
		if v.LeaseID != uuid.Nil {
			leases[i] = sql.NullString{String: v.LeaseID.String(), Valid: true}
		}
		lastErrors[i] = nullString(v.LastError)
		deadReasons[i] = nullString(string(v.DeadReason))
		if len(v.Result) > 0 {
			results[i] = sql.NullString{String: string(v.Result), Valid: true}
		}
		if resultSizes[i], err = jsonBytes(v.Result); err != nil {
			return fmt.Errorf("save tasks: task %s: result: %w", v.ID, err)
		}
		claimedAts[i] = nullTimeText(v.ClaimedAt)
		finishedAts[i] = nullTimeText(v.FinishedAt)
		leaseSecs[i] = nullInt(v.LeaseSeconds)
		leaseEnds[i] = nullTimeText(v.LeaseExpiresAt)
		cancelAts[i] = nullTimeText(v.CancelRequestedAt)
		requestIDs[i] = nullString(v.ClaimRequestID)
		if v.Status == task.StatusPending {
			st.notify(v.Queue)
		}
	}
	_, err = st.tx.ExecContext(ctx, `
		UPDATE tasks t SET status = u.status, attempts = u.attempts, worker_id = u.worker_id,
			lease_id = u.lease_id::uuid, last_error = u.last_error, dead_reason = u.dead_reason,
			result = u.result::jsonb, run_at = u.run_at::timestamptz, claimed_at = u.claimed_at::timestamptz,
			finished_at = u.finished_at::timestamptz, updated_at = u.updated_at::timestamptz,
			lease_seconds = u.lease_seconds, lease_expires_at = u.lease_expires_at::timestamptz,
			cancel_requested_at = u.cancel_requested_at::timestamptz, claim_request_id = u.claim_request_id,
			result_bytes = u.result_bytes
		FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int[], $14::text[], $15::text[], $16::text[],
			$17::int[])
			AS u(id, status, attempts, worker_id, lease_id, last_error, dead_reason, result, run_at,
				claimed_at, finished_at, updated_at, lease_seconds, lease_expires_at, cancel_requested_at, claim_request_id,
				result_bytes)
		WHERE t.id = u.id`,
		ids, statuses, attempts, pq.Array(workers), pq.Array(leases), pq.Array(lastErrors),
		pq.Array(deadReasons), pq.Array(results), runAts, pq.Array(claimedAts),
		pq.Array(finishedAts), updatedAts, pq.Array(leaseSecs), pq.Array(leaseEnds), pq.Array(cancelAts), pq.Array(requestIDs),
		pq.Array(resultSizes))
	if err != nil {
		return fmt.Errorf("save tasks: %w", err)
	}
	return st.saved(ctx, ts...)
}

func uuidArray(ids []uuid.UUID) pq.StringArray {
	out := make(pq.StringArray, len(ids))
	for i, id := range ids {
		out[i] = id.String()
	}
	return out
}

func nullTimeText(t *time.Time) sql.NullString {
	if t == nil {
		return sql.NullString{}
	}
	return sql.NullString{String: timeText(*t), Valid: true}
}

// timeText encodes a time for a text[] parameter cast to timestamptz; it
// keeps microseconds, PostgreSQL's precision.
func timeText(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }
