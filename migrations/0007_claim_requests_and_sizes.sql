-- Claims that are safe to retry, and responses of bounded size (issue 10).
--
-- claim_request_id is the request_id of the claim that made the task
-- RUNNING (NULL when the claim sent none, and whenever the task is not
-- RUNNING). A claim repeated with the same request_id by the same worker
-- answers with the tasks that claim still holds instead of claiming more.
--
-- payload_bytes and result_bytes are the lengths of the texts PostgreSQL
-- renders for payload and result (computed in Go when they are written,
-- adapters/postgres/jsonvalue.go), so that claims and listings can stop
-- adding tasks at the response byte cap without rendering every candidate.
-- Rows written before this migration have NULL there; readers fall back to
-- octet_length(payload::text) for them.
--
-- Nullable columns without a default: no table rewrite, no scan.
ALTER TABLE tasks
    ADD COLUMN claim_request_id text,
    ADD COLUMN payload_bytes    integer,
    ADD COLUMN result_bytes     integer;

-- A repeated claim looks up the tasks a worker holds from one claim:
--   WHERE status = 'RUNNING' AND worker_id = $1 AND claim_request_id = $2
-- The SDK sends a request_id with every claim, so every claim of an SDK
-- worker makes this lookup before it claims. Through tasks_running_by_worker
-- (0001) it reads every task the worker holds and filters on the heap; this
-- index answers it directly. Measured on the development machine (PostgreSQL
-- 15, 100k RUNNING tasks among 370k, median of 21 EXPLAIN ANALYZE runs,
-- execution time):
--
--   tasks the worker holds        10        100       1,000     10,000
--   tasks_running_by_worker     0.12 ms   0.16 ms   6.9 ms    4.5 ms (its rows adjacent)
--   this index                  0.06 ms   0.06 ms   0.07 ms   0.07 ms
--
-- A claim of 100 tasks takes ~1.7 ms alone (docs/performance.md); a worker
-- with a concurrency of 1,000 would pay four times that per claim without
-- the index. The price is an index entry per task claimed with a request_id
-- (WAL per claimed task, claim of 100: ~530 B without, ~680 B with; the
-- whole claim statement of 100 tasks, median of 11 EXPLAIN ANALYZE runs on
-- a busy machine: 5.8 ms before this migration, 5.9 ms with the response
-- cap and no request_id, 6.9 ms with a request_id), paid only by claims
-- that send one (the predicate leaves the others out).
-- Heartbeat renewals change none of its columns: they stay HOT updates
-- (0004). Entries of tasks that left RUNNING are removed by vacuum, as for
-- tasks_running_by_worker. Building it here scans the table under a SHARE
-- lock (writes wait; no row matches yet, so the index is empty): 125 ms for
-- 370k rows on the development machine, about 1 s per 3M.
CREATE INDEX tasks_running_by_claim ON tasks (worker_id, claim_request_id)
    WHERE status = 'RUNNING' AND claim_request_id IS NOT NULL;
