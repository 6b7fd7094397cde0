-- runsink schema v6: what the first read of a message works out from its content (links,
-- codes with their sources, hidden text, content flags; sink/message.py Analysis, as JSON)
-- is kept with it, so every later read gives the same answer without working it out again.
-- Cleared with the body when the body is released.
ALTER TABLE messages ADD COLUMN analysis TEXT;
