-- Workflows that grow while they run (issue 26; docs/api.md "Workflows",
-- docs/architecture.md "Dependencies and attempts").
--
-- Every new column is nullable: adding them neither rewrites nor scans the
-- table, and a task that uses none of them stores nothing (a NULL costs a
-- bit of the row's null bitmap).
--
-- workflow_id: the run the task belongs to. NULL means the task's own id:
--   a task submitted alone is its own run, and pays neither a write nor an
--   index entry for it. A task created by a complete's enqueue, a spawn or
--   a batch graph carries its run's id (the completing or spawning task's
--   run, or the batch's), unless that is its own id.
-- replay_of: the DONE or DEAD task this task was replayed from (no foreign
--   key: retention may delete the original first; the link then names
--   nothing).
-- debounce_until: the latest run_at a debounced task may be pushed to
--   (its first submission's time plus debounce_max_seconds); NULL for a
--   task never debounced.
ALTER TABLE tasks
    ADD COLUMN workflow_id    uuid,
    ADD COLUMN replay_of      uuid,
    ADD COLUMN debounce_until timestamptz;

-- Building each of the indexes below scans the table under a SHARE lock
-- (writes wait), like 0019's; no row matches yet, so both are empty.

-- The tasks of a run other than its first: GET /workflows/v1/{id}, the
-- listing's workflow_id filter, and the run's cancel and retry read
-- "id = $1 OR workflow_id = $1" through the primary key and this index,
-- in id order either way. Partial: tasks that are their own run (every
-- task submitted alone) have no entry.
CREATE INDEX tasks_workflow ON tasks (workflow_id, id) WHERE workflow_id IS NOT NULL;

-- Throttled submissions answer with the last holder of their unique key
-- while it finished less than throttle_seconds ago: the queue's finished
-- tasks with that key, latest end first. Only finished tasks that carry a
-- unique key have an entry; their ends change the status as well, which
-- other indexes already cover, so no update that was HOT stops being so.
CREATE INDEX tasks_unique_finished ON tasks (queue, unique_key, finished_at)
    WHERE unique_key IS NOT NULL AND finished_at IS NOT NULL;

-- A failure policy per dependency: what a parent ending DEAD means for
-- its dependant. NULL is fail (the dependant ends DEAD dependency_failed,
-- as every edge did before this migration); ignore lets the dependant run
-- anyway; skip ends it DEAD dependency_skipped. NOT VALID: existing rows
-- are NULL, which the check admits, and adding it scans nothing.
ALTER TABLE task_dependencies ADD COLUMN on_failure text;
ALTER TABLE task_dependencies ADD CONSTRAINT task_dependencies_on_failure
    CHECK (on_failure IN ('ignore', 'skip')) NOT VALID;
