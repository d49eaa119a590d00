package api_test

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sim"
)

// enrolFixture: three machines of a model on a sim; 0 and 1 are a batch
// with token tok and have instances; 2 is of another batch (token other).
type enrolFixture struct {
	h          *harness
	cloud      *sim.Cloud
	inst       map[string]string // machine → instance id
	nonce      map[string]string
	tok, other string
}

func newEnrolFixture(t *testing.T, hooks ...func(*api.Config)) *enrolFixture {
	t.Helper()
	cloud, err := sim.Open(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cloud.Close() })
	h := newHarness(t, append([]func(*api.Config){withRuntime(&testRuntime{identityCert: cloud.IdentityCert()})}, hooks...)...)
	h.addMachines(t, api.AddMachinesRequest{Count: 4})
	f := &enrolFixture{h: h, cloud: cloud, inst: map[string]string{}, nonce: map[string]string{}, tok: muster.NewSecret(), other: muster.NewSecret()}
	ctx := context.Background()
	for _, id := range []string{"0", "1", "2"} {
		inst, err := cloud.AddInstance("a", "c", h.model.UUID)
		if err != nil {
			t.Fatal(err)
		}
		f.inst[id], f.nonce[id] = inst.ID, "machine-0:"+muster.NewUUID()
		if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{ID: id, Nonce: muster.Ptr(f.nonce[id]),
			PasswordHash: muster.Ptr(muster.HashSecret(muster.NewSecret()))}}); err != nil {
			t.Fatal(err)
		}
		if errs, err := h.store.RecordInstances(ctx, h.model.UUID, []muster.InstanceRecord{{MachineID: id, Nonce: f.nonce[id],
			Info: muster.InstanceInfo{InstanceID: inst.ID, Zone: "a", Hardware: muster.Hardware{Arch: "amd64", Mem: 2048}}}}); err != nil || errs[0] != nil {
			t.Fatalf("record: %v %v", errs, err)
		}
	}
	if err := h.store.SetEnrolment(ctx, h.model.UUID, []string{"0", "1", "3"}, muster.HashSecret(f.tok)); err != nil {
		t.Fatal(err)
	}
	if err := h.store.SetEnrolment(ctx, h.model.UUID, []string{"2"}, muster.HashSecret(f.other)); err != nil {
		t.Fatal(err)
	}
	return f
}

// request is an enrolment of machine with instance's own identity.
func (f *enrolFixture) request(t *testing.T, machine, instance, token string) api.EnrolRequest {
	t.Helper()
	doc, sig, err := f.cloud.IdentityDocument(instance)
	if err != nil {
		t.Fatal(err)
	}
	return api.EnrolRequest{Model: "default", Machine: machine, Token: token, Document: string(doc), Signature: sig}
}

