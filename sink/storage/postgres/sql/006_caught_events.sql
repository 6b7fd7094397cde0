-- Caught mail's live event crosses replicas like every other event: the delivering
-- transaction writes a 'caught' row to events (no run: run_id NULL, message_id the caught
-- id), the trigger of migration 005 announces its id, and every replica's feed reads the
-- row (the subject from the message, never from a payload) and publishes it to its readers
-- of every run. The row goes with its caught mail (sink/storage/postgres/mail.py), so the
-- table does not grow with caught mail; run reports select by run and never see it.
ALTER TABLE events ALTER COLUMN run_id DROP NOT NULL;
CREATE INDEX events_caught ON events (message_id) WHERE run_id IS NULL;

-- v1's metadata-only unrouted rows: emptied by migration 003, written and read by nothing
-- since (caught mail lives in caught, with its body).
DROP TABLE unrouted;
