package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// BulkStore implements ports.BulkStore on one transaction.
type BulkStore struct {
	st *txState
}

var _ ports.BulkStore = (*BulkStore)(nil)

// matching builds the WHERE clause of task.Filter.Matches (and of the
// visible queues), over rows t of tasks, appending its parameters to args.
// It is the domain's rule in SQL; TestBulkFilterAgreesWithDomain checks
// them against each other.
func matching(f task.Filter, visible []string, args []any) (string, []any) {
	var where []string
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	if f.Queue != "" {
		where = append(where, "t.queue = "+arg(f.Queue))
	}
	switch len(f.Statuses) {
	case 0:
	case 1:
		where = append(where, "t.status = "+arg(string(f.Statuses[0])))
	default:
		statuses := make(pq.StringArray, len(f.Statuses))
		for i, s := range f.Statuses {
			statuses[i] = string(s)
		}
		where = append(where, "t.status = ANY("+arg(statuses)+"::text[])")
	}
	if f.DeadReason != "" {
		where = append(where, "t.dead_reason = "+arg(string(f.DeadReason)))
	}
	if f.GroupKey != "" {
		where = append(where, "t.group_key = "+arg(f.GroupKey))
	}
	if f.CreatedAfter != nil {
		where = append(where, "t.created_at > "+arg(*f.CreatedAfter))
	}
	if f.CreatedBefore != nil {
		where = append(where, "t.created_at < "+arg(*f.CreatedBefore))
	}
	if f.ErrorContains != "" {
		where = append(where, "strpos(lower(t.last_error), lower("+arg(f.ErrorContains)+")) > 0")
	}
	if f.Text != "" {
		n := arg(f.Text)
		where = append(where, "(strpos(lower(t.last_error), lower("+n+")) > 0 OR strpos(lower(t.idempotency_key), lower("+n+")) > 0)")
	}
	if f.UpdatedBefore != nil {
		where = append(where, "t.updated_at < "+arg(*f.UpdatedBefore))
	}
	if f.WithoutCancelRequest {
		where = append(where, "t.cancel_requested_at IS NULL")
	}
	if f.WorkflowID != uuid.Nil {
		where = append(where, fmt.Sprintf(inWorkflowSQL, arg(f.WorkflowID)))
	}
	if len(f.Metadata) > 0 {
		// Containment, which tasks_metadata (GIN, jsonb_path_ops, partial
		// on metadata IS NOT NULL) serves.
		where = append(where, "t.metadata IS NOT NULL AND t.metadata @> "+arg(metadataJSON(f.Metadata))+"::jsonb")
	}
	if visible != nil {
		exact, prefixes := queuePatterns(visible)
		args = append(args, exact, prefixes)
		where = append(where, fmt.Sprintf(visibleQueues, len(args)-1, len(args)))
	}
	if len(where) == 0 {
		return "true", args
	}
	return strings.Join(where, " AND "), args
}

// inWorkflowSQL is the condition of a task t of the run %s
// (task.Filter.WorkflowID): the run's first task, whose workflow_id is
// NULL (its own id), by the primary key, and the others by tasks_workflow.
const inWorkflowSQL = `((t.id = %[1]s AND t.workflow_id IS NULL) OR t.workflow_id = %[1]s)`

// Count implements ports.BulkStore.
func (s *BulkStore) Count(ctx context.Context, f task.Filter) (int64, time.Time, error) {
	where, args := matching(f, nil, nil)
	var row struct {
		N   int64     `db:"n"`
		Now time.Time `db:"db_now"`
	}
	if err := s.st.tx.GetContext(ctx, &row, `SELECT count(*) AS n, now() AS db_now FROM tasks t WHERE `+where, args...); err != nil {
		return 0, time.Time{}, fmt.Errorf("count tasks: %w", err)
	}
	s.st.setNow(row.Now)
	return row.N, row.Now, nil
}

