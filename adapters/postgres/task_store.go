package postgres

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// taskColumns are the columns of taskRow, in order.
const taskColumns = `id, seq, queue, status, priority, payload, tags, attempts, max_attempts,
	worker_id, lease_id, last_error, dead_reason, result, deadline, run_at,
	idempotency_key, created_at, claimed_at, finished_at, updated_at,
	lease_seconds, lease_expires_at, cancel_requested_at, claim_request_id,
	unique_key, snoozes, retry_base_seconds, retry_max_seconds, retry_jitter,
	blockers, has_dependants, group_key, grank, schedule_name, schedule_tick,
	timeout_seconds, timeout_at, metadata, traceparent, tracestate, progress, awaited,
	workflow_id, replay_of, debounce_until`

// heldTaskColumns are taskColumns but the payload: what the lease protocol
// reads of a worker's tasks (saving a task never writes its payload).
const heldTaskColumns = `id, seq, queue, status, priority, tags, attempts, max_attempts,
	worker_id, lease_id, last_error, dead_reason, result, deadline, run_at,
	idempotency_key, created_at, claimed_at, finished_at, updated_at,
	lease_seconds, lease_expires_at, cancel_requested_at, claim_request_id,
	unique_key, snoozes, retry_base_seconds, retry_max_seconds, retry_jitter,
	blockers, has_dependants, group_key, grank, schedule_name, schedule_tick,
	timeout_seconds, timeout_at, metadata, traceparent, tracestate, progress, awaited,
	workflow_id, replay_of, debounce_until`

// taskRow is one row of tasks.
type taskRow struct {
	ID             uuid.UUID      `db:"id"`
	Seq            int64          `db:"seq"`
	Queue          string         `db:"queue"`
	Status         string         `db:"status"`
	Priority       int            `db:"priority"`
	Payload        []byte         `db:"payload"`
	Tags           pq.StringArray `db:"tags"`
	Attempts       int            `db:"attempts"`
	MaxAttempts    int            `db:"max_attempts"`
	WorkerID       sql.NullString `db:"worker_id"`
	LeaseID        uuid.NullUUID  `db:"lease_id"`
	LastError      sql.NullString `db:"last_error"`
	DeadReason     sql.NullString `db:"dead_reason"`
	Result         []byte         `db:"result"`
	Deadline       sql.NullTime   `db:"deadline"`
	RunAt          time.Time      `db:"run_at"`
	IdempotencyKey sql.NullString `db:"idempotency_key"`
	CreatedAt      time.Time      `db:"created_at"`
	ClaimedAt      sql.NullTime   `db:"claimed_at"`
	FinishedAt     sql.NullTime   `db:"finished_at"`
	UpdatedAt      time.Time      `db:"updated_at"`
	LeaseSeconds   sql.NullInt32  `db:"lease_seconds"`
	LeaseExpiresAt sql.NullTime   `db:"lease_expires_at"`
	CancelReqAt    sql.NullTime   `db:"cancel_requested_at"`
	ClaimRequestID sql.NullString `db:"claim_request_id"`
	UniqueKey      sql.NullString `db:"unique_key"`
	Snoozes        int            `db:"snoozes"`
	retryColumns
	Blockers      sql.NullInt32  `db:"blockers"`
	HasDependants bool           `db:"has_dependants"`
	GroupKey      sql.NullString `db:"group_key"`
	// Grank is the task's round-robin rank in its queue (fairRankSQL).
	Grank          int64          `db:"grank"`
	TimeoutSeconds sql.NullInt32  `db:"timeout_seconds"`
	TimeoutAt      sql.NullTime   `db:"timeout_at"`
	Metadata       []byte         `db:"metadata"`
	Traceparent    sql.NullString `db:"traceparent"`
	Tracestate     sql.NullString `db:"tracestate"`
	Progress       []byte         `db:"progress"`
	Awaited        bool           `db:"awaited"`
	// ScheduleName and ScheduleTick mark a schedule's tick's task
	// (migrations/0017).
	ScheduleName sql.NullString `db:"schedule_name"`
	ScheduleTick sql.NullTime   `db:"schedule_tick"`
	// WorkflowID is NULL for a task that is its own run, ReplayOf for a
	// task that is no replay, DebounceUntil for one never debounced
	// (migrations/0022).
	WorkflowID    uuid.NullUUID `db:"workflow_id"`
	ReplayOf      uuid.NullUUID `db:"replay_of"`
	DebounceUntil sql.NullTime  `db:"debounce_until"`
}

