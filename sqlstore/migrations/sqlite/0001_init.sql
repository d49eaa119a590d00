-- Models: one provider configuration, its settings and its machine id
-- sequence. next_machine is the id the next machine gets; it only grows,
-- so ids are never reused, even after removal and restart.
CREATE TABLE models (
	uuid         TEXT PRIMARY KEY,
	name         TEXT NOT NULL UNIQUE,
	provider     TEXT NOT NULL,
	config       TEXT NOT NULL,  -- JSON object of strings
	settings     TEXT NOT NULL,  -- JSON of Settings.Map()
	next_machine INTEGER NOT NULL DEFAULT 0,
	created      INTEGER NOT NULL -- unix nanoseconds
);

CREATE TABLE machines (
	model_uuid       TEXT NOT NULL REFERENCES models(uuid),
	id               INTEGER NOT NULL,
	life             TEXT NOT NULL,
	status           TEXT NOT NULL,
	status_message   TEXT NOT NULL DEFAULT '',
	instance_status  TEXT NOT NULL DEFAULT '',
	instance_message TEXT NOT NULL DEFAULT '',
	constraints      TEXT NOT NULL DEFAULT '', -- Constraints.String()
	base             TEXT NOT NULL,
	grp              TEXT NOT NULL DEFAULT '',
	placement        TEXT NOT NULL DEFAULT '',
	storage          TEXT NOT NULL DEFAULT '', -- JSON list, '' for none
	keep_instance    INTEGER NOT NULL DEFAULT 0,
	instance_id      TEXT NOT NULL DEFAULT '',
	instance         TEXT NOT NULL DEFAULT '', -- JSON InstanceInfo, '' for none
	launch_token     TEXT NOT NULL DEFAULT '',
	nonce            TEXT NOT NULL DEFAULT '',
	password_hash    TEXT NOT NULL DEFAULT '',
	auto_retries     INTEGER NOT NULL DEFAULT 0,
	next_retry       INTEGER NOT NULL DEFAULT 0, -- unix nanoseconds, 0 for none
	created          INTEGER NOT NULL,
	updated          INTEGER NOT NULL,
	PRIMARY KEY (model_uuid, id)
);

CREATE INDEX machines_group ON machines (model_uuid, grp);

-- Instances kept on removal of a keep-instance machine (H8).
CREATE TABLE released_instances (
	model_uuid  TEXT NOT NULL REFERENCES models(uuid) ON DELETE CASCADE,
	instance_id TEXT NOT NULL,
	released    INTEGER NOT NULL,
	PRIMARY KEY (model_uuid, instance_id)
);

CREATE TABLE events (
	seq        INTEGER PRIMARY KEY AUTOINCREMENT,
	model_uuid TEXT NOT NULL REFERENCES models(uuid) ON DELETE CASCADE,
	machine_id TEXT NOT NULL DEFAULT '',
	time       INTEGER NOT NULL,
	actor      TEXT NOT NULL DEFAULT '',
	kind       TEXT NOT NULL DEFAULT '',
	message    TEXT NOT NULL DEFAULT ''
);

CREATE INDEX events_model ON events (model_uuid, seq);

-- The change log. Every write transaction that changes something a watcher
-- can see takes the next revision from revision_counter (whose row lock
-- orders revisions like commits) and writes its changes under it.
CREATE TABLE revision_counter (
	one      INTEGER PRIMARY KEY CHECK (one = 1),
	revision INTEGER NOT NULL
);
INSERT INTO revision_counter (one, revision) VALUES (1, 0);

CREATE TABLE changes (
	revision   INTEGER NOT NULL,
	model_uuid TEXT NOT NULL,
	kind       TEXT NOT NULL,
	key        TEXT NOT NULL DEFAULT ''
);

CREATE INDEX changes_model ON changes (model_uuid, revision);

CREATE TABLE controller_config (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
