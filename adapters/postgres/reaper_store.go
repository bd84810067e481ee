package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/domain/worker"
	"github.com/taskmaster/taskmaster/ports"
)

// ReaperStore implements ports.ReaperStore on one transaction. Every query
// reads the database clock (now()), never the application's.
type ReaperStore struct {
	st *txState
}

var _ ports.ReaperStore = (*ReaperStore)(nil)

// silentWorkersSQL selects the workers whose liveness changes now: the rule of
// worker.Worker.CheckLiveness. $1 is the stale threshold, $2 the dead one, in
// microseconds. The first condition is the range of workers_live_by_heartbeat.
//
// Of the rows it locks it keeps those whose liveness lock it also gets
// (exclusive, without waiting, until the transaction ends): a worker whose
// claim is in flight holds that lock shared (WorkerStore.TouchLive) and is
// left for the next cycle (a claim is a sign of life anyway). So a claim never
// commits tasks under a worker this transaction declares DEAD: it either ran
// first, or waits for this commit and then sees the worker DEAD.
const silentWorkersSQL = `
	SELECT ` + workerColumns + `, now() AS db_now FROM (
		SELECT ` + workerColumns + ` FROM workers
		WHERE status <> 'DEAD'
			AND last_heartbeat_at <= now() - $1 * interval '1 microsecond'
			AND (status = 'ACTIVE' OR last_heartbeat_at <= now() - $2 * interval '1 microsecond')
		ORDER BY last_heartbeat_at
		LIMIT $3
		FOR UPDATE SKIP LOCKED
	) w
	WHERE pg_try_advisory_xact_lock($4, hashtext(w.id))
	ORDER BY last_heartbeat_at`

// UpdateSilentWorkers implements ports.ReaperStore.
func (s *ReaperStore) UpdateSilentWorkers(ctx context.Context, cfg worker.LivenessConfig, limit int, fn ports.WorkerUpdateFunc) ([]*worker.Worker, error) {
	var rows []workerRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, silentWorkersSQL, micros(cfg.StaleAfter), micros(cfg.DeadAfter), limit, workerLivenessLock); err != nil {
		return nil, fmt.Errorf("select silent workers: %w", err)
	}
	ws, events, err := decideAll(s.st, rows, restoreWorker, fn)
	if err != nil || len(ws) == 0 {
		return nil, err
	}
	if err := s.saveWorkers(ctx, ws); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return ws, nil
}

// orphanedTasksSQL selects RUNNING tasks that no live worker holds: their
// worker is DEAD or gone, such as a task whose row was locked when its worker
// was declared dead. It walks tasks_running_by_worker.
//
// The judgement and the lock are two moments: the statement judges rows by
// its snapshot, then locks each, and a row updated meanwhile is locked in its
// newest version. PostgreSQL re-checks that version against t's own
// conditions, not against the anti-join, so the newest version may run under
// a live worker by then (the lease reaper requeued the task and a live worker
// claimed it). The CTE keeps the holder that was judged (worker and lease, as
// of the snapshot) next to the locked row, so that the domain can refuse to
// release a task that has another holder by now.
var orphanedTasksSQL = `
	WITH judged AS MATERIALIZED (
		SELECT t.id, t.worker_id, t.lease_id FROM tasks t
		WHERE t.status = 'RUNNING'
			AND NOT EXISTS (SELECT 1 FROM workers w WHERE w.id = t.worker_id AND w.status <> 'DEAD')
		LIMIT $1
	)
	SELECT ` + prefixed("t.", taskColumns) + `,
		j.worker_id AS judged_worker_id, j.lease_id AS judged_lease_id, now() AS db_now
	FROM judged j JOIN tasks t ON t.id = j.id
	WHERE t.status = 'RUNNING'
	FOR UPDATE OF t SKIP LOCKED`

// orphanRow is a task row with the holder orphanedTasksSQL judged dead.
type orphanRow struct {
	taskRowNow
	JudgedWorkerID sql.NullString `db:"judged_worker_id"`
	JudgedLeaseID  uuid.NullUUID  `db:"judged_lease_id"`
}