// taskRowNow is a task row with the transaction's now().
type taskRowNow struct {
	taskRow
	Now time.Time `db:"db_now"`
}

func (r *taskRow) toDomain() *task.Task {
	var timeoutAt *time.Time
	if r.Status == string(task.StatusRunning) {
		// timeout_at is left as it was when a task leaves RUNNING
		// (migration 0019).
		timeoutAt = timePtr(r.TimeoutAt)
	}
	return task.Restore(task.Snapshot{
		ID:             r.ID,
		Queue:          r.Queue,
		Status:         task.Status(r.Status),
		Priority:       r.Priority,
		Payload:        json.RawMessage(r.Payload),
		Tags:           []string(r.Tags),
		Attempts:       r.Attempts,
		MaxAttempts:    r.MaxAttempts,
		WorkerID:       r.WorkerID.String,
		LeaseID:        r.LeaseID.UUID,
		LastError:      r.LastError.String,
		DeadReason:     task.DeadReason(r.DeadReason.String),
		Result:         json.RawMessage(r.Result),
		Deadline:       timePtr(r.Deadline),
		RunAt:          r.RunAt,
		IdempotencyKey: r.IdempotencyKey.String,
		CreatedAt:      r.CreatedAt,
		ClaimedAt:      timePtr(r.ClaimedAt),
		FinishedAt:     timePtr(r.FinishedAt),
		UpdatedAt:      r.UpdatedAt,

		LeaseSeconds:      int(r.LeaseSeconds.Int32),
		LeaseExpiresAt:    timePtr(r.LeaseExpiresAt),
		CancelRequestedAt: timePtr(r.CancelReqAt),
		ClaimRequestID:    r.ClaimRequestID.String,

		UniqueKey:     r.UniqueKey.String,
		Snoozes:       r.Snoozes,
		Retry:         r.retryColumns.policy(),
		HasParents:    r.Blockers.Valid,
		Blockers:      int(r.Blockers.Int32),
		HasDependants: r.HasDependants,
		GroupKey:      r.GroupKey.String,

		TimeoutSeconds: int(r.TimeoutSeconds.Int32),
		TimeoutAt:      timeoutAt,
		Metadata:       metadataOf(r.Metadata),
		Trace:          task.Trace{Parent: r.Traceparent.String, State: r.Tracestate.String},
		Progress:       progressOf(r.Progress),
		Awaited:        r.Awaited,
		ScheduleName:   r.ScheduleName.String,
		ScheduleTick:   utcPtr(r.ScheduleTick),
		WorkflowID:     r.WorkflowID.UUID,
		ReplayOf:       r.ReplayOf.UUID,
		DebounceUntil:  timePtr(r.DebounceUntil),
	})
}

// TaskStore implements ports.TaskStore on one transaction.
type TaskStore struct {
	st *txState
}

var _ ports.TaskStore = (*TaskStore)(nil)

// Create implements ports.TaskStore.
func (s *TaskStore) Create(ctx context.Context, fn ports.TaskCreateFunc) (*task.Task, bool, error) {
	return s.CreateKeyed(ctx, fn, ports.KeyRules{})
}

