-- Delivered attempts settled together (sink/storage/postgres/webhooks.py, settle_soon): one call
-- writes a batch of them (one statement per table), each unless settled already (its lease ran
-- out and another attempt was made) or ended by a 410 meanwhile: those come back as s_missed,
-- for the one-by-one settle. Their leases are freed by it, so until it runs a delivered attempt
-- still counts against its webhook's cap, fleet-wide. With cap > 0 it then refills: their
-- webhooks locked first (in id order: writes of two replicas queue, never deadlock; a take or a
-- hand-off holding one is waited for), each webhook's due deliveries are leased to holder up to
-- the cap, counted in a snapshot taken after the lock (as runsink_hand_over counts), and come
-- back with their webhook's url and secret (a body not made yet is made by the caller from the
-- events row, as take_due makes it). Index scans whatever the tables' sizes (see 014).
CREATE FUNCTION runsink_settle_delivered(
    p_ids TEXT[], p_attempts INTEGER[], p_codes INTEGER[], p_ats DOUBLE PRECISION[],
    p_event_ids TEXT[], p_bodies TEXT[], p_now DOUBLE PRECISION, p_cap INTEGER,
    p_lease_until DOUBLE PRECISION, p_holder INTEGER)
RETURNS TABLE (s_missed TEXT, s_delivery TEXT, s_webhook TEXT, s_kind TEXT, s_row BIGINT,
               s_run TEXT, s_event_id TEXT, s_body TEXT, s_attempts INTEGER, s_url TEXT,
               s_secret TEXT)
LANGUAGE plpgsql SET enable_seqscan = off AS $$
DECLARE
    hooks TEXT[];
    hook TEXT;
    room INTEGER;
BEGIN
    IF p_cap > 0 THEN
        SELECT array_agg(h.webhook_id) INTO hooks FROM (
            SELECT w.webhook_id FROM webhooks w
            WHERE w.disabled_at IS NULL AND w.webhook_id IN (
                SELECT d.webhook_id FROM webhook_deliveries d WHERE d.delivery_id = ANY (p_ids))
            ORDER BY w.webhook_id
            FOR UPDATE
        ) h;
    END IF;
    RETURN QUERY
    WITH m AS (
        SELECT * FROM unnest(p_ids, p_attempts, p_codes, p_ats, p_event_ids, p_bodies)
            AS m(delivery_id, attempt, code, at, event_id, body)
    ), settled AS (
        UPDATE webhook_deliveries d SET state = 'delivered', attempts = m.attempt,
            lease_until = 0, event_id = COALESCE(d.event_id, m.event_id),
            body = COALESCE(d.body, m.body)
        FROM m
        WHERE d.delivery_id = m.delivery_id AND d.state = 'pending'
          AND d.attempts = m.attempt - 1
        RETURNING d.delivery_id, d.seq, d.webhook_id, m.attempt, m.code, m.at
    ), written AS (
        INSERT INTO webhook_attempts (delivery_seq, attempt, webhook_id, state, status_code,
                                      error, at, next_attempt_at)
        SELECT s.seq, s.attempt, s.webhook_id, 'delivered', s.code, NULL, s.at, NULL
        FROM settled s
    )
    SELECT m.delivery_id, NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::BIGINT, NULL::TEXT,
           NULL::TEXT, NULL::TEXT, NULL::INTEGER, NULL::TEXT, NULL::TEXT
    FROM m WHERE m.delivery_id NOT IN (SELECT s.delivery_id FROM settled s);
    FOREACH hook IN ARRAY COALESCE(hooks, '{}') LOOP
        SELECT p_cap - COUNT(*) INTO room FROM webhook_deliveries l
        WHERE l.webhook_id = hook AND l.state = 'pending' AND l.lease_until > p_now;
        CONTINUE WHEN room <= 0;
        RETURN QUERY
        WITH due AS (
            SELECT d.seq FROM webhook_deliveries d
            WHERE d.webhook_id = hook AND d.state = 'pending' AND d.next_attempt_at <= p_now
              AND d.lease_until <= p_now
            ORDER BY d.next_attempt_at, d.seq
            LIMIT room
        ), leased AS (
            UPDATE webhook_deliveries d SET lease_until = p_lease_until, lease_holder = p_holder
            FROM due WHERE d.seq = due.seq
            RETURNING d.seq, d.delivery_id, d.webhook_id, d.kind, d.event_row, d.run_id,
                      d.event_id, d.body, d.attempts, d.next_attempt_at
        )
        SELECT NULL::TEXT, l.delivery_id, l.webhook_id, l.kind, l.event_row, l.run_id,
               l.event_id, l.body, l.attempts, w.url, w.secret
        FROM leased l JOIN webhooks w ON w.webhook_id = l.webhook_id
        ORDER BY l.next_attempt_at, l.seq;
    END LOOP;
END
$$;

-- The hand-off (014) wakes every replica's worker ('db h') only for the deliveries it left
-- because their webhook was locked elsewhere (a take or a refill under way, which may not see
-- them), no longer for those the cap kept back: a slot of that webhook is freed by a settle,
-- and a delivered one's refills it above (after this transaction's lock, so seeing these
-- rows); a retry's or a failure's settle wakes its own worker; a lease that ran out is found
-- by the workers' rounds (next_due). A round per commit at the cap was most of what a stream
-- of mail beside a webhook cost the server.
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
        FOR UPDATE SKIP LOCKED
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
