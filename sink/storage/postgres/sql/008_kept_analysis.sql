-- What the first read of a message works out from its content (links, codes with their
-- sources, hidden text, content flags; sink/message.py Analysis, as JSON), kept with it so
-- that every later read, on any replica, gives the same answer without working it out again.
-- Cleared with the body when the body is released.
ALTER TABLE messages ADD COLUMN analysis text;