// CreateKeyed implements ports.TaskStore. Without rules it inserts first
// and looks for the holder of the task's keys only when the insert gives
// way; with rules it looks first (a throttle must answer before anything is
// inserted, a debounce must change the holder), then inserts. Either way
// a holder that finishes in between sends it round again.
func (s *TaskStore) CreateKeyed(ctx context.Context, fn ports.TaskCreateFunc, rules ports.KeyRules) (*task.Task, bool, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return nil, false, err
	}
	t, e, err := fn(now)
	if err != nil {
		return nil, false, err
	}
	v := t.Snapshot()
	payloadBytes, err := jsonBytes(v.Payload)
	if err != nil {
		return nil, false, fmt.Errorf("insert task: payload: %w", err)
	}
	retry := retryColumnsOf(v.Retry)
	keyed := rules.Debounce != nil || rules.ThrottleSeconds > 0
	for range maxKeyRaces {
		if keyed {
			held, ok, err := s.keyHolder(ctx, t, rules, now)
			if err != nil || ok {
				return held, false, err
			}
			if held == nil && rules.ThrottleSeconds > 0 {
				if held, err = s.lastHolder(ctx, v, rules.ThrottleSeconds, now); err != nil || held != nil {
					return held, false, err
				}
			}
		}
		var row taskRow
		// No conflict target: the statement gives way to the idempotency
		// index and to the active-unique index (tasks_unique_active) alike.
		err = s.st.tx.GetContext(ctx, &row, `
			INSERT INTO tasks (id, queue, status, priority, payload, tags, attempts, max_attempts,
				deadline, run_at, idempotency_key, created_at, updated_at, payload_bytes,
				unique_key, retry_base_seconds, retry_max_seconds, retry_jitter, group_key, schedule_name, schedule_tick, grank,
				timeout_seconds, metadata, traceparent, tracestate, awaited, workflow_id, replay_of, debounce_until)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $12, $13, $14, $15, $16, $17, $18, $19, $20,
				`+fmt.Sprintf(fairRankSQL, "$2::text", "$18::text")+`, $21, $22, $23, $24, $25, $26, $27, $28)
			ON CONFLICT DO NOTHING
			RETURNING `+taskColumns,
			v.ID, v.Queue, string(v.Status), v.Priority, nullJSON(v.Payload), pq.StringArray(v.Tags),
			v.Attempts, v.MaxAttempts, v.Deadline, v.RunAt, nullString(v.IdempotencyKey), v.CreatedAt, payloadBytes,
			nullString(v.UniqueKey), retry.Base, retry.Max, retry.Jitter, nullString(v.GroupKey),
			nullString(v.ScheduleName), v.ScheduleTick,
			nullInt(v.TimeoutSeconds), metadataJSON(v.Metadata), nullString(v.Trace.Parent), nullString(v.Trace.State), v.Awaited,
			workflowColumn(v), nullUUID(v.ReplayOf), v.DebounceUntil)
		if err == nil {
			s.st.Record(e)
			if v.Status == task.StatusPending {
				s.st.notify(v.Queue, v.RunAt)
			}
			return row.toDomain(), true, nil
		}
		if err != sql.ErrNoRows {
			return nil, false, fmt.Errorf("insert task: %w", err)
		}
		if keyed {
			continue // the holder committed meanwhile: found by the look-up
		}
		// The queue already holds this idempotency key, or an unfinished
		// task with this unique key, or (a schedule's tick) the tick has
		// its task (perhaps committed by a concurrent submission this
		// statement waited for).
		existing, err := s.existing(ctx, []*task.Task{t})
		if err != nil {
			return nil, false, err
		}
		if existing[0] != nil {
			return existing[0], false, nil
		}
		// The unique key's holder finished between the conflict and the
		// look-up: the key is free, try again.
	}
	return nil, false, fmt.Errorf("insert task: unique key %q of queue %q: the holder kept changing", v.UniqueKey, v.Queue)
}

// keyHolder finds the task that holds t's idempotency key or, unfinished,
// its unique key (ok: it answers the submission). The unique key's holder
// of a debounced submission is locked and, while still unfinished, let
// rules.Debounce decide at the database time now; a holder that finished
// before the lock is not one (ok false, held nil: look again).
func (s *TaskStore) keyHolder(ctx context.Context, t *task.Task, rules ports.KeyRules, now time.Time) (*task.Task, bool, error) {
	found, err := s.existing(ctx, []*task.Task{t})
	if err != nil || found[0] == nil {
		return nil, false, err
	}
	held, v := found[0].Snapshot(), t.Snapshot()
	byIdempotency := v.IdempotencyKey != "" && held.IdempotencyKey == v.IdempotencyKey
	if byIdempotency || rules.Debounce == nil {
		return found[0], true, nil
	}
	var row taskRow
	err = s.st.tx.GetContext(ctx, &row, `SELECT `+taskColumns+` FROM tasks WHERE id = $1 AND status IN `+unfinishedSQL+` FOR UPDATE`, held.ID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, false, nil // it finished meanwhile
	}
	if err != nil {
		return nil, false, fmt.Errorf("lock the unique key's holder: %w", err)
	}
	h := row.toDomain()
	events, changed, err := rules.Debounce(h, now)
	if err != nil || !changed {
		return h, true, err
	}
	hv := h.Snapshot()
	payloadBytes, err := jsonBytes(hv.Payload)
	if err != nil {
		return nil, false, fmt.Errorf("debounce task: payload: %w", err)
	}
	if _, err := s.st.tx.ExecContext(ctx, `
		UPDATE tasks SET payload = $2, payload_bytes = $3, run_at = $4, updated_at = $5, debounce_until = $6 WHERE id = $1`,
		hv.ID, nullJSON(hv.Payload), payloadBytes, hv.RunAt, hv.UpdatedAt, hv.DebounceUntil); err != nil {
		return nil, false, fmt.Errorf("debounce task: %w", err)
	}
	s.st.Record(events...)
	if hv.Status == task.StatusPending {
		s.st.notify(hv.Queue, hv.RunAt)
	}
	return h, true, nil
}

