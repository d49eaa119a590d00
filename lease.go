package muster

import (
	"context"
	"time"
)

// LeaseStore keeps named leases, for leader election between controllers
// sharing a store. Expiry is measured on the store's clock (the database
// server's clock for a shared database), so controllers whose own clocks
// are skewed still agree on who holds a lease.
//
// A holder that must stop acting before anyone else may start (one
// provisioner per model) should not compare the returned expiry with its
// own clock; it should count ttl from just before its ClaimLease call on
// its own monotonic clock: that deadline always comes before the
// database's expiry, whatever the skew.
type LeaseStore interface {
	// ClaimLease claims the lease name for holder for ttl. It succeeds
	// (held true) when the lease is free, expired or already held by
	// holder, which extends it; expires is then the new expiry. Otherwise
	// held is false and expires is the current holder's expiry. EInvalid
	// for an empty name or holder or a ttl that is not positive.
	ClaimLease(ctx context.Context, name, holder string, ttl time.Duration) (held bool, expires time.Time, err error)
	// ReleaseLease frees the lease if holder holds it; otherwise it does
	// nothing.
	ReleaseLease(ctx context.Context, name, holder string) error
	// LeaseHolder returns the holder of the lease and its expiry, or ""
	// and the zero time when the lease is free or expired.
	LeaseHolder(ctx context.Context, name string) (holder string, expires time.Time, err error)
}

// ControllerInfo is a controller registered in the store.
type ControllerInfo struct {
	ID      string
	Address string    // the controller's API address, host:port
	Expires time.Time // live until then unless it registers again
}

// ControllerRegistry keeps the API addresses of the controllers sharing a
// store.
type ControllerRegistry interface {
	// RegisterController records (or refreshes) controller id at
	// apiAddress, live for ttl on the store's clock. EInvalid for an empty
	// id or address or a ttl that is not positive.
	RegisterController(ctx context.Context, id, apiAddress string, ttl time.Duration) error
	// Controllers returns the live controllers, by id.
	Controllers(ctx context.Context) ([]ControllerInfo, error)
}
