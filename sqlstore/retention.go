package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/musterhq/muster"
)

// Trim deletes the model's events older than retention and its change-log
// entries at or below the newest revision mark older than retention, and
// raises the model's change floor to that revision (S10). Each call also
// marks the current revision with the time now, so the change log is
// trimmed with the granularity of the calls (the controller calls it
// hourly).
func (s *Store) Trim(ctx context.Context, modelUUID string, retention time.Duration) (muster.Trimmed, error) {
	var out muster.Trimmed
	if retention <= 0 {
		return out, muster.Errorf(muster.EInvalid, "bad retention %s: want more than zero", retention)
	}
	now := s.clock.Now()
	cutoff := nanos(now.Add(-retention))
	err := s.write(ctx, func(t *wtx) error {
		out = muster.Trimmed{}
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		var rev int64
		if err := t.queryRow(ctx, `SELECT revision FROM revision_counter WHERE one = 1`).Scan(&rev); err != nil {
			return fmt.Errorf("read revision: %w", err)
		}
		if _, err := t.exec(ctx, `INSERT INTO revision_marks (revision, time) VALUES (?, ?) ON CONFLICT (revision) DO NOTHING`, rev, nanos(now)); err != nil {
			return fmt.Errorf("mark revision: %w", err)
		}
		var floor int64
		if err := t.queryRow(ctx, `SELECT COALESCE(MAX(revision), 0) FROM revision_marks WHERE time <= ?`, cutoff).Scan(&floor); err != nil {
			return fmt.Errorf("read revision marks: %w", err)
		}
		res, err := t.exec(ctx, `DELETE FROM events WHERE model_uuid = ? AND time < ?`, modelUUID, cutoff)
		if err != nil {
			return fmt.Errorf("trim events: %w", err)
		}
		out.Events = affected(res)
		var old int64
		if err := t.queryRow(ctx, `SELECT COALESCE(MAX(revision), 0) FROM change_floors WHERE model_uuid = ?`, modelUUID).Scan(&old); err != nil {
			return fmt.Errorf("read change floor: %w", err)
		}
		out.Floor = max(old, floor)
		if floor <= old {
			return nil
		}
		if res, err = t.exec(ctx, `DELETE FROM changes WHERE model_uuid = ? AND revision <= ?`, modelUUID, floor); err != nil {
			return fmt.Errorf("trim changes: %w", err)
		}
		out.Changes = affected(res)
		if _, err := t.exec(ctx, `INSERT INTO change_floors (model_uuid, revision) VALUES (?, ?)
			ON CONFLICT (model_uuid) DO UPDATE SET revision = excluded.revision`, modelUUID, floor); err != nil {
			return fmt.Errorf("raise change floor: %w", err)
		}
		// Marks below the floor are no use to any model with a retention
		// at least this long; keep a year of them for the others.
		_, err = t.exec(ctx, `DELETE FROM revision_marks WHERE time < ?`, nanos(now.Add(-366*24*time.Hour)))
		return err
	})
	if err != nil {
		return muster.Trimmed{}, fmt.Errorf("trim model %s: %w", modelUUID, err)
	}
	return out, nil
}

func affected(res interface{ RowsAffected() (int64, error) }) int {
	n, err := res.RowsAffected()
	if err != nil {
		return 0
	}
	return int(n)
}

// changeFloor returns the revision up to which the model's change log was
// trimmed (0 when never).
func (s *Store) changeFloor(ctx context.Context, modelUUID string) (int64, error) {
	var floor int64
	err := s.queryRow(ctx, `SELECT COALESCE(MAX(revision), 0) FROM change_floors WHERE model_uuid = ?`, modelUUID).Scan(&floor)
	return floor, err
}
