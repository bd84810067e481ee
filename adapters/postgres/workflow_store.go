package postgres

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/lib/pq"

	"github.com/taskmaster/taskmaster/domain/task"
	"github.com/taskmaster/taskmaster/ports"
)

// WorkflowStore implements ports.WorkflowStore on one transaction. A run's
// tasks are found by inWorkflowSQL (its first task by the primary key, the
// others by tasks_workflow, migrations/0022).
type WorkflowStore struct {
	st *txState
}

var _ ports.WorkflowStore = (*WorkflowStore)(nil)

// inRun is the condition of the tasks t of run id in the visible queues,
// with its arguments.
func inRun(id uuid.UUID, visible []string) (string, []any) {
	return matching(task.Filter{WorkflowID: id}, visible, nil)
}

// Summary implements ports.WorkflowStore.
func (s *WorkflowStore) Summary(ctx context.Context, id uuid.UUID, visible []string) (*ports.WorkflowSummary, error) {
	where, args := inRun(id, visible)
	var rows []struct {
		Status     string         `db:"status"`
		DeadReason sql.NullString `db:"dead_reason"`
		N          int64          `db:"n"`
		First      time.Time      `db:"first_created_at"`
		Updated    time.Time      `db:"last_updated_at"`
		Finished   sql.NullTime   `db:"last_finished_at"`
		Now        time.Time      `db:"db_now"`
	}
	if err := s.st.tx.SelectContext(ctx, &rows, `
		SELECT t.status, t.dead_reason, count(*) AS n, min(t.created_at) AS first_created_at,
			max(t.updated_at) AS last_updated_at, max(t.finished_at) AS last_finished_at, now() AS db_now
		FROM tasks t WHERE `+where+` GROUP BY t.status, t.dead_reason`, args...); err != nil {
		return nil, fmt.Errorf("summarize workflow: %w", err)
	}
	if len(rows) == 0 {
		return nil, task.ErrWorkflowNotFound
	}
	out := &ports.WorkflowSummary{ID: id, Counts: map[task.Status]int64{}, DeadReasons: map[task.DeadReason]int64{}, Finished: true}
	for _, st := range task.Statuses {
		out.Counts[st] = 0
	}
	out.AsOf = rows[0].Now
	for i, r := range rows {
		st := task.Status(r.Status)
		out.Total += r.N
		out.Counts[st] += r.N
		if r.DeadReason.Valid && st == task.StatusDead {
			out.DeadReasons[task.DeadReason(r.DeadReason.String)] += r.N
		}
		if st.Unfinished() {
			out.Finished = false
		}
		if i == 0 || r.First.Before(out.FirstCreatedAt) {
			out.FirstCreatedAt = r.First
		}
		if r.Updated.After(out.LastUpdatedAt) {
			out.LastUpdatedAt = r.Updated
		}
		if r.Finished.Valid && (out.LastFinishedAt == nil || r.Finished.Time.After(*out.LastFinishedAt)) {
			f := r.Finished.Time
			out.LastFinishedAt = &f
		}
	}
	return out, nil
}

// Graph implements ports.WorkflowStore: one statement reads the nodes,
// one the edges into them (task_dependencies_child).
func (s *WorkflowStore) Graph(ctx context.Context, id uuid.UUID, visible []string, limit int) (ports.WorkflowGraph, error) {
	where, args := inRun(id, visible)
	args = append(args, limit+1)
	var nodes []struct {
		ID         uuid.UUID      `db:"id"`
		Queue      string         `db:"queue"`
		Status     string         `db:"status"`
		DeadReason sql.NullString `db:"dead_reason"`
	}
	if err := s.st.tx.SelectContext(ctx, &nodes, `SELECT t.id, t.queue, t.status, t.dead_reason FROM tasks t WHERE `+where+
		fmt.Sprintf(` ORDER BY t.id LIMIT $%d`, len(args)), args...); err != nil {
		return ports.WorkflowGraph{}, fmt.Errorf("workflow tasks: %w", err)
	}
	var out ports.WorkflowGraph
	if len(nodes) > limit {
		nodes, out.Truncated = nodes[:limit], true
	}
	ids := make([]uuid.UUID, len(nodes))
	for i, n := range nodes {
		ids[i] = n.ID
		out.Nodes = append(out.Nodes, ports.GraphNode{ID: n.ID, Queue: n.Queue, Status: task.Status(n.Status), DeadReason: task.DeadReason(n.DeadReason.String)})
	}
	if len(ids) == 0 {
		return out, nil
	}
	var edges []struct {
		Parent    uuid.UUID      `db:"parent_id"`
		Child     uuid.UUID      `db:"child_id"`
		Position  int            `db:"position"`
		OnFailure sql.NullString `db:"on_failure"`
	}
	if err := s.st.tx.SelectContext(ctx, &edges, `
		SELECT d.parent_id, d.child_id, d.position, d.on_failure FROM task_dependencies d
		WHERE d.child_id = ANY($1::uuid[]) AND d.parent_id = ANY($1::uuid[])
		ORDER BY d.child_id, d.position`, uuidArray(ids)); err != nil {
		return ports.WorkflowGraph{}, fmt.Errorf("workflow edges: %w", err)
	}
	for _, e := range edges {
		out.Edges = append(out.Edges, ports.Dependency{Parent: e.Parent, Child: e.Child, Position: e.Position, OnFailure: onFailureOf(e.OnFailure)})
	}
	return out, nil
}