// lockRange reads the ids of the next p.Limit matching tasks after p.After
// (without locking: the batch's range), then locks, in id order, those of
// them that still match and that no other transaction holds. It returns
// the locked rows (without payload) and the batch's range.
func (s *BulkStore) lockRange(ctx context.Context, p ports.BulkBatchParams) ([]taskRowNow, ports.BulkBatch, error) {
	where, args := matching(p.Filter, p.Visible, nil)
	if p.After != nil {
		args = append(args, *p.After)
		where += fmt.Sprintf(" AND t.id > $%d", len(args))
	}
	args = append(args, p.Limit)
	var ids []uuid.UUID
	if err := s.st.tx.SelectContext(ctx, &ids, `SELECT t.id FROM tasks t WHERE `+where+
		fmt.Sprintf(` ORDER BY t.id LIMIT $%d`, len(args)), args...); err != nil {
		return nil, ports.BulkBatch{}, fmt.Errorf("select tasks of a bulk action: %w", err)
	}
	var out ports.BulkBatch
	if len(ids) == 0 {
		now, err := s.st.Now(ctx)
		out.Now = now
		return nil, out, err
	}
	out.Last, out.Full = &ids[len(ids)-1], len(ids) == p.Limit
	where, args = matching(p.Filter, p.Visible, []any{uuidArray(ids)})
	var rows []taskRowNow
	err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT `+prefixed("t.", heldTaskColumns)+`, now() AS db_now FROM tasks t
		WHERE t.id = ANY($1::uuid[]) AND `+where+`
		ORDER BY t.id
		FOR UPDATE OF t SKIP LOCKED`, args...)
	if err != nil {
		return nil, out, fmt.Errorf("lock tasks of a bulk action: %w", err)
	}
	out.Locked = len(ids) - len(rows)
	if len(rows) > 0 {
		s.st.setNow(rows[0].Now)
	}
	out.Now, err = s.st.Now(ctx)
	return rows, out, err
}

// decided is a task a bulk action's decision changed, with its events.
type decided struct {
	t      *task.Task
	was    task.Status
	events []event.Event
}

// decide lets fn decide each locked row, returning the tasks it changed
// and counting those it refused.
func decide(rows []taskRowNow, fn ports.TaskUpdateFunc, out *ports.BulkBatch) []decided {
	var changed []decided
	for i := range rows {
		t := rows[i].toDomain()
		was := t.Status()
		es, err := fn(t, rows[i].Now)
		if err != nil {
			out.Refused++
			continue
		}
		changed = append(changed, decided{t: t, was: was, events: es})
	}
	return changed
}

// UpdateMatching implements ports.BulkStore: one statement reads the
// batch's range, one locks it (skipping rows a claim, a report or a reaper
// holds, so no claim ever waits for a bulk action), the domain decides
// each task, and saveTasks writes the changed ones with one statement.
func (s *BulkStore) UpdateMatching(ctx context.Context, p ports.BulkBatchParams, fn ports.TaskUpdateFunc) (ports.BulkBatch, error) {
	rows, out, err := s.lockRange(ctx, p)
	if err != nil || len(rows) == 0 {
		return out, err
	}
	changed := decide(rows, fn, &out)
	changed, err = s.keepFreeKeys(ctx, changed, &out)
	if err != nil {
		return out, err
	}
	ts := make([]*task.Task, len(changed))
	var events []event.Event
	for i, d := range changed {
		ts[i] = d.t
		events = append(events, d.events...)
	}
	if err := saveTasks(ctx, s.st, ts); err != nil {
		return out, uniqueKeyTaken(err)
	}
	out.Changed = len(ts)
	s.st.Record(events...)
	return out, nil
}

// uniqueKeyTaken turns a unique violation of UniqueActiveIndex by a save
// of tasks moving back into an unfinished status into errRaced: a
// submission took a key between the check and the save, and the
// transaction, run again, sees it taken.
func uniqueKeyTaken(err error) error {
	var pqErr *pq.Error
	if errors.As(err, &pqErr) && pqErr.Code == "23505" && pqErr.Constraint == UniqueActiveIndex {
		return fmt.Errorf("save tasks: %w", errRaced)
	}
	return err
}

// heldKeysSQL returns which of the (queue, unique key) pairs $1, $2 an
// unfinished task holds (UniqueActiveIndex).
var heldKeysSQL = `
	SELECT t.queue, t.unique_key FROM unnest($1::text[], $2::text[]) AS k(queue, key)
	JOIN tasks t ON t.queue = k.queue AND t.unique_key = k.key
	WHERE t.unique_key IS NOT NULL AND t.status IN ` + unfinishedSQL

// keepFreeKeys refuses the tasks that a decision moved from a finished
// status back into an unfinished one while another unfinished task of
// their queue holds their unique key (as TaskStore.save refuses a single
// retry), and all but the first (by id) of those of the batch that share a
// free key.
func (s *BulkStore) keepFreeKeys(ctx context.Context, ds []decided, out *ports.BulkBatch) ([]decided, error) {
	type key struct{ queue, key string }
	var queues, names pq.StringArray
	for _, d := range ds {
		if v := d.t.Snapshot(); v.UniqueKey != "" && !d.was.Unfinished() && v.Status.Unfinished() {
			queues, names = append(queues, v.Queue), append(names, v.UniqueKey)
		}
	}
	if len(queues) == 0 {
		return ds, nil
	}
	var held []struct {
		Queue string `db:"queue"`
		Key   string `db:"unique_key"`
	}
	if err := s.st.tx.SelectContext(ctx, &held, heldKeysSQL, queues, names); err != nil {
		return nil, fmt.Errorf("look up unique keys: %w", err)
	}
	taken := map[key]bool{}
	for _, h := range held {
		taken[key{h.Queue, h.Key}] = true
	}
	kept := ds[:0]
	for _, d := range ds { // in id order
		v := d.t.Snapshot()
		if v.UniqueKey != "" && !d.was.Unfinished() && v.Status.Unfinished() {
			k := key{v.Queue, v.UniqueKey}
			if taken[k] {
				out.Refused++
				continue
			}
			taken[k] = true
		}
		kept = append(kept, d)
	}
	return kept, nil
}

// PurgeMatching implements ports.BulkStore. The purged tasks' ends are
// passed on to their dependants (as a DEAD parent's: BLOCKED dependants
// die dependency_failed) before the rows go, since deleting a task deletes
// its dependency edges (ON DELETE CASCADE), and its attempts with them.
func (s *BulkStore) PurgeMatching(ctx context.Context, p ports.BulkBatchParams, fn ports.TaskUpdateFunc) (ports.BulkBatch, error) {
	rows, out, err := s.lockRange(ctx, p)
	if err != nil || len(rows) == 0 {
		return out, err
	}
	changed := decide(rows, fn, &out)
	if len(changed) == 0 {
		return out, nil
	}
	ids := make([]uuid.UUID, len(changed))
	var events []event.Event
	for i, d := range changed {
		ids[i] = d.t.ID()
		events = append(events, d.events...)
		if d.t.HasDependants() {
			s.st.finished = append(s.st.finished, d.t)
		}
		if d.t.Awaited() {
			// Gone for good: its waiters answer now (with not found).
			s.st.awaitedEnds = append(s.st.awaitedEnds, d.t.ID())
		}
	}
	s.st.Record(events...)
	// The purged tasks are still PENDING or DEAD: settleRound counts every
	// parent not DONE as failed.
	if err := s.st.settleDependants(ctx); err != nil {
		return out, err
	}
	res, err := s.st.tx.ExecContext(ctx, `DELETE FROM tasks WHERE id = ANY($1::uuid[])`, uuidArray(ids))
	if err != nil {
		return out, fmt.Errorf("delete purged tasks: %w", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != int64(len(ids)) {
		return out, fmt.Errorf("delete purged tasks: %d of %d deleted (%v)", n, len(ids), err)
	}
	out.Changed = len(ids)
	return out, nil
}

// Search implements ports.BulkStore: newest first (or oldest first),
// keyset on the primary key, capped like TaskStore.List (the payloads and results of rows left
// out are never read).
func (s *BulkStore) Search(ctx context.Context, p ports.BulkBatchParams, maxBytes int64) ([]*task.Task, bool, error) {
	q, args := searchSQL(p, maxBytes)
	var rows []countedRow
	if err := s.st.tx.SelectContext(ctx, &rows, q, args...); err != nil {
		return nil, false, fmt.Errorf("search tasks: %w", err)
	}
	out := make([]*task.Task, len(rows))
	truncated := false
	for i := range rows {
		out[i] = rows[i].toDomain()
		truncated = rows[i].Candidates > len(rows)
	}
	return out, truncated, nil
}

// searchSQL is Search's statement and its arguments.
func searchSQL(p ports.BulkBatchParams, maxBytes int64) (string, []any) {
	where, args := matching(p.Filter, p.Visible, nil)
	order, after := "DESC", "<"
	if p.OldestFirst {
		order, after = "ASC", ">"
	}
	if p.After != nil {
		args = append(args, *p.After)
		where += fmt.Sprintf(" AND t.id %s $%d", after, len(args))
	}
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	args = append(args, p.Limit, maxBytes)
	q := `SELECT ` + taskColumns + `, candidates FROM (
		SELECT p.*, sum(p.bytes) OVER w AS upto, row_number() OVER w AS n, count(*) OVER () AS candidates
		FROM (SELECT ` + prefixed("t.", taskColumns) + `, ` + taskBytesSQL + ` AS bytes FROM tasks t
			WHERE ` + where + fmt.Sprintf(` ORDER BY t.id %[1]s LIMIT $%[2]d) p
		WINDOW w AS (ORDER BY p.id %[1]s ROWS UNBOUNDED PRECEDING)
	) s WHERE s.n = 1 OR s.upto <= $%[3]d ORDER BY s.id %[1]s`, order, len(args)-1, len(args))
	return q, args
}

// PurgeJobsTable holds the purge jobs (migrations/0014_purge_jobs.sql).
const PurgeJobsTable = "purge_jobs"

const purgeJobColumns = `id, queue, status, state, matched, removed, as_of, started_at, finished_at,
	error, key_id, cursor, pass, locked`

type purgeJobRow struct {
	ID         uuid.UUID      `db:"id"`
	Queue      string         `db:"queue"`
	Status     string         `db:"status"`
	State      string         `db:"state"`
	Matched    int64          `db:"matched"`
	Removed    int64          `db:"removed"`
	AsOf       time.Time      `db:"as_of"`
	StartedAt  time.Time      `db:"started_at"`
	FinishedAt sql.NullTime   `db:"finished_at"`
	Error      sql.NullString `db:"error"`
	KeyID      sql.NullString `db:"key_id"`
	Cursor     uuid.NullUUID  `db:"cursor"`
	Pass       int            `db:"pass"`
	Locked     int64          `db:"locked"`
}

func (r *purgeJobRow) toDomain() *task.PurgeJob {
	j := &task.PurgeJob{
		ID: r.ID, Queue: r.Queue, Status: task.Status(r.Status), State: task.PurgeState(r.State),
		Matched: r.Matched, Removed: r.Removed, AsOf: r.AsOf, StartedAt: r.StartedAt,
		FinishedAt: timePtr(r.FinishedAt), Error: r.Error.String, KeyID: r.KeyID.String,
		Pass: r.Pass, Locked: r.Locked,
	}
	if r.Cursor.Valid {
		c := r.Cursor.UUID
		j.Cursor = &c
	}
	return j
}

// CreatePurgeJob implements ports.BulkStore.
func (s *BulkStore) CreatePurgeJob(ctx context.Context, j *task.PurgeJob) error {
	if _, err := s.st.tx.ExecContext(ctx, `
		INSERT INTO `+PurgeJobsTable+` (`+purgeJobColumns+`)
		VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
		j.ID, j.Queue, string(j.Status), string(j.State), j.Matched, j.Removed, j.AsOf, j.StartedAt,
		nullTime(j.FinishedAt), nullString(j.Error), nullString(j.KeyID), nullUUIDPtr(j.Cursor), j.Pass, j.Locked); err != nil {
		return fmt.Errorf("insert purge job: %w", err)
	}
	return nil
}

