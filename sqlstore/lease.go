package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/musterhq/muster"
)

var (
	_ muster.LeaseStore         = (*Store)(nil)
	_ muster.ControllerRegistry = (*Store)(nil)
)

func checkTTL(what string, ttl time.Duration) error {
	if ttl <= 0 {
		return muster.Errorf(muster.EInvalid, "bad %s ttl %s: want more than zero", what, ttl)
	}
	return nil
}

// ClaimLease claims the lease name for holder: it is taken when free or
// expired and extended when holder holds it already, in one statement
// whose row lock makes concurrent claims agree on one winner. It runs on
// the lease connection (Store.ldb), never queued behind other writes.
func (s *Store) ClaimLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, time.Time, error) {
	switch {
	case name == "":
		return false, time.Time{}, muster.Errorf(muster.EInvalid, "empty lease name")
	case holder == "":
		return false, time.Time{}, muster.Errorf(muster.EInvalid, "empty lease holder")
	}
	if err := checkTTL("lease", ttl); err != nil {
		return false, time.Time{}, err
	}
	var held bool
	var expires int64
	err := s.leaseTx(ctx, func(tx *sql.Tx) error {
		now, err := s.d.now(ctx, s, tx)
		if err != nil {
			return fmt.Errorf("claim lease %s: read clock: %w", name, err)
		}
		err = tx.QueryRowContext(ctx, s.d.rebind(`INSERT INTO leases (name, holder, expires) VALUES (?, ?, ?)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires = excluded.expires
			WHERE leases.holder = excluded.holder OR leases.expires <= ? RETURNING expires`),
			name, holder, nanos(now.Add(ttl)), nanos(now)).Scan(&expires)
		if err == nil {
			held = true
			return nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("claim lease %s: %w", name, err)
		}
		held = false
		var other string
		if err := tx.QueryRowContext(ctx, s.d.rebind(`SELECT holder, expires FROM leases WHERE name = ?`), name).Scan(&other, &expires); err != nil {
			return fmt.Errorf("claim lease %s: read holder: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return false, time.Time{}, err
	}
	return held, fromNanos(expires), nil
}

// ReleaseLease frees the lease if holder holds it.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	return s.leaseTx(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, s.d.rebind(`DELETE FROM leases WHERE name = ? AND holder = ?`), name, holder); err != nil {
			return fmt.Errorf("release lease %s: %w", name, err)
		}
		return nil
	})
}

// leaseTx runs fn in a transaction on the lease connection. Leases record
// no changes: no watcher sees them.
func (s *Store) leaseTx(ctx context.Context, fn func(tx *sql.Tx) error) error {
	if err := s.checkOpen(); err != nil {
		return err
	}
	tx, err := s.ldb.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// LeaseHolder returns the lease's holder and expiry, or "" when it is free
// or expired.
func (s *Store) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	if err := s.checkOpen(); err != nil {
		return "", time.Time{}, err
	}
	now, err := s.d.now(ctx, s, s.rdb)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read lease %s: read clock: %w", name, err)
	}
	var holder string
	var expires int64
	err = s.queryRow(ctx, `SELECT holder, expires FROM leases WHERE name = ? AND expires > ?`, name, nanos(now)).Scan(&holder, &expires)
	if errors.Is(err, sql.ErrNoRows) {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("read lease %s: %w", name, err)
	}
	return holder, fromNanos(expires), nil
}

// controllerGrace is how long an expired controller stays in the registry
// before a registration sweeps it away.
const controllerGrace = time.Hour

// RegisterController records or refreshes a controller's API address.
func (s *Store) RegisterController(ctx context.Context, id, apiAddress string, ttl time.Duration) error {
	switch {
	case id == "":
		return muster.Errorf(muster.EInvalid, "empty controller id")
	case apiAddress == "":
		return muster.Errorf(muster.EInvalid, "empty API address of controller %s", id)
	}
	if err := checkTTL("controller", ttl); err != nil {
		return err
	}
	return s.write(ctx, func(t *wtx) error {
		now, err := s.d.now(ctx, s, t.tx)
		if err != nil {
			return fmt.Errorf("register controller %s: read clock: %w", id, err)
		}
		if _, err := t.exec(ctx, `INSERT INTO controllers (id, address, expires) VALUES (?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET address = excluded.address, expires = excluded.expires`,
			id, apiAddress, nanos(now.Add(ttl))); err != nil {
			return fmt.Errorf("register controller %s: %w", id, err)
		}
		if _, err := t.exec(ctx, `DELETE FROM controllers WHERE expires <= ?`, nanos(now.Add(-controllerGrace))); err != nil {
			return fmt.Errorf("register controller %s: sweep: %w", id, err)
		}
		return nil
	})
}

// Controllers returns the live controllers, by id.
func (s *Store) Controllers(ctx context.Context) ([]muster.ControllerInfo, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	now, err := s.d.now(ctx, s, s.rdb)
	if err != nil {
		return nil, fmt.Errorf("read controllers: read clock: %w", err)
	}
	rows, err := s.query(ctx, `SELECT id, address, expires FROM controllers WHERE expires > ? ORDER BY id`, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("read controllers: %w", err)
	}
	defer rows.Close()
	var out []muster.ControllerInfo
	for rows.Next() {
		var c muster.ControllerInfo
		var expires int64
		if err := rows.Scan(&c.ID, &c.Address, &expires); err != nil {
			return nil, fmt.Errorf("read controllers: %w", err)
		}
		c.Expires = fromNanos(expires)
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read controllers: %w", err)
	}
	return out, nil
}
