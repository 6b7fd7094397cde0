-- Live events across replicas (GET /v1/events): every replica shows every replica's events,
-- its own included, in the order the database committed them. Every statement that inserts
-- events NOTIFYs their ids once it commits (``db v <id,id,...>``, or ``db v *`` when the list
-- would not fit a payload of 8000 bytes); notifications arrive in commit order, and each
-- replica reads those rows (never mail content in a payload: subjects come from the rows) and
-- publishes them. On a reconnect it catches up from the table by id (sink/storage/postgres/feed.py).
-- A trigger leaves every INSERT INTO events as it was.
CREATE FUNCTION runsink_events_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    ids TEXT;
BEGIN
    SELECT string_agg(n.id::text, ',' ORDER BY n.id) INTO ids FROM new_events n;
    IF ids IS NULL THEN
        RETURN NULL;
    END IF;
    IF length(ids) > 7900 THEN
        ids := '*';
    END IF;
    PERFORM pg_notify('runsink', 'db v ' || ids);
    RETURN NULL;
END
$$;

CREATE TRIGGER events_inserted AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION runsink_events_inserted();
