package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// AddMachines declares machines in one transaction. Ids come from the
// model's sequence, which only grows.
func (s *Store) AddMachines(ctx context.Context, modelUUID string, ts []muster.MachineTemplate) ([]muster.Machine, error) {
	ms := make([]muster.Machine, len(ts))
	storage := make([]string, len(ts))
	now := s.clock.Now().UTC()
	for i, t := range ts {
		t.Storage = append([]muster.StorageDirective(nil), t.Storage...)
		if err := t.Validate(); err != nil {
			return nil, muster.Errorf(muster.EInvalid, "machine template %d: %s", i, muster.ErrorMessage(err))
		}
		if len(t.Storage) > 0 {
			b, err := json.Marshal(t.Storage)
			if err != nil {
				return nil, fmt.Errorf("encode storage: %w", err)
			}
			storage[i] = string(b)
		}
		ms[i] = muster.Machine{
			ModelUUID:   modelUUID,
			Life:        muster.LifeAlive,
			Status:      muster.StatusPending,
			Constraints: t.Constraints,
			Base:        t.Base,
			Group:       t.Group,
			Placement:   t.Placement,
			Storage:     t.Storage,
			Created:     now,
			Updated:     now,
		}
	}
	err := s.write(ctx, func(t *wtx) error {
		var next int64
		err := t.queryRow(ctx, `UPDATE models SET next_machine = next_machine + ? WHERE uuid = ? RETURNING next_machine`, len(ts), modelUUID).Scan(&next)
		if errors.Is(err, sql.ErrNoRows) {
			return muster.Errorf(muster.ENotFound, "model %q not found", modelUUID)
		}
		if err != nil {
			return fmt.Errorf("next machine id of model %s: %w", modelUUID, err)
		}
		if len(ts) == 0 {
			return nil
		}
		first := next - int64(len(ts))
		if s.d.arrays {
			n := len(ms)
			idA := make([]int64, n)
			cons, base, grp, place := make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			for i := range ms {
				m := &ms[i]
				idA[i] = first + int64(i)
				m.ID = formatID(idA[i])
				cons[i], base[i], grp[i], place[i] = m.Constraints.String(), m.Base, m.Group, m.Placement
			}
			if _, err := t.exec(ctx, `INSERT INTO machines (model_uuid, id, life, status, constraints, base, grp, placement, storage, created, updated)
				SELECT ?, id, ?, ?, cons, base, grp, place, storage, ?, ?
				FROM unnest(?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[]) AS u(id, cons, base, grp, place, storage)`,
				modelUUID, string(muster.LifeAlive), string(muster.StatusPending), nanos(now), nanos(now),
				idA, cons, base, grp, place, storage); err != nil {
				return fmt.Errorf("add machines: %w", err)
			}
			for i := range ms {
				t.change(modelUUID, muster.ChangeMachine, ms[i].ID)
			}
			return nil
		}
		stmt, err := t.prepare(ctx, `INSERT INTO machines (model_uuid, id, life, status, constraints, base, grp, placement, storage, created, updated)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`)
		if err != nil {
			return fmt.Errorf("add machines: %w", err)
		}
		defer stmt.Close()
		for i := range ms {
			m := &ms[i]
			id := first + int64(i)
			m.ID = formatID(id)
			if _, err := stmt.ExecContext(stmtCtx(ctx), modelUUID, id, string(m.Life), string(m.Status), m.Constraints.String(),
				m.Base, m.Group, m.Placement, storage[i], nanos(now), nanos(now)); err != nil {
				return fmt.Errorf("add machine %s: %w", m.ID, err)
			}
			t.change(modelUUID, muster.ChangeMachine, m.ID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return ms, nil
}

const machineCols = `model_uuid, id, life, status, status_message, instance_status, instance_message,
	constraints, base, grp, placement, storage, keep_instance, instance, launch_token, nonce,
	password_hash, auto_retries, next_retry, created, updated, last_seen`

// machineScan reads rows of machineCols. Its destinations, and the Scan
// arguments that point at them, are made once for a query rather than
// once for each row: a row's were most of what reading a machine
// allocated.
type machineScan struct {
	m                                               muster.Machine
	id, keep, nextRetry, created, updated, lastSeen int64
	life, status, istatus, cons, storage, inst      string
	args                                            []any
}

func newMachineScan() *machineScan {
	s := &machineScan{}
	m := &s.m
	s.args = []any{&m.ModelUUID, &s.id, &s.life, &s.status, &m.StatusMessage, &s.istatus, &m.InstanceMessage,
		&s.cons, &m.Base, &m.Group, &m.Placement, &s.storage, &s.keep, &s.inst, &m.LaunchToken, &m.Nonce,
		&m.PasswordHash, &m.AutoRetries, &s.nextRetry, &s.created, &s.updated, &s.lastSeen}
	return s
}

// scan reads the current row into *out.
func (s *machineScan) scan(sc interface{ Scan(...any) error }, out *muster.Machine) error {
	s.m = muster.Machine{}
	if err := sc.Scan(s.args...); err != nil {
		return err
	}
	m := &s.m
	m.ID = formatID(s.id)
	m.Life = muster.Life(s.life)
	m.Status = muster.MachineStatus(s.status)
	m.InstanceStatus = muster.InstanceStatus(s.istatus)
	m.KeepInstance = s.keep != 0
	m.NextRetry = fromNanos(s.nextRetry)
	m.Created = fromNanos(s.created)
	m.Updated = fromNanos(s.updated)
	m.LastSeen = fromNanos(s.lastSeen)
	var err error
	if m.Constraints, err = muster.ParseConstraints(s.cons); err != nil {
		return fmt.Errorf("decode constraints of machine %s: %w", m.ID, err)
	}
	if s.storage != "" {
		if err := json.Unmarshal([]byte(s.storage), &m.Storage); err != nil {
			return fmt.Errorf("decode storage of machine %s: %w", m.ID, err)
		}
	}
	if s.inst != "" {
		if m.Instance, err = decodeInstance(s.inst); err != nil {
			return fmt.Errorf("decode instance of machine %s: %w", m.ID, err)
		}
	}
	*out = s.m
	return nil
}

// Machine returns one machine.
func (s *Store) Machine(ctx context.Context, modelUUID, id string) (muster.Machine, error) {
	if err := s.checkOpen(); err != nil {
		return muster.Machine{}, err
	}
	n, ok := parseID(id)
	if ok {
		row := s.queryRow(ctx, (`SELECT ` + machineCols + ` FROM machines WHERE model_uuid = ? AND id = ?`), modelUUID, n)
		var m muster.Machine
		err := newMachineScan().scan(row, &m)
		if err == nil {
			return m, nil
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return muster.Machine{}, fmt.Errorf("read machine %s: %w", id, err)
		}
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return muster.Machine{}, err
	}
	return muster.Machine{}, muster.Errorf(muster.ENotFound, "machine %q not found", id)
}

// Machines returns the named machines that exist (every machine for nil
// ids), in id order.
func (s *Store) Machines(ctx context.Context, modelUUID string, ids []string) ([]muster.Machine, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	q := `SELECT ` + machineCols + ` FROM machines WHERE model_uuid = ?`
	args := []any{modelUUID}
	room := 0
	if ids != nil {
		nums := parseIDs(ids)
		if len(nums) == 0 {
			return nil, nil
		}
		q += ` AND ` + s.d.inList("id")
		args = append(args, s.d.listArg(nums))
		room = len(nums) // at most: the provisioner re-reads thousands at once
	}
	return s.readMachinesN(ctx, room, q+` ORDER BY id`, args...)
}

// readMachinesN runs a query of machineCols and scans its rows, with room
// for n machines made at once (a page's size, the ids asked for): a
// 1,000-machine slice grown by appending copies 1 MB.
func (s *Store) readMachinesN(ctx context.Context, n int, q string, args ...any) ([]muster.Machine, error) {
	rows, err := s.query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("read machines: %w", err)
	}
	defer rows.Close()
	ms := make([]muster.Machine, 0, n)
	sc := newMachineScan()
	for rows.Next() {
		ms = append(ms, muster.Machine{})
		if err := sc.scan(rows, &ms[len(ms)-1]); err != nil {
			return nil, fmt.Errorf("read machines: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read machines: %w", err)
	}
	if len(ms) == 0 {
		return nil, nil // as when nothing was appended
	}
	return ms, nil
}

// maxPageHint bounds the room MachinesPage makes before reading: a caller
// may ask for far more than the model has.
const maxPageHint = 1000

// MachinesPage returns a page of the model's machines, in id order.
func (s *Store) MachinesPage(ctx context.Context, modelUUID, after string, limit int) ([]muster.Machine, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	from := int64(-1)
	if after != "" {
		n, ok := parseID(after)
		if !ok {
			return nil, muster.Errorf(muster.EInvalid, "bad machine id %q to page after: want a number", after)
		}
		from = n
	}
	if limit < 1 {
		return nil, muster.Errorf(muster.EInvalid, "bad page size %d: want at least 1", limit)
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	return s.readMachinesN(ctx, min(limit, maxPageHint), `SELECT `+machineCols+` FROM machines WHERE model_uuid = ? AND id > ? ORDER BY id LIMIT ?`, modelUUID, from, limit)
}

// RecordHeartbeats writes the named machines' last-seen time in one
// statement and reads their lives back, in one transaction that records
// no change.
func (s *Store) RecordHeartbeats(ctx context.Context, modelUUID string, ids []string, at time.Time) (map[string]muster.Life, error) {
	lives := map[string]muster.Life{}
	err := s.write(ctx, func(t *wtx) error {
		clear(lives) // a retried transaction starts again
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		nums := parseIDs(ids)
		if len(nums) == 0 {
			return nil
		}
		in := t.s.d.inList("id")
		if _, err := t.exec(ctx, `UPDATE machines SET last_seen = ? WHERE model_uuid = ? AND `+in, nanos(at), modelUUID, t.s.d.listArg(nums)); err != nil {
			return fmt.Errorf("record heartbeats: %w", err)
		}
		rows, err := t.query(ctx, `SELECT id, life FROM machines WHERE model_uuid = ? AND `+in, modelUUID, t.s.d.listArg(nums))
		if err != nil {
			return fmt.Errorf("record heartbeats: %w", err)
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var life string
			if err := rows.Scan(&id, &life); err != nil {
				return fmt.Errorf("record heartbeats: %w", err)
			}
			lives[formatID(id)] = muster.Life(life)
		}
		return rows.Err()
	})
	if err != nil {
		return nil, err
	}
	return lives, nil
}

// checkUpdate checks the parts of u that need no stored state.
func checkUpdate(u muster.MachineUpdate) error {
	if u.Life != nil && !u.Life.Valid() {
		return muster.Errorf(muster.EInvalid, "machine %s: bad life %q", u.ID, *u.Life)
	}
	if u.Status != nil && !u.Status.Valid() {
		return muster.Errorf(muster.EInvalid, "machine %s: bad status %q", u.ID, *u.Status)
	}
	if u.InstanceStatus != nil && !u.InstanceStatus.Valid() {
		return muster.Errorf(muster.EInvalid, "machine %s: bad instance status %q", u.ID, *u.InstanceStatus)
	}
	if u.AutoRetries != nil && *u.AutoRetries < 0 {
		return muster.Errorf(muster.EInvalid, "machine %s: bad auto-retries %d: want zero or more", u.ID, *u.AutoRetries)
	}
	return nil
}

// UpdateMachines applies the updates in one transaction, in order: all or
// none.
func (s *Store) UpdateMachines(ctx context.Context, modelUUID string, us []muster.MachineUpdate, events ...muster.Event) error {
	for _, u := range us {
		if err := checkUpdate(u); err != nil {
			return err
		}
	}
	if err := checkEvents(events); err != nil {
		return err
	}
	now := s.clock.Now().UTC()
	var seqs []int64
	err := s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		if err := t.updateMachines(ctx, modelUUID, us); err != nil {
			return err
		}
		var err error
		seqs, err = t.appendEvents(ctx, events, now, map[string]bool{modelUUID: true})
		return err
	})
	if err != nil {
		return err
	}
	setSeqs(events, seqs, now)
	return nil
}

func (t *wtx) updateMachines(ctx context.Context, modelUUID string, us []muster.MachineUpdate) error {
	if len(us) == 0 {
		return nil
	}
	ids := make([]string, len(us))
	for i, u := range us {
		ids[i] = u.ID
	}
	current, err := t.machinesForUpdate(ctx, modelUUID, parseIDs(ids))
	if err != nil {
		return err
	}
	return t.applyUpdates(ctx, modelUUID, current, us)
}

// applyUpdates applies us to the machines in current (read and locked in
// t, by id) and writes them.
func (t *wtx) applyUpdates(ctx context.Context, modelUUID string, current map[int64]*muster.Machine, us []muster.MachineUpdate) error {
	var changed, templates []*muster.Machine
	for _, u := range us {
		n, _ := parseID(u.ID)
		m, ok := current[n]
		if !ok {
			return muster.Errorf(muster.ENotFound, "machine %q not found", u.ID)
		}
		if err := applyUpdate(m, u); err != nil {
			return err
		}
		if u.Constraints != nil || u.Base != nil {
			templates = append(templates, m)
		}
		if !t.seen[change{modelUUID, muster.ChangeMachine, m.ID}] {
			changed = append(changed, m)
			t.change(modelUUID, muster.ChangeMachine, m.ID)
		}
	}
	if err := t.writeMachines(ctx, modelUUID, changed, nanos(t.s.clock.Now())); err != nil {
		return err
	}
	// A new template (R5) is rare: one statement per machine.
	for _, m := range templates {
		n, _ := parseID(m.ID)
		if _, err := t.exec(ctx, `UPDATE machines SET constraints = ?, base = ? WHERE model_uuid = ? AND id = ?`,
			m.Constraints.String(), m.Base, modelUUID, n); err != nil {
			return fmt.Errorf("update template of machine %s: %w", m.ID, err)
		}
	}
	return nil
}

// machinesForUpdate reads the named machines that exist in one query,
// locking their rows (in id order, so that concurrent writers cannot
// deadlock) where the dialect locks rows.
func (t *wtx) machinesForUpdate(ctx context.Context, modelUUID string, nums []int64) (map[int64]*muster.Machine, error) {
	out := make(map[int64]*muster.Machine, len(nums))
	if len(nums) == 0 {
		return out, nil
	}
	d := t.s.d
	rows, err := t.query(ctx, `SELECT `+machineCols+` FROM machines WHERE model_uuid = ? AND `+d.inList("id")+` ORDER BY id`+d.forUpdate,
		modelUUID, d.listArg(nums))
	if err != nil {
		return nil, fmt.Errorf("read machines: %w", err)
	}
	defer rows.Close()
	sc := newMachineScan()
	for rows.Next() {
		m := new(muster.Machine)
		if err := sc.scan(rows, m); err != nil {
			return nil, fmt.Errorf("read machines: %w", err)
		}
		out[sc.id] = m
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read machines: %w", err)
	}
	return out, nil
}

// machineRow holds the columns of a machine that updates write.
type machineRow struct {
	id                                           int64
	life, status, statusMsg, instStatus, instMsg string
	keep                                         int64
	instance, launchToken, nonce, passwordHash   string
	autoRetries, nextRetry                       int64
}

func toRow(m *muster.Machine) (machineRow, error) {
	n, _ := parseID(m.ID)
	r := machineRow{id: n, life: string(m.Life), status: string(m.Status), statusMsg: m.StatusMessage,
		instStatus: string(m.InstanceStatus), instMsg: m.InstanceMessage, keep: int64(boolInt(m.KeepInstance)),
		launchToken: m.LaunchToken, nonce: m.Nonce, passwordHash: m.PasswordHash,
		autoRetries: int64(m.AutoRetries), nextRetry: nanos(m.NextRetry)}
	if m.Instance != nil {
		b, err := json.Marshal(m.Instance)
		if err != nil {
			return r, fmt.Errorf("encode instance of machine %s: %w", m.ID, err)
		}
		r.instance = string(b)
	}
	return r, nil
}

// writeMachines writes the updatable columns of ms: one statement per
// machine, or one for all where the dialect takes arrays.
func (t *wtx) writeMachines(ctx context.Context, modelUUID string, ms []*muster.Machine, now int64) error {
	rows := make([]machineRow, len(ms))
	for i, m := range ms {
		var err error
		if rows[i], err = toRow(m); err != nil {
			return err
		}
	}
	if len(rows) == 0 {
		return nil
	}
	if t.s.d.arrays {
		var a struct {
			id, keep, retries, next                                     []int64
			life, status, smsg, istatus, imsg, inst, token, nonce, hash []string
		}
		for _, r := range rows {
			a.id, a.keep, a.retries, a.next = append(a.id, r.id), append(a.keep, r.keep), append(a.retries, r.autoRetries), append(a.next, r.nextRetry)
			a.life, a.status, a.smsg, a.istatus, a.imsg = append(a.life, r.life), append(a.status, r.status), append(a.smsg, r.statusMsg), append(a.istatus, r.instStatus), append(a.imsg, r.instMsg)
			a.inst, a.token, a.nonce, a.hash = append(a.inst, r.instance), append(a.token, r.launchToken), append(a.nonce, r.nonce), append(a.hash, r.passwordHash)
		}
		_, err := t.exec(ctx, `UPDATE machines AS m SET life = u.life, status = u.status, status_message = u.smsg,
			instance_status = u.istatus, instance_message = u.imsg, keep_instance = u.keep, instance = u.inst,
			launch_token = u.token, nonce = u.nonce, password_hash = u.hash, auto_retries = u.retries,
			next_retry = u.next, updated = ?
			FROM unnest(?::bigint[], ?::text[], ?::text[], ?::text[], ?::text[], ?::text[], ?::bigint[], ?::text[],
				?::text[], ?::text[], ?::text[], ?::bigint[], ?::bigint[])
				AS u(id, life, status, smsg, istatus, imsg, keep, inst, token, nonce, hash, retries, next)
			WHERE m.model_uuid = ? AND m.id = u.id`,
			now, a.id, a.life, a.status, a.smsg, a.istatus, a.imsg, a.keep, a.inst, a.token, a.nonce, a.hash, a.retries, a.next, modelUUID)
		if err != nil {
			return fmt.Errorf("update machines: %w", err)
		}
		return nil
	}
	err := powerChunks(len(rows), machinesPerUpdate, func(i, k int) error {
		upd, err := t.prepare(ctx, machineUpdates[k])
		if err != nil {
			return err
		}
		defer upd.Close()
		args := make([]any, 0, 13*k+2)
		for _, r := range rows[i : i+k] {
			args = append(args, r.id, r.life, r.status, r.statusMsg, r.instStatus, r.instMsg, r.keep, r.instance,
				r.launchToken, r.nonce, r.passwordHash, r.autoRetries, r.nextRetry)
		}
		_, err = upd.ExecContext(stmtCtx(ctx), append(args, now, modelUUID)...)
		return err
	})
	if err != nil {
		return fmt.Errorf("update machines: %w", err)
	}
	return nil
}

// machinesPerUpdate is how many machines one SQLite update writes at
// most (a power of two).
const machinesPerUpdate = 32

// machineUpdates are the SQLite updates of 1, 2, 4, … machinesPerUpdate
// machines, by count: the rows' values in a table u, joined to the
// machines by primary key.
var machineUpdates = func() map[int]string {
	m := map[int]string{}
	for k, values := range multiRowSQL(`WITH u(id, life, status, smsg, istatus, imsg, keep, inst, token, nonce, hash, retries, next) AS (VALUES `, 13, machinesPerUpdate) {
		m[k] = values + `) UPDATE machines SET life = u.life, status = u.status, status_message = u.smsg,
			instance_status = u.istatus, instance_message = u.imsg, keep_instance = u.keep, instance = u.inst,
			launch_token = u.token, nonce = u.nonce, password_hash = u.hash, auto_retries = u.retries,
			next_retry = u.next, updated = ?
			FROM u WHERE machines.model_uuid = ? AND machines.id = u.id`
	}
	return m
}()

// applyUpdate applies u to m, checking what depends on m.
func applyUpdate(m *muster.Machine, u muster.MachineUpdate) error {
	if u.Life != nil {
		if !m.Life.CanBecome(*u.Life) {
			return muster.Errorf(muster.EInvalid, "machine %s: life cannot move back from %s to %s", m.ID, m.Life, *u.Life)
		}
		m.Life = *u.Life
	}
	if (u.Addresses != nil || u.Hardware != nil) && !m.HasInstance() {
		return muster.Errorf(muster.EInvalid, "machine %s has no instance to set addresses or hardware on", m.ID)
	}
	set := func(dst *string, src *string) {
		if src != nil {
			*dst = *src
		}
	}
	if u.Status != nil {
		m.Status = *u.Status
	}
	set(&m.StatusMessage, u.StatusMessage)
	if u.InstanceStatus != nil {
		m.InstanceStatus = *u.InstanceStatus
	}
	set(&m.InstanceMessage, u.InstanceMessage)
	if u.KeepInstance != nil {
		m.KeepInstance = *u.KeepInstance
	}
	set(&m.LaunchToken, u.LaunchToken)
	set(&m.Nonce, u.Nonce)
	set(&m.PasswordHash, u.PasswordHash)
	if u.AutoRetries != nil {
		m.AutoRetries = *u.AutoRetries
	}
	if u.NextRetry != nil {
		m.NextRetry = *u.NextRetry
	}
	if u.Addresses != nil {
		m.Instance.Addresses = append([]string(nil), (*u.Addresses)...)
	}
	if u.Hardware != nil {
		m.Instance.Hardware = *u.Hardware
	}
	if u.Base != nil {
		if _, _, err := muster.ParseBase(*u.Base); err != nil {
			return err
		}
		m.Base = *u.Base
	}
	if u.Constraints != nil {
		m.Constraints = *u.Constraints
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// RecordInstances records started instances (P11), each refused on its own.
func (s *Store) RecordInstances(ctx context.Context, modelUUID string, rs []muster.InstanceRecord) ([]error, error) {
	errs := make([]error, len(rs))
	err := s.write(ctx, func(t *wtx) error {
		clear(errs) // a retried transaction starts afresh
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		if len(rs) == 0 {
			return nil
		}
		// Read (and lock, in id order) every machine of the batch at once.
		type state struct{ life, instID, nonce, token string }
		ids := make([]string, len(rs))
		for i, r := range rs {
			ids[i] = r.MachineID
		}
		current := map[int64]*state{}
		if nums := parseIDs(ids); len(nums) > 0 {
			rows, err := t.query(ctx, `SELECT id, life, instance_id, nonce, launch_token FROM machines WHERE model_uuid = ? AND `+s.d.inList("id")+` ORDER BY id`+s.d.forUpdate,
				modelUUID, s.d.listArg(nums))
			if err != nil {
				return fmt.Errorf("read machines: %w", err)
			}
			for rows.Next() {
				var id int64
				var st state
				if err := rows.Scan(&id, &st.life, &st.instID, &st.nonce, &st.token); err != nil {
					rows.Close()
					return fmt.Errorf("read machines: %w", err)
				}
				current[id] = &st
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return fmt.Errorf("read machines: %w", err)
			}
		}
		upd, err := t.prepare(ctx, `UPDATE machines SET instance_id = ?, instance = ?, instance_status = ?,
			instance_message = '', updated = ? WHERE model_uuid = ? AND id = ?`)
		if err != nil {
			return fmt.Errorf("record instances: %w", err)
		}
		defer upd.Close()
		// A replacement (R1–R5) also hands the machine to the new
		// instance's agent: its nonce and password, and pending until
		// that agent reports started.
		repl, err := t.prepare(ctx, `UPDATE machines SET instance_id = ?, instance = ?, instance_status = ?,
			instance_message = '', nonce = ?, password_hash = ?, status = ?, status_message = '', updated = ?
			WHERE model_uuid = ? AND id = ?`)
		if err != nil {
			return fmt.Errorf("record instances: %w", err)
		}
		defer repl.Close()
		now := nanos(s.clock.Now())
		for i, r := range rs {
			if r.Info.InstanceID == "" {
				errs[i] = muster.Errorf(muster.EInvalid, "machine %s: empty instance id", r.MachineID)
				continue
			}
			if r.ReleaseReplaced && r.Replaces == "" {
				errs[i] = muster.Errorf(muster.EInvalid, "machine %s: release of the replaced instance without a replacement", r.MachineID)
				continue
			}
			n, ok := parseID(r.MachineID)
			st := current[n]
			if !ok || st == nil {
				errs[i] = muster.Errorf(muster.ENotFound, "machine %q not found", r.MachineID)
				continue
			}
			life, instID, nonce := st.life, st.instID, st.nonce
			if r.Replaces != "" {
				switch {
				case muster.Life(life) != muster.LifeAlive:
					errs[i] = muster.Errorf(muster.EConflict, "machine %s is %s", r.MachineID, life)
				case instID != r.Replaces:
					errs[i] = muster.Errorf(muster.EConflict, "machine %s has instance %q, not %s", r.MachineID, instID, r.Replaces)
				case r.LaunchToken == "" || st.token != r.LaunchToken:
					errs[i] = muster.Errorf(muster.EConflict, "machine %s: launch token does not match the replacement", r.MachineID)
				case r.Nonce == "" || r.PasswordHash == "":
					errs[i] = muster.Errorf(muster.EInvalid, "machine %s: a replacement needs a nonce and a password hash", r.MachineID)
				case r.ReleaseReplaced && r.Replaces == r.Info.InstanceID:
					errs[i] = muster.Errorf(muster.EInvalid, "machine %s: cannot release instance %s and record it again", r.MachineID, r.Replaces)
				}
				if errs[i] != nil {
					continue
				}
				b, err := json.Marshal(r.Info)
				if err != nil {
					return fmt.Errorf("encode instance of machine %s: %w", r.MachineID, err)
				}
				if _, err := repl.ExecContext(stmtCtx(ctx), r.Info.InstanceID, string(b), string(muster.InstanceRunning), r.Nonce, r.PasswordHash,
					string(muster.StatusPending), now, modelUUID, n); err != nil {
					return fmt.Errorf("record instance of machine %s: %w", r.MachineID, err)
				}
				if r.ReleaseReplaced {
					if err := t.release(ctx, modelUUID, r.Replaces, now); err != nil {
						return err
					}
				}
				st.instID, st.nonce = r.Info.InstanceID, r.Nonce
				t.change(modelUUID, muster.ChangeMachine, r.MachineID)
				continue
			}
			switch {
			case muster.Life(life) == muster.LifeDead:
				errs[i] = muster.Errorf(muster.EConflict, "machine %s is dead", r.MachineID)
				continue
			case instID != "":
				errs[i] = muster.Errorf(muster.EConflict, "machine %s already has instance %s", r.MachineID, instID)
				continue
			case nonce != r.Nonce:
				errs[i] = muster.Errorf(muster.EConflict, "machine %s: nonce %q does not match the current attempt", r.MachineID, r.Nonce)
				continue
			}
			b, err := json.Marshal(r.Info)
			if err != nil {
				return fmt.Errorf("encode instance of machine %s: %w", r.MachineID, err)
			}
			if _, err := upd.ExecContext(stmtCtx(ctx), r.Info.InstanceID, string(b), string(muster.InstanceRunning), now, modelUUID, n); err != nil {
				return fmt.Errorf("record instance of machine %s: %w", r.MachineID, err)
			}
			st.instID = r.Info.InstanceID
			t.change(modelUUID, muster.ChangeMachine, r.MachineID)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// RemoveMachines removes dead machines; the instances of keep-instance
// machines are remembered as released.
func (s *Store) RemoveMachines(ctx context.Context, modelUUID string, ids []string) error {
	nums := parseIDs(ids)
	return s.write(ctx, func(t *wtx) error {
		if err := t.checkModel(ctx, modelUUID); err != nil {
			return err
		}
		if len(nums) == 0 {
			return nil
		}
		rows, err := t.query(ctx, `SELECT id, life, keep_instance, instance_id FROM machines WHERE model_uuid = ? AND `+s.d.inList("id")+` ORDER BY id`+s.d.forUpdate,
			modelUUID, s.d.listArg(nums))
		if err != nil {
			return fmt.Errorf("read machines: %w", err)
		}
		type victim struct {
			id       int64
			released string
		}
		var victims []victim
		var alive []string
		for rows.Next() {
			var id, keep int64
			var life, inst string
			if err := rows.Scan(&id, &life, &keep, &inst); err != nil {
				rows.Close()
				return fmt.Errorf("read machines: %w", err)
			}
			if muster.Life(life) != muster.LifeDead {
				alive = append(alive, formatID(id)+" is "+life)
				continue
			}
			v := victim{id: id}
			if keep != 0 {
				v.released = inst
			}
			victims = append(victims, v)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read machines: %w", err)
		}
		if len(alive) > 0 {
			return muster.Errorf(muster.EConflict, "cannot remove machines that are not dead: machine %s", strings.Join(alive, ", machine "))
		}
		now := nanos(s.clock.Now())
		for _, v := range victims {
			if _, err := t.exec(ctx, `DELETE FROM machines WHERE model_uuid = ? AND id = ?`, modelUUID, v.id); err != nil {
				return fmt.Errorf("remove machine %d: %w", v.id, err)
			}
			if v.released != "" {
				if err := t.release(ctx, modelUUID, v.released, now); err != nil {
					return err
				}
			}
			t.change(modelUUID, muster.ChangeMachine, formatID(v.id))
		}
		return nil
	})
}

// ReleasedInstances returns the ids of instances released from muster.
func (s *Store) ReleasedInstances(ctx context.Context, modelUUID string) (map[string]bool, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, (`SELECT instance_id FROM released_instances WHERE model_uuid = ?`), modelUUID)
	if err != nil {
		return nil, fmt.Errorf("read released instances: %w", err)
	}
	defer rows.Close()
	out := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, fmt.Errorf("read released instances: %w", err)
		}
		out[id] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read released instances: %w", err)
	}
	return out, nil
}

// ProvisioningInfo returns what is needed to start each named machine that
// exists, in one query.
func (s *Store) ProvisioningInfo(ctx context.Context, modelUUID string, ids []string) (map[string]muster.ProvisioningInfo, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	out := map[string]muster.ProvisioningInfo{}
	nums := parseIDs(ids)
	if len(nums) == 0 {
		return out, nil
	}
	rows, err := s.query(ctx, (`SELECT id, constraints, base, placement, storage, grp FROM machines WHERE model_uuid = ? AND ` + s.d.inList("id")),
		modelUUID, s.d.listArg(nums))
	if err != nil {
		return nil, fmt.Errorf("read provisioning info: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id int64
		var cons, storage string
		var p muster.ProvisioningInfo
		if err := rows.Scan(&id, &cons, &p.Base, &p.Placement, &storage, &p.Group); err != nil {
			return nil, fmt.Errorf("read provisioning info: %w", err)
		}
		p.MachineID = formatID(id)
		if p.Constraints, err = muster.ParseConstraints(cons); err != nil {
			return nil, fmt.Errorf("decode constraints of machine %s: %w", p.MachineID, err)
		}
		if storage != "" {
			if err := json.Unmarshal([]byte(storage), &p.Storage); err != nil {
				return nil, fmt.Errorf("decode storage of machine %s: %w", p.MachineID, err)
			}
		}
		out[p.MachineID] = p
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read provisioning info: %w", err)
	}
	return out, nil
}

// DistributionGroups returns, for each named machine that has a group, the
// ids of the alive machines of its group and its own, in id order, in one
// query.
func (s *Store) DistributionGroups(ctx context.Context, modelUUID string, ids []string) (map[string][]string, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	out := map[string][]string{}
	nums := parseIDs(ids)
	if len(nums) == 0 {
		return out, nil
	}
	rows, err := s.query(ctx, (`SELECT q.id, m.id FROM machines q
		JOIN machines m ON m.model_uuid = q.model_uuid AND m.grp = q.grp
		WHERE q.model_uuid = ? AND q.grp <> '' AND ` + s.d.inList("q.id") + ` AND (m.life = 'alive' OR m.id = q.id)
		ORDER BY q.id, m.id`), modelUUID, s.d.listArg(nums))
	if err != nil {
		return nil, fmt.Errorf("read distribution groups: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var q, m int64
		if err := rows.Scan(&q, &m); err != nil {
			return nil, fmt.Errorf("read distribution groups: %w", err)
		}
		out[formatID(q)] = append(out[formatID(q)], formatID(m))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read distribution groups: %w", err)
	}
	return out, nil
}
