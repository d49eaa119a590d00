package storetest

import (
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/musterhq/muster"
)

// testEnrolment: a batch's token hands out the credentials of the machine
// recorded with the instance, once; another batch's token, an unrecorded
// instance and a second enrolment are refused, and nothing changes then.
func testEnrolment(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	addMachines(t, s, m.UUID, 4)
	for i := 0; i < 4; i++ {
		update(t, s, m.UUID, muster.MachineUpdate{ID: idOf(i), Nonce: muster.Ptr("n" + idOf(i)), PasswordHash: muster.Ptr("old")})
	}
	const tokA, tokB = "token-of-batch-a", "token-of-batch-b"
	if err := s.SetEnrolment(ctx, m.UUID, []string{"0", "1", "99"}, muster.HashSecret(tokA)); err != nil {
		t.Fatalf("SetEnrolment: %v", err)
	}
	if err := s.SetEnrolment(ctx, m.UUID, []string{"2"}, muster.HashSecret(tokB)); err != nil {
		t.Fatalf("SetEnrolment: %v", err)
	}
	wantCode(t, "enrolment in unknown model", s.SetEnrolment(ctx, "no-such-model", []string{"0"}, "h"), muster.ENotFound)
	wantCode(t, "empty token hash", s.SetEnrolment(ctx, m.UUID, []string{"0"}, ""), muster.EInvalid)

	// Instance i-N is machine N's.
	enrol := func(inst, tok string) (muster.Machine, error) {
		return enrolOne(t, s, m.UUID, strings.TrimPrefix(inst, "i-"), inst, tok, muster.HashSecret("pw-"+inst))
	}
	// Batch a's instances are not recorded yet: try again later.
	_, err := enrol("i-0", tokA)
	wantCode(t, "unrecorded instance, live token", err, muster.EUnavailable)
	_, err = enrol("i-0", "forged")
	wantCode(t, "unrecorded instance, unknown token", err, muster.EUnauthorized)
	_, err = enrolOne(t, s, m.UUID, "7", "i-7", tokA, "h")
	wantCode(t, "no such machine", err, muster.ENotFound)
	_, err = enrolOne(t, s, m.UUID, "", "i-0", tokA, "h")
	wantCode(t, "no machine id", err, muster.EInvalid)

	for i := 0; i < 4; i++ {
		errs, err := s.RecordInstances(ctx, m.UUID, []muster.InstanceRecord{{MachineID: idOf(i), Nonce: "n" + idOf(i),
			Info: muster.InstanceInfo{InstanceID: "i-" + idOf(i)}}})
		if err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
	}
	got, err := enrol("i-1", tokA)
	if err != nil {
		t.Fatalf("enrol i-1: %v", err)
	}
	if got.ID != "1" || got.Nonce != "n1" {
		t.Fatalf("enrol i-1: got machine %s nonce %s, want 1, n1", got.ID, got.Nonce)
	}
	if mm, _ := s.Machine(ctx, m.UUID, "1"); mm.PasswordHash != muster.HashSecret("pw-i-1") {
		t.Fatalf("password hash of machine 1 not replaced: %q", mm.PasswordHash)
	} else if mm.LastSeen.IsZero() || !mm.LastSeen.Equal(got.LastSeen) {
		// The enrolling agent is the machine seen, as a heartbeat is.
		t.Fatalf("machine 1 last seen %v after its enrolment (returned %v), want the enrolment's time", mm.LastSeen, got.LastSeen)
	}
	_, err = enrol("i-1", tokA)
	wantCode(t, "replay", err, muster.EConflict)
	_, err = enrolOne(t, s, m.UUID, "0", "i-1", tokA, muster.HashSecret("pw"))
	wantCode(t, "machine 1's instance for machine 0", err, muster.EUnauthorized)
	_, err = enrol("i-2", tokA)
	wantCode(t, "batch a's token for batch b's machine", err, muster.EUnauthorized)
	_, err = enrol("i-3", tokA)
	wantCode(t, "a machine of no batch", err, muster.EUnauthorized)
	kill(t, s, m.UUID, "0")
	_, err = enrol("i-0", tokA)
	wantCode(t, "dead machine", err, muster.EConflict)
	for _, id := range []string{"0", "2", "3"} {
		if mm, _ := s.Machine(ctx, m.UUID, id); mm.PasswordHash != "old" || !mm.LastSeen.IsZero() {
			t.Errorf("refused enrolment changed machine %s: password hash %q, last seen %v", id, mm.PasswordHash, mm.LastSeen)
		}
	}
	// A new batch for the machine makes its credentials available again,
	// once; the instance may carry either batch's token (a start repeated
	// after a crash in another batch adopts the first one's instance).
	if err := s.SetEnrolment(ctx, m.UUID, []string{"1"}, muster.HashSecret(tokB)); err != nil {
		t.Fatal(err)
	}
	if _, err := enrol("i-1", tokA); err != nil {
		t.Fatalf("enrol with the earlier batch's token: %v", err)
	}
	_, err = enrol("i-1", tokB)
	wantCode(t, "second enrolment after a new batch", err, muster.EConflict)
	// Only the newest few tokens of a machine stay valid.
	for i := range 4 {
		if err := s.SetEnrolment(ctx, m.UUID, []string{"1"}, muster.HashSecret("later-"+idOf(i))); err != nil {
			t.Fatal(err)
		}
	}
	_, err = enrol("i-1", tokA)
	wantCode(t, "a token four batches old", err, muster.EUnauthorized)
	if _, err := enrol("i-1", "later-0"); err != nil {
		t.Fatalf("enrol with a recent token: %v", err)
	}
	// A batch of a machine with earlier tokens and one with none hands
	// out both machines' credentials.
	const tokC = "token-of-batch-c"
	if err := s.SetEnrolment(ctx, m.UUID, []string{"3", "1"}, muster.HashSecret(tokC)); err != nil {
		t.Fatal(err)
	}
	for _, inst := range []string{"i-1", "i-3"} {
		if _, err := enrol(inst, tokC); err != nil {
			t.Fatalf("enrol %s in a batch of a new and an enrolled machine: %v", inst, err)
		}
	}
	// The enrolment goes with its machine.
	if err := s.RemoveMachines(ctx, m.UUID, []string{"0"}); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if err := s.SetEnrolment(ctx, m.UUID, []string{"0"}, muster.HashSecret(tokA)); err != nil {
		t.Fatalf("SetEnrolment of a removed machine: %v", err)
	}
}

