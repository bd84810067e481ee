-- Push delivery and rate limits by key (issue 27; docs/api.md "Push queues"
-- and "Named limits", docs/operations.md "Push delivery").
--
-- Every column added to an existing table is nullable or has a constant
-- default: nothing is rewritten.

-- A queue's rate limit per group (rate_limit_per_group): each group_key of
-- the queue has a token bucket of its own (queue_group_buckets).
ALTER TABLE queue_settings
    ADD COLUMN group_rate_per_second double precision CHECK (group_rate_per_second > 0),
    ADD COLUMN group_rate_burst      integer          CHECK (group_rate_burst >= 1),
    ADD CONSTRAINT queue_settings_group_rate CHECK ((group_rate_per_second IS NULL) = (group_rate_burst IS NULL));

-- The named limits a queue draws on (limits: ["tenant-api"]), in the
-- operator's order. A claim of the queue locks them (named_limits, FOR NO
-- KEY UPDATE, in name order, after the queues' settings rows), and counts
-- the RUNNING tasks of every queue naming a limit with max_running: the GIN
-- index finds those queues. Deleting a limit that a queue names is refused
-- (the delete locks the limit row, which a change naming it holds FOR KEY
-- SHARE until it commits).
ALTER TABLE queue_settings ADD COLUMN limits text[] NOT NULL DEFAULT '{}';
CREATE INDEX queue_settings_limits ON queue_settings USING gin (limits);

-- Push delivery: set when push_url is. The secret, the rotated-out secret
-- and the static headers (a JSON object) are stored sealed by the
-- application (AES-256-GCM under TASKMASTER_PUSH_SECRET_KEYS, or marked
-- unsealed when no key is configured; docs/operations.md); header names
-- are kept in clear for display.
ALTER TABLE queue_settings
    ADD COLUMN push_url                        text,
    ADD COLUMN push_timeout_seconds            integer CHECK (push_timeout_seconds BETWEEN 1 AND 900),
    ADD COLUMN push_max_in_flight              integer CHECK (push_max_in_flight BETWEEN 1 AND 10000),
    ADD COLUMN push_header_names               text[],
    ADD COLUMN push_non_retryable_statuses     integer[],
    ADD COLUMN push_secret                     text,
    ADD COLUMN push_secret_rotated_at          timestamptz,
    ADD COLUMN push_previous_secret            text,
    ADD COLUMN push_previous_secret_expires_at timestamptz,
    ADD COLUMN push_headers                    text,
    ADD CONSTRAINT queue_settings_push CHECK (
        (push_url IS NULL) = (push_timeout_seconds IS NULL) AND (push_url IS NULL) = (push_max_in_flight IS NULL)
        AND (push_url IS NULL) = (push_secret IS NULL) AND (push_url IS NULL) = (push_secret_rotated_at IS NULL));

-- The push queues, which every instance's dispatcher reads every second.
CREATE INDEX queue_settings_push_queues ON queue_settings (queue) WHERE push_url IS NOT NULL;

-- Named limits (PUT /limits/v1/{name}): a token bucket (rate_per_second,
-- rate_burst; tokens at tokens_at on the database clock, written by the
-- claims that take from it) and a cap on the RUNNING tasks of the queues
-- naming the limit, shared by those queues across every instance.
CREATE TABLE named_limits (
    name            text             PRIMARY KEY,
    rate_per_second double precision CHECK (rate_per_second > 0),
    rate_burst      integer          CHECK (rate_burst >= 1),
    max_running     integer          CHECK (max_running >= 1),
    tokens          double precision,
    tokens_at       timestamptz,
    created_at      timestamptz      NOT NULL,
    updated_at      timestamptz      NOT NULL,
    CHECK ((rate_per_second IS NULL) = (rate_burst IS NULL)),
    CHECK (rate_per_second IS NOT NULL OR max_running IS NOT NULL)
);

-- The token buckets of rate_limit_per_group: one row per queue and group
-- that a claim took from. A missing row is a full bucket, so rows whose
-- bucket has refilled are deleted (by the outbox janitor's sweep) without
-- changing anything, and a changed rate_limit_per_group deletes the
-- queue's rows (every group starts full). Written only under the queue's
-- settings lock, like the queue's own bucket.
CREATE TABLE queue_group_buckets (
    queue     text             NOT NULL,
    group_key text             NOT NULL,
    tokens    double precision NOT NULL,
    tokens_at timestamptz      NOT NULL,
    PRIMARY KEY (queue, group_key)
);

-- The HTTP status of a push delivery's attempt (NULL: no delivery, or no
-- response: a timeout, a connection error).
ALTER TABLE task_attempts ADD COLUMN http_status smallint CHECK (http_status BETWEEN 100 AND 599);

-- What each instance's dispatcher last delivered, per push queue: the
-- statuses (0: no response) and latencies of its last deliveries, newest
-- first, and its deliveries in flight. Each instance writes its own rows
-- about once a second while it delivers; the dashboard merges the rows
-- written in the last minute. An instance deletes its rows when it stops;
-- rows of instances gone for an hour are deleted by the others.
CREATE TABLE push_delivery_stats (
    queue       text        NOT NULL,
    instance    text        NOT NULL,
    in_flight   integer     NOT NULL,
    statuses    smallint[]  NOT NULL,
    latency_ms  integer[]   NOT NULL,
    updated_at  timestamptz NOT NULL,
    PRIMARY KEY (queue, instance)
);