// UpdateOrphanedTasks implements ports.ReaperStore.
func (s *ReaperStore) UpdateOrphanedTasks(ctx context.Context, limit int, fn ports.ReleaseFunc) ([]*task.Task, error) {
	var rows []orphanRow
	if err := s.st.tx.SelectContext(ctx, &rows, orphanedTasksSQL, limit); err != nil {
		return nil, fmt.Errorf("select orphaned tasks: %w", err)
	}
	var (
		changed []*task.Task
		checked []taskRowNow
		events  []event.Event
	)
	for i := range rows {
		r := &rows[i]
		t, now := restoreTask(&r.taskRowNow)
		s.st.setNow(now)
		es, ok, err := fn(t, task.Holder{WorkerID: r.JudgedWorkerID.String, LeaseID: r.JudgedLeaseID.UUID}, now)
		if err != nil {
			return nil, err
		}
		if ok {
			changed = append(changed, t)
			checked = append(checked, r.taskRowNow)
			events = append(events, es...)
		}
	}
	return s.saveTakenBack(ctx, "orphaned", checked, changed, events)
}

// expiredLeasesSQL selects RUNNING tasks whose lease has run out: the rule of
// task.Task.LeaseExpired. It walks tasks_running_by_worker and filters on the
// heap; lease_expires_at is not indexed so that lease renewals stay HOT
// updates (see migrations/0004_leases.sql).
var expiredLeasesSQL = `
	SELECT ` + taskColumns + `, now() AS db_now FROM tasks
	WHERE status = 'RUNNING' AND lease_expires_at <= now()
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// UpdateExpiredLeases implements ports.ReaperStore.
func (s *ReaperStore) UpdateExpiredLeases(ctx context.Context, limit int, fn ports.TaskUpdateFunc) ([]*task.Task, error) {
	return s.updateTasks(ctx, "lease-expired", expiredLeasesSQL, limit, fn)
}

// timedOutTasksSQL selects RUNNING tasks whose attempt used up its time
// limit: the rule of task.Task.TimedOut, earliest limit first. It walks
// tasks_running_timeout (0019) from its low end: only the entries that are
// due, however many tasks run.
var timedOutTasksSQL = `
	SELECT ` + taskColumns + `, now() AS db_now FROM tasks
	WHERE status = 'RUNNING' AND timeout_at IS NOT NULL AND timeout_at <= now()
	ORDER BY timeout_at
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// UpdateTimedOutTasks implements ports.ReaperStore. A timeout sets the
// task's last error (task.Task.TimeOut), which the takebacks of the other
// reapers may not.
func (s *ReaperStore) UpdateTimedOutTasks(ctx context.Context, limit int, fn ports.TaskUpdateFunc) ([]*task.Task, error) {
	var rows []taskRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, timedOutTasksSQL, limit); err != nil {
		return nil, fmt.Errorf("select timed-out tasks: %w", err)
	}
	ts, events, err := decideAll(s.st, rows, restoreTask, fn)
	if err != nil || len(ts) == 0 {
		return nil, err
	}
	for i, t := range ts {
		if !slices.Equal(t.Snapshot().Result, rows[i].Result) {
			return nil, fmt.Errorf("timed-out task %s: a timeout may not change the result", t.ID())
		}
	}
	if err := saveTasks(ctx, s.st, ts); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return ts, nil
}

// overdueTasksSQL selects PENDING and BLOCKED tasks whose deadline has
// passed: the rule of task.Task.ExpireDeadline. It walks
// tasks_waiting_deadline (0011).
var overdueTasksSQL = `
	SELECT ` + taskColumns + `, now() AS db_now FROM tasks
	WHERE status IN ('PENDING', 'BLOCKED') AND deadline IS NOT NULL AND deadline <= now()
	ORDER BY deadline
	LIMIT $1
	FOR UPDATE SKIP LOCKED`

// UpdateOverdueTasks implements ports.ReaperStore.
func (s *ReaperStore) UpdateOverdueTasks(ctx context.Context, limit int, fn ports.TaskUpdateFunc) ([]*task.Task, error) {
	return s.updateTasks(ctx, "overdue", overdueTasksSQL, limit, fn)
}

