package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sort"

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
		lasts, err := t.lastEnrolments(ctx, modelUUID, parseIDs(machineIDs))
		if err != nil {
			return err
		}
		for _, id := range machineIDs {
			n, ok := parseID(id)
			if !ok {
				continue
			}
			last := lasts[n]
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

// lastEnrolments returns when each of the machines got its newest
// enrolment token, in one query for a batch; a machine without one is
// not in the map.
func (t *wtx) lastEnrolments(ctx context.Context, modelUUID string, nums []int64) (map[int64]int64, error) {
	lasts := make(map[int64]int64, len(nums))
	if len(nums) == 0 {
		return lasts, nil
	}
	rows, err := t.query(ctx, `SELECT machine_id, MAX(created) FROM enrolments WHERE model_uuid = ? AND `+t.s.d.inList("machine_id")+
		` GROUP BY machine_id`, modelUUID, t.s.d.listArg(nums))
	if err != nil {
		return nil, fmt.Errorf("read enrolments: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, last int64
		if err := rows.Scan(&n, &last); err != nil {
			return nil, fmt.Errorf("read enrolments: %w", err)
		}
		lasts[n] = last
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read enrolments: %w", err)
	}
	return lasts, nil
}

// Enrol implements muster.EnrolmentStore. The machines are locked in the
// order of their ids, whatever the order of es: two controllers' batches
// cannot deadlock.
func (s *Store) Enrol(ctx context.Context, modelUUID string, es []muster.Enrolment) ([]muster.Enrolled, error) {
	out := make([]muster.Enrolled, len(es))
	order := make([]int, 0, len(es))
	ids := make([]int64, len(es))
	for i, e := range es {
		n, ok := parseID(e.MachineID)
		switch {
		case e.MachineID == "" || e.InstanceID == "" || e.Token == "" || e.PasswordHash == "":
			out[i].Err = muster.Errorf(muster.EInvalid, "enrol needs a machine id, an instance id, a token and a password hash")
		case !ok:
			out[i].Err = muster.Errorf(muster.ENotFound, "no machine %q", e.MachineID)
		default:
			ids[i] = n
			order = append(order, i)
		}
	}
	sort.SliceStable(order, func(a, b int) bool { return ids[order[a]] < ids[order[b]] })
	err := s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		now := s.clock.Now().UTC()
		// What the granted enrolments' Then returned: their machines get
		// the updates in one write, their events in one insert.
		reported := map[int64]*muster.Machine{}
		var us []muster.MachineUpdate
		var evs []muster.Event
		for _, i := range order {
			g, err := t.enrol(ctx, modelUUID, ids[i], es[i], now.UnixNano())
			if err != nil {
				return err
			}
			out[i] = g.out
			if g.update != nil {
				m := g.out.Machine
				reported[ids[i]] = &m
				us = append(us, *g.update)
			}
			evs = append(evs, g.events...)
		}
		if err := t.applyUpdates(ctx, modelUUID, reported, us); err != nil {
			return err
		}
		for _, i := range order {
			if m := reported[ids[i]]; m != nil && out[i].Err == nil {
				out[i].Machine = *m
			}
		}
		_, err := t.appendEvents(ctx, evs, now, map[string]bool{modelUUID: true})
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// granted is one enrolment's outcome in its transaction and, when its
// Then returned them, the update and events still to write.
type granted struct {
	out    muster.Enrolled
	update *muster.MachineUpdate
	events []muster.Event
}

// callThen calls e.Then for machine m and checks what it returns; a
// refusal is the error.
func callThen(e muster.Enrolment, modelUUID string, m muster.Machine) (*muster.MachineUpdate, []muster.Event, error) {
	if e.Then == nil {
		return nil, nil, nil
	}
	u, evs := e.Then(m)
	if u != nil {
		v := *u
		v.ID = m.ID
		if err := checkUpdate(v); err != nil {
			return nil, nil, err
		}
		if v.Constraints != nil || v.Base != nil {
			return nil, nil, muster.Errorf(muster.EInvalid, "machine %s: an enrolment's update may not change the template", m.ID)
		}
		u = &v
	}
	if err := checkEvents(evs); err != nil {
		return nil, nil, err
	}
	for _, ev := range evs {
		if ev.ModelUUID != modelUUID {
			return nil, nil, muster.Errorf(muster.EInvalid, "machine %s: an enrolment's event is of another model", m.ID)
		}
	}
	return u, evs, nil
}

// enrol decides one enrolment of machine n in t: a refusal is the
// outcome's Err, err a failed statement (the transaction's end).
func (t *wtx) enrol(ctx context.Context, modelUUID string, n int64, e muster.Enrolment, now int64) (out granted, err error) {
	m, err := scanMachine(t.queryRow(ctx, `SELECT `+machineCols+` FROM machines WHERE model_uuid = ? AND id = ?`+t.s.d.forUpdate,
		modelUUID, n))
	if errors.Is(err, sql.ErrNoRows) {
		return granted{out: muster.Enrolled{Err: muster.Errorf(muster.ENotFound, "no machine %q", e.MachineID)}}, nil
	}
	if err != nil {
		return out, fmt.Errorf("read machine %s: %w", e.MachineID, err)
	}
	rows, err := t.query(ctx, `SELECT token_hash, handed_out FROM enrolments WHERE model_uuid = ? AND machine_id = ?`, modelUUID, n)
	if err != nil {
		return out, fmt.Errorf("read enrolments of machine %s: %w", m.ID, err)
	}
	var matches, handedOut bool
	for rows.Next() {
		var hash string
		var handed int64
		if err := rows.Scan(&hash, &handed); err != nil {
			rows.Close()
			return out, fmt.Errorf("read enrolments of machine %s: %w", m.ID, err)
		}
		matches = matches || muster.SecretMatches(e.Token, hash)
		handedOut = handedOut || handed != 0
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("read enrolments of machine %s: %w", m.ID, err)
	}
	refuse := func(code, format string, args ...any) (granted, error) {
		return granted{out: muster.Enrolled{Err: muster.Errorf(code, format, args...)}}, nil
	}
	if !matches {
		return refuse(muster.EUnauthorized, "the token is not an enrolment token of machine %s", m.ID)
	}
	if inst := m.InstanceID(); inst == "" && m.Life != muster.LifeDead && !handedOut {
		// A batch's instances are recorded after its start call
		// returns: its agent tries again.
		return refuse(muster.EUnavailable, "machine %s has no instance recorded yet", m.ID)
	} else if inst != e.InstanceID {
		return refuse(muster.EUnauthorized, "instance %s is not machine %s's", e.InstanceID, m.ID)
	}
	if handedOut {
		return refuse(muster.EConflict, "the credentials of machine %s were handed out already", m.ID)
	}
	if m.Life == muster.LifeDead {
		return refuse(muster.EConflict, "machine %s is dead", m.ID)
	}
	u, evs, err := callThen(e, modelUUID, m)
	if err != nil {
		return granted{out: muster.Enrolled{Err: err}}, nil
	}
	if _, err := t.exec(ctx, `UPDATE enrolments SET handed_out = 1 WHERE model_uuid = ? AND machine_id = ?`, modelUUID, n); err != nil {
		return out, fmt.Errorf("mark enrolment of machine %s: %w", m.ID, err)
	}
	m.PasswordHash = e.PasswordHash
	if u == nil {
		// Otherwise the update's write sets the password with the rest.
		if _, err := t.exec(ctx, `UPDATE machines SET password_hash = ?, updated = ? WHERE model_uuid = ? AND id = ?`,
			e.PasswordHash, now, modelUUID, n); err != nil {
			return out, fmt.Errorf("set password of machine %s: %w", m.ID, err)
		}
	}
	return granted{out: muster.Enrolled{Machine: m}, update: u, events: evs}, nil
}