// enrolOne enrols one instance: its outcome (a failed transaction fails
// the test).
func enrolOne(t *testing.T, s muster.Store, model, machine, instance, token, passwordHash string) (muster.Machine, error) {
	t.Helper()
	out, err := s.Enrol(ctxFor(t), model, []muster.Enrolment{{MachineID: machine, InstanceID: instance, Token: token, PasswordHash: passwordHash}})
	if err != nil {
		t.Fatalf("enrol transaction: %v", err)
	}
	if len(out) != 1 {
		t.Fatalf("enrol: %d outcomes for one enrolment", len(out))
	}
	return out[0].Machine, out[0].Err
}

// batchOfFour adds machines 0–3 to model, started in one batch with
// enrolment token tok: nonce nI, password hash "old", instance i-I
// recorded.
func batchOfFour(t *testing.T, s muster.Store, model, tok string) {
	t.Helper()
	ctx := ctxFor(t)
	addMachines(t, s, model, 4)
	for i := 0; i < 4; i++ {
		update(t, s, model, muster.MachineUpdate{ID: idOf(i), Nonce: muster.Ptr("n" + idOf(i)), PasswordHash: muster.Ptr("old")})
		errs, err := s.RecordInstances(ctx, model, []muster.InstanceRecord{{MachineID: idOf(i), Nonce: "n" + idOf(i),
			Info: muster.InstanceInfo{InstanceID: "i-" + idOf(i)}}})
		if err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
	}
	if err := s.SetEnrolment(ctx, model, []string{"0", "1", "2", "3"}, muster.HashSecret(tok)); err != nil {
		t.Fatal(err)
	}
}

