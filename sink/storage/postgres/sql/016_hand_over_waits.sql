-- The hand-off (014, 015) waits for its webhooks' locks instead of skipping them: a refill
-- (015) holds one for one statement, and a skipped webhook's deliveries cost every worker a
-- round ('db h') that a stream of mail paid once per commit or so. Locks are taken in
-- webhook_id order here and in the refill, and take_due skips what is locked: queues, never a
-- deadlock. What it still NOTIFYs: deliveries of a webhook disabled meanwhile (none leased).
CREATE OR REPLACE FUNCTION runsink_hand_over(now DOUBLE PRECISION, cap INTEGER,
                                             lease_until DOUBLE PRECISION, holder INTEGER)
RETURNS TABLE (hand_seq BIGINT, hand_delivery TEXT, hand_webhook TEXT, hand_kind TEXT,
               hand_row BIGINT, hand_run TEXT, hand_url TEXT, hand_secret TEXT)
LANGUAGE plpgsql ROWS 8 SET enable_seqscan = off AS $$
DECLARE
    added BIGINT[] := string_to_array(NULLIF(current_setting('runsink.added', true), ''), ',');
    wanted TEXT[] := string_to_array(current_setting('runsink.added_hooks', true), ',');
    hooks TEXT[];
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
        FOR UPDATE
    ) h;
    IF EXISTS (SELECT 1 FROM unnest(wanted) x(id) WHERE NOT x.id = ANY (COALESCE(hooks, '{}'))) THEN
        PERFORM pg_notify('runsink', 'db h');
    END IF;
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
END
$$;
