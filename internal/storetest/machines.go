package storetest

import (
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func testMachines(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	tmpl := muster.MachineTemplate{
		Constraints: muster.MustParseConstraints("arch=arm64 cores=4 mem=8G zones=a,b tags=^gpu"),
		Base:        "ubuntu@22.04",
		Group:       "web",
		Placement:   "zone=b",
		Storage:     []muster.StorageDirective{{Name: "data", Size: 10240, Pool: "ssd"}},
	}
	added, err := s.AddMachines(ctx, m.UUID, []muster.MachineTemplate{tmpl, {}})
	if err != nil {
		t.Fatalf("add machines: %v", err)
	}
	if got, want := machineIDs(added), []string{"0", "1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("ids: got %v, want %v", got, want)
	}
	got := machine(t, s, m.UUID, "0")
	want := added[0]
	if got.ModelUUID != m.UUID || got.Life != muster.LifeAlive || got.Status != muster.StatusPending ||
		got.InstanceStatus != muster.InstanceNone || got.Instance != nil || got.HasInstance() {
		t.Fatalf("new machine: got %+v, want alive, pending, no instance", got)
	}
	if !reflect.DeepEqual(got.Constraints, tmpl.Constraints) || got.Base != tmpl.Base || got.Group != "web" ||
		got.Placement != "zone=b" || !reflect.DeepEqual(got.Storage, tmpl.Storage) {
		t.Fatalf("machine 0: got %+v, want the template %+v", got, tmpl)
	}
	if !got.Created.Equal(want.Created) || got.Created.IsZero() {
		t.Fatalf("created: got %v, want %v", got.Created, want.Created)
	}
	if got := machine(t, s, m.UUID, "1"); got.Base != muster.DefaultBase || got.Group != "" || got.Storage != nil {
		t.Fatalf("machine 1: got base %q group %q storage %v, want defaults", got.Base, got.Group, got.Storage)
	}

	addMachines(t, s, m.UUID, 10) // 2..11: "10" and "11" sort after "9"
	all, err := s.Machines(ctx, m.UUID, nil)
	if err != nil {
		t.Fatalf("machines: %v", err)
	}
	if got, want := machineIDs(all), ids(12); !reflect.DeepEqual(got, want) {
		t.Fatalf("all machines: got %v, want %v", got, want)
	}
	for _, tc := range []struct {
		name string
		ids  []string
		want []string
	}{
		{"some", []string{"11", "2", "10"}, []string{"2", "10", "11"}},
		{"missing and bad ignored", []string{"3", "99", "x", "-1", "03", ""}, []string{"3"}},
		{"repeats", []string{"4", "4"}, []string{"4"}},
		{"empty", []string{}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ms, err := s.Machines(ctx, m.UUID, tc.ids)
			if err != nil {
				t.Fatalf("machines %v: %v", tc.ids, err)
			}
			if got := machineIDs(ms); !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("machines %v: got %v, want %v", tc.ids, got, tc.want)
			}
		})
	}
	// Another model's machines are its own.
	other := newModel(t, s, "other")
	if got := addMachines(t, s, other.UUID, 1); got[0] != "0" {
		t.Fatalf("first id of a new model: got %s, want 0", got[0])
	}
	if ms, _ := s.Machines(ctx, other.UUID, nil); len(ms) != 1 {
		t.Fatalf("machines of other model: got %d, want 1", len(ms))
	}
}

