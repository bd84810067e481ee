-- Pipelines: dependencies between tasks and the history of attempts
-- (issue 15; docs/api.md, docs/architecture.md "Dependencies and attempts").

-- A new status, BLOCKED: submitted depending on tasks not yet DONE. The new
-- check is added NOT VALID so that the migration does not scan the table
-- under its exclusive lock: every existing row satisfied the old, narrower
-- check, so none can break the new one, and new rows are checked as usual.
ALTER TABLE tasks DROP CONSTRAINT tasks_status_check;
ALTER TABLE tasks ADD CONSTRAINT tasks_status_check
    CHECK (status IN ('PENDING', 'RUNNING', 'DONE', 'DEAD', 'BLOCKED')) NOT VALID;

-- blockers: NULL for a task submitted without dependencies; else how many of
-- its parents are not DONE yet (above 0 only while BLOCKED). It is counted
-- down under the task's row lock in the transaction that completes each
-- parent, so concurrent completions of its parents serialize on it and
-- exactly one of them unblocks it.
-- has_dependants: some task was submitted depending on this one while it
-- was unfinished. A transition into DONE or DEAD looks for dependants only
-- when it is set: the task row is read anyway, so a task without dependants
-- pays nothing for the feature. Neither column is indexed (their updates
-- stay HOT); a nullable column and a column with a constant default are
-- added without rewriting or scanning the table.
ALTER TABLE tasks
    ADD COLUMN blockers       integer,
    ADD COLUMN has_dependants boolean NOT NULL DEFAULT false;

-- The edges: child_id depends on parent_id; position is the parent's place
-- in the child's depends_on. Deleting a task (retention) deletes its edges
-- both ways. The primary key serves "the dependants of these parents" (a
-- completion), the second index "the parents of this task" (GET, parents,
-- and the cascade delete of a child).
CREATE TABLE task_dependencies (
    parent_id uuid    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    child_id  uuid    NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    position  integer NOT NULL,
    PRIMARY KEY (parent_id, child_id)
);
CREATE INDEX task_dependencies_child ON task_dependencies (child_id, position);

-- The deadline reaper ends BLOCKED tasks past their deadline too (they could
-- only be unblocked into tasks no claim hands out). This index replaces
-- tasks_pending_deadline (0002); a query for PENDING alone still uses it.
-- Building it scans the table under a SHARE lock (writes wait), like 0007's.
CREATE INDEX tasks_waiting_deadline ON tasks (deadline)
    WHERE status IN ('PENDING', 'BLOCKED') AND deadline IS NOT NULL;
DROP INDEX tasks_pending_deadline;

-- Ended attempts: one row per attempt, written in the transaction (and the
-- statement batch) of the transition that ends it; the running attempt is
-- read from the task row, so a claim writes nothing here. attempt is the
-- task's attempt count at the claim. Deleted with the task.
CREATE TABLE task_attempts (
    task_id     uuid        NOT NULL REFERENCES tasks (id) ON DELETE CASCADE,
    seq         bigint      GENERATED ALWAYS AS IDENTITY,
    attempt     integer     NOT NULL,
    worker_id   text        NOT NULL,
    claimed_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    outcome     text        NOT NULL CHECK (outcome IN ('completed', 'failed', 'lease_expired',
                    'orphaned', 'worker_dead', 'cancelled', 'snoozed')),
    error       text,
    PRIMARY KEY (task_id, seq)
);
