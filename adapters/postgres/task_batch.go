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
// tasks, plain, enqueued or with dependencies. Per-row arrays (tags) and
// nullable values travel as text and are cast per row; lib/pq has no
// array-of-arrays or nullable-array encoding otherwise. ON CONFLICT has no
// target: an item gives way to the idempotency index and to the
// active-unique index alike, including to an earlier item of the same
// batch. The round-robin rank (fairRankSQL) is read once per queue and
// group of the batch (k is materialized: inlined, the planner evaluated
// the look-ups once per row); the batch's tasks of one group take
// consecutive ranks from there, in batch order.
var insertTasksSQL = `
	WITH u AS (
		SELECT * FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::int[],
			$7::text[], $8::text[], $9::text[], $11::int[], $12::text[], $13::float8[], $14::float8[], $15::text[],
			$16::text[], $17::int[], $18::bool[], $19::text[], $20::text[], $21::text[],
			$22::int[], $23::text[], $24::text[], $25::text[], $26::bool[], $27::uuid[], $28::uuid[])
			WITH ORDINALITY AS u(id, queue, priority, payload, tags, max_attempts, deadline, run_at, idempotency_key, payload_bytes,
				unique_key, retry_base, retry_max, retry_jitter, status, blockers, has_dependants, dead_reason, finished_at,
				group_key, timeout_seconds, metadata, traceparent, tracestate, awaited, workflow_id, replay_of, n)
	), k AS MATERIALIZED (
		SELECT k.queue, k.group_key, ` + fmt.Sprintf(fairRankSQL, "k.queue", "k.group_key") + ` AS base
		FROM (SELECT DISTINCT queue, group_key FROM u) k
	)
	INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts,
		deadline, run_at, idempotency_key, created_at, updated_at, payload_bytes,
		unique_key, retry_base_seconds, retry_max_seconds, retry_jitter,
		blockers, has_dependants, dead_reason, finished_at, group_key, grank,
		timeout_seconds, metadata, traceparent, tracestate, awaited, workflow_id, replay_of)
	SELECT u.id, u.queue, u.status, u.priority, u.payload::jsonb, u.tags::text[], 0, u.max_attempts,
		u.deadline::timestamptz, u.run_at::timestamptz, u.idempotency_key, $10, $10, u.payload_bytes,
		u.unique_key, u.retry_base, u.retry_max, u.retry_jitter,
		u.blockers, u.has_dependants, u.dead_reason, u.finished_at::timestamptz, u.group_key,
		k.base + row_number() OVER (PARTITION BY u.queue, u.group_key ORDER BY u.n) - 1,
		u.timeout_seconds, u.metadata::jsonb, u.traceparent, u.tracestate, u.awaited, u.workflow_id, u.replay_of
	FROM u JOIN k ON k.queue = u.queue AND k.group_key IS NOT DISTINCT FROM u.group_key
	ORDER BY u.n
	ON CONFLICT DO NOTHING
	RETURNING ` + taskColumns

// fairRankSQL is the round-robin rank of a new task of queue %[1]s and
// group %[2]s (NULL: the tasks without a group, which form one group):
// right after the group's last PENDING task; for a group that has none, the
// rank of the task at the head of the queue (the round the queue's claims
// have reached), so that a group that had nothing waiting joins the current
// round instead of jumping ahead of it or waiting behind every other
// group's backlog. Within a priority, claims take tasks by rank, then
// submission order (the claim index), so groups take turns: one task of
// every group that has one at a rank, then the next rank. One descent of
// tasks_group_rank, at its high end (which claims do not churn), and of the
// claim index only for a group with nothing waiting. Concurrent submissions
// may give two tasks of a group the same rank (submission order settles
// them).
const fairRankSQL = `coalesce(
		(SELECT h.grank + 1 FROM tasks h
			WHERE h.queue = %[1]s AND coalesce(h.group_key, '') = coalesce(%[2]s, '') AND h.status = 'PENDING'
			ORDER BY h.grank DESC LIMIT 1),
		(SELECT h.grank FROM tasks h WHERE h.queue = %[1]s AND h.status = 'PENDING'
			ORDER BY h.priority DESC, h.grank, h.seq LIMIT 1),
		0)`