// PurgeJob implements ports.BulkStore.
func (s *BulkStore) PurgeJob(ctx context.Context, queue string, id uuid.UUID) (*task.PurgeJob, error) {
	var row purgeJobRow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+purgeJobColumns+` FROM `+PurgeJobsTable+` WHERE id = $1 AND queue = $2`, id, queue)
	if err != nil {
		return nil, notFound(err, ports.ErrPurgeJobNotFound)
	}
	return row.toDomain(), nil
}

// LockRunningPurgeJob implements ports.BulkStore; it walks
// purge_jobs_running.
func (s *BulkStore) LockRunningPurgeJob(ctx context.Context) (*task.PurgeJob, error) {
	var row purgeJobRow
	err := s.st.tx.GetContext(ctx, &row, `SELECT `+purgeJobColumns+` FROM `+PurgeJobsTable+`
		WHERE state = 'running' ORDER BY started_at LIMIT 1 FOR UPDATE SKIP LOCKED`)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("lock purge job: %w", err)
	}
	return row.toDomain(), nil
}

// SavePurgeJob implements ports.BulkStore.
func (s *BulkStore) SavePurgeJob(ctx context.Context, j *task.PurgeJob) error {
	if _, err := s.st.tx.ExecContext(ctx, `
		UPDATE `+PurgeJobsTable+` SET state = $2, removed = $3,
			finished_at = CASE WHEN $2 = 'running' THEN NULL ELSE coalesce($4, now()) END, error = $5,
			cursor = $6, pass = $7, locked = $8
		WHERE id = $1`,
		j.ID, string(j.State), j.Removed, nullTime(j.FinishedAt), nullString(j.Error),
		nullUUIDPtr(j.Cursor), j.Pass, j.Locked); err != nil {
		return fmt.Errorf("save purge job: %w", err)
	}
	return nil
}

func nullUUIDPtr(id *uuid.UUID) uuid.NullUUID {
	if id == nil {
		return uuid.NullUUID{}
	}
	return uuid.NullUUID{UUID: *id, Valid: true}
}
