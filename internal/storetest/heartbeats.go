package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// testMachinesPage reads a model's machines in pages: id order (numeric,
// "10" after "9"), the limit, after, and bad arguments.
func testMachinesPage(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	other := newModel(t, s, "other")
	addMachines(t, s, m.UUID, 12)
	addMachines(t, s, other.UUID, 3)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 12 {
			t.Fatalf("paging does not end: %v", got)
		}
		page, err := s.MachinesPage(ctx, m.UUID, after, 5)
		if err != nil {
			t.Fatalf("page after %q: %v", after, err)
		}
		if len(page) > 5 {
			t.Fatalf("page after %q: %d machines, want at most 5", after, len(page))
		}
		if len(page) == 0 {
			break
		}
		got = append(got, machineIDs(page)...)
		after = page[len(page)-1].ID
	}
	if want := ids(12); !reflect.DeepEqual(got, want) {
		t.Fatalf("pages: got %v, want %v", got, want)
	}
	page, err := s.MachinesPage(ctx, m.UUID, "9", 100)
	if err != nil || !reflect.DeepEqual(machineIDs(page), []string{"10", "11"}) {
		t.Fatalf("page after 9: got %v, %v, want [10 11]", machineIDs(page), err)
	}
	if full, _ := s.Machines(ctx, m.UUID, []string{"10"}); len(page) == 0 || !reflect.DeepEqual(page[0], full[0]) {
		t.Fatalf("a paged machine differs from the machine read by id:\n%+v\n%+v", page, full)
	}
	for _, tc := range []struct {
		model, after string
		limit        int
		code         string
	}{
		{m.UUID, "x", 5, muster.EInvalid},
		{m.UUID, "-1", 5, muster.EInvalid},
		{m.UUID, "", 0, muster.EInvalid},
		{m.UUID, "", -3, muster.EInvalid},
		{"no-such-model", "", 5, muster.ENotFound},
	} {
		if _, err := s.MachinesPage(ctx, tc.model, tc.after, tc.limit); muster.ErrorCode(err) != tc.code {
			t.Errorf("page of %s after %q limit %d: got %v, want %s", tc.model, tc.after, tc.limit, err, tc.code)
		}
	}
}

// testRecordHeartbeats writes last-seen times in a batch: they are read
// back, lives come back for the machines that exist, and watchers see
// nothing.
func testRecordHeartbeats(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 3)
	update(t, s, m.UUID, muster.MachineUpdate{ID: "1", Life: muster.Ptr(muster.LifeDying)})
	before := machine(t, s, m.UUID, "0")
	if !before.LastSeen.IsZero() {
		t.Fatalf("new machine: last seen %v, want zero", before.LastSeen)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	lives, err := s.RecordHeartbeats(ctx, m.UUID, []string{"0", "1", "7"}, at)
	if err != nil {
		t.Fatalf("record heartbeats: %v", err)
	}
	if want := map[string]muster.Life{"0": muster.LifeAlive, "1": muster.LifeDying}; !reflect.DeepEqual(lives, want) {
		t.Fatalf("lives: got %v, want %v (missing machine 7 left out)", lives, want)
	}
	for id, want := range map[string]time.Time{"0": at, "1": at, "2": {}} {
		if got := machine(t, s, m.UUID, id).LastSeen; !got.Equal(want) {
			t.Errorf("machine %s: last seen %v, want %v", id, got, want)
		}
	}
	if got := machine(t, s, m.UUID, "0"); !got.Updated.Equal(before.Updated) {
		t.Errorf("heartbeats changed Updated: %v, was %v", got.Updated, before.Updated)
	}
	if now, err := s.Revision(ctx); err != nil || now != rev {
		t.Errorf("revision after heartbeats: %d (%v), want %d: heartbeats are not in the change log", now, err, rev)
	}
	if lives, err := s.RecordHeartbeats(ctx, m.UUID, nil, at); err != nil || len(lives) != 0 {
		t.Errorf("no ids: got %v, %v, want nothing", lives, err)
	}
	if _, err := s.RecordHeartbeats(ctx, "no-such-model", []string{"0"}, at); !muster.IsCode(err, muster.ENotFound) {
		t.Errorf("unknown model: got %v, want not-found", err)
	}
}

// testMachinesReadTogether: machines read in one list each carry their
// own row's fields, never those of the machine read before them (a
// storage, an instance, constraints), whichever read they come from.
func testMachinesReadTogether(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	full := muster.MachineTemplate{
		Constraints: muster.MustParseConstraints("cores=4 zones=a"),
		Storage:     []muster.StorageDirective{{Name: "data", Size: 1024}},
	}
	if _, err := s.AddMachines(ctx, m.UUID, []muster.MachineTemplate{full, {}, full, {}}); err != nil {
		t.Fatalf("add machines: %v", err)
	}
	update(t, s, m.UUID, muster.MachineUpdate{ID: "0", Nonce: muster.Ptr("n0")})
	errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: "0", Nonce: "n0",
		Info: muster.InstanceInfo{InstanceID: "i-0", Addresses: []string{"10.0.0.1"}}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("record instance: %v %v", errs, err)
	}
	one := make([]muster.Machine, 4)
	for i := range one {
		one[i] = machine(t, s, m.UUID, idOf(i))
	}
	if one[1].Instance != nil || one[1].Storage != nil || one[1].Constraints.String() != "" {
		t.Fatalf("machine 1 read alone: got %+v, want no instance, storage or constraints", one[1])
	}
	all, err := s.Machines(ctx, m.UUID, nil)
	if err != nil {
		t.Fatalf("machines: %v", err)
	}
	some, err := s.Machines(ctx, m.UUID, []string{"0", "1", "2", "3"})
	if err != nil {
		t.Fatalf("machines by id: %v", err)
	}
	page, err := s.MachinesPage(ctx, m.UUID, "", 10)
	if err != nil {
		t.Fatalf("machines page: %v", err)
	}
	for name, got := range map[string][]muster.Machine{"all": all, "by id": some, "page": page} {
		if !reflect.DeepEqual(got, one) {
			t.Errorf("machines read together (%s) differ from machines read one at a time:\n%+v\n%+v", name, got, one)
		}
	}
}
