-- v3 agent guidance: each inbox keeps the create_inbox arguments it was made with, as the
-- caller gave them (canonical JSON), so an expired inbox's answer can name the exact call
-- that makes the run's next one (next_tool create_inbox). NULL for older inboxes.
ALTER TABLE inboxes ADD COLUMN created_with TEXT;
