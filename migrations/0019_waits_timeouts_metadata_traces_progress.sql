-- Producers wait for results; attempts have time limits; tasks carry
-- metadata, traces and progress (issue 23; docs/api.md).
--
-- Every new column of tasks is nullable or has a constant default: adding
-- them neither rewrites nor scans the table. None of them is in an index
-- that a heartbeat renewal's update touches, so renewals stay HOT.
--
-- timeout_seconds: the task's own time limit on each attempt (NULL: the
--   queue's default_timeout_seconds at each claim, or none).
-- timeout_at: when the running attempt's limit is up, set by the claim
--   (claimed_at + the limit; NULL without one). Meaningful only while
--   RUNNING: the transitions out of RUNNING leave it as it was (writing it
--   would cost every report a column), and readers ignore it on a task
--   that is not RUNNING.
-- metadata: the producer's string values by key (NULL: none). Never
--   changed after the insert.
-- traceparent, tracestate: the W3C trace context the task was submitted
--   under (NULL: none). Never changed after the insert.
-- progress: the holder's last progress report
--   ({"percent", "message", "details", "updated_at", "event_at"}; NULL
--   since the last claim, which clears it). Written only by progress
--   reports (and heartbeats that carry one), with a statement of its own.
-- awaited: a producer waited for the task to finish (GET ?wait_ms, POST
--   ?wait_ms). The transition that moves an awaited task into DONE or DEAD
--   sends a notification (channel taskmaster_finished) when it commits;
--   the flag is read with the row the transition locks anyway, so a task
--   nobody waits for pays nothing.
ALTER TABLE tasks
    ADD COLUMN timeout_seconds integer,
    ADD COLUMN timeout_at      timestamptz,
    ADD COLUMN metadata        jsonb,
    ADD COLUMN traceparent     text,
    ADD COLUMN tracestate      text,
    ADD COLUMN progress        jsonb,
    ADD COLUMN awaited         boolean NOT NULL DEFAULT false;

-- Building each of the two indexes below scans the table under a SHARE lock
-- (writes wait), like 0007's; no row matches yet, so both are empty.

-- The timeout reaper finds the attempts whose limit is up by walking this
-- index from its low end: a cycle reads only the entries that are due (no
-- scan of every RUNNING task). Only claims of tasks under a limit insert an
-- entry (claims change status, so they are never HOT anyway); tasks without
-- a limit, renewals and reports add nothing. Entries of tasks that left
-- RUNNING are removed by vacuum, as for tasks_running_by_worker.
CREATE INDEX tasks_running_timeout ON tasks (timeout_at)
    WHERE status = 'RUNNING' AND timeout_at IS NOT NULL;

-- Equality filters on metadata (GET /tasks/v1?metadata.<key>=<value>, bulk
-- actions): metadata @> '{"key": "value", ...}'. GIN, with the smaller
-- jsonb_path_ops opclass (it serves @> only), and partial: a task without
-- metadata has no entry, so its transitions write nothing here. A task
-- with metadata pays an entry per transition that is not a HOT update
-- (status changes; fastupdate queues them in the index's pending list).
CREATE INDEX tasks_metadata ON tasks USING gin (metadata jsonb_path_ops)
    WHERE metadata IS NOT NULL;

-- A queue's default time limit on attempts of tasks without their own
-- (PATCH /queues/v1/{queue} default_timeout_seconds; NULL: none). A claim
-- reads it with the queue's other settings.
ALTER TABLE queue_settings ADD COLUMN default_timeout_seconds integer
    CHECK (default_timeout_seconds BETWEEN 1 AND 86400);

-- A new attempt outcome, timed_out. The check lists 'released' too (issue
-- 29's outcome, migration 0018), so that whichever of the two migrations
-- runs last leaves both allowed. NOT VALID: every existing row satisfied
-- the narrower check, so none can break this one, and adding it scans
-- nothing; new rows are checked as usual.
ALTER TABLE task_attempts DROP CONSTRAINT task_attempts_outcome_check;
ALTER TABLE task_attempts ADD CONSTRAINT task_attempts_outcome_check
    CHECK (outcome IN ('completed', 'failed', 'lease_expired', 'orphaned', 'worker_dead',
        'cancelled', 'snoozed', 'released', 'timed_out')) NOT VALID;