func testMachineErrors(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	const missing = "00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		name string
		ts   []muster.MachineTemplate
	}{
		{"bad base", []muster.MachineTemplate{{}, {Base: "ubuntu"}}},
		{"bad group", []muster.MachineTemplate{{Group: "a b"}}},
		{"bad placement", []muster.MachineTemplate{{Placement: "rack=3"}}},
		{"zero storage", []muster.MachineTemplate{{Storage: []muster.StorageDirective{{Name: "d"}}}}},
		{"storage twice", []muster.MachineTemplate{{Storage: []muster.StorageDirective{{Name: "d", Size: 1}, {Name: "d", Size: 2}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.AddMachines(ctx, m.UUID, tc.ts)
			wantCode(t, "add machines", err, muster.EInvalid)
		})
	}
	if ms, _ := s.Machines(ctx, m.UUID, nil); len(ms) != 0 {
		t.Fatalf("machines after refused adds: got %v, want none", machineIDs(ms))
	}
	_, err := s.AddMachines(ctx, missing, []muster.MachineTemplate{{}})
	wantCode(t, "add to unknown model", err, muster.ENotFound)
	_, err = s.Machine(ctx, m.UUID, "0")
	wantCode(t, "missing machine", err, muster.ENotFound)
	_, err = s.Machine(ctx, m.UUID, "zero")
	wantCode(t, "bad machine id", err, muster.ENotFound)
	_, err = s.Machine(ctx, missing, "0")
	wantCode(t, "machine of unknown model", err, muster.ENotFound)
	_, err = s.Machines(ctx, missing, nil)
	wantCode(t, "machines of unknown model", err, muster.ENotFound)
	wantCode(t, "update in unknown model", s.UpdateMachines(ctx, missing, []muster.MachineUpdate{{ID: "0"}}), muster.ENotFound)
	_, err = s.RecordInstances(ctx, missing, []muster.InstanceRecord{{MachineID: "0"}})
	wantCode(t, "record in unknown model", err, muster.ENotFound)
	wantCode(t, "remove in unknown model", s.RemoveMachines(ctx, missing, []string{"0"}), muster.ENotFound)
	_, err = s.ReleasedInstances(ctx, missing)
	wantCode(t, "released of unknown model", err, muster.ENotFound)
	_, err = s.ProvisioningInfo(ctx, missing, []string{"0"})
	wantCode(t, "provisioning info of unknown model", err, muster.ENotFound)
	_, err = s.DistributionGroups(ctx, missing, []string{"0"})
	wantCode(t, "groups of unknown model", err, muster.ENotFound)
	// A refused add does not use up ids.
	if got := addMachines(t, s, m.UUID, 1); got[0] != "0" {
		t.Fatalf("first id after refused adds: got %s, want 0", got[0])
	}
}

func testIDsNeverReused(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 3)
	kill(t, s, m.UUID, "1", "2")
	if err := s.RemoveMachines(ctx, m.UUID, []string{"1", "2"}); err != nil {
		t.Fatalf("remove machines: %v", err)
	}
	if got := addMachines(t, s, m.UUID, 1); got[0] != "3" {
		t.Fatalf("id after removing the newest machines: got %s, want 3", got[0])
	}
	kill(t, s, m.UUID, "0", "3")
	if err := s.RemoveMachines(ctx, m.UUID, []string{"0", "3"}); err != nil {
		t.Fatalf("remove machines: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	s = h.store(t)
	if ms, err := s.Machines(ctx, m.UUID, nil); err != nil || len(ms) != 0 {
		t.Fatalf("machines after reopen: got %v (err %v), want none", machineIDs(ms), err)
	}
	if got := addMachines(t, s, m.UUID, 2); !reflect.DeepEqual(got, []string{"4", "5"}) {
		t.Fatalf("ids after removing every machine and reopening: got %v, want [4 5]", got)
	}
}

func testLifeForwardOnly(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	lives := []muster.Life{muster.LifeAlive, muster.LifeDying, muster.LifeDead}
	for _, from := range lives {
		for _, to := range lives {
			t.Run(string(from)+"-to-"+string(to), func(t *testing.T) {
				id := addMachines(t, s, m.UUID, 1)[0]
				update(t, s, m.UUID, muster.MachineUpdate{ID: id, Life: muster.Ptr(from)})
				err := s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: id, Life: muster.Ptr(to)}})
				want, code := to, ""
				if !from.CanBecome(to) {
					want, code = from, muster.EInvalid
				}
				wantCode(t, "update life", err, code)
				if got := machine(t, s, m.UUID, id).Life; got != want {
					t.Fatalf("life: got %s, want %s", got, want)
				}
			})
		}
	}
	id := addMachines(t, s, m.UUID, 1)[0]
	wantCode(t, "unknown life", s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: id, Life: muster.Ptr(muster.Life("undead"))}}), muster.EInvalid)
}

