-- Recurring schedules, active-unique keys, snoozes and per-task retry
-- policies (issue 15; docs/api.md).

-- Active-unique keys: while a task with a unique_key is unfinished, no other
-- task of its queue may carry the same key; once it is DONE or DEAD the key
-- is free again. The index predicate lists the unfinished statuses
-- (task.UnfinishedStatuses: a test compares the two), so a submission
-- resolves the race on it with INSERT ... ON CONFLICT DO NOTHING, and an
-- operator's retry of a DEAD task whose key another task holds is refused.
ALTER TABLE tasks ADD COLUMN unique_key text;
CREATE UNIQUE INDEX tasks_unique_active ON tasks (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'RUNNING');

-- Snoozes: the holder gave the task back for later without spending an
-- attempt (attempts is decremented; this counts how often). A constant
-- default is stored in the catalog: no table rewrite.
ALTER TABLE tasks ADD COLUMN snoozes integer NOT NULL DEFAULT 0;

-- A task's own retry policy, overriding the server's backoff: all three set,
-- or none (NULL: the server's policy). Seconds as submitted. Nullable
-- columns without a default rewrite nothing; the constraint is NOT VALID
-- because every existing row has NULL there (it holds for them), so adding
-- it scans nothing; it is enforced on every write from now on.
ALTER TABLE tasks ADD COLUMN retry_base_seconds double precision,
    ADD COLUMN retry_max_seconds double precision,
    ADD COLUMN retry_jitter text,
    ADD CONSTRAINT tasks_retry_policy CHECK (
        (retry_base_seconds IS NULL) = (retry_max_seconds IS NULL)
        AND (retry_base_seconds IS NULL) = (retry_jitter IS NULL)
        AND (retry_jitter IS NULL OR retry_jitter IN ('none', 'full'))) NOT VALID;

-- Recurring schedules. The scheduler (a led background job) creates the task
-- of each due tick and advances next_run_at in one fenced transaction; the
-- task's idempotency key is derived from the schedule's name and the tick,
-- so a tick creates one task whatever happens.
CREATE TABLE schedules (
    name          text        PRIMARY KEY,
    cron          text        NOT NULL,
    timezone      text        NOT NULL,
    -- the submit body of each tick's task (queue, payload, priority, ...)
    task          jsonb       NOT NULL,
    queue         text        NOT NULL,
    overlap       text        NOT NULL CHECK (overlap IN ('skip', 'allow')),
    paused        boolean     NOT NULL,
    -- the next tick; NULL while paused or when the expression fires no more
    next_run_at   timestamptz,
    -- the last tick that ran or was skipped, and the task the last one made
    last_tick_at  timestamptz,
    last_task_id  uuid,
    skipped_ticks bigint      NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL,
    updated_at    timestamptz NOT NULL
);

-- The scheduler finds due schedules by next tick.
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE next_run_at IS NOT NULL;