// LockForRetry implements ports.WorkflowStore. Lock order: the run's DEAD
// tasks (id order), then their other parents (id order, shared). A report
// locks RUNNING tasks and then BLOCKED dependants, never a DEAD task, so
// it never waits for this transaction while holding what it waits for.
func (s *WorkflowStore) LockForRetry(ctx context.Context, id uuid.UUID, visible []string) (ports.RunToRetry, error) {
	where, args := matching(task.Filter{WorkflowID: id, Statuses: []task.Status{task.StatusDead}}, visible, nil)
	var rows []taskRowNow
	if err := s.st.tx.SelectContext(ctx, &rows, `SELECT `+prefixed("t.", heldTaskColumns)+`, now() AS db_now FROM tasks t WHERE `+where+
		` ORDER BY t.id FOR UPDATE OF t`, args...); err != nil {
		return ports.RunToRetry{}, fmt.Errorf("lock the workflow's DEAD tasks: %w", err)
	}
	out := ports.RunToRetry{Edges: map[uuid.UUID][]task.Edge{}, Parents: map[uuid.UUID]task.Status{}, Taken: map[ports.UniqueKey]bool{}}
	var err error
	if out.Now, err = s.st.nowOf(ctx, rows); err != nil {
		return out, err
	}
	dead := map[uuid.UUID]bool{}
	var children []uuid.UUID
	var queues, keys pq.StringArray
	for i := range rows {
		t := rows[i].toDomain()
		out.Dead = append(out.Dead, t)
		dead[t.ID()] = true
		v := t.Snapshot()
		if v.HasParents {
			children = append(children, v.ID)
		}
		if v.UniqueKey != "" {
			queues, keys = append(queues, v.Queue), append(keys, v.UniqueKey)
		}
	}
	if len(children) > 0 {
		var edges []struct {
			Parent    uuid.UUID      `db:"parent_id"`
			Child     uuid.UUID      `db:"child_id"`
			OnFailure sql.NullString `db:"on_failure"`
		}
		if err := s.st.tx.SelectContext(ctx, &edges, `
			SELECT parent_id, child_id, on_failure FROM task_dependencies WHERE child_id = ANY($1::uuid[])
			ORDER BY child_id, position`, uuidArray(children)); err != nil {
			return out, fmt.Errorf("the DEAD tasks' dependencies: %w", err)
		}
		var others []uuid.UUID
		seen := map[uuid.UUID]bool{}
		for _, e := range edges {
			out.Edges[e.Child] = append(out.Edges[e.Child], task.Edge{Parent: e.Parent, OnFailure: onFailureOf(e.OnFailure)})
			if !dead[e.Parent] && !seen[e.Parent] {
				seen[e.Parent] = true
				others = append(others, e.Parent)
			}
		}
		if len(others) > 0 {
			var parents []struct {
				ID     uuid.UUID `db:"id"`
				Status string    `db:"status"`
			}
			if err := s.st.tx.SelectContext(ctx, &parents, `SELECT id, status FROM tasks WHERE id = ANY($1::uuid[]) ORDER BY id FOR SHARE`,
				uuidArray(others)); err != nil {
				return out, fmt.Errorf("lock the DEAD tasks' parents: %w", err)
			}
			for _, p := range parents {
				out.Parents[p.ID] = task.Status(p.Status)
			}
		}
	}
	if len(queues) > 0 {
		var held []struct {
			Queue string `db:"queue"`
			Key   string `db:"unique_key"`
		}
		if err := s.st.tx.SelectContext(ctx, &held, heldKeysSQL, queues, keys); err != nil {
			return out, fmt.Errorf("look up unique keys: %w", err)
		}
		for _, h := range held {
			out.Taken[ports.UniqueKey{Queue: h.Queue, Key: h.Key}] = true
		}
	}
	return out, nil
}

// SaveRetried implements ports.WorkflowStore: saveTasks writes what Retry
// changes, one more statement the blockers of the tasks with parents.
func (s *WorkflowStore) SaveRetried(ctx context.Context, ts []*task.Task) error {
	if err := saveTasks(ctx, s.st, ts); err != nil {
		return uniqueKeyTaken(err)
	}
	var ids []uuid.UUID
	var blockers pq.Int64Array
	for _, t := range ts {
		if v := t.Snapshot(); v.HasParents {
			ids, blockers = append(ids, v.ID), append(blockers, int64(v.Blockers))
		}
	}
	if len(ids) == 0 {
		return nil
	}
	if _, err := s.st.tx.ExecContext(ctx, `
		UPDATE tasks t SET blockers = u.blockers FROM unnest($1::uuid[], $2::int[]) AS u(id, blockers) WHERE t.id = u.id`,
		uuidArray(ids), blockers); err != nil {
		return fmt.Errorf("save blockers: %w", err)
	}
	return nil
}
