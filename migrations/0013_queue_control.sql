-- Queue control (issue 14; docs/operations.md "Queue control"): settings an
-- operator steers per queue, and fair claiming across the groups of a queue.

-- One row per queue that has ever had a setting (a queue without a row has
-- none: not paused, no limits). A row may exist for a queue with no tasks
-- yet. The claim reads the rows of the queues it claims from and locks,
-- FOR NO KEY UPDATE, those with a limit (max_running, rate, per-group cap):
-- claims of a limited queue are serialized across instances, which is what
-- makes the limits exact; claims of other queues never touch the table's
-- rows. tokens and tokens_at are the rate limit's token bucket (the level at
-- tokens_at, on the database clock), written by the claims that take from it.
CREATE TABLE queue_settings (
    queue                 text             PRIMARY KEY,
    paused                boolean          NOT NULL DEFAULT false,
    max_running           integer          CHECK (max_running >= 1),
    rate_per_second       double precision CHECK (rate_per_second > 0),
    rate_burst            integer          CHECK (rate_burst >= 1),
    max_running_per_group integer          CHECK (max_running_per_group >= 1),
    tokens                double precision,
    tokens_at             timestamptz,
    updated_at            timestamptz      NOT NULL,
    CHECK ((rate_per_second IS NULL) = (rate_burst IS NULL))
);

-- Paused queues, for queue listings filtered by paused and for claims from
-- any queue, which skip them.
CREATE INDEX queue_settings_paused ON queue_settings (queue) WHERE paused;

-- Groups: a task may carry a group_key (a tenant, a customer). grank is the
-- task's place in its queue's round-robin over groups (domain/queue
-- FairRank): a new task of a group ranks after the group's last PENDING task
-- and no earlier than the task at the head of the queue, so each group's
-- tasks interleave with every other group's, and tasks without a group form
-- one group of their own. Adding the columns rewrites nothing (a constant
-- default); existing tasks all rank 0 and keep their FIFO order by seq.
ALTER TABLE tasks
    ADD COLUMN group_key text CHECK (char_length(group_key) BETWEEN 1 AND 128),
    ADD COLUMN grank     bigint NOT NULL DEFAULT 0;

-- The claim index orders a queue's PENDING tasks by priority, then
-- round-robin rank, then submission. Replaced in this migration's
-- transaction, so no claim ever sees the table without one.
DROP INDEX tasks_claim;
CREATE INDEX tasks_claim ON tasks (queue, priority DESC, grank, seq) WHERE status = 'PENDING';

-- A group's last PENDING rank, read when its new tasks are ranked (one
-- descent per queue and group of a submission). The tasks without a group
-- are the group '' (no group_key is empty): an equality, which the planner
-- can walk in grank order, where "group_key IS NULL" would make it sort.
CREATE INDEX tasks_group_rank ON tasks (queue, (coalesce(group_key, '')), grank DESC) WHERE status = 'PENDING';

-- RUNNING tasks by queue and group: what a claim of a queue with
-- max_running or max_running_per_group counts under its settings lock, and
-- what the queue detail's leased count and sample read.
CREATE INDEX tasks_running_by_queue ON tasks (queue, group_key) WHERE status = 'RUNNING';
