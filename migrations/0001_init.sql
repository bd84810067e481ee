-- Workers: one row per registered worker process.
CREATE TABLE workers (
    id                text        PRIMARY KEY,
    queues            text[]      NOT NULL DEFAULT '{}',
    tags              text[]      NOT NULL DEFAULT '{}',
    status            text        NOT NULL CHECK (status IN ('ACTIVE', 'STALE', 'DEAD')),
    registered_at     timestamptz NOT NULL,
    last_heartbeat_at timestamptz NOT NULL
);

-- The heartbeat reaper scans live workers by silence.
CREATE INDEX workers_live_by_heartbeat ON workers (last_heartbeat_at) WHERE status <> 'DEAD';

-- Tasks. seq gives a strict FIFO order within a priority across instances.
-- fillfactor leaves room for HOT updates; aggressive autovacuum keeps the dead
-- index entries that claims leave at the head of the claim index short-lived
-- (see docs/performance.md).
CREATE TABLE tasks (
    id              uuid        PRIMARY KEY,
    seq             bigint      GENERATED ALWAYS AS IDENTITY,
    queue           text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('PENDING', 'RUNNING', 'DONE', 'DEAD')),
    priority        integer     NOT NULL DEFAULT 0,
    payload         jsonb,
    tags            text[]      NOT NULL DEFAULT '{}',
    attempts        integer     NOT NULL DEFAULT 0,
    max_attempts    integer     NOT NULL CHECK (max_attempts BETWEEN 1 AND 100),
    worker_id       text,
    lease_id        uuid,
    last_error      text,
    dead_reason     text,
    result          jsonb,
    deadline        timestamptz,
    run_at          timestamptz NOT NULL,
    idempotency_key text,
    created_at      timestamptz NOT NULL,
    claimed_at      timestamptz,
    finished_at     timestamptz,
    updated_at      timestamptz NOT NULL
) WITH (
    fillfactor = 85,
    autovacuum_vacuum_scale_factor = 0.01,
    autovacuum_vacuum_threshold = 1000,
    autovacuum_vacuum_insert_scale_factor = 0.05,
    autovacuum_analyze_scale_factor = 0.02,
    autovacuum_vacuum_cost_delay = 0
);

-- The claim index: only claimable-status rows, in claim order.
CREATE INDEX tasks_claim ON tasks (queue, priority DESC, seq) WHERE status = 'PENDING';

-- One task per (queue, idempotency key).
CREATE UNIQUE INDEX tasks_idempotency ON tasks (queue, idempotency_key) WHERE idempotency_key IS NOT NULL;

-- Requeueing a dead worker's tasks.
CREATE INDEX tasks_running_by_worker ON tasks (worker_id) WHERE status = 'RUNNING';

-- Watermill SQL (v3) outbox for the topic "taskmaster_events": the schema of
-- watermill-sql's DefaultPostgreSQLSchema and DefaultPostgreSQLOffsetsAdapter,
-- created here because publishers run inside transactions with automatic
-- schema initialisation off.
CREATE TABLE watermill_taskmaster_events (
    "offset"       bigserial,
    uuid           varchar(36) NOT NULL,
    created_at     timestamp   NOT NULL DEFAULT CURRENT_TIMESTAMP,
    payload        json        DEFAULT NULL,
    metadata       json        DEFAULT NULL,
    transaction_id xid8        NOT NULL,
    PRIMARY KEY (transaction_id, "offset")
);

CREATE TABLE watermill_offsets_taskmaster_events (
    consumer_group                varchar(255) NOT NULL PRIMARY KEY,
    offset_acked                  bigint,
    last_processed_transaction_id xid8         NOT NULL
);