// updateTasks loads the (at most limit) rows query selects, lets fn decide
// each and saves them all.
func (s *ReaperStore) updateTasks(ctx context.Context, what, query string, limit int, fn ports.TaskUpdateFunc) ([]*task.Task, error) {
	var rows []taskRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, query, limit); err != nil {
		return nil, fmt.Errorf("select %s tasks: %w", what, err)
	}
	ts, events, err := decideAll(s.st, rows, restoreTask, fn)
	if err != nil {
		return nil, err
	}
	return s.saveTakenBack(ctx, what, rows, ts, events)
}

// saveTakenBack saves the tasks a reaper changed (ts[i] was read as rows[i])
// and records their events, after checking that no reaper transition touched
// what a worker reported.
func (s *ReaperStore) saveTakenBack(ctx context.Context, what string, rows []taskRowNow, ts []*task.Task, events []event.Event) ([]*task.Task, error) {
	if len(ts) == 0 {
		return nil, nil
	}
	for i, t := range ts {
		after := t.Snapshot()
		if after.LastError != rows[i].LastError.String || !slices.Equal(after.Result, rows[i].Result) {
			return nil, fmt.Errorf("%s task %s: a reaper transition may not change the result or last error", what, after.ID)
		}
	}
	if err := saveTasks(ctx, s.st, ts); err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return ts, nil
}

// saveWorkersSQL writes the liveness of many workers in one statement.
const saveWorkersSQL = `
	UPDATE workers w SET status = u.status, last_heartbeat_at = u.last_heartbeat_at
	FROM unnest($1::text[], $2::text[], $3::timestamptz[]) AS u(id, status, last_heartbeat_at)
	WHERE w.id = u.id`

func (s *ReaperStore) saveWorkers(ctx context.Context, ws []*worker.Worker) error {
	ids := make(pq.StringArray, len(ws))
	statuses := make(pq.StringArray, len(ws))
	heartbeats := make([]time.Time, len(ws))
	for i, w := range ws {
		v := w.Snapshot()
		ids[i], statuses[i], heartbeats[i] = v.ID, string(v.Status), v.LastHeartbeatAt
	}
	if _, err := s.st.tx.ExecContext(ctx, saveWorkersSQL, ids, statuses, pq.Array(heartbeats)); err != nil {
		return fmt.Errorf("save workers: %w", err)
	}
	return nil
}

// cleanedTaskColumns are what the retention rule and the task.cleaned event
// read; payloads and results stay in the database.
const cleanedTaskColumns = `id, queue, status, attempts, max_attempts, worker_id, dead_reason,
	run_at, created_at, claimed_at, finished_at, updated_at`

// unfinishedDependantSQL is true when task t has a dependant that is not
// finished: retention keeps t, whose result that dependant may still read
// (GET /tasks/v1/{id}/parents). It walks the primary key of
// task_dependencies by parent, and only for tasks that ever had a
// dependant (has_dependants, set whatever the task's status when the
// dependant was linked).
const unfinishedDependantSQL = `(t.has_dependants AND EXISTS (
	SELECT 1 FROM task_dependencies d JOIN tasks c ON c.id = d.child_id
	WHERE d.parent_id = t.id AND c.status IN ('PENDING', 'RUNNING', 'BLOCKED')))`

// lockExpiredTasksSQL locks, oldest first, up to $2 tasks finished at
// least the TTL ago ($1 microseconds) without an unfinished dependant: the
// rule of task.Task.Expired. It walks tasks_finished; rows another
// transaction holds are skipped (a batch submit linking a dependant to one
// of them holds it).
const lockExpiredTasksSQL = `
	SELECT t.id FROM tasks t
	WHERE t.status IN ('DONE', 'DEAD') AND t.finished_at <= now() - $1 * interval '1 microsecond'
		AND NOT ` + unfinishedDependantSQL + `
	ORDER BY t.finished_at
	LIMIT $2
	FOR UPDATE SKIP LOCKED`

