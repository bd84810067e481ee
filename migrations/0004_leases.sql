-- Leases, cancel requests and drain (issue 7).
--
-- Every RUNNING task has a lease: lease_seconds (its length, which heartbeat
-- renewals reuse) and lease_expires_at (when it runs out); both are NULL
-- unless RUNNING. cancel_requested_at is set while an operator's cancel of a
-- RUNNING task waits for its holder. Adding nullable columns (and a column
-- with a constant default) neither rewrites nor scans the table; so no CHECK
-- constraint here (validating one would scan it under the ALTER's exclusive
-- lock): the domain validates lease lengths (1 to 43200 seconds).
ALTER TABLE tasks
    ADD COLUMN lease_seconds       integer,
    ADD COLUMN lease_expires_at    timestamptz,
    ADD COLUMN cancel_requested_at timestamptz;

-- Tasks already RUNNING were claimed by workers that know nothing of leases:
-- give them the longest lease (12 h) rather than cut off a long task at the
-- upgrade. Their workers' deaths still requeue them as before.
UPDATE tasks SET lease_seconds = 43200, lease_expires_at = now() + interval '12 hours'
WHERE status = 'RUNNING';

ALTER TABLE workers ADD COLUMN draining boolean NOT NULL DEFAULT false;

-- No index on lease_expires_at, on purpose. The lease reaper's query
--   WHERE status = 'RUNNING' AND lease_expires_at <= now() LIMIT n FOR UPDATE SKIP LOCKED
-- walks tasks_running_by_worker (0001; its predicate is status = 'RUNNING', so
-- the planner scans the whole partial index) and filters on the heap. The
-- heartbeat's load of one worker's tasks and the orphan sweep use the same
-- index by worker_id. Measured on the development machine (PostgreSQL 15,
-- 100k RUNNING tasks among 350k):
--
--                                          reuse tasks_running_by_worker   + (lease_expires_at) WHERE RUNNING
--   lease reaper cycle, nothing expired      ~40-65 ms (bitmap heap scan)     ~0.1 ms
--   WAL per heartbeat renewal                159 B, 100% HOT                  370 B, 0% HOT
--   WAL per claim (batch of 100)             696 B                            753 B
--
-- Renewals are the hot path: every listed task of every worker, at every
-- heartbeat (100k in-flight tasks at the default 10 s interval is 10k
-- renewals/s). Only columns that no index mentions change in a renewal, so it
-- is a HOT update that writes no index entry; indexing lease_expires_at would
-- make each one a non-HOT update writing an entry into the primary key,
-- tasks_running_by_worker and the new index (and their WAL), and every claim
-- would pay one more index insert. The reaper's scan is proportional to the
-- RUNNING tasks (bounded by the workers' capacity, not the backlog) and runs
-- once per TASKMASTER_LEASE_REAPER_INTERVAL_MS on one instance. A deployment
-- with far more in-flight tasks and short leases may prefer the index; raise
-- the reaper interval first.
