-- Batch enrolment (SPEC §4): the hashes of the one-time enrolment tokens of
-- the batches a machine was started in (the last few: an instance a crash
-- left unrecorded, adopted later, still enrols with its batch's token), and
-- whether the machine's credentials were handed out since its last batch.
-- Gone with the machine.
CREATE TABLE enrolments (
	model_uuid  TEXT NOT NULL,
	machine_id  BIGINT NOT NULL,
	token_hash  TEXT NOT NULL,
	handed_out  BIGINT NOT NULL DEFAULT 0,
	created     BIGINT NOT NULL, -- unix nanoseconds
	PRIMARY KEY (model_uuid, machine_id, token_hash),
	FOREIGN KEY (model_uuid, machine_id) REFERENCES machines (model_uuid, id) ON DELETE CASCADE
);

CREATE INDEX enrolments_token ON enrolments (model_uuid, token_hash);
CREATE INDEX machines_instance ON machines (model_uuid, instance_id);
