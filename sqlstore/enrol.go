package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/musterhq/muster"
)

var _ muster.EnrolmentStore = (*Store)(nil)

// SetEnrolment implements muster.EnrolmentStore.
func (s *Store) SetEnrolment(ctx context.Context, modelUUID string, machineIDs []string, tokenHash string) error {
	if tokenHash == "" {
		return muster.Errorf(muster.EInvalid, "enrolment token hash is empty")
	}
	return s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		for _, id := range machineIDs {
			n, ok := parseID(id)
			if !ok {
				continue
			}
			// Only machines that exist: the foreign key would refuse others.
			if _, err := t.exec(ctx, `INSERT INTO enrolments (model_uuid, machine_id, token_hash, handed_out)
				SELECT model_uuid, id, ?, 0 FROM machines WHERE model_uuid = ? AND id = ?
				ON CONFLICT (model_uuid, machine_id) DO UPDATE SET token_hash = excluded.token_hash, handed_out = 0`,
				tokenHash, modelUUID, n); err != nil {
				return fmt.Errorf("record enrolment of machine %s: %w", id, err)
			}
		}
		return nil
	})
}

// Enrol implements muster.EnrolmentStore.
func (s *Store) Enrol(ctx context.Context, modelUUID, instanceID, token, passwordHash string) (muster.Machine, error) {
	if instanceID == "" || token == "" || passwordHash == "" {
		return muster.Machine{}, muster.Errorf(muster.EInvalid, "enrol needs an instance id, a token and a password hash")
	}
	var m muster.Machine
	err := s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		var err error
		m, err = scanMachine(t.queryRow(ctx, `SELECT `+machineCols+` FROM machines WHERE model_uuid = ? AND instance_id = ?`+t.s.d.forUpdate,
			modelUUID, instanceID))
		if errors.Is(err, sql.ErrNoRows) {
			// Not recorded yet, or no machine of ours: the token tells.
			var n int64
			if err := t.queryRow(ctx, `SELECT COUNT(*) FROM enrolments WHERE model_uuid = ? AND token_hash = ? AND handed_out = 0`,
				modelUUID, muster.HashSecret(token)).Scan(&n); err != nil {
				return fmt.Errorf("read enrolments: %w", err)
			}
			if n > 0 {
				return muster.Errorf(muster.EUnavailable, "instance %s is not recorded for a machine yet", instanceID)
			}
			return muster.Errorf(muster.EUnauthorized, "instance %s has no machine enrolling with this token", instanceID)
		}
		if err != nil {
			return fmt.Errorf("read machine of instance %s: %w", instanceID, err)
		}
		n, _ := parseID(m.ID)
		var hash string
		var handedOut int64
		err = t.queryRow(ctx, `SELECT token_hash, handed_out FROM enrolments WHERE model_uuid = ? AND machine_id = ?`, modelUUID, n).Scan(&hash, &handedOut)
		if errors.Is(err, sql.ErrNoRows) || (err == nil && !muster.SecretMatches(token, hash)) {
			return muster.Errorf(muster.EUnauthorized, "the token is not the enrolment token of machine %s", m.ID)
		}
		if err != nil {
			return fmt.Errorf("read enrolment of machine %s: %w", m.ID, err)
		}
		if handedOut != 0 {
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
