-- API keys and worker ownership (issue 13; README "Security").
--
-- A key is an opaque bearer token (tmk_...) that exists only in the answer
-- that created it: this table keeps its SHA-256 digest, from which the token
-- cannot be recovered. Keys are never deleted: a revoked key keeps its row,
-- so audit events and worker owners that name it stay meaningful.
CREATE TABLE api_keys (
    id            uuid        PRIMARY KEY,
    name          text        NOT NULL,
    hash          bytea       NOT NULL CHECK (octet_length(hash) = 32),
    scopes        text[]      NOT NULL,
    -- empty: every queue; else exact names and prefixes ending in '*'
    queues        text[]      NOT NULL DEFAULT '{}',
    worker_prefix text,
    created_at    timestamptz NOT NULL,
    -- refreshed at most once a minute per instance, off the request path
    last_used_at  timestamptz,
    expires_at    timestamptz,
    revoked_at    timestamptz
);

-- Authentication looks a key up by its digest.
CREATE UNIQUE INDEX api_keys_hash ON api_keys (hash);

-- The key that registered a worker owns it: only that key (or an admin key)
-- may heartbeat, claim and report as the worker, and see the lease ids of
-- its tasks. NULL for workers registered while authentication was off; the
-- first key to register such a worker again becomes its owner. A nullable
-- column without a default neither rewrites nor scans the table. No foreign
-- key: keys are never deleted, and a constraint would make every worker
-- insert look up the key.
ALTER TABLE workers ADD COLUMN owner_key_id uuid;