// lastHolderSQL selects the queue's ($1) task with unique key $2 that
// finished last, if it finished after $3 (tasks_unique_finished).
var lastHolderSQL = `
	SELECT ` + taskColumns + ` FROM tasks
	WHERE queue = $1 AND unique_key = $2 AND finished_at IS NOT NULL AND finished_at > $3
	ORDER BY finished_at DESC LIMIT 1`

// lastHolder returns the last holder of v's unique key when it finished
// less than seconds before now (task.Task.Throttles), else nil.
func (s *TaskStore) lastHolder(ctx context.Context, v task.Snapshot, seconds int, now time.Time) (*task.Task, error) {
	if v.UniqueKey == "" || !storableText(v.UniqueKey) {
		return nil, nil
	}
	var row taskRow
	err := s.st.tx.GetContext(ctx, &row, lastHolderSQL, v.Queue, v.UniqueKey, now.Add(-time.Duration(seconds)*time.Second))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("last holder of a unique key: %w", err)
	}
	if t := row.toDomain(); t.Throttles(seconds, now) {
		return t, nil
	}
	return nil, nil
}

// maxKeyRaces bounds the tries of a submission whose unique key's holder
// finishes in the instant between the insert's conflict and the look-up of
// the holder (each try needs that to happen anew).
const maxKeyRaces = 5

// Get implements ports.TaskStore.
func (s *TaskStore) Get(ctx context.Context, id uuid.UUID) (*task.Task, error) {
	var row taskRow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+taskColumns+` FROM tasks WHERE id = $1`, id)
	if err != nil {
		return nil, notFound(err, task.ErrNotFound)
	}
	return row.toDomain(), nil
}

// Update implements ports.TaskStore.
func (s *TaskStore) Update(ctx context.Context, id uuid.UUID, fn ports.TaskUpdateFunc) (*task.Task, error) {
	var row taskRowNow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+taskColumns+`, now() AS db_now FROM tasks WHERE id = $1 FOR UPDATE`, id)
	if err != nil {
		return nil, notFound(err, task.ErrNotFound)
	}
	s.st.setNow(row.Now)
	t := row.toDomain()
	events, err := fn(t, row.Now)
	if err != nil {
		return nil, err
	}
	if err := s.save(ctx, t); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	if t.Status() == task.StatusPending {
		s.st.notify(t.Queue(), t.Snapshot().RunAt)
	}
	return t, nil
}

// save writes every mutable column of t. A task moving back into an
// unfinished status (an operator's retry) whose unique key another
// unfinished task holds is refused with a *task.UniqueKeyError.
func (s *TaskStore) save(ctx context.Context, t *task.Task) error {
	v := t.Snapshot()
	resultBytes, err := jsonBytes(v.Result)
	if err != nil {
		return fmt.Errorf("save task: result: %w", err)
	}
	_, err = s.st.tx.ExecContext(ctx, `
		UPDATE tasks SET status = $2, attempts = $3, worker_id = $4, lease_id = $5, last_error = $6,
			dead_reason = $7, result = $8, run_at = $9, claimed_at = $10, finished_at = $11, updated_at = $12,
			lease_seconds = $13, lease_expires_at = $14, cancel_requested_at = $15, claim_request_id = $16,
			result_bytes = $17, snoozes = $18
		WHERE id = $1`,
		v.ID, string(v.Status), v.Attempts, nullString(v.WorkerID), nullUUID(v.LeaseID), nullString(v.LastError),
		nullString(string(v.DeadReason)), nullJSON(v.Result), v.RunAt, v.ClaimedAt, v.FinishedAt, v.UpdatedAt,
		nullInt(v.LeaseSeconds), v.LeaseExpiresAt, v.CancelRequestedAt, nullString(v.ClaimRequestID), resultBytes, v.Snoozes)
	if err != nil {
		return uniqueKeyConflict(err, v)
	}
	return s.st.saved(ctx, t)
}

// taskBytesSQL estimates, for a row t of tasks, the bytes its task takes in
// a response: its payload's and result's JSON texts (payload_bytes and
// result_bytes, written with them; rendered for rows older than migration
// 0007), its last error, metadata, progress and tracestate (NULL for most
// tasks: nothing to render), and taskOverheadBytes for the rest.
const taskBytesSQL = `(coalesce(t.payload_bytes, octet_length(t.payload::text), 0)
	+ coalesce(t.result_bytes, octet_length(t.result::text), 0)
	+ coalesce(octet_length(t.last_error), 0) + coalesce(octet_length(t.metadata::text), 0)
	+ coalesce(octet_length(t.progress::text), 0) + coalesce(octet_length(t.tracestate), 0) + ` + taskOverheadBytes + `)`

