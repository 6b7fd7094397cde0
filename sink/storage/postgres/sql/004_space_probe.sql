-- Readiness, part two: can the database still grow its files? A full disk (or a full
-- tablespace) fails only writes that need a new page, so an UPDATE of the readiness row
-- goes on committing. The probe empties this table (TRUNCATE gives it a new, empty file)
-- and inserts one row, which must extend that file: on a full disk it fails.
CREATE TABLE space_probe (
    replica_id TEXT NOT NULL,
    at         DOUBLE PRECISION NOT NULL
);
