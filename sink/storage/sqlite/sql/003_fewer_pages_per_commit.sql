-- runsink schema v3: fewer pages in a delivery's commit (each is written to the WAL and
-- fsynced before the 250). Each index on messages or deliveries costs a page per commit;
-- what only search needs now lives on the listing, which the background indexer writes.

-- The indexer's progress is a watermark: everything up to indexed_upto is in the listing
-- and the full-text index, everything above it is not (messages are indexed in message_pk
-- order). It replaces messages.indexed and its index (the column stays, unused).
CREATE TABLE index_state (
    id           INTEGER PRIMARY KEY CHECK (id = 1),
    indexed_upto INTEGER NOT NULL
);
INSERT INTO index_state (id, indexed_upto) VALUES (1, COALESCE(
    (SELECT MIN(message_pk) - 1 FROM messages WHERE indexed = 0),
    (SELECT MAX(message_pk) FROM messages),
    0));
DROP INDEX messages_unindexed;

-- Search's size, date and attachment filters: on the listing, filled by the indexer, instead
-- of on messages, where every delivery paid for them (messages.has_attachment stays, unused).
ALTER TABLE listing ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
ALTER TABLE listing ADD COLUMN received_at REAL NOT NULL DEFAULT 0;
ALTER TABLE listing ADD COLUMN has_attachment INTEGER NOT NULL DEFAULT 0;
UPDATE listing SET (size, received_at, has_attachment) = (
    SELECT m.size, m.received_at, m.has_attachment FROM messages m
    WHERE m.message_pk = listing.message_pk);
CREATE INDEX listing_size ON listing (size);
CREATE INDEX listing_received ON listing (received_at);
CREATE INDEX listing_attachment ON listing (seq) WHERE has_attachment = 1;
DROP INDEX messages_size;
DROP INDEX messages_received;
DROP INDEX messages_attachment;

-- deliveries.seq without AUTOINCREMENT: no sqlite_sequence row to rewrite at each commit.
-- Deliveries are never deleted, so the largest seq + 1 never goes back, as before.
CREATE TABLE deliveries_v3 (
    seq          INTEGER PRIMARY KEY,
    message_id   TEXT NOT NULL UNIQUE,
    inbox_id     TEXT NOT NULL,
    message_pk   INTEGER NOT NULL REFERENCES messages (message_pk),
    rcpt_json    TEXT NOT NULL,
    claim_id     TEXT,
    claim_run_id TEXT,
    claimed_at   REAL
);
INSERT INTO deliveries_v3 (seq, message_id, inbox_id, message_pk, rcpt_json, claim_id,
                           claim_run_id, claimed_at)
    SELECT seq, message_id, inbox_id, message_pk, rcpt_json, claim_id, claim_run_id, claimed_at
    FROM deliveries ORDER BY seq;
DROP TABLE deliveries;
ALTER TABLE deliveries_v3 RENAME TO deliveries;
CREATE INDEX deliveries_inbox_seq ON deliveries (inbox_id, seq);
CREATE INDEX deliveries_message ON deliveries (message_pk);
CREATE INDEX deliveries_claimed ON deliveries (message_pk) WHERE claim_id IS NOT NULL;