// newTaskArrays are the columns of new tasks as the parallel arrays of
// insertTasksSQL.
type newTaskArrays struct {
	ids, queues, tags, runAts, statuses pq.StringArray
	priorities, maxAtt                  pq.Int64Array
	payloads, deadlines, keys, ukeys    []sql.NullString
	jitters, deadReasons, finishedAts   []sql.NullString
	groups                              []sql.NullString
	bases, maxes                        []sql.NullFloat64
	sizes, blockers                     []sql.NullInt64
	dependants                          pq.BoolArray
	timeouts                            []sql.NullInt64
	metadata, parents, states           []sql.NullString
	awaited                             pq.BoolArray
	workflows, replays                  []sql.NullString
}

func newTaskArraysOf(ts []*task.Task) (newTaskArrays, error) {
	n := len(ts)
	a := newTaskArrays{
		ids: make(pq.StringArray, n), queues: make(pq.StringArray, n), tags: make(pq.StringArray, n),
		runAts: make(pq.StringArray, n), statuses: make(pq.StringArray, n),
		priorities: make(pq.Int64Array, n), maxAtt: make(pq.Int64Array, n),
		payloads: make([]sql.NullString, n), deadlines: make([]sql.NullString, n), keys: make([]sql.NullString, n),
		ukeys: make([]sql.NullString, n), jitters: make([]sql.NullString, n),
		deadReasons: make([]sql.NullString, n), finishedAts: make([]sql.NullString, n), groups: make([]sql.NullString, n),
		bases: make([]sql.NullFloat64, n), maxes: make([]sql.NullFloat64, n),
		sizes: make([]sql.NullInt64, n), blockers: make([]sql.NullInt64, n), dependants: make(pq.BoolArray, n),
		timeouts: make([]sql.NullInt64, n), metadata: make([]sql.NullString, n), parents: make([]sql.NullString, n),
		states: make([]sql.NullString, n), awaited: make(pq.BoolArray, n),
		workflows: make([]sql.NullString, n), replays: make([]sql.NullString, n),
	}
	for i, t := range ts {
		v := t.Snapshot()
		if v.ScheduleTick != nil {
			// Its mark has no column here: a tick's task is created alone.
			return newTaskArrays{}, fmt.Errorf("insert tasks: task %s is a schedule's tick: create it with Create", v.ID)
		}
		a.ids[i], a.queues[i], a.priorities[i], a.maxAtt[i], a.runAts[i] = v.ID.String(), v.Queue, int64(v.Priority), int64(v.MaxAttempts), timeText(v.RunAt)
		if len(v.Payload) > 0 {
			a.payloads[i] = sql.NullString{String: string(v.Payload), Valid: true}
		}
		var err error
		if a.sizes[i], err = jsonBytes(v.Payload); err != nil {
			return newTaskArrays{}, fmt.Errorf("insert tasks: task %s: payload: %w", v.ID, err)
		}
		lit, err := pq.StringArray(v.Tags).Value()
		if err != nil {
			return newTaskArrays{}, fmt.Errorf("encode tags: %w", err)
		}
		a.tags[i] = lit.(string)
		a.deadlines[i] = nullTimeText(v.Deadline)
		a.keys[i] = nullString(v.IdempotencyKey)
		a.ukeys[i] = nullString(v.UniqueKey)
		retry := retryColumnsOf(v.Retry)
		a.bases[i], a.maxes[i], a.jitters[i] = retry.Base, retry.Max, retry.Jitter
		a.statuses[i] = string(v.Status)
		a.blockers[i] = sql.NullInt64{Int64: int64(v.Blockers), Valid: v.HasParents}
		a.dependants[i] = v.HasDependants
		a.deadReasons[i] = nullString(string(v.DeadReason))
		a.finishedAts[i] = nullTimeText(v.FinishedAt)
		a.groups[i] = nullString(v.GroupKey)
		a.timeouts[i] = nullInt(v.TimeoutSeconds)
		if m, ok := metadataJSON(v.Metadata).(string); ok {
			a.metadata[i] = sql.NullString{String: m, Valid: true}
		}
		a.parents[i], a.states[i] = nullString(v.Trace.Parent), nullString(v.Trace.State)
		a.awaited[i] = v.Awaited
		a.workflows[i] = workflowColumn(v)
		if v.ReplayOf != uuid.Nil {
			a.replays[i] = sql.NullString{String: v.ReplayOf.String(), Valid: true}
		}
		if v.DebounceUntil != nil {
			// Debounce applies to single submissions only.
			return newTaskArrays{}, fmt.Errorf("insert tasks: task %s is debounced: create it with CreateKeyed", v.ID)
		}
	}
	return a, nil
}

