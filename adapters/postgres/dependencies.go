package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/event"
	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// Dependencies between tasks (migrations/0011_pipelines.sql).
//
// Counting. A BLOCKED task's blockers column counts its parents not yet
// DONE. The transaction that moves a parent into DONE or DEAD (any save:
// report, batch report, reaper, heartbeat, operator) queues it when it has
// dependants (txState.saved); before the transaction commits,
// settleDependants locks those dependants and lets the domain decide each
// (task.Task.ParentsFinished): count down, unblock at zero, or die
// dependency_failed. The lock makes concurrent completions of one task's
// parents take turns on it, each reading the count the previous one left,
// so exactly one of them sees it reach zero: one task.unblocked, once.
//
// Lock order. A report locks the task it reports (RUNNING) before the
// dependants (BLOCKED), and a batch locks all of its tasks, in id order,
// before any dependant; the dependants of one round are locked in id order
// by one statement. RUNNING and BLOCKED tasks are disjoint sets, so
// completions, single or batched, never wait for each other in a cycle,
// however many parents of one child they complete. Only deaths cascade
// further (a dependant that dies passes its end on in the next round, to
// its own dependants): two cascades through crossing paths of one graph can
// deadlock; PostgreSQL detects it and TxRunner runs the loser again.
//
// A task without dependants pays nothing: has_dependants is read with the
// row the transition locks anyway, and no statement runs unless it is set.

// settleDependants passes on the ends of the tasks this transaction moved
// into DONE or DEAD that have dependants, round after round until no
// dependant dies with dependants of its own.
func (s *txState) settleDependants(ctx context.Context) error {
	for len(s.finished) > 0 {
		parents := s.finished
		s.finished = nil
		if err := s.settleRound(ctx, parents); err != nil {
			return err
		}
	}
	return nil
}

// dependantsSQL locks, in id order, the BLOCKED dependants of the parents
// $1 (their ends: $2, true for DONE) and counts, for each, how many of them
// ended DONE, and how many not, by the failure policy of the edge (NULL:
// fail): task.ParentEnds. It walks the primary key of task_dependencies by
// parent.
var dependantsSQL = `
	WITH p(id, done) AS (SELECT * FROM unnest($1::uuid[], $2::bool[])),
	d AS (
		SELECT e.child_id, count(*) FILTER (WHERE p.done) AS done,
			count(*) FILTER (WHERE NOT p.done AND e.on_failure IS NULL) AS failed,
			count(*) FILTER (WHERE NOT p.done AND e.on_failure = 'skip') AS skipped,
			count(*) FILTER (WHERE NOT p.done AND e.on_failure = 'ignore') AS ignored
		FROM task_dependencies e JOIN p ON e.parent_id = p.id
		GROUP BY e.child_id
	)
	SELECT ` + prefixed("c.", heldTaskColumns) + `, d.done, d.failed, d.skipped, d.ignored, now() AS db_now
	FROM d JOIN tasks c ON c.id = d.child_id
	WHERE c.status = 'BLOCKED'
	ORDER BY c.id
	FOR UPDATE OF c`

// dependantRow is a locked dependant and what its parents did.
type dependantRow struct {
	taskRowNow
	Done    int `db:"done"`
	Failed  int `db:"failed"`
	Skipped int `db:"skipped"`
	Ignored int `db:"ignored"`
}

func (s *txState) settleRound(ctx context.Context, parents []*task.Task) error {
	ids := make(pq.StringArray, len(parents))
	done := make(pq.BoolArray, len(parents))
	for i, p := range parents {
		ids[i], done[i] = p.ID().String(), p.Status() == task.StatusDone
	}
	var rows []dependantRow
	if err := s.tx.SelectContext(ctx, &rows, dependantsSQL, ids, done); err != nil {
		return fmt.Errorf("lock dependants: %w", err)
	}
	var (
		changed []*task.Task
		events  []event.Event
	)
	for i := range rows {
		r := &rows[i]
		t := r.toDomain()
		s.setNow(r.Now)
		es, ok := t.ParentsFinished(task.ParentEnds{Done: r.Done, Failed: r.Failed, Skipped: r.Skipped, Ignored: r.Ignored}, r.Now)
		if ok {
			changed = append(changed, t)
			events = append(events, es...)
		}
	}
	if err := s.saveDependants(ctx, changed); err != nil {
		return err
	}
	s.Record(events...)
	return nil
}

