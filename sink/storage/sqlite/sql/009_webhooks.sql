-- Webhooks (contract v3) and their outbox: a delivery row is written in the same
-- transaction as the event it carries; each attempt at it is a row of webhook_attempts.
CREATE TABLE webhooks (
    webhook_id       TEXT PRIMARY KEY,
    url              TEXT NOT NULL,
    events           TEXT NOT NULL,  -- comma-separated: message,inbox,run_event
    run_id           TEXT,
    run_glob         TEXT,
    description      TEXT,
    secret           TEXT NOT NULL,
    created_at       REAL NOT NULL,
    disabled_at      REAL,
    created_by_admin INTEGER NOT NULL DEFAULT 0
);

CREATE TABLE webhook_deliveries (
    seq             INTEGER PRIMARY KEY,
    delivery_id     TEXT NOT NULL UNIQUE,
    webhook_id      TEXT NOT NULL,
    event_id        TEXT NOT NULL,
    type            TEXT NOT NULL,
    run_id          TEXT,
    body            TEXT NOT NULL,
    created_at      REAL NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at REAL NOT NULL,
    lease_until     REAL NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_of ON webhook_deliveries (webhook_id, attempts);

CREATE TABLE webhook_attempts (
    delivery_seq    INTEGER NOT NULL,
    attempt         INTEGER NOT NULL,
    webhook_id      TEXT NOT NULL,
    state           TEXT NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    at              REAL NOT NULL,
    next_attempt_at REAL,
    PRIMARY KEY (delivery_seq, attempt)
);
CREATE INDEX webhook_attempts_of ON webhook_attempts (webhook_id, at);
