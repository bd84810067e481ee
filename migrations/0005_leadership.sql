-- Leadership of the background jobs (issue 10; docs/operations.md#leadership).
--
-- One row per job: the instance that leads it (owner), until when
-- (expires_at, on the database clock), and the term of that leadership,
-- which increases at every change of owner. The leader renews its row at
-- every tick and in every batch transaction of a cycle; any other instance
-- takes the row once expires_at has passed. Every batch transaction of a
-- cycle first locks and renews the row for its term, in the same
-- transaction, so a former leader (frozen, partitioned) that wakes up commits
-- nothing: its term is no longer the row's. No session holds anything across
-- transactions, so this works through any connection pooler.
CREATE TABLE leader_leases (
    job         text        PRIMARY KEY,
    owner       text        NOT NULL,
    term        bigint      NOT NULL,
    expires_at  timestamptz NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL
);
