package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// testTrim checks S10: Trim deletes old events and the change log up to
// an older revision mark, and a watcher resuming from a trimmed revision
// gets a full resync (every machine, Resync set), never a silent gap.
func testTrim(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	other := newModel(t, s, "other")
	start := revision(t, s)
	addMachines(t, s, m.UUID, 3) // 0 1 2
	addMachines(t, s, other.UUID, 1)
	marked := revision(t, s)
	// The first Trim marks the current revision; nothing is old enough yet.
	got, err := s.Trim(ctx, m.UUID, time.Nanosecond)
	if err != nil {
		t.Fatalf("first trim: %v", err)
	}
	if got.Changes != 0 {
		t.Fatalf("first trim: got %+v, want no change-log entries deleted (no older mark)", got)
	}
	addMachines(t, s, m.UUID, 2) // 3 4
	kill(t, s, m.UUID, "0")
	if err := s.RemoveMachines(ctx, m.UUID, []string{"0"}); err != nil {
		t.Fatalf("remove machine 0: %v", err)
	}
	final := revision(t, s)
	// The second Trim finds the first one's mark older than the retention.
	got, err = s.Trim(ctx, m.UUID, time.Nanosecond)
	if err != nil {
		t.Fatalf("second trim: %v", err)
	}
	if got.Floor != marked || got.Changes == 0 {
		t.Fatalf("second trim: got %+v, want floor %d and change-log entries deleted", got, marked)
	}

	// Behind the floor: a full resync, without the removed machine.
	r := watch(t, s, m.UUID, start)
	cs := r.next()
	if !cs.Resync || !reflect.DeepEqual(cs.Machines, []string{"1", "2", "3", "4"}) || cs.Revision < final {
		t.Fatalf("resumed behind the floor: got %+v, want Resync with machines 1-4 at revision %d or later", cs, final)
	}
	// At the floor: the changes after it, no resync.
	r = watch(t, s, m.UUID, marked)
	r.until(final)
	for _, cs := range r.sets {
		if cs.Resync {
			t.Fatalf("resumed at the floor %d: got a resync %+v, want the changes after it", marked, cs)
		}
	}
	if got, want := r.seen(), []string{"0", "3", "4"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("resumed at the floor %d: got machines %v, want %v", marked, got, want)
	}
	// Another model's change log is its own.
	r = watch(t, s, other.UUID, start)
	if cs := r.next(); cs.Resync || !reflect.DeepEqual(cs.Machines, []string{"0"}) {
		t.Fatalf("other model resumed from %d: got %+v, want machine 0 without resync", start, cs)
	}

	// Events older than the retention go, newer ones stay.
	now := time.Now()
	if err := s.AppendEvents(ctx, []muster.Event{
		{ModelUUID: m.UUID, Kind: "old", Time: now.Add(-3 * time.Hour)},
		{ModelUUID: m.UUID, Kind: "new", Time: now},
		{ModelUUID: other.UUID, Kind: "old", Time: now.Add(-3 * time.Hour)},
	}); err != nil {
		t.Fatal(err)
	}
	if got, err = s.Trim(ctx, m.UUID, time.Hour); err != nil || got.Events != 1 {
		t.Fatalf("trim events: got %+v, %v, want 1 event deleted", got, err)
	}
	kinds := func(model string) []string {
		es, err := s.Events(ctx, model, muster.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, e := range es {
			if e.Kind == "old" || e.Kind == "new" {
				out = append(out, e.Kind)
			}
		}
		return out
	}
	if got, want := kinds(m.UUID), []string{"new"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("events after trim: got %v, want %v", got, want)
	}
	if got, want := kinds(other.UUID), []string{"old"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("other model's events after trim: got %v, want %v", got, want)
	}

	_, err = s.Trim(ctx, m.UUID, 0)
	wantCode(t, "trim with zero retention", err, muster.EInvalid)
	_, err = s.Trim(ctx, "no-such-model", time.Hour)
	wantCode(t, "trim of an unknown model", err, muster.ENotFound)
}

// testUpdateWithEvents checks that UpdateMachines writes its events in
// the same transaction as the change (S10): both at one revision, and
// none when the update is refused.
func testUpdateWithEvents(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 2)
	r := watch(t, s, m.UUID, 0, muster.ChangeMachine, muster.ChangeEvent)
	r.next()
	before, err := s.Events(ctx, m.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	ev := muster.Event{ModelUUID: m.UUID, MachineID: "0", Actor: "agent/0", Kind: "started", Message: "machine 0 started"}
	if err := s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: "0", Status: muster.Ptr(muster.StatusStarted)}}, ev); err != nil {
		t.Fatalf("update with an event: %v", err)
	}
	rev := revision(t, s)
	cs := r.next()
	if cs.Revision != rev || !cs.Events || !reflect.DeepEqual(cs.Machines, []string{"0"}) {
		t.Fatalf("change set: got %+v, want machine 0 and events at revision %d", cs, rev)
	}
	// A refused update writes no event.
	bad := muster.Event{ModelUUID: m.UUID, MachineID: "9", Kind: "started"}
	err = s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: "1", Status: muster.Ptr(muster.StatusStarted)}, {ID: "9", Status: muster.Ptr(muster.StatusStarted)}}, bad)
	wantCode(t, "update of a missing machine", err, muster.ENotFound)
	err = s.UpdateMachines(ctx, m.UUID, nil, muster.Event{ModelUUID: m.UUID})
	wantCode(t, "event without a kind", err, muster.EInvalid)
	after, err := s.Events(ctx, m.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	if len(after) != len(before)+1 || after[len(after)-1].Kind != "started" || after[len(after)-1].MachineID != "0" || after[len(after)-1].Seq == 0 {
		t.Fatalf("events: got %+v after %d before, want exactly the one started event added", after, len(before))
	}
	if got := machine(t, s, m.UUID, "1").Status; got != muster.StatusPending {
		t.Fatalf("machine 1 after a refused update: got %s, want pending", got)
	}
}
