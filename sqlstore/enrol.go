package sqlstore

import (
	"context"
	"fmt"
	"sort"
	"time"

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
		nums := parseIDs(machineIDs)
		lasts, err := t.lastEnrolments(ctx, modelUUID, nums)
		if err != nil {
			return err
		}
		// A machine's first token (every machine of a batch but a retried
		// one's) goes in with the others' in one statement; only machines
		// that exist: the foreign key would refuse others.
		var firsts []int64
		for _, n := range nums {
			if lasts[n] == 0 {
				firsts = append(firsts, n)
			}
		}
		if len(firsts) > 0 {
			if _, err := t.exec(ctx, `INSERT INTO enrolments (model_uuid, machine_id, token_hash, handed_out, created)
				SELECT model_uuid, id, ?, 0, ? FROM machines WHERE model_uuid = ? AND `+t.s.d.inList("id")+`
				ON CONFLICT (model_uuid, machine_id, token_hash) DO UPDATE SET created = excluded.created`,
				tokenHash, now, modelUUID, t.s.d.listArg(firsts)); err != nil {
				return fmt.Errorf("record enrolment of %d machines: %w", len(firsts), err)
			}
		}
		for _, n := range nums {
			last := lasts[n]
			if last == 0 {
				continue // recorded above: nothing to reset or trim
			}
			id := formatID(n)
			if _, err := t.exec(ctx, `INSERT INTO enrolments (model_uuid, machine_id, token_hash, handed_out, created)
				SELECT model_uuid, id, ?, 0, ? FROM machines WHERE model_uuid = ? AND id = ?
				ON CONFLICT (model_uuid, machine_id, token_hash) DO UPDATE SET created = excluded.created`,
				tokenHash, max(now, last+1), modelUUID, n); err != nil {
				return fmt.Errorf("record enrolment of machine %s: %w", id, err)
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

// Enrol implements muster.EnrolmentStore. The batch's machines are read
// and locked in one query, in the order of their ids whatever the order
// of es (two controllers' batches cannot deadlock), and their tokens in
// another; each enrolment is then decided on what was read and what the
// batch's earlier enrolments did, and the outcomes written together.
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
	nums := make([]int64, 0, len(order))
	for _, i := range order {
		if len(nums) == 0 || nums[len(nums)-1] != ids[i] {
			nums = append(nums, ids[i])
		}
	}
	err := s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		ms, err := t.machinesForUpdate(ctx, modelUUID, nums)
		if err != nil {
			return err
		}
		toks, err := t.enrolmentTokens(ctx, modelUUID, nums)
		if err != nil {
			return err
		}
		g := grants{reported: map[int64]*muster.Machine{}}
		for _, i := range order {
			n, e := ids[i], es[i]
			m, ok := ms[n]
			if !ok {
				out[i] = muster.Enrolled{Err: muster.Errorf(muster.ENotFound, "no machine %q", e.MachineID)}
				continue
			}
			out[i] = muster.Enrolled{Err: decideEnrolment(*m, toks[n], e)}
			if out[i].Err == nil {
				out[i].Err = g.grant(modelUUID, n, m, e)
			}
			if out[i].Err == nil {
				toks[n].handedOut = true // a second enrolment of the batch is a replay
			}
		}
		now := s.clock.Now().UTC()
		if err := g.write(ctx, t, modelUUID, now); err != nil {
			return err
		}
		for _, i := range order {
			if out[i].Err == nil {
				out[i].Machine = *ms[ids[i]]
				out[i].Machine.LastSeen = now
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// grants collects what a batch's granted enrolments write.
type grants struct {
	handed   []int64                   // machines whose credentials are handed out
	reported map[int64]*muster.Machine // those with an update (Then's), by id
	us       []muster.MachineUpdate    // and the updates
	plain    []*muster.Machine         // those without: only the password changes
	events   []muster.Event
}

// grant grants enrolment e of machine m (number n), as read in the
// transaction: m takes the new password hash, and Then's update and events
// are kept for write. A refusal by Then is the error; then nothing is kept.
func (g *grants) grant(modelUUID string, n int64, m *muster.Machine, e muster.Enrolment) error {
	u, evs, err := callThen(e, modelUUID, *m)
	if err != nil {
		return err
	}
	g.handed = append(g.handed, n)
	m.PasswordHash = e.PasswordHash
	if u != nil {
		g.reported[n] = m
		g.us = append(g.us, *u)
	} else {
		g.plain = append(g.plain, m)
	}
	g.events = append(g.events, evs...)
	return nil
}

// write writes the grants in t: the tokens marked handed out, the
// machines seen now, with their updates (a change each) or only their
// passwords, the events.
func (g *grants) write(ctx context.Context, t *wtx, modelUUID string, now time.Time) error {
	if len(g.handed) == 0 {
		return nil
	}
	if _, err := t.exec(ctx, `UPDATE enrolments SET handed_out = 1 WHERE model_uuid = ? AND `+t.s.d.inList("machine_id"),
		modelUUID, t.s.d.listArg(g.handed)); err != nil {
		return fmt.Errorf("mark enrolments: %w", err)
	}
	// The agent enrolling is the machine seen now, as a heartbeat is.
	if _, err := t.exec(ctx, `UPDATE machines SET last_seen = ? WHERE model_uuid = ? AND `+t.s.d.inList("id"),
		nanos(now), modelUUID, t.s.d.listArg(g.handed)); err != nil {
		return fmt.Errorf("record enrolled machines seen: %w", err)
	}
	if err := t.applyUpdates(ctx, modelUUID, g.reported, g.us); err != nil {
		return err
	}
	if err := t.writeMachines(ctx, modelUUID, g.plain, nanos(now)); err != nil {
		return err
	}
	_, err := t.appendEvents(ctx, g.events, now, map[string]bool{modelUUID: true})
	return err
}

// machineTokens are the enrolment tokens of one machine.
type machineTokens struct {
	hashes    []string
	handedOut bool // the credentials were handed out with one of them
}

// enrolmentTokens reads the enrolment tokens of the machines nums.
func (t *wtx) enrolmentTokens(ctx context.Context, modelUUID string, nums []int64) (map[int64]*machineTokens, error) {
	out := make(map[int64]*machineTokens, len(nums))
	for _, n := range nums {
		out[n] = &machineTokens{}
	}
	if len(nums) == 0 {
		return out, nil
	}
	rows, err := t.query(ctx, `SELECT machine_id, token_hash, handed_out FROM enrolments WHERE model_uuid = ? AND `+t.s.d.inList("machine_id"),
		modelUUID, t.s.d.listArg(nums))
	if err != nil {
		return nil, fmt.Errorf("read enrolments: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var n, handed int64
		var hash string
		if err := rows.Scan(&n, &hash, &handed); err != nil {
			return nil, fmt.Errorf("read enrolments: %w", err)
		}
		if mt := out[n]; mt != nil {
			mt.hashes = append(mt.hashes, hash)
			mt.handedOut = mt.handedOut || handed != 0
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read enrolments: %w", err)
	}
	return out, nil
}

// decideEnrolment decides enrolment e of machine m with its tokens: nil
// grants it, else the refusal.
func decideEnrolment(m muster.Machine, toks *machineTokens, e muster.Enrolment) error {
	matches := false
	for _, h := range toks.hashes {
		matches = matches || muster.SecretMatches(e.Token, h)
	}
	switch inst := m.InstanceID(); {
	case !matches:
		return muster.Errorf(muster.EUnauthorized, "the token is not an enrolment token of machine %s", m.ID)
	case inst == "" && m.Life != muster.LifeDead && !toks.handedOut:
		// A batch's instances are recorded after its start call
		// returns: its agent tries again.
		return muster.Errorf(muster.EUnavailable, "machine %s has no instance recorded yet", m.ID)
	case inst != e.InstanceID:
		return muster.Errorf(muster.EUnauthorized, "instance %s is not machine %s's", e.InstanceID, m.ID)
	case toks.handedOut:
		return muster.Errorf(muster.EConflict, "the credentials of machine %s were handed out already", m.ID)
	case m.Life == muster.LifeDead:
		return muster.Errorf(muster.EConflict, "machine %s is dead", m.ID)
	}
	return nil
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
