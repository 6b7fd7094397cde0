-- runsink schema v1. Every hot query has an index; nothing scans a table per poll.
CREATE TABLE inboxes (
    inbox_id             TEXT PRIMARY KEY,
    run_id               TEXT NOT NULL,
    purpose              TEXT NOT NULL,
    local_part           TEXT NOT NULL UNIQUE,
    address              TEXT NOT NULL,
    policy               TEXT NOT NULL,
    created_at           REAL NOT NULL,
    expires_at           REAL NOT NULL,
    poll_budget          INTEGER NOT NULL,
    polls_used           INTEGER NOT NULL DEFAULT 0,
    next_poll_at         REAL,
    cursor_seq           INTEGER NOT NULL DEFAULT 0,
    state                TEXT NOT NULL,
    reason               TEXT,
    evidence_message_id  TEXT,
    match_json           TEXT NOT NULL,
    trace_id             TEXT NOT NULL,
    last_error           TEXT,
    expired_at           REAL,
    last_poll_at         REAL,
    last_poll_latency_ms REAL,
    released_at          REAL,
    evidence_release_at  REAL NOT NULL,
    last_change_reason   TEXT
);
CREATE INDEX inboxes_run_purpose ON inboxes (run_id, purpose);
CREATE INDEX inboxes_live_expiry ON inboxes (expires_at) WHERE state != 'expired';
CREATE INDEX inboxes_release_due ON inboxes (evidence_release_at) WHERE released_at IS NULL;

CREATE TABLE idempotency (
    key          TEXT PRIMARY KEY,
    request_json TEXT NOT NULL,
    inbox_id     TEXT NOT NULL
);

CREATE TABLE messages (
    message_pk  INTEGER PRIMARY KEY,
    raw         BLOB,
    size        INTEGER NOT NULL,
    subject     TEXT NOT NULL,
    from_addr   TEXT NOT NULL,
    to_json     TEXT NOT NULL,
    cc_json     TEXT NOT NULL,
    date        TEXT,
    mail_from   TEXT NOT NULL,
    received_at REAL NOT NULL,
    released_at REAL
);

CREATE TABLE deliveries (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    message_id   TEXT NOT NULL UNIQUE,
    inbox_id     TEXT NOT NULL,
    message_pk   INTEGER NOT NULL REFERENCES messages (message_pk),
    rcpt_json    TEXT NOT NULL,
    claim_id     TEXT,
    claim_run_id TEXT,
    claimed_at   REAL
);
CREATE INDEX deliveries_inbox_seq ON deliveries (inbox_id, seq);
CREATE INDEX deliveries_message ON deliveries (message_pk);

CREATE TABLE unrouted (
    id          INTEGER PRIMARY KEY,
    rcpt        TEXT NOT NULL,
    mail_from   TEXT NOT NULL,
    received_at REAL NOT NULL,
    size        INTEGER NOT NULL
);

CREATE TABLE events (
    id          INTEGER PRIMARY KEY,
    run_id      TEXT NOT NULL,
    inbox_id    TEXT,
    message_id  TEXT,
    at          REAL NOT NULL,
    type        TEXT NOT NULL,
    detail_json TEXT NOT NULL
);
CREATE INDEX events_run ON events (run_id, at, id);