// insert runs insertTasksSQL at the transaction's time now and returns the
// rows inserted by id (an item that gave way to an idempotency or unique key
// is missing).
func (a newTaskArrays) insert(ctx context.Context, tx sqlx.QueryerContext, now time.Time) (map[uuid.UUID]*taskRow, error) {
	rows, err := selectRows(ctx, tx, taskRowFields, insertTasksSQL,
		a.ids, a.queues, a.priorities, nullTexts(a.payloads), a.tags, a.maxAtt,
		nullTexts(a.deadlines), a.runAts, nullTexts(a.keys), now, nullInts(a.sizes),
		nullTexts(a.ukeys), nullFloats(a.bases), nullFloats(a.maxes), nullTexts(a.jitters),
		a.statuses, nullInts(a.blockers), a.dependants, nullTexts(a.deadReasons), nullTexts(a.finishedAts), nullTexts(a.groups),
		nullInts(a.timeouts), nullTexts(a.metadata), nullTexts(a.parents), nullTexts(a.states), a.awaited,
		nullTexts(a.workflows), nullTexts(a.replays))
	if err != nil {
		return nil, fmt.Errorf("insert tasks: %w", err)
	}
	inserted := make(map[uuid.UUID]*taskRow, len(rows))
	for i := range rows {
		inserted[rows[i].ID] = &rows[i]
	}
	return inserted, nil
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
	out := make([]*task.Task, len(ts))
	created := make([]bool, len(ts))
	var recorded []event.Event
	todo := make([]int, len(ts)) // the items neither inserted nor found yet
	for i := range todo {
		todo[i] = i
	}
	for range maxKeyRaces {
		inserted, err := s.insertMany(ctx, ts, todo, now)
		if err != nil {
			return nil, nil, err
		}
		var missing, left []int
		for _, i := range todo {
			if r, ok := inserted[ts[i].ID()]; ok {
				out[i], created[i] = r.toDomain(), true
				recorded = append(recorded, events[i])
				if r.Status == string(task.StatusPending) {
					s.st.notify(r.Queue, r.RunAt)
				}
				continue
			}
			missing = append(missing, i)
		}
		if len(missing) > 0 {
			pick := make([]*task.Task, len(missing))
			for j, i := range missing {
				pick[j] = ts[i]
			}
			found, err := s.existing(ctx, pick)
			if err != nil {
				return nil, nil, err
			}
			for j, i := range missing {
				if found[j] == nil {
					// Its unique key's holder finished in between: try again.
					left = append(left, i)
					continue
				}
				out[i] = found[j]
			}
		}
		if todo = left; len(todo) == 0 {
			s.st.Record(recorded...)
			return out, created, nil
		}
	}
	return nil, nil, fmt.Errorf("insert tasks: the unique keys' holders kept changing")
}

// insertMany inserts the items idx of ts with one statement (insertTasksSQL)
// and returns the inserted rows by id; an item that gave way to an
// idempotency or unique key is missing.
func (s *TaskStore) insertMany(ctx context.Context, ts []*task.Task, idx []int, now time.Time) (map[uuid.UUID]*taskRow, error) {
	pick := make([]*task.Task, len(idx))
	for i, item := range idx {
		pick[i] = ts[item]
	}
	a, err := newTaskArraysOf(pick)
	if err != nil {
		return nil, err
	}
	return a.insert(ctx, s.st.tx, now)
}

