-- v3 agent guidance: what the last wait matched by and where it began (a GET counts resends
-- by the same criteria, and shows what a mismatching wait passed over), and the near misses
-- recorded when caught mail is stored (address and distance only: the mail stays caught).
ALTER TABLE inboxes ADD COLUMN wait_match_json TEXT;
ALTER TABLE inboxes ADD COLUMN rescan_seq INTEGER;

CREATE TABLE near_misses (
    id          INTEGER PRIMARY KEY,
    inbox_id    TEXT NOT NULL,
    address     TEXT NOT NULL,
    received_at REAL NOT NULL,
    distance    INTEGER NOT NULL
);
CREATE INDEX near_misses_inbox ON near_misses (inbox_id, received_at, id);