func testUpdateMachines(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 2)
	next := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	update(t, s, m.UUID, muster.MachineUpdate{
		ID:              "0",
		Status:          muster.Ptr(muster.StatusError),
		StatusMessage:   muster.Ptr("agent said no"),
		InstanceStatus:  muster.Ptr(muster.InstanceProvisioningError),
		InstanceMessage: muster.Ptr("retrying in 10s"),
		KeepInstance:    muster.Ptr(true),
		LaunchToken:     muster.Ptr("tok"),
		Nonce:           muster.Ptr("nonce-1"),
		PasswordHash:    muster.Ptr("hash"),
		AutoRetries:     muster.Ptr(3),
		NextRetry:       &next,
	})
	got := machine(t, s, m.UUID, "0")
	if got.Status != muster.StatusError || got.StatusMessage != "agent said no" || got.InstanceStatus != muster.InstanceProvisioningError ||
		got.InstanceMessage != "retrying in 10s" || !got.KeepInstance || got.LaunchToken != "tok" || got.Nonce != "nonce-1" ||
		got.PasswordHash != "hash" || got.AutoRetries != 3 || !got.NextRetry.Equal(next) {
		t.Fatalf("updated machine: got %+v", got)
	}
	if other := machine(t, s, m.UUID, "1"); other.Status != muster.StatusPending || other.Nonce != "" {
		t.Fatalf("machine 1 changed by an update of machine 0: %+v", other)
	}
	// nil fields are left alone.
	update(t, s, m.UUID, muster.MachineUpdate{ID: "0", StatusMessage: muster.Ptr("")})
	if got := machine(t, s, m.UUID, "0"); got.StatusMessage != "" || got.Nonce != "nonce-1" || got.Status != muster.StatusError {
		t.Fatalf("after a one-field update: got %+v", got)
	}
	// Addresses and hardware need an instance.
	err := s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{{ID: "1", Addresses: &[]string{"10.0.0.1"}}})
	wantCode(t, "addresses without instance", err, muster.EInvalid)
	errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: "0", Nonce: "nonce-1", Info: muster.InstanceInfo{InstanceID: "i-0", Zone: "a"}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("record instance: %v %v", errs, err)
	}
	hw := muster.Hardware{Arch: "amd64", Cores: 2, Mem: 4096, AvailabilityZone: "a"}
	update(t, s, m.UUID, muster.MachineUpdate{ID: "0", Addresses: &[]string{"10.0.0.1", "fd00::1"}, Hardware: &hw})
	got = machine(t, s, m.UUID, "0")
	if got.InstanceID() != "i-0" || got.Instance.Zone != "a" || !reflect.DeepEqual(got.Instance.Addresses, []string{"10.0.0.1", "fd00::1"}) || got.Instance.Hardware != hw {
		t.Fatalf("instance after address update: got %+v", got.Instance)
	}
	if !got.Updated.After(got.Created) && !got.Updated.Equal(got.Created) {
		t.Fatalf("updated %v before created %v", got.Updated, got.Created)
	}
	for _, tc := range []struct {
		name string
		u    muster.MachineUpdate
		code string
	}{
		{"bad status", muster.MachineUpdate{ID: "1", Status: muster.Ptr(muster.MachineStatus("sleepy"))}, muster.EInvalid},
		{"bad instance status", muster.MachineUpdate{ID: "1", InstanceStatus: muster.Ptr(muster.InstanceStatus("warm"))}, muster.EInvalid},
		{"negative retries", muster.MachineUpdate{ID: "1", AutoRetries: muster.Ptr(-1)}, muster.EInvalid},
		{"missing machine", muster.MachineUpdate{ID: "7", Status: muster.Ptr(muster.StatusDown)}, muster.ENotFound},
		{"bad id", muster.MachineUpdate{ID: "x", Status: muster.Ptr(muster.StatusDown)}, muster.ENotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantCode(t, "update", s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{tc.u}), tc.code)
		})
	}
}