// deleteExpiredTasksSQL deletes the locked tasks $1, but those that have an
// unfinished dependant now. The check is made again, by a statement that
// starts after the locks were taken: lockExpiredTasksSQL judged by its own
// snapshot, from before it locked, and a batch submit that linked a
// dependant to a task and committed in between (it locks its parents
// first, so it cannot commit once retention holds them) is visible only
// here. Deleting a task deletes its attempts and dependencies (ON DELETE
// CASCADE).
const deleteExpiredTasksSQL = `
	DELETE FROM tasks t WHERE t.id = ANY($1::uuid[]) AND NOT ` + unfinishedDependantSQL + `
	RETURNING ` + cleanedTaskColumns + `, now() AS db_now`

// DeleteExpiredTasks implements ports.ReaperStore.
func (s *ReaperStore) DeleteExpiredTasks(ctx context.Context, ttl time.Duration, limit int, fn ports.TaskUpdateFunc) ([]*task.Task, error) {
	var ids []uuid.UUID
	if err := s.st.tx.SelectContext(ctx, &ids, lockExpiredTasksSQL, micros(ttl), limit); err != nil {
		return nil, fmt.Errorf("lock expired tasks: %w", err)
	}
	if len(ids) == 0 {
		return nil, nil
	}
	var rows []taskRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, deleteExpiredTasksSQL, uuidArray(ids)); err != nil {
		return nil, fmt.Errorf("delete expired tasks: %w", err)
	}
	ts, events, err := decideAll(s.st, rows, restoreTask, fn)
	if err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return ts, nil
}

// expiredWorkersSQL deletes DEAD workers silent for at least the TTL ($1
// microseconds): the rule of worker.Worker.Expired. Workers are few and
// retention is rare, so it scans the table (see migrations/0002_reapers.sql).
const expiredWorkersSQL = `
	DELETE FROM workers WHERE id IN (
		SELECT id FROM workers
		WHERE status = 'DEAD' AND last_heartbeat_at <= now() - $1 * interval '1 microsecond'
		ORDER BY last_heartbeat_at
		LIMIT $2
		FOR UPDATE SKIP LOCKED
	)
	RETURNING ` + workerColumns + `, now() AS db_now`

// DeleteExpiredWorkers implements ports.ReaperStore.
func (s *ReaperStore) DeleteExpiredWorkers(ctx context.Context, ttl time.Duration, limit int, fn ports.WorkerUpdateFunc) ([]*worker.Worker, error) {
	var rows []workerRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, expiredWorkersSQL, micros(ttl), limit); err != nil {
		return nil, fmt.Errorf("delete expired workers: %w", err)
	}
	ws, events, err := decideAll(s.st, rows, restoreWorker, fn)
	if err != nil {
		return nil, err
	}
	s.st.Record(events...)
	return ws, nil
}

// decideAll restores each row and lets fn decide it at the database time the
// row was read at, collecting fn's events. Nothing is saved or recorded.
func decideAll[Row, T any](st *txState, rows []Row, restore func(*Row) (T, time.Time),
	fn func(T, time.Time) ([]event.Event, error)) ([]T, []event.Event, error) {
	out := make([]T, len(rows))
	var events []event.Event
	for i := range rows {
		v, now := restore(&rows[i])
		st.setNow(now)
		es, err := fn(v, now)
		if err != nil {
			return nil, nil, err
		}
		out[i] = v
		events = append(events, es...)
	}
	return out, events, nil
}

func restoreTask(r *taskRowNow) (*task.Task, time.Time) { return r.toDomain(), r.Now }

func restoreWorker(r *workerRowNow) (*worker.Worker, time.Time) { return r.toDomain(), r.Now }

// micros returns d in whole microseconds, the database's resolution, rounded
// up: database times are whole microseconds, so "silence >= d" and "silence
// >= micros(d) µs" select the same rows and the SQL agrees with the domain.
func micros(d time.Duration) int64 {
	us := d / time.Microsecond
	if d%time.Microsecond > 0 {
		us++
	}
	return int64(us)
}

func nullTime(t *time.Time) sql.NullTime {
	if t == nil {
		return sql.NullTime{}
	}
	return sql.NullTime{Time: *t, Valid: true}
}
