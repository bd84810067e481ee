-- The operations dashboard (issue 16) and bulk actions by filter (issue 14).

-- Dashboard sessions: a browser that logged in with an API key holds an
-- opaque session token in an HttpOnly cookie; this table keeps its SHA-256
-- digest (the token cannot be recovered from it), the key it acts as, the
-- session's CSRF token and an absolute expiry on the database clock. Rows
-- live in the database, not in an instance's memory, so a session works on
-- every instance behind a load balancer. A session works only while its key
-- does: every lookup joins api_keys (revoked_at, expires_at). No foreign
-- key: keys are never deleted (0009).
CREATE TABLE ui_sessions (
    id         uuid        PRIMARY KEY,
    hash       bytea       NOT NULL CHECK (octet_length(hash) = 32),
    key_id     uuid        NOT NULL,
    csrf       text        NOT NULL,
    created_at timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

CREATE UNIQUE INDEX ui_sessions_hash ON ui_sessions (hash);

-- Logins delete a bounded batch of expired sessions.
CREATE INDEX ui_sessions_expiry ON ui_sessions (expires_at);

-- DEAD tasks by queue and reason, newest first: the dead letters page counts
-- them per (queue, dead_reason) with an index-only scan, and the bulk retry,
-- the most common bulk action, walks a queue's (and a reason's) DEAD tasks
-- through it. Only transitions into DEAD insert an entry (rare next to
-- claims and completions, and never HOT updates anyway: status changes, and
-- status is in the predicates of the claim index); claims, completions,
-- heartbeat renewals and extensions do not touch it. Measurements:
-- docs/dashboard.md ("Indexes").
CREATE INDEX tasks_dead ON tasks (queue, dead_reason, id) WHERE status = 'DEAD';
