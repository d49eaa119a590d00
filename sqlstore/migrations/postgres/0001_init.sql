-- The PostgreSQL schema: the SQLite one (see migrations/sqlite) with
-- PostgreSQL types. Times are unix nanoseconds in BIGINT, as in SQLite, so
-- that both dialects share their queries; names compare bytewise
-- (COLLATE "C") so that ORDER BY name gives the same order everywhere.
CREATE TABLE models (
	uuid         TEXT PRIMARY KEY,
	name         TEXT COLLATE "C" NOT NULL UNIQUE,
	provider     TEXT NOT NULL,
	config       TEXT NOT NULL,  -- JSON object of strings
	settings     TEXT NOT NULL,  -- JSON of Settings.Map()
	next_machine BIGINT NOT NULL DEFAULT 0,
	created      BIGINT NOT NULL
);

CREATE TABLE machines (
	model_uuid       TEXT NOT NULL REFERENCES models(uuid),
	id               BIGINT NOT NULL,
	life             TEXT NOT NULL,
	status           TEXT NOT NULL,
	status_message   TEXT NOT NULL DEFAULT '',
	instance_status  TEXT NOT NULL DEFAULT '',
	instance_message TEXT NOT NULL DEFAULT '',
	constraints      TEXT NOT NULL DEFAULT '',
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
	next_retry       BIGINT NOT NULL DEFAULT 0,
	created          BIGINT NOT NULL,
	updated          BIGINT NOT NULL,
	PRIMARY KEY (model_uuid, id)
);

CREATE INDEX machines_group ON machines (model_uuid, grp);

CREATE TABLE released_instances (
	model_uuid  TEXT NOT NULL REFERENCES models(uuid) ON DELETE CASCADE,
	instance_id TEXT NOT NULL,
	released    BIGINT NOT NULL,
	PRIMARY KEY (model_uuid, instance_id)
);

-- Event seqs come from event_counter, not a sequence: its row lock, held
-- until the commit, gives seqs in commit order, so a reader following the
-- log with "seq > last" never skips an event committed late.
CREATE TABLE event_counter (
	one INTEGER PRIMARY KEY CHECK (one = 1),
	seq BIGINT NOT NULL
);
INSERT INTO event_counter (one, seq) VALUES (1, 0);

CREATE TABLE events (
	seq        BIGINT PRIMARY KEY,
	model_uuid TEXT NOT NULL REFERENCES models(uuid) ON DELETE CASCADE,
	machine_id TEXT NOT NULL DEFAULT '',
	time       BIGINT NOT NULL,
	actor      TEXT NOT NULL DEFAULT '',
	kind       TEXT NOT NULL DEFAULT '',
	message    TEXT NOT NULL DEFAULT ''
);

CREATE INDEX events_model ON events (model_uuid, seq);

-- The change log. A write transaction takes the next revision from
-- revision_counter last, just before it commits: the row lock it holds
-- until then orders revisions like commits, so a reader that sees
-- revision N has seen every revision before it.
CREATE TABLE revision_counter (
	one      INTEGER PRIMARY KEY CHECK (one = 1),
	revision BIGINT NOT NULL
);
INSERT INTO revision_counter (one, revision) VALUES (1, 0);

CREATE TABLE changes (
	revision   BIGINT NOT NULL,
	model_uuid TEXT NOT NULL,
	kind       TEXT NOT NULL,
	key        TEXT NOT NULL DEFAULT ''
);

CREATE INDEX changes_model ON changes (model_uuid, revision);

CREATE TABLE controller_config (
	key   TEXT COLLATE "C" PRIMARY KEY,
	value TEXT NOT NULL
);

-- Leases for leader election; expires is unix nanoseconds of the
-- DATABASE clock, which every controller shares.
CREATE TABLE leases (
	name    TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,
	expires BIGINT NOT NULL
);

CREATE TABLE controllers (
	id      TEXT COLLATE "C" PRIMARY KEY,
	address TEXT NOT NULL,
	expires BIGINT NOT NULL
);
