package storetest

import (
	"fmt"
	"testing"

	"github.com/musterhq/muster"
)

// testReplaceInstance: a replacement record (R1–R5) is accepted only for an
// alive machine whose recorded instance and launch token it names, and then
// hands the machine to the new instance: its nonce, password hash, pending.
func testReplaceInstance(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 4)
	for i := 0; i < 4; i++ {
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), Nonce: muster.Ptr("n" + idOf(i)), PasswordHash: muster.Ptr("h-old")})
		errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: idOf(i), Nonce: "n" + idOf(i), Info: muster.InstanceInfo{InstanceID: "i-old" + idOf(i)}}})
		if err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), Status: muster.Ptr(muster.StatusStarted), LaunchToken: muster.Ptr("tok" + idOf(i))})
	}
	update(t, s, m.UUID, muster.MachineUpdate{ID: "3", Life: muster.Ptr(muster.LifeDying)})
	rec := func(id, replaces, token string) muster.InstanceRecord {
		return muster.InstanceRecord{MachineID: id, Nonce: "new" + id, Info: muster.InstanceInfo{InstanceID: "i-new" + id, Zone: "c"},
			Replaces: replaces, LaunchToken: token, PasswordHash: "h-new"}
	}
	recs := []muster.InstanceRecord{
		rec("0", "i-old0", "tok0"),  // accepted
		rec("1", "i-other", "tok1"), // not its instance
		rec("2", "i-old2", "stale"), // not its token
		rec("3", "i-old3", "tok3"),  // dying
		rec("0", "i-old0", "tok0"),  // its instance is i-new0 now
	}
	errs, err := s.RecordInstances(ctx, m.UUID, recs)
	if err != nil {
		t.Fatalf("record replacements: %v", err)
	}
	for i, code := range []string{"", muster.EConflict, muster.EConflict, muster.EConflict, muster.EConflict} {
		wantCode(t, "replacement "+recs[i].MachineID, errs[i], code)
	}
	got, err := s.Machine(ctx, m.UUID, "0")
	if err != nil {
		t.Fatal(err)
	}
	if got.InstanceID() != "i-new0" || got.Instance.Zone != "c" || got.Nonce != "new0" || got.PasswordHash != "h-new" ||
		got.Status != muster.StatusPending || got.InstanceStatus != muster.InstanceRunning {
		t.Fatalf("replaced machine: got instance %q zone %q nonce %q hash %q status %s/%s, want i-new0 c new0 h-new pending/running",
			got.InstanceID(), got.Instance.Zone, got.Nonce, got.PasswordHash, got.Status, got.InstanceStatus)
	}
	for _, id := range []string{"1", "2", "3"} {
		m2, err := s.Machine(ctx, m.UUID, id)
		if err != nil {
			t.Fatal(err)
		}
		if m2.InstanceID() != "i-old"+id || m2.Nonce != "n"+id || m2.PasswordHash != "h-old" || m2.Status != muster.StatusStarted {
			t.Fatalf("machine %s changed by a refused replacement: instance %q nonce %q hash %q status %s", id, m2.InstanceID(), m2.Nonce, m2.PasswordHash, m2.Status)
		}
	}
}

// testReplaceReleases: a replacement record with ReleaseReplaced releases
// the replaced instance (H8) in its own transaction, and only when it is
// accepted; the flag is refused without a replacement, or naming the new
// instance itself.
func testReplaceReleases(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 3)
	for i := 0; i < 3; i++ {
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), Nonce: muster.Ptr("n" + idOf(i))})
		errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: idOf(i), Nonce: "n" + idOf(i), Info: muster.InstanceInfo{InstanceID: "i-old" + idOf(i)}}})
		if err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), LaunchToken: muster.Ptr("tok" + idOf(i)), KeepInstance: muster.Ptr(true)})
	}
	rec := func(id, replaces, token, inst string, release bool) muster.InstanceRecord {
		return muster.InstanceRecord{MachineID: id, Nonce: "new" + id, Info: muster.InstanceInfo{InstanceID: inst},
			Replaces: replaces, LaunchToken: token, PasswordHash: "h", ReleaseReplaced: release}
	}
	recs := []muster.InstanceRecord{
		rec("0", "i-old0", "tok0", "i-new0", true),  // accepted, releases i-old0
		rec("1", "i-old1", "tok1", "i-new1", false), // accepted, releases nothing
		rec("2", "i-old2", "stale", "i-new2", true), // refused: not its token
		rec("2", "", "", "i-new2", true),            // refused: not a replacement
		rec("2", "i-old2", "tok2", "i-old2", true),  // refused: would release what it records
	}
	errs, err := s.RecordInstances(ctx, m.UUID, recs)
	if err != nil {
		t.Fatalf("record replacements: %v", err)
	}
	for i, code := range []string{"", "", muster.EConflict, muster.EInvalid, muster.EInvalid} {
		wantCode(t, fmt.Sprintf("record %d (machine %s)", i, recs[i].MachineID), errs[i], code)
	}
	rel, err := s.ReleasedInstances(ctx, m.UUID)
	if err != nil {
		t.Fatal(err)
	}
	if len(rel) != 1 || !rel["i-old0"] {
		t.Fatalf("released %v, want only i-old0", rel)
	}
	if got, err := s.Machine(ctx, m.UUID, "0"); err != nil || got.InstanceID() != "i-new0" {
		t.Fatalf("machine 0: instance %q (%v), want i-new0", got.InstanceID(), err)
	}
	if got, err := s.Machine(ctx, m.UUID, "2"); err != nil || got.InstanceID() != "i-old2" {
		t.Fatalf("machine 2: instance %q (%v), want i-old2 after refused records", got.InstanceID(), err)
	}
}

// testUpdateTemplate: an update may replace a machine's constraints and
// base (R5); provisioning info follows, a bad base is refused whole.
func testUpdateTemplate(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 2)
	c := muster.MustParseConstraints("cores=4 mem=8G")
	update(t, s, m.UUID, muster.MachineUpdate{ID: "0", Constraints: &c, Base: muster.Ptr("ubuntu@22.04"), InstanceMessage: muster.Ptr("x")})
	got, err := s.Machine(ctx, m.UUID, "0")
	if err != nil {
		t.Fatal(err)
	}
	if got.Constraints.String() != "cores=4 mem=8G" || got.Base != "ubuntu@22.04" || got.InstanceMessage != "x" {
		t.Fatalf("got constraints %q base %q message %q, want cores=4 mem=8G, ubuntu@22.04, x", got.Constraints, got.Base, got.InstanceMessage)
	}
	infos, err := s.ProvisioningInfo(ctx, m.UUID, []string{"0"})
	if err != nil || infos["0"].Constraints.String() != "cores=4 mem=8G" || infos["0"].Base != "ubuntu@22.04" {
		t.Fatalf("provisioning info %+v %v: want the new template", infos["0"], err)
	}
	err = s.UpdateMachines(ctx, m.UUID, []muster.MachineUpdate{
		{ID: "1", Constraints: &c},
		{ID: "0", Base: muster.Ptr("ubuntu")},
	})
	wantCode(t, "bad base", err, muster.EInvalid)
	if got, _ := s.Machine(ctx, m.UUID, "1"); got.Constraints.String() != "" {
		t.Fatalf("machine 1 constraints %q after a refused update, want none", got.Constraints)
	}
}