// UpdateEach implements ports.TaskStore.
func (s *TaskStore) UpdateEach(ctx context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc) ([]ports.TaskResult, error) {
	out, changed, events, err := s.decideEach(ctx, ids, fn, nil)
	if err != nil {
		return nil, err
	}
	if err := saveTasks(ctx, s.st, changed); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return out, nil
}

// decideEach locks the tasks with these ids in id order (so concurrent
// batches cannot deadlock each other) and lets fn decide each that exists,
// at the database time. It returns the results in ids order, the tasks fn
// changed and their events; check, when not nil, vets each change (its
// error fails the whole call: the store's contract broken).
func (s *TaskStore) decideEach(ctx context.Context, ids []uuid.UUID, fn ports.TaskUpdateEachFunc,
	check func(before task.Snapshot, t *task.Task) error) ([]ports.TaskResult, []*task.Task, []event.Event, error) {
	rows, err := selectRows(ctx, s.st.tx, taskRowNowFields, lockTasksByIDSQL, uuidArray(ids))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("lock tasks: %w", err)
	}
	now, err := s.st.nowOf(ctx, rows)
	if err != nil {
		return nil, nil, nil, err
	}
	found := make(map[uuid.UUID]*task.Task, len(rows))
	for i := range rows {
		found[rows[i].ID] = rows[i].toDomain()
	}
	out := make([]ports.TaskResult, len(ids))
	var (
		changed []*task.Task
		events  []event.Event
	)
	for i, id := range ids {
		out[i].ID = id
		t, ok := found[id]
		if !ok {
			out[i].Err = task.ErrNotFound
			continue
		}
		var before task.Snapshot
		if check != nil {
			before = t.Snapshot()
		}
		es, err := fn(i, t, now)
		out[i].Task = t
		if err != nil {
			out[i].Err = err
			// The domain refused and changed nothing; show the stored state.
			continue
		}
		if check != nil {
			if err := check(before, t); err != nil {
				return nil, nil, nil, err
			}
		}
		changed = append(changed, t)
		events = append(events, es...)
	}
	return out, changed, events, nil
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
		snoozes     = make(pq.Int64Array, n)
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
		snoozes[i] = int64(v.Snoozes)
		if v.Status == task.StatusPending {
			st.notify(v.Queue, v.RunAt)
		}
	}
	_, err = st.tx.ExecContext(ctx, `
		UPDATE tasks t SET status = u.status, attempts = u.attempts, worker_id = u.worker_id,
			lease_id = u.lease_id::uuid, last_error = u.last_error, dead_reason = u.dead_reason,
			result = u.result::jsonb, run_at = u.run_at::timestamptz, claimed_at = u.claimed_at::timestamptz,
			finished_at = u.finished_at::timestamptz, updated_at = u.updated_at::timestamptz,
			lease_seconds = u.lease_seconds, lease_expires_at = u.lease_expires_at::timestamptz,
			cancel_requested_at = u.cancel_requested_at::timestamptz, claim_request_id = u.claim_request_id,
			result_bytes = u.result_bytes, snoozes = u.snoozes
		FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[], $7::text[],
			$8::text[], $9::text[], $10::text[], $11::text[], $12::text[], $13::int[], $14::text[], $15::text[], $16::text[],
			$17::int[], $18::int[])
			AS u(id, status, attempts, worker_id, lease_id, last_error, dead_reason, result, run_at,
				claimed_at, finished_at, updated_at, lease_seconds, lease_expires_at, cancel_requested_at, claim_request_id,
				result_bytes, snoozes)
		WHERE t.id = u.id`,
		ids, statuses, attempts, nullTexts(workers), nullTexts(leases), nullTexts(lastErrors),
		nullTexts(deadReasons), nullTexts(results), runAts, nullTexts(claimedAts),
		nullTexts(finishedAts), updatedAts, nullInts(leaseSecs), nullTexts(leaseEnds), nullTexts(cancelAts), nullTexts(requestIDs),
		nullInts(resultSizes), snoozes)
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
