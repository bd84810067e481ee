-- Holes a hostile review found (issue 22; docs/operations.md "Upgrading to
-- migration 0017").
--
-- A schedule's tick is marked on its task, in columns only the scheduler
-- writes: schedule_name and schedule_tick. The scheduler used to find a
-- tick's task by an ordinary idempotency key (schedule:<name>:<tick>), which
-- any producer of the queue could send first: the scheduler then took the
-- producer's task (and payload) for the tick's. Nothing a client sends sets
-- these columns, and the unique index keeps one task per tick of a schedule
-- name, however often, and by however many instances, the tick is tried.
-- Tasks made before this migration keep their idempotency keys and have no
-- mark; ticks to come never collide with them (a tick is always after its
-- schedule was created). Adding nullable columns rewrites nothing; the
-- index is built over the NULL-free rows (none yet).
ALTER TABLE tasks ADD COLUMN schedule_name text, ADD COLUMN schedule_tick timestamptz;
ALTER TABLE tasks ADD CONSTRAINT tasks_schedule_mark
    CHECK ((schedule_name IS NULL) = (schedule_tick IS NULL)) NOT VALID;
CREATE UNIQUE INDEX tasks_schedule_tick ON tasks (schedule_name, schedule_tick) WHERE schedule_name IS NOT NULL;

-- has_dependants now says that some task was ever linked to depend on this
-- one, whatever this one's status then; it used to be set only on parents
-- unfinished at link time, so retention, which keeps a finished task while
-- a dependant is unfinished and looks for dependants only where the flag is
-- set, deleted a parent that was already DONE when its dependant was linked.
-- Set it on every such parent (task_dependencies is walked once).
UPDATE tasks SET has_dependants = true
WHERE NOT has_dependants AND id IN (SELECT parent_id FROM task_dependencies);
