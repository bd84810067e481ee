-- Indexes of the background jobs (issue 3). Each is partial and holds one
-- timestamp: a status change is never a HOT update (status appears in index
-- predicates), so every transition writes an entry, and its WAL, into each
-- index whose predicate the new row version satisfies. A partial index costs
-- only the transitions that enter its predicate.

-- Deadline reaper: PENDING tasks by deadline. Only tasks that have a deadline
-- and are PENDING are in it: an entry is written when such a task is
-- submitted or requeued, none on claims, completions or for tasks without a
-- deadline.
CREATE INDEX tasks_pending_deadline ON tasks (deadline)
    WHERE status = 'PENDING' AND deadline IS NOT NULL;

-- Retention: finished tasks by finished_at, oldest first. One entry per task
-- reaching DONE or DEAD, which retention later deletes with the row.
CREATE INDEX tasks_finished ON tasks (finished_at)
    WHERE status IN ('DONE', 'DEAD');

-- Not indexed on purpose:
-- * DEAD workers by last heartbeat (worker retention): the workers table holds
--   one row per worker process and retention runs every few minutes, so a
--   sequential scan is cheap enough.
-- * RUNNING tasks of dead workers: tasks_running_by_worker (0001) already
--   serves the orphan sweep, which walks the RUNNING tasks and anti-joins the
--   live workers.
-- * Silent workers: workers_live_by_heartbeat (0001) serves the heartbeat
--   reaper.
