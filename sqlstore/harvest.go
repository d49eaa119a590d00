package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/musterhq/muster"
)

var _ muster.HarvestStore = (*Store)(nil)

// ReleaseInstances remembers instances as released from muster (H8).
func (s *Store) ReleaseInstances(ctx context.Context, modelUUID string, ids []string) error {
	for _, id := range ids {
		if id == "" {
			return muster.Errorf(muster.EInvalid, "release instances: empty instance id")
		}
	}
	return s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		now := nanos(s.clock.Now())
		for _, id := range ids {
			if err := t.release(ctx, modelUUID, id, now); err != nil {
				return err
			}
		}
		return nil
	})
}

// release remembers one instance as released (H8); releasing it again
// changes nothing.
func (t *wtx) release(ctx context.Context, modelUUID, id string, now int64) error {
	if _, err := t.exec(ctx, `INSERT INTO released_instances (model_uuid, instance_id, released) VALUES (?, ?, ?) ON CONFLICT DO NOTHING`,
		modelUUID, id, now); err != nil {
		return fmt.Errorf("release instance %s: %w", id, err)
	}
	return nil
}

// BlockCapacity records a capacity block (Z7), keeping the later end of
// two blocks of the same cloud, zone and shape.
func (s *Store) BlockCapacity(ctx context.Context, b muster.CapacityBlock) error {
	if b.Cloud == "" || b.Zone == "" || b.Shape == "" {
		return muster.Errorf(muster.EInvalid, "capacity block needs a cloud, a zone and a shape (got %q, %q, %q)", b.Cloud, b.Zone, b.Shape)
	}
	return s.write(ctx, func(t *wtx) error {
		_, err := t.exec(ctx, `INSERT INTO capacity_blocks (cloud, zone, shape, until) VALUES (?, ?, ?, ?)
			ON CONFLICT (cloud, zone, shape) DO UPDATE SET until = excluded.until WHERE excluded.until > capacity_blocks.until`,
			b.Cloud, b.Zone, b.Shape, nanos(b.Until))
		if err != nil {
			return fmt.Errorf("record capacity block: %w", err)
		}
		// Blocks that ended long ago are of no use to anyone.
		if _, err := t.exec(ctx, `DELETE FROM capacity_blocks WHERE cloud = ? AND until < ?`, b.Cloud, nanos(b.Until.Add(-24*time.Hour))); err != nil {
			return fmt.Errorf("prune capacity blocks: %w", err)
		}
		return nil
	})
}

// CapacityBlocks returns a cloud's blocks that end after now.
func (s *Store) CapacityBlocks(ctx context.Context, cloud string, now time.Time) ([]muster.CapacityBlock, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT zone, shape, until FROM capacity_blocks WHERE cloud = ? AND until > ? ORDER BY zone, shape`, cloud, nanos(now))
	if err != nil {
		return nil, fmt.Errorf("read capacity blocks: %w", err)
	}
	defer rows.Close()
	var out []muster.CapacityBlock
	for rows.Next() {
		b := muster.CapacityBlock{Cloud: cloud}
		var until int64
		if err := rows.Scan(&b.Zone, &b.Shape, &until); err != nil {
			return nil, fmt.Errorf("read capacity blocks: %w", err)
		}
		b.Until = fromNanos(until)
		out = append(out, b)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read capacity blocks: %w", err)
	}
	return out, nil
}
