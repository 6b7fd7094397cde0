-- The hand-off of new deliveries (sink/storage/postgres/webhooks.py): a replica whose
-- transaction inserts events leases their deliveries to its own worker in that transaction,
-- within the per-webhook cap, and attempts them once it commits, with no NOTIFY round trip
-- and no take_due transaction. The trigger stays the outbox's one writer: a statement that
-- sets the transaction-local runsink.hand = 'on' (only the replica's event inserts, and only
-- while an enabled webhook exists) gets the seqs of the rows it wrote in runsink.added
-- instead of a NOTIFY; the replica then calls runsink_hand_over in the same transaction,
-- which NOTIFYs for whatever it could not lease. Any other statement is served as before.
CREATE OR REPLACE FUNCTION runsink_events_to_webhooks() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    added TEXT;
    hooks TEXT;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM webhooks WHERE disabled_at IS NULL) THEN
        RETURN NULL;  -- no webhook: the ingest path pays this one index probe
    END IF;
    WITH made AS (
        INSERT INTO webhook_deliveries (delivery_id, webhook_id, kind, event_row, run_id,
                                        created_at, next_attempt_at)
        SELECT 'dlv_' || replace(gen_random_uuid()::text, '-', ''), w.webhook_id, k.kind, n.id,
               n.run_id, n.at, n.at
        FROM new_events n
        CROSS JOIN LATERAL unnest(runsink_live_kinds(n.type, n.detail_json)) AS k(kind)
        JOIN webhooks w ON w.disabled_at IS NULL
                       AND k.kind = ANY (string_to_array(w.events, ','))
        WHERE CASE
                WHEN n.run_id IS NULL THEN w.created_by_admin AND w.run_id IS NULL
                                           AND w.run_glob IS NULL
                ELSE (w.run_id IS NULL OR w.run_id = n.run_id)
                     AND (w.run_regex IS NULL OR n.run_id ~ w.run_regex)
              END
          AND NOT (n.type = 'webhook_failed'
                   AND (n.detail_json::jsonb ->> 'webhook_id') = w.webhook_id)
        ORDER BY n.id
        RETURNING seq, webhook_id
    )
    SELECT string_agg(seq::text, ','), string_agg(DISTINCT webhook_id, ',')
    INTO added, hooks FROM made;
    IF added IS NULL THEN
        RETURN NULL;
    END IF;
    IF current_setting('runsink.hand', true) = 'on' THEN
        -- The inserting replica hands these over (runsink_hand_over, before its COMMIT).
        PERFORM set_config('runsink.added',
                           concat_ws(',', NULLIF(current_setting('runsink.added', true), ''), added),
                           true),
                set_config('runsink.added_hooks',
                           concat_ws(',', NULLIF(current_setting('runsink.added_hooks', true), ''),
                                     hooks),
                           true);
    ELSE
        PERFORM pg_notify('runsink', 'db h');  -- every replica's worker looks at once
    END IF;
    RETURN NULL;
END
$$;

-- Leases of pending deliveries by webhook: what the hand-off counts against the cap, without
-- reading a webhook's backlog (only its leased rows).
CREATE INDEX webhook_deliveries_leased ON webhook_deliveries (webhook_id, lease_until)
    WHERE state = 'pending';

-- The deliveries this transaction's events statement wrote (runsink.added, of the webhooks in
-- runsink.added_hooks) that its replica may lease now, leased to it (until lease_until, in
-- holder's name) and returned with their webhook's url and secret: their webhooks locked to
-- COMMIT (SKIP LOCKED: a webhook another transaction is taking or handing over keeps its new
-- deliveries for the workers), then, in a snapshot taken after the lock (so the leases its
-- last holder committed count), at most cap leased per webhook, as take_due counts them. The
-- rest wake every replica's worker ('db h'). Its plans are made once per connection and are
-- index scans whatever the tables' sizes were then (enable_seqscan off: a plan made while
-- they were small would read them whole once they are not).
CREATE FUNCTION runsink_hand_over(now DOUBLE PRECISION, cap INTEGER,
                                  lease_until DOUBLE PRECISION, holder INTEGER)
RETURNS TABLE (hand_seq BIGINT, hand_delivery TEXT, hand_webhook TEXT, hand_kind TEXT,
               hand_row BIGINT, hand_run TEXT, hand_url TEXT, hand_secret TEXT)
LANGUAGE plpgsql ROWS 8 SET enable_seqscan = off AS $$
DECLARE
    added BIGINT[] := string_to_array(NULLIF(current_setting('runsink.added', true), ''), ',');
    wanted TEXT[] := string_to_array(current_setting('runsink.added_hooks', true), ',');
    hooks TEXT[];
    handed INTEGER;
BEGIN
    PERFORM set_config('runsink.hand', '', true), set_config('runsink.added', '', true),
            set_config('runsink.added_hooks', '', true);
    IF added IS NULL THEN
        RETURN;
    END IF;
    SELECT array_agg(h.webhook_id) INTO hooks FROM (
        SELECT w.webhook_id FROM webhooks w
        WHERE w.webhook_id = ANY (wanted) AND w.disabled_at IS NULL
        ORDER BY w.webhook_id
        FOR UPDATE SKIP LOCKED
    ) h;
    RETURN QUERY
    WITH mine AS (
        SELECT d.seq, d.webhook_id,
               row_number() OVER (PARTITION BY d.webhook_id ORDER BY d.seq) AS rn
        FROM webhook_deliveries d
        WHERE d.seq = ANY (added) AND d.webhook_id = ANY (hooks)
    ), busy AS (
        SELECT l.webhook_id, COUNT(*) AS n FROM webhook_deliveries l
        WHERE l.webhook_id = ANY (hooks) AND l.state = 'pending' AND l.lease_until > now
        GROUP BY l.webhook_id
    ), leased AS (
        UPDATE webhook_deliveries d SET lease_until = runsink_hand_over.lease_until,
                                        lease_holder = holder
        FROM mine m LEFT JOIN busy b ON b.webhook_id = m.webhook_id
        WHERE d.seq = m.seq AND m.rn <= cap - COALESCE(b.n, 0)
        RETURNING d.seq, d.delivery_id, d.webhook_id, d.kind, d.event_row, d.run_id
    )
    SELECT l.seq, l.delivery_id, l.webhook_id, l.kind, l.event_row, l.run_id, w.url, w.secret
    FROM leased l JOIN webhooks w ON w.webhook_id = l.webhook_id
    ORDER BY l.seq;
    GET DIAGNOSTICS handed = ROW_COUNT;
    IF handed < cardinality(added) THEN
        PERFORM pg_notify('runsink', 'db h');
    END IF;
END
$$;