// testEnrolmentBatch: enrolments decided in one transaction each get
// their own outcome, whatever their order; a second enrolment of a
// machine in the same batch is a replay; a refusal changes nothing while
// the others commit; an unknown model fails the whole transaction.
func testEnrolmentBatch(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	const tok = "token-of-the-batch"
	batchOfFour(t, s, m.UUID, tok)
	es := []muster.Enrolment{
		{MachineID: "3", InstanceID: "i-3", Token: tok, PasswordHash: "h3"},
		{MachineID: "1", InstanceID: "i-1", Token: "forged", PasswordHash: "h1"},
		{MachineID: "0", InstanceID: "i-0", Token: tok, PasswordHash: "h0"},
		{MachineID: "9", InstanceID: "i-9", Token: tok, PasswordHash: "h9"},
		{MachineID: "3", InstanceID: "i-3", Token: tok, PasswordHash: "again"},
		{MachineID: "2", InstanceID: "i-2", Token: tok},
	}
	out, err := s.Enrol(ctx, m.UUID, es)
	if err != nil || len(out) != len(es) {
		t.Fatalf("Enrol: %d outcomes, %v; want %d", len(out), err, len(es))
	}
	for i, want := range []string{"", muster.EUnauthorized, "", muster.ENotFound, muster.EConflict, muster.EInvalid} {
		if got := muster.ErrorCode(out[i].Err); got != want {
			t.Errorf("enrolment %d (machine %s): code %q (%v), want %q", i, es[i].MachineID, got, out[i].Err, want)
		}
	}
	if out[0].Machine.ID != "3" || out[0].Machine.Nonce != "n3" || out[2].Machine.ID != "0" {
		t.Errorf("enrolled machines %q (nonce %q) and %q, want 3 (n3) and 0", out[0].Machine.ID, out[0].Machine.Nonce, out[2].Machine.ID)
	}
	for id, want := range map[string]string{"0": "h0", "1": "old", "2": "old", "3": "h3"} {
		if mm, _ := s.Machine(ctx, m.UUID, id); mm.PasswordHash != want {
			t.Errorf("machine %s password hash %q, want %q", id, mm.PasswordHash, want)
		}
	}
	if _, err := enrolOne(t, s, m.UUID, "1", "i-1", tok, "h1"); err != nil {
		t.Errorf("machine 1 after its refused enrolment in a batch: %v", err)
	}
	_, err = s.Enrol(ctx, "no-such-model", es[:1])
	wantCode(t, "enrolments in an unknown model", err, muster.ENotFound)
}