func testUpdateAllOrNothing(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 2)
	update(t, s, m.UUID, muster.MachineUpdate{ID: "1", Life: muster.Ptr(muster.LifeDying)})
	for _, tc := range []struct {
		name string
		last muster.MachineUpdate
		code string
	}{
		{"backward life", muster.MachineUpdate{ID: "1", Life: muster.Ptr(muster.LifeAlive)}, muster.EInvalid},
		{"missing machine", muster.MachineUpdate{ID: "9", StatusMessage: muster.Ptr("x")}, muster.ENotFound},
		{"bad status", muster.MachineUpdate{ID: "1", Status: muster.Ptr(muster.MachineStatus("?"))}, muster.EInvalid},
		{"addresses without instance", muster.MachineUpdate{ID: "1", Addresses: &[]string{"10.0.0.9"}}, muster.EInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rev, err := s.Revision(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{
				{ID: "0", Status: muster.Ptr(muster.StatusStarted), Nonce: muster.Ptr("n")},
				{ID: "1", StatusMessage: muster.Ptr("first")},
				tc.last,
			})
			wantCode(t, "update batch", err, tc.code)
			if got := machine(t, s, m.UUID, "0"); got.Status != muster.StatusPending || got.Nonce != "" {
				t.Fatalf("machine 0 after a refused batch: got status %s nonce %q, want pending and none", got.Status, got.Nonce)
			}
			if got := machine(t, s, m.UUID, "1"); got.StatusMessage != "" || got.Life != muster.LifeDying {
				t.Fatalf("machine 1 after a refused batch: got message %q life %s", got.StatusMessage, got.Life)
			}
			if got, _ := s.Revision(ctx); got != rev {
				t.Fatalf("revision after a refused batch: got %d, want %d", got, rev)
			}
		})
	}
	// The same batch without the bad update applies in full.
	update(t, s, m.UUID,
		muster.MachineUpdate{ID: "0", Status: muster.Ptr(muster.StatusStarted)},
		muster.MachineUpdate{ID: "1", StatusMessage: muster.Ptr("first")},
		muster.MachineUpdate{ID: "1", StatusMessage: muster.Ptr("second")},
	)
	if got := machine(t, s, m.UUID, "0"); got.Status != muster.StatusStarted {
		t.Fatalf("machine 0: got status %s, want started", got.Status)
	}
	if got := machine(t, s, m.UUID, "1"); got.StatusMessage != "second" {
		t.Fatalf("machine 1: got message %q, want the last update's", got.StatusMessage)
	}
}

func testRecordInstances(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 5)
	for i := 0; i < 5; i++ {
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), Nonce: muster.Ptr("n" + idOf(i)),
			InstanceStatus: muster.Ptr(muster.InstanceProvisioningError), InstanceMessage: muster.Ptr("retrying: no capacity")})
	}
	kill(t, s, m.UUID, "1")
	errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: "2", Nonce: "n2", Info: muster.InstanceInfo{InstanceID: "i-first"}}})
	if err != nil || errs[0] != nil {
		t.Fatalf("record: %v %v", errs, err)
	}
	info := muster.InstanceInfo{
		InstanceID: "i-0", DisplayName: "vm0", Zone: "b",
		Hardware:    muster.Hardware{Arch: "amd64", Cores: 2, Mem: 2048},
		Addresses:   []string{"10.1.0.1"},
		Volumes:     []muster.Volume{{Name: "data", VolumeID: "vol-1", Size: 1024}},
		Attachments: []muster.VolumeAttachment{{Volume: "data", MachineID: "0", InstanceID: "i-0", DeviceName: "/dev/sdb"}},
	}
	recs := []muster.InstanceRecord{
		{MachineID: "0", Nonce: "n0", Info: info},                                    // accepted
		{MachineID: "1", Nonce: "n1", Info: muster.InstanceInfo{InstanceID: "i-1"}},  // dead
		{MachineID: "2", Nonce: "n2", Info: muster.InstanceInfo{InstanceID: "i-2"}},  // has one
		{MachineID: "3", Nonce: "old", Info: muster.InstanceInfo{InstanceID: "i-3"}}, // nonce
		{MachineID: "9", Nonce: "n9", Info: muster.InstanceInfo{InstanceID: "i-9"}},  // gone
		{MachineID: "4", Nonce: "n4", Info: muster.InstanceInfo{InstanceID: "i-4"}},  // accepted
		{MachineID: "4", Nonce: "n4", Info: muster.InstanceInfo{InstanceID: "i-5"}},  // has one now
	}
	errs, err = s.RecordInstances(ctx, m.UUID, recs)
	if err != nil {
		t.Fatalf("record instances: %v", err)
	}
	wantCodes := []string{"", muster.EConflict, muster.EConflict, muster.EConflict, muster.ENotFound, "", muster.EConflict}
	if len(errs) != len(recs) {
		t.Fatalf("got %d errors, want %d", len(errs), len(recs))
	}
	for i, code := range wantCodes {
		wantCode(t, "record "+recs[i].MachineID+" "+recs[i].Info.InstanceID, errs[i], code)
	}
	got := machine(t, s, m.UUID, "0")
	if !reflect.DeepEqual(got.Instance, &info) {
		t.Fatalf("recorded instance: got %+v, want %+v", got.Instance, info)
	}
	for _, id := range []string{"0", "4"} {
		got := machine(t, s, m.UUID, id)
		if got.InstanceStatus != muster.InstanceRunning || got.InstanceMessage != "" {
			t.Fatalf("machine %s after record: got instance status %q message %q, want running and no message", id, got.InstanceStatus, got.InstanceMessage)
		}
	}
	if got := machine(t, s, m.UUID, "4").InstanceID(); got != "i-4" {
		t.Fatalf("machine 4 instance: got %s, want the first record's i-4", got)
	}
	for id, want := range map[string]string{"1": "", "2": "i-first", "3": ""} {
		got := machine(t, s, m.UUID, id)
		if got.InstanceID() != want {
			t.Fatalf("refused machine %s: got instance %q, want %q", id, got.InstanceID(), want)
		}
		if id != "2" && (got.InstanceStatus != muster.InstanceProvisioningError || got.InstanceMessage == "") {
			t.Fatalf("refused machine %s: instance status changed to %q %q", id, got.InstanceStatus, got.InstanceMessage)
		}
	}
	// Empty nonces match each other; an empty instance id is refused.
	addMachines(t, s, m.UUID, 1) // 5
	errs, err = s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: "5"}, {MachineID: "5", Info: muster.InstanceInfo{InstanceID: "i-x"}}})
	if err != nil {
		t.Fatal(err)
	}
	wantCode(t, "empty instance id", errs[0], muster.EInvalid)
	wantCode(t, "empty nonce", errs[1], "")
}

