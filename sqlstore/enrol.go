package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/musterhq/muster"
)

var _ muster.EnrolmentStore = (*Store)(nil)

// keptEnrolments is how many batch tokens of a machine stay valid: an
// instance a crashed start left unrecorded and a repeated start (in
// another batch) adopted still enrols with the token of its own batch.
const keptEnrolments = 4

// SetEnrolment implements muster.EnrolmentStore. The machine's earlier
// tokens stay valid (the newest keptEnrolments): the instance a machine
// enrols is always the one recorded for it, whichever batch made it.
func (s *Store) SetEnrolment(ctx context.Context, modelUUID string, machineIDs []string, tokenHash string) error {
	if tokenHash == "" {
		return muster.Errorf(muster.EInvalid, "enrolment token hash is empty")
	}
	now := s.clock.Now().UnixNano()
	return s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		for _, id := range machineIDs {
			n, ok := parseID(id)
			if !ok {
				continue
			}
			var last int64
			if err := t.queryRow(ctx, `SELECT COALESCE(MAX(created), 0) FROM enrolments WHERE model_uuid = ? AND machine_id = ?`,
				modelUUID, n).Scan(&last); err != nil {
				return fmt.Errorf("read enrolments of machine %s: %w", id, err)
			}
			// Only machines that exist: the foreign key would refuse others.
			if _, err := t.exec(ctx, `INSERT INTO enrolments (model_uuid, machine_id, token_hash, handed_out, created)
				SELECT model_uuid, id, ?, 0, ? FROM machines WHERE model_uuid = ? AND id = ?
				ON CONFLICT (model_uuid, machine_id, token_hash) DO UPDATE SET created = excluded.created`,
				tokenHash, max(now, last+1), modelUUID, n); err != nil {
				return fmt.Errorf("record enrolment of machine %s: %w", id, err)
			}
			if last == 0 {
				continue // the machine's first: nothing to reset or trim
			}
			if _, err := t.exec(ctx, `UPDATE enrolments SET handed_out = 0 WHERE model_uuid = ? AND machine_id = ?`, modelUUID, n); err != nil {
				return fmt.Errorf("record enrolment of machine %s: %w", id, err)
			}
			if _, err := t.exec(ctx, `DELETE FROM enrolments WHERE model_uuid = ? AND machine_id = ? AND token_hash NOT IN
				(SELECT token_hash FROM enrolments WHERE model_uuid = ? AND machine_id = ? ORDER BY created DESC LIMIT ?)`,
				modelUUID, n, modelUUID, n, keptEnrolments); err != nil {
				return fmt.Errorf("trim enrolments of machine %s: %w", id, err)
			}
		}
		return nil
	})
}

// Enrol implements muster.EnrolmentStore.
func (s *Store) Enrol(ctx context.Context, modelUUID, machineID, instanceID, token, passwordHash string) (muster.Machine, error) {
	if machineID == "" || instanceID == "" || token == "" || passwordHash == "" {
		return muster.Machine{}, muster.Errorf(muster.EInvalid, "enrol needs a machine id, an instance id, a token and a password hash")
	}
	var m muster.Machine
	err := s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		n, ok := parseID(machineID)
		if !ok {
			return muster.Errorf(muster.ENotFound, "no machine %q", machineID)
		}
		var err error
		m, err = scanMachine(t.queryRow(ctx, `SELECT `+machineCols+` FROM machines WHERE model_uuid = ? AND id = ?`+t.s.d.forUpdate,
			modelUUID, n))
		if errors.Is(err, sql.ErrNoRows) {
			return muster.Errorf(muster.ENotFound, "no machine %q", machineID)
		}
		if err != nil {
			return fmt.Errorf("read machine %s: %w", machineID, err)
		}
		rows, err := t.query(ctx, `SELECT token_hash, handed_out FROM enrolments WHERE model_uuid = ? AND machine_id = ?`, modelUUID, n)
		if err != nil {
			return fmt.Errorf("read enrolments of machine %s: %w", m.ID, err)
		}
		var matches, handedOut bool
		for rows.Next() {
			var hash string
			var handed int64
			if err := rows.Scan(&hash, &handed); err != nil {
				rows.Close()
				return fmt.Errorf("read enrolments of machine %s: %w", m.ID, err)
			}
			matches = matches || muster.SecretMatches(token, hash)
			handedOut = handedOut || handed != 0
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read enrolments of machine %s: %w", m.ID, err)
		}
		if !matches {
			return muster.Errorf(muster.EUnauthorized, "the token is not an enrolment token of machine %s", m.ID)
		}
		if inst := m.InstanceID(); inst == "" && m.Life != muster.LifeDead && !handedOut {
			// A batch's instances are recorded after its start call
			// returns: its agent tries again.
			return muster.Errorf(muster.EUnavailable, "machine %s has no instance recorded yet", machineID)
		} else if inst != instanceID {
			return muster.Errorf(muster.EUnauthorized, "instance %s is not machine %s's", instanceID, machineID)
		}
		if handedOut {
			return muster.Errorf(muster.EConflict, "the credentials of machine %s were handed out already", m.ID)
		}
		if m.Life == muster.LifeDead {
			return muster.Errorf(muster.EConflict, "machine %s is dead", m.ID)
		}
		now := s.clock.Now().UTC().UnixNano()
		if _, err := t.exec(ctx, `UPDATE enrolments SET handed_out = 1 WHERE model_uuid = ? AND machine_id = ?`, modelUUID, n); err != nil {
			return fmt.Errorf("mark enrolment of machine %s: %w", m.ID, err)
		}
		if _, err := t.exec(ctx, `UPDATE machines SET password_hash = ?, updated = ? WHERE model_uuid = ? AND id = ?`,
			passwordHash, now, modelUUID, n); err != nil {
			return fmt.Errorf("set password of machine %s: %w", m.ID, err)
		}
		m.PasswordHash = passwordHash
		return nil
	})
	return m, err
}