// testEnrolmentThen: a granted enrolment's Then gets the machine as it
// was, and its update and events are written in the enrolment's
// transaction (the update's machine changed once, password included); a
// refused enrolment's Then is not called; an invalid update or an event
// of another model refuses the enrolment and writes nothing of it.
func testEnrolmentThen(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	m := newModel(t, s, "m")
	other := newModel(t, s, "other")
	const tok = "token-of-the-batch"
	batchOfFour(t, s, m.UUID, tok)
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	called := map[string]muster.MachineStatus{}
	then := func(u *muster.MachineUpdate, evs ...muster.Event) func(muster.Machine) (*muster.MachineUpdate, []muster.Event) {
		return func(mc muster.Machine) (*muster.MachineUpdate, []muster.Event) {
			mu.Lock()
			called[mc.ID] = mc.Status
			mu.Unlock()
			return u, evs
		}
	}
	started := muster.MachineUpdate{ID: "ignored", Status: muster.Ptr(muster.StatusStarted), StatusMessage: muster.Ptr("up")}
	ev := func(model, id, kind string) muster.Event {
		return muster.Event{ModelUUID: model, MachineID: id, Actor: "test", Kind: kind, Message: kind + " of " + id}
	}
	es := []muster.Enrolment{
		{MachineID: "0", InstanceID: "i-0", Token: tok, PasswordHash: "h0", Then: then(&started, ev(m.UUID, "0", "then-0"))},
		{MachineID: "1", InstanceID: "i-1", Token: tok, PasswordHash: "h1",
			Then: then(&muster.MachineUpdate{Status: muster.Ptr(muster.MachineStatus("bogus"))}, ev(m.UUID, "1", "then-1"))},
		{MachineID: "2", InstanceID: "i-2", Token: "forged", PasswordHash: "h2", Then: then(&started, ev(m.UUID, "2", "then-2"))},
		{MachineID: "3", InstanceID: "i-3", Token: tok, PasswordHash: "h3", Then: then(nil, ev(other.UUID, "3", "then-3"))},
		{MachineID: "0", InstanceID: "i-0", Token: tok, PasswordHash: "again", Then: then(nil, ev(m.UUID, "0", "replay"))},
	}
	out, err := s.Enrol(ctx, m.UUID, es)
	if err != nil || len(out) != len(es) {
		t.Fatalf("Enrol: %d outcomes, %v; want %d", len(out), err, len(es))
	}
	for i, want := range []string{"", muster.EInvalid, muster.EUnauthorized, muster.EInvalid, muster.EConflict} {
		if got := muster.ErrorCode(out[i].Err); got != want {
			t.Errorf("enrolment %d (machine %s): code %q (%v), want %q", i, es[i].MachineID, got, out[i].Err, want)
		}
	}
	if got := out[0].Machine; got.Status != muster.StatusStarted || got.StatusMessage != "up" || got.PasswordHash != "h0" {
		t.Errorf("enrolled machine 0: status %q (%q), hash %q; want the update applied", got.Status, got.StatusMessage, got.PasswordHash)
	}
	if st, ok := called["0"]; !ok || st == muster.StatusStarted {
		t.Errorf("Then of machine 0: called %v with status %q, want called with the machine before the update", ok, st)
	}
	if _, ok := called["2"]; ok {
		t.Error("Then called for a refused enrolment (forged token)")
	}
	for id, want := range map[string]string{"0": "h0", "1": "old", "2": "old", "3": "old"} {
		mm, _ := s.Machine(ctx, m.UUID, id)
		if mm.PasswordHash != want {
			t.Errorf("machine %s password hash %q, want %q", id, mm.PasswordHash, want)
		}
		if id == "0" && mm.Status != muster.StatusStarted {
			t.Errorf("machine 0 status %q, want started", mm.Status)
		} else if id != "0" && mm.Status == muster.StatusStarted {
			t.Errorf("machine %s started by a refused enrolment's update", id)
		}
	}
	all, err := s.Events(ctx, m.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range all {
		kinds[e.Kind]++
	}
	if kinds["then-0"] != 1 || kinds["then-1"]+kinds["then-2"]+kinds["then-3"]+kinds["replay"] != 0 {
		t.Errorf("events by kind %v: want then-0 once and none of the refused enrolments", kinds)
	}
	// One change: machine 0's, whose update was written (an enrolment
	// without an update changes nothing a watcher sees).
	if cs := watch(t, s, m.UUID, rev, muster.ChangeMachine).next(); !reflect.DeepEqual(cs.Machines, []string{"0"}) {
		t.Errorf("changed machines %v, want [0]", cs.Machines)
	}
	// The refused ones left nothing behind: they enrol now.
	if _, err := enrolOne(t, s, m.UUID, "1", "i-1", tok, "h1"); err != nil {
		t.Errorf("machine 1 after its invalid update: %v", err)
	}
	if _, err := enrolOne(t, s, m.UUID, "3", "i-3", tok, "h3"); err != nil {
		t.Errorf("machine 3 after its other model's event: %v", err)
	}
}
