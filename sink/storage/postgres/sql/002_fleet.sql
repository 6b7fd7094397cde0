-- runsink on PostgreSQL, schema v2: what replicas must share beyond the data itself.

-- One wait in progress per inbox, fleet-wide: a wait takes the slot with a conditional
-- UPDATE (free, or its holder's deadline passed; not before next_poll_at) and a recorded
-- poll frees it. A replica that dies holding it loses it at the wait's deadline.
ALTER TABLE inboxes ADD COLUMN poll_until DOUBLE PRECISION;

-- One circuit breaker per (run, inbox, operation), fleet-wide. A row exists only from the
-- breaker's first failure until it settles (closed, no failures), as in memory. Times are
-- the database's clock, so that replicas with skewed clocks agree on a cooldown.
CREATE TABLE breakers (
    run_id         TEXT NOT NULL,
    inbox_id       TEXT NOT NULL,
    operation      TEXT NOT NULL,
    state          TEXT NOT NULL CHECK (state IN ('closed', 'open', 'half_open')),
    failures       INTEGER NOT NULL CHECK (failures >= 0),
    cooldown_s     DOUBLE PRECISION NOT NULL CHECK (cooldown_s > 0),
    opened_at      DOUBLE PRECISION,
    -- The half-open probe's slot: taken until this time (NULL: free). Exactly one replica
    -- takes it, by a conditional UPDATE; one that dies holding it loses it at this time.
    probe_until    DOUBLE PRECISION,
    touched_at     DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (run_id, inbox_id, operation)
);
CREATE INDEX breakers_touched ON breakers (touched_at);

-- Readiness: each replica proves now and then that the database still commits (a full disk
-- fails a write while reads go on working). One row per replica, overwritten.
CREATE TABLE readiness (
    replica_id TEXT PRIMARY KEY,
    at         DOUBLE PRECISION NOT NULL
);