func testRemoveMachines(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 4)
	for i := 0; i < 4; i++ {
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), Nonce: muster.Ptr("n")})
		if errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: idOf(i), Nonce: "n", Info: muster.InstanceInfo{InstanceID: "i-" + idOf(i)}}}); err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
	}
	update(t, s, m.UUID, muster.MachineUpdate{ID: "1", KeepInstance: muster.Ptr(true)}, muster.MachineUpdate{ID: "3", Life: muster.Ptr(muster.LifeDying)})
	kill(t, s, m.UUID, "0", "1")
	err := s.RemoveMachines(ctx, m.UUID, []string{"0", "1", "3"})
	wantCode(t, "remove with a dying machine", err, muster.EConflict)
	if ms, _ := s.Machines(ctx, m.UUID, nil); len(ms) != 4 {
		t.Fatalf("machines after a refused remove: got %v, want all 4", machineIDs(ms))
	}
	if rel, _ := s.ReleasedInstances(ctx, m.UUID); len(rel) != 0 {
		t.Fatalf("released after a refused remove: got %v, want none", rel)
	}
	if err := s.RemoveMachines(ctx, m.UUID, []string{"0", "1", "42", "bad"}); err != nil {
		t.Fatalf("remove dead machines (and missing ids): %v", err)
	}
	if ms, _ := s.Machines(ctx, m.UUID, nil); !reflect.DeepEqual(machineIDs(ms), []string{"2", "3"}) {
		t.Fatalf("machines after remove: got %v, want [2 3]", machineIDs(ms))
	}
	rel, err := s.ReleasedInstances(ctx, m.UUID)
	if err != nil {
		t.Fatalf("released instances: %v", err)
	}
	if want := map[string]bool{"i-1": true}; !reflect.DeepEqual(rel, want) {
		t.Fatalf("released instances: got %v, want %v", rel, want)
	}
	wantCode(t, "remove alive", s.RemoveMachines(ctx, m.UUID, []string{"2"}), muster.EConflict)
	if err := s.RemoveMachines(ctx, m.UUID, nil); err != nil {
		t.Fatalf("remove nothing: %v", err)
	}
	other := newModel(t, s, "other")
	if rel, _ := s.ReleasedInstances(ctx, other.UUID); len(rel) != 0 {
		t.Fatalf("released instances of another model: got %v, want none", rel)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = h.store(t)
	if rel, _ := s.ReleasedInstances(ctx, m.UUID); !rel["i-1"] {
		t.Fatalf("released instances after reopen: got %v, want i-1", rel)
	}
}

