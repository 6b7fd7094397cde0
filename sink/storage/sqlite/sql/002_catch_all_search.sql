-- runsink schema v2: caught mail (kept with its body), one listing of all captured mail
-- (evidence and caught, newest first), and a full-text index of 3-character substrings.
ALTER TABLE messages ADD COLUMN has_attachment INTEGER NOT NULL DEFAULT 0;
-- 0 until the message is in the full-text index (sqlite.py indexes in batches after commits).
ALTER TABLE messages ADD COLUMN indexed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX messages_unindexed ON messages (message_pk) WHERE indexed = 0;

-- Mail for recipients without a live inbox: one row per message (its caught recipients).
CREATE TABLE caught (
    caught_id  TEXT PRIMARY KEY,
    message_pk INTEGER NOT NULL,
    rcpt_json  TEXT NOT NULL,
    expires_at REAL NOT NULL
);
CREATE INDEX caught_expiry ON caught (expires_at);
CREATE INDEX caught_message ON caught (message_pk);

-- Everything search and the Mailpit subset list: each delivery, and each caught mail.
-- seq follows arrival, so newest first is seq descending (also message_pk descending).
CREATE TABLE listing (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,
    id         TEXT NOT NULL UNIQUE,
    message_pk INTEGER NOT NULL,
    inbox_id   TEXT,            -- NULL for caught mail
    run_id     TEXT
);
CREATE INDEX listing_message ON listing (message_pk, seq);
CREATE INDEX listing_run ON listing (run_id, seq) WHERE run_id IS NOT NULL;
CREATE INDEX listing_inbox ON listing (inbox_id, seq) WHERE inbox_id IS NOT NULL;
CREATE INDEX listing_caught ON listing (seq) WHERE inbox_id IS NULL;
-- A filter that few entries pass drives the search by its own index (see sqlite.py _narrowing).
CREATE INDEX deliveries_claimed ON deliveries (message_pk) WHERE claim_id IS NOT NULL;
CREATE INDEX messages_size ON messages (size);
CREATE INDEX messages_received ON messages (received_at);
CREATE INDEX messages_attachment ON messages (message_pk) WHERE has_attachment = 1;

-- rowid = messages.message_pk. Trigrams make every text term a literal substring match.
CREATE VIRTUAL TABLE message_text USING fts5 (
    subject, body, sender, rcpts, tokenize = 'trigram'
);

-- v1's messages (indexed = 0) get their listing entries and index text when the store
-- opens, as all mail does after its commit (sink/storage/sqlite/fts.py).

-- v1 kept metadata only for unrouted mail: not carried over (no body to show). The table stays
-- (the readiness probe writes a row in it and takes it out again).
DELETE FROM unrouted;
