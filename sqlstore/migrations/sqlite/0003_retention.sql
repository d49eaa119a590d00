-- Retention (S10). revision_marks remembers when the change log reached a
-- revision (written by Trim itself, so ordinary writes pay nothing), which
-- turns "older than the retention" into "at or below a revision".
-- change_floors holds, per model, the revision up to which its change log
-- was trimmed: a watcher behind it resyncs in full.
CREATE TABLE revision_marks (
	revision INTEGER PRIMARY KEY,
	time     INTEGER NOT NULL
);

CREATE TABLE change_floors (
	model_uuid TEXT PRIMARY KEY,
	revision   INTEGER NOT NULL
);

CREATE INDEX events_model_time ON events (model_uuid, time);
