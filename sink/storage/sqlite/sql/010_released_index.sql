-- runsink schema v10: a run token is checked against its run's latest release on every
-- request it makes (sink/run_tokens.py: released_since); a partial index of the releases
-- alone makes that one look-up however many events the run has.
CREATE INDEX events_released ON events (run_id, at) WHERE type = 'run_released';
