-- Live events across replicas (GET /v1/events): every replica shows what any replica
-- committed. Each event row names the replica that wrote it (``origin``: its pool
-- connections carry the session setting ``runsink.replica``), and every statement that
-- inserts events NOTIFYs their ids once it commits: ``<origin> v <id,id,...>``, or
-- ``<origin> v *`` when the list would not fit a payload (8000 bytes). A replica reads the
-- rows of the ids it did not write (never mail content in a payload: subjects come from the
-- rows), and on a reconnect catches up from the table by id (sink/storage/pg_events.py).
-- Writing through the column default and a trigger leaves every INSERT INTO events as it was.
ALTER TABLE events ADD COLUMN origin TEXT DEFAULT current_setting('runsink.replica', true);

CREATE FUNCTION runsink_events_inserted() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    writer TEXT;
    ids TEXT;
BEGIN
    FOR writer, ids IN
        SELECT COALESCE(n.origin, '-'), string_agg(n.id::text, ',' ORDER BY n.id)
        FROM new_events n GROUP BY 1
    LOOP
        IF length(ids) > 7900 THEN
            ids := '*';
        END IF;
        PERFORM pg_notify('runsink', writer || ' v ' || ids);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE TRIGGER events_inserted AFTER INSERT ON events
    REFERENCING NEW TABLE AS new_events
    FOR EACH STATEMENT EXECUTE FUNCTION runsink_events_inserted();