// saveDependantsSQL writes what ParentsFinished changes.
const saveDependantsSQL = `
	UPDATE tasks t SET status = u.status, blockers = u.blockers, dead_reason = u.dead_reason,
		finished_at = u.finished_at::timestamptz, updated_at = u.updated_at::timestamptz
	FROM unnest($1::uuid[], $2::text[], $3::int[], $4::text[], $5::text[], $6::text[])
		AS u(id, status, blockers, dead_reason, finished_at, updated_at)
	WHERE t.id = u.id`

func (s *txState) saveDependants(ctx context.Context, ts []*task.Task) error {
	if len(ts) == 0 {
		return nil
	}
	n := len(ts)
	var (
		ids         = make(pq.StringArray, n)
		statuses    = make(pq.StringArray, n)
		blockers    = make(pq.Int64Array, n)
		deadReasons = make(nullTexts, n)
		finishedAts = make(nullTexts, n)
		updatedAts  = make(pq.StringArray, n)
	)
	for i, t := range ts {
		v := t.Snapshot()
		ids[i], statuses[i], blockers[i], updatedAts[i] = v.ID.String(), string(v.Status), int64(v.Blockers), timeText(v.UpdatedAt)
		deadReasons[i] = nullString(string(v.DeadReason))
		finishedAts[i] = nullTimeText(v.FinishedAt)
		if v.Status == task.StatusPending {
			s.notify(v.Queue, v.RunAt)
		}
	}
	if _, err := s.tx.ExecContext(ctx, saveDependantsSQL, ids, statuses, blockers,
		deadReasons, finishedAts, updatedAts); err != nil {
		return fmt.Errorf("save dependants: %w", err)
	}
	return s.saved(ctx, ts...)
}

// errRaced: a statement found that a concurrent transaction changed what
// an earlier statement of this one had read (an idempotency key taken in
// between). The transaction is run again (see retryable).
var errRaced = errors.New("raced with a concurrent transaction")

// lockTasksSQL locks the tasks named by id ($1), by queue and idempotency
// key ($2, $3), or by queue and unique key ($4, $5) while unfinished (the
// predicate of UniqueActiveIndex), in id order, in the queues its %s
// condition allows (none: every queue).
// Each kind of name is looked up by its own index (an OR of them in one
// WHERE would read the whole table). A holder that a concurrent transaction
// finishes while this one waits for its lock comes back as it is now,
// finished: the caller must check the status of what it gets for a unique
// key. The queue condition is applied before the rows are locked: a task
// of another queue is never locked. The names become an array of ids
// first (an initial plan, run once), so the locked scan's only condition
// is on tasks' own columns: when a row it waited for changed, the recheck
// of its newest version tests that condition alone. With the names in a
// semi-join instead, the recheck under a generic plan (which shared
// transactions pin) dropped rows named by id that had merely changed
// (TestLockTasksKeepsRowsChangedWhileItWaited).
var lockTasksSQL = `
	SELECT ` + taskColumns + ` FROM tasks
	WHERE id = ANY(ARRAY(
		SELECT unnest($1::uuid[])
		UNION ALL
		SELECT t.id FROM unnest($2::text[], $3::text[]) AS k(queue, key)
			JOIN tasks t ON t.queue = k.queue AND t.idempotency_key = k.key
		UNION ALL
		SELECT t.id FROM unnest($4::text[], $5::text[]) AS k(queue, key)
			JOIN tasks t ON t.queue = k.queue AND t.unique_key = k.key
			WHERE t.unique_key IS NOT NULL AND t.status IN ` + unfinishedSQL + `))
		%s
	ORDER BY id
	FOR UPDATE`