func testProvisioningInfo(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	ts := []muster.MachineTemplate{
		{Constraints: muster.MustParseConstraints("cores=2 spaces=db,^dmz"), Group: "db", Placement: "zone=a", Storage: []muster.StorageDirective{{Name: "logs", Size: 512}}},
		{Base: "ubuntu@22.04"},
		{Constraints: muster.MustParseConstraints("instance-type=m5.large")},
	}
	if _, err := s.AddMachines(ctx, m.UUID, ts); err != nil {
		t.Fatal(err)
	}
	got, err := s.ProvisioningInfo(ctx, m.UUID, []string{"0", "2", "7", "x"})
	if err != nil {
		t.Fatalf("provisioning info: %v", err)
	}
	want := map[string]muster.ProvisioningInfo{
		"0": {MachineID: "0", Constraints: ts[0].Constraints, Base: muster.DefaultBase, Placement: "zone=a", Storage: ts[0].Storage, Group: "db"},
		"2": {MachineID: "2", Constraints: ts[2].Constraints, Base: muster.DefaultBase},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("provisioning info: got %+v, want %+v", got, want)
	}
	if got, err := s.ProvisioningInfo(ctx, m.UUID, nil); err != nil || len(got) != 0 {
		t.Fatalf("provisioning info of nothing: got %v (err %v), want empty", got, err)
	}
	// A large batch is still answered.
	many := addMachines(t, s, m.UUID, 1200)
	got, err = s.ProvisioningInfo(ctx, m.UUID, many)
	if err != nil || len(got) != len(many) {
		t.Fatalf("provisioning info of %d machines: got %d (err %v)", len(many), len(got), err)
	}
}

func testDistributionGroups(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	other := newModel(t, s, "other")
	var ts []muster.MachineTemplate
	for _, g := range []string{"web", "web", "db", "web", "", "web", "db"} { // 0..6
		ts = append(ts, muster.MachineTemplate{Group: g})
	}
	if _, err := s.AddMachines(ctx, m.UUID, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMachines(ctx, other.UUID, ts); err != nil {
		t.Fatal(err)
	}
	kill(t, s, m.UUID, "3")
	update(t, s, m.UUID, muster.MachineUpdate{ID: "5", Life: muster.Ptr(muster.LifeDying)})
	got, err := s.DistributionGroups(ctx, m.UUID, []string{"0", "2", "4", "3", "99"})
	if err != nil {
		t.Fatalf("distribution groups: %v", err)
	}
	want := map[string][]string{
		"0": {"0", "1"},
		"2": {"2", "6"},
		"3": {"0", "1", "3"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("distribution groups: got %v, want %v", got, want)
	}
}

func idOf(i int) string { return strconv.Itoa(i) }

// testUpdateMachinesMany: one UpdateMachines of many machines (more than
// a SQLite statement takes) writes each machine its own values, every
// column in its place.
func testUpdateMachinesMany(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	const n = 71
	addMachines(t, s, m.UUID, n)
	base := time.Unix(1_900_000_000, 0).UTC()
	us := make([]muster.MachineUpdate, n)
	for i := range us {
		us[i] = muster.MachineUpdate{ID: idOf(i), StatusMessage: muster.Ptr("sm-" + idOf(i)),
			InstanceMessage: muster.Ptr("im-" + idOf(i)), KeepInstance: muster.Ptr(i%3 == 0), LaunchToken: muster.Ptr("lt-" + idOf(i)),
			Nonce: muster.Ptr("n-" + idOf(i)), PasswordHash: muster.Ptr("h-" + idOf(i)), AutoRetries: muster.Ptr(i),
			NextRetry: muster.Ptr(base.Add(time.Duration(i) * time.Second))}
		if i%2 == 1 {
			us[i].Status = muster.Ptr(muster.StatusDown)
		}
	}
	update(t, s, m.UUID, us...)
	ms, err := s.Machines(ctx, m.UUID, nil)
	if err != nil || len(ms) != n {
		t.Fatalf("machines: %d, %v; want %d", len(ms), err, n)
	}
	for _, mc := range ms {
		i, _ := strconv.Atoi(mc.ID)
		wantStatus := muster.StatusPending
		if i%2 == 1 {
			wantStatus = muster.StatusDown
		}
		if mc.Status != wantStatus || mc.StatusMessage != "sm-"+mc.ID || mc.InstanceMessage != "im-"+mc.ID ||
			mc.KeepInstance != (i%3 == 0) || mc.LaunchToken != "lt-"+mc.ID || mc.Nonce != "n-"+mc.ID ||
			mc.PasswordHash != "h-"+mc.ID || mc.AutoRetries != i || !mc.NextRetry.Equal(base.Add(time.Duration(i)*time.Second)) ||
			mc.Life != muster.LifeAlive {
			t.Fatalf("machine %s after a %d-machine update: %+v", mc.ID, n, mc)
		}
	}
}
