-- Who holds a delivery's lease: the taking worker's presence key. Each worker holds the
-- session advisory lock (PRESENCE, key) while it runs (sink/storage/postgres/webhooks.py),
-- so a lease whose holder holds no such lock belongs to a replica that is gone, and any
-- replica frees it at once instead of waiting for lease_until. NULL: a holder unknown (its
-- lease runs to lease_until).
ALTER TABLE webhook_deliveries ADD COLUMN lease_holder INTEGER;