// Statements of LockTasks: for every queue, and for a key's queues ($6
// exact names, $7 prefixes).
var (
	lockAnyTasksSQL     = fmt.Sprintf(lockTasksSQL, "")
	lockVisibleTasksSQL = fmt.Sprintf(lockTasksSQL, "AND "+fmt.Sprintf(visibleQueues, 6, 7))
)

// LockTasks implements ports.TaskStore.
func (s *TaskStore) LockTasks(ctx context.Context, p ports.LockParams) ([]*task.Task, error) {
	if len(p.IDs) == 0 && len(p.Keys) == 0 && len(p.Unique) == 0 {
		return nil, nil
	}
	queues, names := storableKeys(len(p.Keys), func(i int) (string, string) { return p.Keys[i].Queue, p.Keys[i].Key })
	uqueues, unames := storableKeys(len(p.Unique), func(i int) (string, string) { return p.Unique[i].Queue, p.Unique[i].Key })
	query, args := lockAnyTasksSQL, []any{uuidArray(p.IDs), queues, names, uqueues, unames}
	if p.Visible != nil {
		exact, prefixes := queuePatterns(p.Visible)
		query, args = lockVisibleTasksSQL, append(args, exact, prefixes)
	}
	var rows []taskRow
	if err := s.st.tx.SelectContext(ctx, &rows, query, args...); err != nil {
		return nil, fmt.Errorf("lock tasks: %w", err)
	}
	out := make([]*task.Task, len(rows))
	for i := range rows {
		out[i] = rows[i].toDomain()
	}
	return out, nil
}

// storableKeys returns the n keys that key(i) gives (queue, key) as
// parallel arrays, leaving out those the database cannot hold (no stored
// task has them).
func storableKeys(n int, key func(i int) (queue, name string)) (pq.StringArray, pq.StringArray) {
	queues := make(pq.StringArray, 0, n)
	names := make(pq.StringArray, 0, n)
	for i := range n {
		q, k := key(i)
		if storableText(k) && storableText(q) {
			queues, names = append(queues, q), append(names, k)
		}
	}
	return queues, names
}

// CreateGraph implements ports.TaskStore.
func (s *TaskStore) CreateGraph(ctx context.Context, fn ports.TaskGraphFunc) ([]*task.Task, error) {
	now, err := s.st.Now(ctx)
	if err != nil {
		return nil, err
	}
	g, err := fn(now)
	if err != nil {
		return nil, err
	}
	n := len(g.Tasks)
	arrays, err := newTaskArraysOf(g.Tasks)
	if err != nil {
		return nil, err
	}
	rows := map[uuid.UUID]*taskRow{}
	if n > 0 {
		if rows, err = arrays.insert(ctx, s.st.tx, now); err != nil {
			return nil, err
		}
	}
	if len(rows) != n {
		// An idempotency key or unique key LockTasks did not find was
		// taken since.
		return nil, fmt.Errorf("insert tasks: %d of %d were new: %w", len(rows), n, errRaced)
	}
	if err := s.insertDependencies(ctx, g.Dependencies); err != nil {
		return nil, err
	}
	if len(g.Dependants) > 0 {
		if _, err := s.st.tx.ExecContext(ctx, `UPDATE tasks SET has_dependants = true WHERE id = ANY($1::uuid[])`,
			uuidArray(g.Dependants)); err != nil {
			return nil, fmt.Errorf("mark dependants: %w", err)
		}
	}
	out := make([]*task.Task, n)
	for i, t := range g.Tasks {
		out[i] = rows[t.ID()].toDomain()
		if t.Status() == task.StatusPending {
			s.st.notify(t.Queue(), t.Snapshot().RunAt)
		}
	}
	s.st.Record(g.Events...)
	return out, nil
}

