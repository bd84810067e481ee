-- Projections of the outbox (topic taskmaster_events). Each projector consumes
-- the outbox in its own watermill-sql consumer group and writes its tables on
-- the subscriber's transaction, so its writes and its consumer offset commit
-- together (see docs/architecture.md).

-- The last outbox message each projector applied. A message at or below the
-- position is never applied again, whatever the subscriber redelivers.
CREATE TABLE projector_positions (
    consumer_group text        PRIMARY KEY,
    transaction_id xid8        NOT NULL,
    "offset"       bigint      NOT NULL,
    -- database time at which the last message was applied (NULL before the first)
    applied_at     timestamptz
);

-- queue_stats projector: tasks per queue and status (From -1, To +1 per event).
CREATE TABLE queue_status_counts (
    queue  text   NOT NULL,
    status text   NOT NULL,
    count  bigint NOT NULL,
    PRIMARY KEY (queue, status)
);

-- queue_stats projector: cumulative transition counts per queue; reason is
-- '' for kinds without one (submitted, claimed, completed, failed, cleaned).
CREATE TABLE queue_totals (
    queue  text   NOT NULL,
    kind   text   NOT NULL,
    reason text   NOT NULL,
    count  bigint NOT NULL,
    PRIMARY KEY (queue, kind, reason)
);

-- queue_stats projector: per-minute counts (enqueued, claimed, completed,
-- dead_lettered) by the minute of the event's database time. The janitor
-- prunes old minutes.
CREATE TABLE queue_rate_buckets (
    queue  text        NOT NULL,
    minute timestamptz NOT NULL,
    kind   text        NOT NULL,
    count  bigint      NOT NULL,
    PRIMARY KEY (queue, minute, kind)
);

CREATE INDEX queue_rate_buckets_minute ON queue_rate_buckets (minute);

-- queue_stats projector: workers per status.
CREATE TABLE worker_status_counts (
    status text   PRIMARY KEY,
    count  bigint NOT NULL
);

-- metrics projector: cumulative counters (kind is the Prometheus name without
-- the taskmaster_ prefix and _total suffix).
CREATE TABLE metric_counters (
    kind   text   NOT NULL,
    queue  text   NOT NULL,
    reason text   NOT NULL,
    value  bigint NOT NULL,
    PRIMARY KEY (kind, queue, reason)
);

-- metrics projector: histogram observations per bucket upper bound
-- (non-cumulative; 'Infinity' for the +Inf bucket).
CREATE TABLE metric_histogram_buckets (
    kind        text             NOT NULL,
    queue       text             NOT NULL,
    upper_bound double precision NOT NULL,
    count       bigint           NOT NULL,
    PRIMARY KEY (kind, queue, upper_bound)
);

-- metrics projector: histogram sums.
CREATE TABLE metric_histogram_sums (
    kind  text             NOT NULL,
    queue text             NOT NULL,
    sum   double precision NOT NULL,
    PRIMARY KEY (kind, queue)
);

-- The janitor's high-water mark: the greatest outbox position it has deleted.
-- The SSE feed compares a resuming client's position with it to detect
-- events lost to deletion.
CREATE TABLE outbox_janitor_state (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    transaction_id xid8    NOT NULL,
    "offset"       bigint  NOT NULL
);

INSERT INTO outbox_janitor_state (transaction_id, "offset") VALUES ('0', 0);

-- The built-in consumer groups exist from the start, so the janitor never
-- deletes a message one of them has not consumed yet (the subscriber inserts
-- the same zero offset itself, ON CONFLICT DO NOTHING).
INSERT INTO watermill_offsets_taskmaster_events (consumer_group, offset_acked, last_processed_transaction_id)
VALUES ('queue_stats', 0, '0'), ('metrics', 0, '0')
ON CONFLICT DO NOTHING;

INSERT INTO projector_positions (consumer_group, transaction_id, "offset")
VALUES ('queue_stats', '0', 0), ('metrics', '0', 0);
