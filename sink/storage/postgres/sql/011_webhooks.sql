-- Webhooks (contract v3) and their outbox, shared by every replica. A trigger writes the
-- delivery rows in the same statement (so the same transaction) as the event rows they
-- carry, whichever statement inserts events, reading the webhooks as that transaction sees
-- them (a webhook another replica created is matched at once). Rows name their event's row
-- and kind; the worker that first takes a delivery makes its body and id from that row
-- (sink/storage/postgres/webhooks.py) and keeps them, so every retry sends the same bytes.
CREATE TABLE webhooks (
    webhook_id       TEXT PRIMARY KEY,
    url              TEXT NOT NULL,
    events           TEXT NOT NULL,  -- comma-separated: message,inbox,run_event
    run_id           TEXT,
    run_glob         TEXT,
    run_regex        TEXT,  -- run_glob as a POSIX regular expression (fnmatchcase semantics)
    description      TEXT,
    secret           TEXT NOT NULL,
    created_at       DOUBLE PRECISION NOT NULL,
    disabled_at      DOUBLE PRECISION,
    created_by_admin BOOLEAN NOT NULL DEFAULT FALSE
);

CREATE TABLE webhook_deliveries (
    seq             BIGSERIAL PRIMARY KEY,
    delivery_id     TEXT NOT NULL UNIQUE,
    webhook_id      TEXT NOT NULL,
    kind            TEXT NOT NULL,  -- message | inbox | run_event | ping
    event_row       BIGINT,  -- the events row it carries (NULL: a ping)
    event_id        TEXT,  -- made (with body) when first taken; a ping's at once
    body            TEXT,
    run_id          TEXT,
    created_at      DOUBLE PRECISION NOT NULL,
    state           TEXT NOT NULL DEFAULT 'pending',
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at DOUBLE PRECISION NOT NULL,
    lease_until     DOUBLE PRECISION NOT NULL DEFAULT 0
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at)
    WHERE state = 'pending';
CREATE INDEX webhook_deliveries_of ON webhook_deliveries (webhook_id, attempts);

CREATE TABLE webhook_attempts (
    delivery_seq    BIGINT NOT NULL,
    attempt         INTEGER NOT NULL,
    webhook_id      TEXT NOT NULL,
    state           TEXT NOT NULL,
    status_code     INTEGER,
    error           TEXT,
    at              DOUBLE PRECISION NOT NULL,
    next_attempt_at DOUBLE PRECISION,
    PRIMARY KEY (delivery_seq, attempt)
);
CREATE INDEX webhook_attempts_of ON webhook_attempts (webhook_id, at);

-- The live events an events row makes (sink/event_shapes.py, the same rules): run_event
-- for every run's row, inbox for one that changes an inbox's state, message for a stored
-- message's row and caught mail's.
CREATE FUNCTION runsink_live_kinds(kind TEXT, detail TEXT) RETURNS TEXT[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE
        WHEN kind = 'caught' THEN ARRAY['message']
        WHEN kind = 'message_accepted' THEN ARRAY['run_event', 'message']
        WHEN kind IN ('created', 'claimed', 'expired') THEN ARRAY['run_event', 'inbox']
        WHEN kind = 'polled' AND (detail::jsonb ->> 'outcome') IN
            ('received', 'evidence_not_found', 'evidence_mismatch', 'evidence_misaddressed')
            THEN ARRAY['run_event', 'inbox']
        ELSE ARRAY['run_event']
    END
$$;

CREATE FUNCTION runsink_events_to_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    added BIGINT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhooks WHERE disabled_at IS NULL) THEN
        RETURN NULL;  -- no webhook: the ingest path pays this one index probe
    END IF;
    INSERT INTO webhook_deliveries (delivery_id, webhook_id, kind, event_row, run_id,
                                    created_at, next_attempt_at)
    SELECT 'dlv_' || replace(gen_random_uuid()::text, '-', ''), w.webhook_id, k.kind, n.id,
           n.run_id, n.at, n.at
    FROM new_events n
    CROSS JOIN LATERAL unnest(runsink_live_kinds(n.type, n.detail_json)) AS k(kind)
    JOIN webhooks w ON w.disabled_at IS NULL AND k.kind = ANY (string_to_array(w.events, ','))
    WHERE CASE
            WHEN n.run_id IS NULL THEN w.created_by_admin AND w.run_id IS NULL
                                       AND w.run_glob IS NULL
            ELSE (w.run_id IS NULL OR w.run_id = n.run_id)
                 AND (w.run_regex IS NULL OR n.run_id ~ w.run_regex)
          END
      AND NOT (n.type = 'webhook_failed' AND (n.detail_json::jsonb ->> 'webhook_id') = w.webhook_id)
    ORDER BY n.id;
    GET DIAGNOSTICS added = ROW_COUNT;
    IF added > 0 THEN
        PERFORM pg_notify('runsink', 'db h');  -- every replica's worker looks at once
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_to_webhooks AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION runsink_events_to_webhooks();
