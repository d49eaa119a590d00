-- When the controller last wrote down that a machine's agent showed up:
-- heartbeats are kept in memory and written here in batches, one
-- transaction per interval (unix nanoseconds, 0 for never).
ALTER TABLE machines ADD COLUMN last_seen INTEGER NOT NULL DEFAULT 0;