// An instance gets its own machine's credentials once, and can log in with
// them; it cannot get another machine's, with any document, token or
// signature, nor its own a second time. Every refusal changes nothing and
// leaves an event.
func TestEnrolHandsOutOwnCredentialsOnce(t *testing.T) {
	f := newEnrolFixture(t)
	h, ctx := f.h, context.Background()
	ownA := f.request(t, "0", f.inst["0"], f.tok)
	forged := ownA
	forged.Document = strings.Replace(forged.Document, f.inst["0"], f.inst["1"], 1)
	otherSim, err := sim.Open(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer otherSim.Close()
	foreign, _ := otherSim.AddInstance("a", "c", h.model.UUID)
	fdoc, fsig, _ := otherSim.IdentityDocument(foreign.ID)
	for _, tc := range []struct {
		name string
		req  api.EnrolRequest
		code string
	}{
		{"instance A's document for machine B", f.request(t, "1", f.inst["0"], f.tok), muster.EUnauthorized},
		{"altered document", forged, muster.EUnauthorized},
		{"signature of another document", func() api.EnrolRequest {
			r := ownA
			r.Signature = f.request(t, "1", f.inst["1"], f.tok).Signature
			return r
		}(), muster.EUnauthorized},
		{"signed by another cloud", api.EnrolRequest{Model: "default", Machine: "0", Token: f.tok, Document: string(fdoc), Signature: fsig}, muster.EUnauthorized},
		{"wrong batch token", f.request(t, "0", f.inst["0"], f.other), muster.EUnauthorized},
		{"another batch's machine", f.request(t, "2", f.inst["2"], f.tok), muster.EUnauthorized},
		{"no token", f.request(t, "0", f.inst["0"], ""), muster.EUnauthorized},
		{"unknown machine", f.request(t, "9", f.inst["0"], f.tok), muster.EUnauthorized},
		{"unknown model", func() api.EnrolRequest { r := ownA; r.Model = "nope"; return r }(), muster.EUnauthorized},
		{"not recorded yet", f.request(t, "3", f.inst["0"], f.tok), muster.EUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.anon.Enrol(ctx, tc.req)
			wantCode(t, err, tc.code)
		})
	}

	res, err := h.anon.Enrol(ctx, ownA)
	if err != nil {
		t.Fatalf("enrol: %v", err)
	}
	if res.Machine != "0" || res.Nonce != f.nonce["0"] || len(res.Password) != 64 {
		t.Fatalf("enrol: got %+v, want machine 0 with its nonce and a password", res)
	}
	// The enrolment opened a session: the agent acts without logging in.
	if res.Session == nil || res.Session.Token == "" || res.Session.ModelUUID != h.model.UUID {
		t.Fatalf("enrol: session %+v, want one for model %s", res.Session, h.model.UUID)
	}
	if am, err := h.anon.WithToken(res.Session.Token).AgentMachine(ctx, res.Session.ModelUUID, "0"); err != nil || am.ID != "0" {
		t.Fatalf("the enrolment's session as machine 0: %+v %v", am, err)
	}
	if _, err := h.anon.WithToken(res.Session.Token).AgentMachine(ctx, res.Session.ModelUUID, "1"); !muster.IsCode(err, muster.EForbidden) {
		t.Fatalf("the enrolment's session as machine 1: %v, want forbidden", err)
	}
	if _, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: res.Machine, Password: res.Password, Nonce: res.Nonce}); err != nil {
		t.Fatalf("login with the enrolled credentials: %v", err)
	}
	_, err = h.anon.Enrol(ctx, ownA)
	wantCode(t, err, muster.EConflict)
	if _, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: res.Password, Nonce: res.Nonce}); err != nil {
		t.Fatalf("a refused replay changed the credentials: %v", err)
	}

	evs, err := h.store.Events(ctx, h.model.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var refused, enrolled, logins int
	for _, e := range evs {
		switch e.Kind {
		case "enrol-refused":
			refused++
		case "enrol":
			enrolled++
		case "login":
			logins++
		}
	}
	// Refusals about a machine of the model leave an event; unknown
	// models and unrecorded instances do not.
	if refused != 8 || enrolled != 1 || logins != 3 {
		t.Fatalf("events: %d enrol-refused, %d enrol, %d login; want 8, 1 and 3 (the enrolment's session, two logins)", refused, enrolled, logins)
	}
	if !bytes.Contains(h.logBuf.Bytes(), []byte("enrolment refused")) {
		t.Errorf("refusals not logged")
	}
}

