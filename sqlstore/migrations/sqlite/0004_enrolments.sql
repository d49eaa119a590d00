-- Batch enrolment (SPEC §4): the hash of the one-time enrolment token of
-- the batch a machine was last started in, and whether its credentials
-- were handed out. Gone with the machine.
CREATE TABLE enrolments (
	model_uuid  TEXT NOT NULL,
	machine_id  INTEGER NOT NULL,
	token_hash  TEXT NOT NULL,
	handed_out  INTEGER NOT NULL DEFAULT 0,
	PRIMARY KEY (model_uuid, machine_id),
	FOREIGN KEY (model_uuid, machine_id) REFERENCES machines (model_uuid, id) ON DELETE CASCADE
);

CREATE INDEX machines_instance ON machines (model_uuid, instance_id);
