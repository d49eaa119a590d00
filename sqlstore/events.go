package sqlstore

import (
	"context"
	"fmt"
	"time"

	"github.com/musterhq/muster"
)

// AppendEvents appends events in one transaction. It sets Seq (and Time
// when zero) in es as well as in the store.
func (s *Store) AppendEvents(ctx context.Context, es []muster.Event) error {
	if err := checkEvents(es); err != nil {
		return err
	}
	if len(es) == 0 {
		return nil
	}
	now := s.clock.Now().UTC()
	var seqs []int64
	err := s.write(ctx, func(t *wtx) error {
		var err error
		seqs, err = t.appendEvents(ctx, es, now, nil)
		return err
	})
	if err != nil {
		return err
	}
	setSeqs(es, seqs, now)
	return nil
}

func checkEvents(es []muster.Event) error {
	for i, e := range es {
		if e.ModelUUID == "" {
			return muster.Errorf(muster.EInvalid, "event %d has no model", i)
		}
		if e.Kind == "" {
			return muster.Errorf(muster.EInvalid, "event %d has no kind", i)
		}
	}
	return nil
}

func setSeqs(es []muster.Event, seqs []int64, now time.Time) {
	for i := range es {
		es[i].Seq = seqs[i]
		if es[i].Time.IsZero() {
			es[i].Time = now
		}
	}
}

// appendEvents writes es in t and returns their sequence numbers. Undated
// events get the time now. checked lists the models known to exist.
func (t *wtx) appendEvents(ctx context.Context, es []muster.Event, now time.Time, checked map[string]bool) ([]int64, error) {
	if checked == nil {
		checked = map[string]bool{}
	}
	seqs := make([]int64, len(es))
	times := make([]int64, len(es))
	for i, e := range es {
		if !checked[e.ModelUUID] {
			if err := t.checkModel(ctx, e.ModelUUID); err != nil {
				return nil, err
			}
			checked[e.ModelUUID] = true
		}
		tm := e.Time
		if tm.IsZero() {
			tm = now
		}
		times[i] = nanos(tm)
	}
	if t.s.d.arrays {
		return seqs, appendEventArrays(ctx, t, es, times, seqs)
	}
	// SQLite: seq is the rowid. Events go eventsPerInsert to a statement
	// (the per-statement cost was most of an event's); the rows of one
	// insert get consecutive rowids under the write lock, so the insert's
	// LastInsertId is its last event's seq.
	err := powerChunks(len(es), eventsPerInsert, func(i, k int) error {
		stmt, err := t.prepare(ctx, eventInserts[k])
		if err != nil {
			return err
		}
		defer stmt.Close()
		args := make([]any, 0, 6*k)
		for j, e := range es[i : i+k] {
			args = append(args, e.ModelUUID, e.MachineID, times[i+j], e.Actor, e.Kind, e.Message)
			t.change(e.ModelUUID, muster.ChangeEvent, "")
		}
		res, err := stmt.ExecContext(stmtCtx(ctx), args...)
		if err != nil {
			return err
		}
		last, err := res.LastInsertId()
		if err != nil {
			return err
		}
		for j := range k {
			seqs[i+j] = last - int64(k-1-j)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("append events: %w", err)
	}
	return seqs, nil
}

// eventsPerInsert is how many events one SQLite insert writes at most
// (a power of two).
const eventsPerInsert = 32

// eventInserts are the SQLite inserts of 1, 2, 4, … eventsPerInsert
// events, by count.
var eventInserts = multiRowSQL(`INSERT INTO events (model_uuid, machine_id, time, actor, kind, message) VALUES `, 6, eventsPerInsert)

func (s *Store) Events(ctx context.Context, modelUUID string, f muster.EventFilter) ([]muster.Event, error) {
	if f.Limit < 0 {
		return nil, muster.Errorf(muster.EInvalid, "bad event limit %d: want zero or more", f.Limit)
	}
	if f.Page < 0 || (f.Page > 0 && f.Limit > 0) {
		return nil, muster.Errorf(muster.EInvalid, "bad event page %d: want zero or more, and no limit with it", f.Page)
	}
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if err := s.checkModel(ctx, modelUUID); err != nil {
		return nil, err
	}
	q := `SELECT seq, model_uuid, machine_id, time, actor, kind, message FROM events WHERE model_uuid = ? AND seq > ?`
	args := []any{modelUUID, f.AfterSeq}
	if f.MachineID != "" {
		q += ` AND machine_id = ?`
		args = append(args, f.MachineID)
	}
	switch {
	case f.Limit > 0:
		q += ` ORDER BY seq DESC LIMIT ?`
		args = append(args, f.Limit)
	case f.Page > 0:
		q += ` ORDER BY seq LIMIT ?`
		args = append(args, f.Page)
	default:
		q += ` ORDER BY seq`
	}
	rows, err := s.query(ctx, (q), args...)
	if err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	defer rows.Close()
	var es []muster.Event
	for rows.Next() {
		var e muster.Event
		var tm int64
		if err := rows.Scan(&e.Seq, &e.ModelUUID, &e.MachineID, &tm, &e.Actor, &e.Kind, &e.Message); err != nil {
			return nil, fmt.Errorf("read events: %w", err)
		}
		e.Time = fromNanos(tm)
		es = append(es, e)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	if f.Limit > 0 {
		for i, j := 0, len(es)-1; i < j; i, j = i+1, j-1 {
			es[i], es[j] = es[j], es[i]
		}
	}
	return es, nil
}

// appendEventArrays appends es in one statement with seqs taken from
// event_counter, whose row lock (held until the commit) orders seqs like
// commits.
func appendEventArrays(ctx context.Context, t *wtx, es []muster.Event, times, seqs []int64) error {
	n := len(es)
	models, machines, actors, kinds, msgs := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
	for i, e := range es {
		models[i], machines[i], actors[i], kinds[i], msgs[i] = e.ModelUUID, e.MachineID, e.Actor, e.Kind, e.Message
	}
	var last int64
	if err := t.queryRow(ctx, `UPDATE event_counter SET seq = seq + ? WHERE one = 1 RETURNING seq`, n).Scan(&last); err != nil {
		return fmt.Errorf("append events: next seq: %w", err)
	}
	for i := range seqs {
		seqs[i] = last - int64(n) + 1 + int64(i)
	}
	if _, err := t.exec(ctx, `INSERT INTO events (seq, model_uuid, machine_id, time, actor, kind, message)
		SELECT * FROM unnest(?::bigint[], ?::text[], ?::text[], ?::bigint[], ?::text[], ?::text[], ?::text[])`,
		seqs, models, machines, times, actors, kinds, msgs); err != nil {
		return fmt.Errorf("append events: %w", err)
	}
	for _, m := range models {
		t.change(m, muster.ChangeEvent, "")
	}
	return nil
}
