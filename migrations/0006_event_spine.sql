-- The event spine at full speed (docs/architecture.md, "Consuming"): both
-- projections consume the outbox in one consumer group, a batch at a time;
-- messages whose projection keeps failing are set aside; outbox times are
-- timestamptz.

-- 1. Outbox times with a time zone. watermill-sql's default schema made
-- created_at a timestamp without time zone filled with CURRENT_TIMESTAMP in
-- the inserting session's zone, and the janitor and the lag metric compared
-- it with localtimestamp: right only while every session shares one zone.
-- Existing values are read in this session's zone (the one they were
-- written in, unless sessions disagreed). watermill-sql's publisher never
-- writes the column and its subscriber never reads it, so both keep working.
--
-- New rows take clock_timestamp(), not now(): the publisher appends the
-- message just before COMMIT, so this is about when the message became
-- visible, while now() is when its transaction began (a batch of 1,000 tasks
-- began a good while before). The outbox lag metric measures from it.
ALTER TABLE watermill_taskmaster_events
    ALTER COLUMN created_at TYPE timestamptz USING created_at::timestamptz,
    ALTER COLUMN created_at SET DEFAULT clock_timestamp();

-- Payloads too large to stay inline (a claim of 100 tasks is ~30 kB of
-- events) are compressed with lz4 where the server supports it: several
-- times faster than pglz for the transaction that writes them and for every
-- reader of the outbox.
DO $$
BEGIN
    ALTER TABLE watermill_taskmaster_events ALTER COLUMN payload SET COMPRESSION lz4;
EXCEPTION WHEN feature_not_supported OR invalid_parameter_value THEN
    RAISE NOTICE 'lz4 is not supported by this server; outbox payloads stay pglz-compressed';
END
$$;

-- 2. One consumer group, "projections", for the queue_stats and metrics
-- projections. It starts at the slower of the two old groups; each
-- projection keeps its own position in projector_positions, so whatever the
-- faster one had applied already is not applied again.
INSERT INTO watermill_offsets_taskmaster_events (consumer_group, offset_acked, last_processed_transaction_id)
SELECT 'projections', coalesce(offset_acked, 0), last_processed_transaction_id
FROM watermill_offsets_taskmaster_events
WHERE consumer_group IN ('queue_stats', 'metrics')
ORDER BY last_processed_transaction_id, coalesce(offset_acked, 0)
LIMIT 1
ON CONFLICT DO NOTHING;

INSERT INTO watermill_offsets_taskmaster_events (consumer_group, offset_acked, last_processed_transaction_id)
VALUES ('projections', 0, '0')
ON CONFLICT DO NOTHING;

-- The old groups would pin the outbox for good (the janitor waits for every
-- group).
DELETE FROM watermill_offsets_taskmaster_events WHERE consumer_group IN ('queue_stats', 'metrics');

-- A position belongs to a projection now, not to a consumer group.
ALTER TABLE projector_positions RENAME COLUMN consumer_group TO projection;

-- 3. Messages set aside: a message whose projection failed alone, with an
-- error that retrying cannot fix (bad data), PoisonAttempts times in a row.
-- The projection's position moves past it in the same statement that
-- inserts the row; `taskmaster outbox poison replay` applies it later, in
-- the statement that deletes the row, so it is applied once.
CREATE TABLE outbox_poison (
    id             bigserial   PRIMARY KEY,
    -- the projection (projector_positions.projection) that set it aside
    projection     text        NOT NULL,
    -- the outbox position of the message
    transaction_id xid8        NOT NULL,
    "offset"       bigint      NOT NULL,
    -- a copy of the message's payload (the janitor may delete the message)
    payload        json        NOT NULL,
    -- the last error, and how many attempts failed (replays included)
    error          text        NOT NULL,
    attempts       integer     NOT NULL,
    set_aside_at   timestamptz NOT NULL DEFAULT now(),
    UNIQUE (projection, transaction_id, "offset")
);
