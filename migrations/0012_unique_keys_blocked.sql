-- Active-unique keys count BLOCKED tasks (issue 15; docs/api.md): a task
-- waiting for its parents holds its unique key as a PENDING or RUNNING one
-- does, so a batch with dependencies may carry unique keys. The predicate
-- lists task.UnfinishedStatuses in their order (a test compares the two).
--
-- Safe on existing data: until now no BLOCKED task could carry a unique key
-- (a batch with dependencies refused unique_key, and nothing else creates
-- BLOCKED tasks), so the wider predicate admits no row the old one did not
-- already keep unique. The index is dropped and rebuilt in this migration's
-- transaction, so no submission ever sees the table without it; the build
-- scans the table under a SHARE lock (writes wait), like 0011's index.
DROP INDEX tasks_unique_active;
CREATE UNIQUE INDEX tasks_unique_active ON tasks (queue, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('PENDING', 'RUNNING', 'BLOCKED');