// taskOverheadBytes bounds what a task's JSON holds besides its payload,
// result and last error: ids, times, queue (128), tags (16 of 64), the
// idempotency key (255, escaped), names and punctuation.
const taskOverheadBytes = "3072"

// countedRow is a row of a capped statement (a claim, a list page) and how
// many candidates that statement considered before the byte cap.
type countedRow struct {
	taskRow
	Candidates int `db:"candidates"`
}

// inClaimOrder sorts rows as claims hand them out: priority DESC, then FIFO.
func inClaimOrder(rows []taskRow) {
	sort.Slice(rows, func(i, j int) bool { return claimsBefore(&rows[i], &rows[j]) })
}

// ClaimedUnder implements ports.TaskStore.
func (s *TaskStore) ClaimedUnder(ctx context.Context, workerID, requestID string) ([]*task.Task, error) {
	out, err := s.ClaimedUnderEach(ctx, []ports.ClaimRef{{WorkerID: workerID, RequestID: requestID}})
	if err != nil {
		return nil, err
	}
	return out[0], nil
}

// claimedUnderEachSQL selects the tasks RUNNING under a worker from the
// claim with a request id, for several (worker, request id) pairs ($1, $2)
// (task.Task.ClaimedUnder). It walks tasks_running_by_claim (0007).
var claimedUnderEachSQL = `
	SELECT ` + prefixed("t.", taskColumns) + ` FROM tasks t
	JOIN unnest($1::text[], $2::text[]) AS r(worker_id, request_id)
		ON t.worker_id = r.worker_id AND t.claim_request_id = r.request_id
	WHERE t.status = 'RUNNING'`

// ClaimedUnderEach implements ports.TaskStore.
func (s *TaskStore) ClaimedUnderEach(ctx context.Context, refs []ports.ClaimRef) ([][]*task.Task, error) {
	out := make([][]*task.Task, len(refs))
	var workers, requests pq.StringArray
	asked := make(map[ports.ClaimRef]bool, len(refs))
	for i, r := range refs {
		out[i] = []*task.Task{}
		// Each pair once: a repeated pair would join every task twice.
		if r.RequestID != "" && storableText(r.WorkerID) && storableText(r.RequestID) && !asked[r] {
			asked[r] = true
			workers, requests = append(workers, r.WorkerID), append(requests, r.RequestID)
		}
	}
	if len(workers) == 0 {
		return out, nil // no claim carried such an id
	}
	var rows []taskRow
	if err := s.st.tx.SelectContext(ctx, &rows, claimedUnderEachSQL, workers, requests); err != nil {
		return nil, fmt.Errorf("select tasks of claims: %w", err)
	}
	inClaimOrder(rows)
	for i := range rows {
		t := rows[i].toDomain()
		for j, r := range refs {
			if t.ClaimedUnder(r.WorkerID, r.RequestID) {
				out[j] = append(out[j], t)
			}
		}
	}
	return out, nil
}

func prefixed(prefix, columns string) string {
	parts := strings.Split(columns, ",")
	for i, p := range parts {
		parts[i] = prefix + strings.TrimSpace(p)
	}
	return strings.Join(parts, ", ")
}

// utcPtr is timePtr in UTC.
func utcPtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	u := t.Time.UTC()
	return &u
}

func timePtr(t sql.NullTime) *time.Time {
	if !t.Valid {
		return nil
	}
	return &t.Time
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

func nullUUID(id uuid.UUID) uuid.NullUUID { return uuid.NullUUID{UUID: id, Valid: id != uuid.Nil} }

// workflowColumn is the workflow_id column of v: NULL when the task is its
// own run (migrations/0022).
func workflowColumn(v task.Snapshot) sql.NullString {
	if v.WorkflowID == uuid.Nil || v.WorkflowID == v.ID {
		return sql.NullString{}
	}
	return sql.NullString{String: v.WorkflowID.String(), Valid: true}
}

// nullInt stores 0 as SQL NULL.
func nullInt(n int) sql.NullInt64 { return sql.NullInt64{Int64: int64(n), Valid: n != 0} }

// nullJSON stores an absent value as SQL NULL. JSON goes as text: lib/pq
// would send a []byte as bytea.
func nullJSON(b json.RawMessage) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}
