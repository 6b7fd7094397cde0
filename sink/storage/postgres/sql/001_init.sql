-- runsink on PostgreSQL, schema v1: the SQLite schema's tables, with the contract's atomic
-- rules as constraints. Times are seconds since the epoch (double precision), as in the domain.
CREATE TABLE inboxes (
    inbox_id             TEXT PRIMARY KEY,
    run_id               TEXT NOT NULL,
    purpose              TEXT NOT NULL,
    local_part           TEXT NOT NULL UNIQUE,
    address              TEXT NOT NULL,
    policy               TEXT NOT NULL,
    created_at           DOUBLE PRECISION NOT NULL,
    expires_at           DOUBLE PRECISION NOT NULL,
    poll_budget          INTEGER NOT NULL,
    polls_used           INTEGER NOT NULL DEFAULT 0 CHECK (polls_used <= poll_budget),
    next_poll_at         DOUBLE PRECISION,
    cursor_seq           BIGINT NOT NULL DEFAULT 0,
    -- Deliveries are numbered per inbox under this row's lock, so an inbox's numbers are
    -- in commit order: a wait that moved its cursor past n never misses a later commit < n.
    last_seq             BIGINT NOT NULL DEFAULT 0,
    state                TEXT NOT NULL CHECK (state IN ('created', 'waiting', 'received', 'expired')),
    reason               TEXT,
    evidence_message_id  TEXT,
    match_json           TEXT NOT NULL,
    trace_id             TEXT NOT NULL,
    last_error           TEXT,
    expired_at           DOUBLE PRECISION,
    last_poll_at         DOUBLE PRECISION,
    last_poll_latency_ms DOUBLE PRECISION,
    released_at          DOUBLE PRECISION,
    evidence_release_at  DOUBLE PRECISION NOT NULL,
    last_change_reason   TEXT
);
CREATE INDEX inboxes_run_purpose ON inboxes (run_id, purpose);
CREATE INDEX inboxes_live_expiry ON inboxes (expires_at) WHERE state <> 'expired';
CREATE INDEX inboxes_release_due ON inboxes (evidence_release_at) WHERE released_at IS NULL;

-- One inbox per idempotency key: the key is the primary key; creators race on its INSERT.
CREATE TABLE idempotency (
    key          TEXT PRIMARY KEY,
    request_json TEXT NOT NULL,
    inbox_id     TEXT NOT NULL
);

-- The per-purpose inbox limit: one counter row per (run, purpose), raised only by a
-- conditional upsert that refuses to pass the policy's limit.
CREATE TABLE purpose_counts (
    run_id  TEXT NOT NULL,
    purpose TEXT NOT NULL,
    used    INTEGER NOT NULL CHECK (used >= 0),
    PRIMARY KEY (run_id, purpose)
);

CREATE TABLE messages (
    message_key TEXT PRIMARY KEY,
    raw         BYTEA,
    size        INTEGER NOT NULL,
    subject     TEXT NOT NULL,
    from_addr   TEXT NOT NULL,
    to_json     TEXT NOT NULL,
    cc_json     TEXT NOT NULL,
    date        TEXT,
    mail_from   TEXT NOT NULL,
    received_at DOUBLE PRECISION NOT NULL,
    released_at DOUBLE PRECISION
);

CREATE TABLE deliveries (
    inbox_id     TEXT NOT NULL,
    seq          BIGINT NOT NULL,
    message_id   TEXT NOT NULL UNIQUE,
    message_key  TEXT NOT NULL REFERENCES messages (message_key),
    rcpt_json    TEXT NOT NULL,
    -- One claim per message: claim_id is set once, by a conditional UPDATE.
    claim_id     TEXT,
    claim_run_id TEXT,
    claimed_at   DOUBLE PRECISION,
    PRIMARY KEY (inbox_id, seq),
    CHECK ((claim_id IS NULL) = (claim_run_id IS NULL))
);
CREATE INDEX deliveries_message_key ON deliveries (message_key);

CREATE TABLE unrouted (
    id          BIGSERIAL PRIMARY KEY,
    rcpt        TEXT NOT NULL,
    mail_from   TEXT NOT NULL,
    received_at DOUBLE PRECISION NOT NULL,
    size        INTEGER NOT NULL
);

CREATE TABLE events (
    id          BIGSERIAL PRIMARY KEY,
    run_id      TEXT NOT NULL,
    inbox_id    TEXT,
    message_id  TEXT,
    at          DOUBLE PRECISION NOT NULL,
    type        TEXT NOT NULL,
    detail_json TEXT NOT NULL
);
CREATE INDEX events_run ON events (run_id, at, id);