func (s *TaskStore) insertDependencies(ctx context.Context, deps []ports.Dependency) error {
	if len(deps) == 0 {
		return nil
	}
	parents := make([]uuid.UUID, len(deps))
	children := make([]uuid.UUID, len(deps))
	positions := make(pq.Int64Array, len(deps))
	policies := make(nullTexts, len(deps))
	for i, d := range deps {
		parents[i], children[i], positions[i] = d.Parent, d.Child, int64(d.Position)
		policies[i] = onFailureColumn(d.OnFailure)
	}
	if _, err := s.st.tx.ExecContext(ctx, `
		INSERT INTO task_dependencies (parent_id, child_id, position, on_failure)
		SELECT * FROM unnest($1::uuid[], $2::uuid[], $3::int[], $4::text[])`,
		uuidArray(parents), uuidArray(children), positions, policies); err != nil {
		return fmt.Errorf("insert dependencies: %w", err)
	}
	return nil
}

// onFailureColumn is the on_failure column of an edge: NULL for fail
// (migrations/0022).
func onFailureColumn(o task.OnFailure) sql.NullString {
	if o == "" || o == task.OnFailureFail {
		return sql.NullString{}
	}
	return sql.NullString{String: string(o), Valid: true}
}

// onFailureOf reads the on_failure column.
func onFailureOf(c sql.NullString) task.OnFailure {
	if !c.Valid {
		return task.OnFailureFail
	}
	return task.OnFailure(c.String)
}

// DependsOn implements ports.TaskStore. It walks task_dependencies_child.
func (s *TaskStore) DependsOn(ctx context.Context, id uuid.UUID) ([]ports.Parent, error) {
	var rows []struct {
		ID        uuid.UUID      `db:"id"`
		Status    string         `db:"status"`
		OnFailure sql.NullString `db:"on_failure"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT p.id, p.status, d.on_failure FROM task_dependencies d JOIN tasks p ON p.id = d.parent_id
		WHERE d.child_id = $1 ORDER BY d.position`, id); err != nil {
		return nil, fmt.Errorf("select parents: %w", err)
	}
	out := make([]ports.Parent, len(rows))
	for i, r := range rows {
		out[i] = ports.Parent{ID: r.ID, Status: task.Status(r.Status), OnFailure: onFailureOf(r.OnFailure)}
	}
	return out, nil
}

// parentsPageSQL selects the parents of task $1 after position $2, in
// position order, at most $3 of them and, past the first, within $4 bytes
// (taskBytesSQL), with the number of candidates considered (Parents asks
// for one more than the page, to know whether more follow). It walks
// task_dependencies_child.
var parentsPageSQL = `
	SELECT ` + taskColumns + `, position, candidates FROM (
		SELECT s.*, sum(s.bytes) OVER w AS upto, row_number() OVER w AS n, count(*) OVER () AS candidates
		FROM (SELECT ` + prefixed("t.", taskColumns) + `, d.position, ` + taskBytesSQL + ` AS bytes
			FROM task_dependencies d JOIN tasks t ON t.id = d.parent_id
			WHERE d.child_id = $1 AND d.position > $2
			ORDER BY d.position LIMIT $3) s
		WINDOW w AS (ORDER BY s.position ROWS UNBOUNDED PRECEDING)
	) p WHERE p.n = 1 OR p.upto <= $4 ORDER BY p.position`

// Parents implements ports.TaskStore.
func (s *TaskStore) Parents(ctx context.Context, id uuid.UUID, p ports.PageParams) (ports.ParentsPage, error) {
	after := int64(-1)
	if p.After != nil {
		after = *p.After
	}
	maxBytes := p.MaxBytes
	if maxBytes <= 0 {
		maxBytes = math.MaxInt64
	}
	var rows []struct {
		countedRow
		Position int64 `db:"position"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, parentsPageSQL, id, after, p.Limit+1, maxBytes); err != nil {
		return ports.ParentsPage{}, fmt.Errorf("select parents: %w", err)
	}
	candidates := 0
	if len(rows) > 0 {
		candidates = rows[0].Candidates
	}
	if len(rows) > p.Limit {
		rows = rows[:p.Limit]
	}
	n := len(rows)
	out := ports.ParentsPage{Parents: make([]*task.Task, n)}
	for i := range rows {
		out.Parents[i] = rows[i].toDomain()
	}
	if n > 0 && candidates > n {
		last := rows[n-1].Position
		out.Next = &last
		out.Truncated = n < p.Limit
	}
	return out, nil
}
