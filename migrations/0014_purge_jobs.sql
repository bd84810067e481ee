-- Purge jobs (issue 14; docs/operations.md "Bulk actions and purge"): a
-- purge of a queue that matches many tasks is accepted as a job, and its
-- batches run in the background on the instance that leads the purge-jobs
-- background service; a job outlives the instance that accepted it (the
-- next leader resumes it from its cursor).
CREATE TABLE purge_jobs (
    id          uuid        PRIMARY KEY,
    queue       text        NOT NULL,
    status      text        NOT NULL CHECK (status IN ('PENDING', 'DEAD')),
    state       text        NOT NULL CHECK (state IN ('running', 'done', 'failed')),
    matched     bigint      NOT NULL,
    removed     bigint      NOT NULL DEFAULT 0,
    -- The database time of the count: the job removes the tasks that
    -- matched then and have not changed since.
    as_of       timestamptz NOT NULL,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz,
    error       text,
    key_id      text,
    -- Where the current pass stands (the last task id a batch considered),
    -- which pass it is, and how many tasks of it other transactions held.
    cursor      uuid,
    pass        integer     NOT NULL DEFAULT 0,
    locked      bigint      NOT NULL DEFAULT 0
);

-- The running jobs, oldest first: what the background service looks for.
CREATE INDEX purge_jobs_running ON purge_jobs (started_at) WHERE state = 'running';
