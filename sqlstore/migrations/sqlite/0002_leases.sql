-- Leases for leader election: a lease is held by holder until expires
-- (unix nanoseconds of the store's clock); an expired lease is free.
CREATE TABLE leases (
	name    TEXT PRIMARY KEY,
	holder  TEXT NOT NULL,
	expires INTEGER NOT NULL
);

-- The controllers sharing the store and their API addresses; a controller
-- is live until expires (unix nanoseconds) unless it registers again.
CREATE TABLE controllers (
	id      TEXT PRIMARY KEY,
	address TEXT NOT NULL,
	expires INTEGER NOT NULL
);