// Without a certificate for the model's cloud, enrolment is unavailable
// (the agent tries again), not refused.
func TestEnrolWithoutCertificate(t *testing.T) {
	cloud, err := sim.Open(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer cloud.Close()
	h := newHarness(t, withRuntime(&testRuntime{}))
	h.addMachines(t, api.AddMachinesRequest{Count: 1})
	inst, _ := cloud.AddInstance("a", "c", h.model.UUID)
	doc, sig, _ := cloud.IdentityDocument(inst.ID)
	_, err = h.anon.Enrol(context.Background(), api.EnrolRequest{Model: "default", Machine: "0", Token: "t", Document: string(doc), Signature: sig})
	wantCode(t, err, muster.EUnavailable)
}

// An enrolment that carries the agent's first report sets the machine
// started in the same request (hardware merged over the recorded, the
// addresses taken), with its events; an invalid report refuses the
// enrolment before anything changes.
func TestEnrolAppliesTheStartedReport(t *testing.T) {
	f := newEnrolFixture(t)
	h, ctx := f.h, context.Background()
	req := f.request(t, "0", f.inst["0"], f.tok)
	for _, tc := range []struct {
		name   string
		report api.AgentUpdate
	}{
		{"life", api.AgentUpdate{Life: muster.Ptr(string(muster.LifeDead))}},
		{"status", api.AgentUpdate{Status: muster.Ptr("pending")}},
		{"address", api.AgentUpdate{Addresses: &[]string{"not-an-ip"}}},
	} {
		bad := req
		bad.Report = &tc.report
		_, err := h.anon.Enrol(ctx, bad)
		wantCode(t, err, muster.EInvalid)
	}
	before, err := h.store.Machine(ctx, h.model.UUID, "0")
	if err != nil {
		t.Fatal(err)
	}
	if before.Status == muster.StatusStarted || before.Instance == nil || before.Instance.Hardware.Arch == "" {
		t.Fatalf("fixture: machine 0 %s, instance %+v; want not started, with recorded hardware", before.Status, before.Instance)
	}
	req.Report = &api.AgentUpdate{Status: muster.Ptr("started"), StatusMessage: muster.Ptr(""),
		Hardware: &muster.Hardware{Cores: 7}, Addresses: &[]string{"10.1.2.3"}}
	res, err := h.anon.Enrol(ctx, req)
	if err != nil {
		t.Fatalf("enrol with a valid report after invalid ones: %v", err)
	}
	if !res.Reported || res.Life != string(muster.LifeAlive) || res.Session == nil {
		t.Fatalf("enrol: reported %v, life %q, session %v; want reported, alive, a session", res.Reported, res.Life, res.Session)
	}
	m, err := h.store.Machine(ctx, h.model.UUID, "0")
	if err != nil {
		t.Fatal(err)
	}
	hw := before.Instance.Hardware
	hw.Cores = 7
	if m.Status != muster.StatusStarted || m.Instance.Hardware != hw || len(m.Instance.Addresses) != 1 || m.Instance.Addresses[0] != "10.1.2.3" {
		t.Fatalf("after the report: status %s, hardware %+v, addresses %v; want started, %+v, [10.1.2.3]", m.Status, m.Instance.Hardware, m.Instance.Addresses, hw)
	}
	evs, err := h.store.Events(ctx, h.model.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, e := range evs {
		kinds[e.Kind]++
	}
	if kinds["enrol"] != 1 || kinds["login"] != 1 || kinds["started"] != 1 {
		t.Fatalf("events %v; want one enrol, login and started", kinds)
	}
	// Enrolments are agent requests: three refused, one granted.
	if got := h.srv.AgentStats().Requests; got != 4 {
		t.Fatalf("agent requests %d, want 4 enrolments", got)
	}
}

// TestEnrolmentIsTheFirstHeartbeat: the enrolment writes its machine seen
// in its own transaction, so the heartbeat monitor knows the agent is up
// without a heartbeat write of its own; the session's heartbeats are
// batched as a login's are.
func TestEnrolmentIsTheFirstHeartbeat(t *testing.T) {
	cs := &countingStore{}
	f := newEnrolFixture(t, func(c *api.Config) { cs.Store = c.Store; c.Store = cs })
	h, ctx := f.h, context.Background()
	h.srv.Start()
	res, err := h.anon.Enrol(ctx, f.request(t, "0", f.inst["0"], f.tok))
	if err != nil || res.Session == nil {
		t.Fatalf("enrol: %+v, %v; want a session", res, err)
	}
	<-h.clock.WaitForTimers(1) // the monitor waits for the session's deadline
	m, err := h.store.Machine(ctx, h.model.UUID, "0")
	if err != nil {
		t.Fatal(err)
	}
	if !m.LastSeen.Equal(start) {
		t.Fatalf("machine 0 last seen %v right after its enrolment, want %v", m.LastSeen, start)
	}
	h.clock.Advance(api.HeartbeatFlushEvery)
	<-h.clock.WaitForTimers(1)
	if b, _, _ := cs.counts(); len(b) != 0 {
		t.Fatalf("the enrolment cost heartbeat writes %v, want none", b)
	}
	agent := h.anon.WithToken(res.Session.Token)
	if hb, err := agent.Heartbeat(ctx, "default", "0"); err != nil || hb.Life != "alive" {
		t.Fatalf("heartbeat: %+v, %v", hb, err)
	}
	// The batch is counted as its write begins: wait for the write itself.
	testutil.Eventually(t, "the heartbeat written", func() bool {
		h.clock.Advance(api.HeartbeatFlushEvery / 10)
		m, err = h.store.Machine(ctx, h.model.UUID, "0")
		return err == nil && m.LastSeen.After(start)
	})
	// A batch is written with its flush's time: at most a flush interval
	// after the heartbeat.
	if beat := start.Add(api.HeartbeatFlushEvery); m.LastSeen.Before(beat) || m.LastSeen.After(beat.Add(api.HeartbeatFlushEvery)) {
		t.Fatalf("machine 0 last seen %v after a heartbeat at %v, want its batch's time, at most %v later", m.LastSeen, beat, api.HeartbeatFlushEvery)
	}
	if b, _, _ := cs.counts(); len(b) != 1 || !slices.Equal(b[0], []string{"0"}) {
		t.Fatalf("heartbeat writes %v, want one of machine 0", b)
	}
}
