-- Capacity memory (Z7): a zone of a cloud out of capacity for a launch
-- shape, until a time; shared by every model on that cloud.
CREATE TABLE capacity_blocks (
	cloud TEXT NOT NULL,
	zone  TEXT NOT NULL,
	shape TEXT NOT NULL,
	until BIGINT NOT NULL,
	PRIMARY KEY (cloud, zone, shape)
);
