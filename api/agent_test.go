package api_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

func TestAgentLogin(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 3})
	pw, nonce := h.provision(t, "0", "a")
	pw1, nonce1 := h.provision(t, "1", "b")
	for _, tc := range []struct {
		name string
		req  api.LoginRequest
		code string
	}{
		{"wrong password", api.LoginRequest{Model: "default", Machine: "0", Password: pw1, Nonce: nonce}, muster.EUnauthorized},
		{"no password", api.LoginRequest{Model: "default", Machine: "0", Nonce: nonce}, muster.EUnauthorized},
		{"unknown machine", api.LoginRequest{Model: "default", Machine: "9", Password: pw, Nonce: nonce}, muster.EUnauthorized},
		{"unknown model", api.LoginRequest{Model: "nope", Machine: "0", Password: pw, Nonce: nonce}, muster.EUnauthorized},
		{"wrong nonce", api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce1}, muster.ENotProvisioned},
		{"no nonce", api.LoginRequest{Model: "default", Machine: "0", Password: pw}, muster.ENotProvisioned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := h.anon.Login(ctx, tc.req)
			wantCode(t, err, tc.code)
		})
	}
	// A machine without an instance is not provisioned, even with the
	// right password and nonce.
	pw2, nonce2 := muster.NewSecret(), "machine-0:x"
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{ID: "2", Nonce: &nonce2, PasswordHash: muster.Ptr(muster.HashSecret(pw2))}}); err != nil {
		t.Fatal(err)
	}
	_, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "2", Password: pw2, Nonce: nonce2})
	wantCode(t, err, muster.ENotProvisioned)

	res, err := h.anon.Login(ctx, api.LoginRequest{Model: h.model.UUID, Machine: "0", Password: pw, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	if res.ModelUUID != h.model.UUID || res.Heartbeat != "10s" || res.Token == "" {
		t.Errorf("got %+v", res)
	}
	agent := h.anon.WithToken(res.Token)
	am, err := agent.AgentMachine(ctx, "default", "0")
	if err != nil {
		t.Fatal(err)
	}
	if am.InstanceID != "i-0" || am.Status != "pending" {
		t.Errorf("got %+v", am)
	}
	hw := muster.Hardware{Arch: "amd64", Cores: 2, Mem: 4096, AvailabilityZone: "a"}
	am, err = agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Status: muster.Ptr("started"), Hardware: &hw, Addresses: &[]string{"10.1.0.5"}})
	if err != nil {
		t.Fatal(err)
	}
	m := h.machine(t, "0")
	if m.Status != muster.StatusStarted || m.Instance.Hardware != hw || len(m.Instance.Addresses) != 1 || m.Instance.Addresses[0] != "10.1.0.5" {
		t.Errorf("store: got %s %+v", m.Status, m.Instance)
	}
	st, err := h.admin.Status(ctx, "default")
	if err != nil {
		t.Fatal(err)
	}
	if got := st.Machines["0"]; got.Status != "started" || got.Hardware != "arch=amd64 cores=2 mem=4096M availability-zone=a" {
		t.Errorf("status: got %+v", got)
	}
	es, err := h.admin.Events(ctx, "default", api.EventQuery{Machine: "0"})
	if err != nil {
		t.Fatal(err)
	}
	if last := es[len(es)-1]; last.Actor != "agent/0" || last.Kind != "started" {
		t.Errorf("last event: got %+v, want started by agent/0", last)
	}

	for _, tc := range []struct {
		name string
		call func() error
		code string
	}{
		{"read other machine", func() error { _, err := agent.AgentMachine(ctx, "default", "1"); return err }, muster.EForbidden},
		{"write other machine", func() error {
			_, err := agent.SetAgentMachine(ctx, "default", "1", api.AgentUpdate{Status: muster.Ptr("started")})
			return err
		}, muster.EForbidden},
		{"heartbeat other machine", func() error { _, err := agent.Heartbeat(ctx, "default", "1"); return err }, muster.EForbidden},
		{"other model", func() error { _, err := agent.AgentMachine(ctx, "other", "0"); return err }, muster.EForbidden},
		{"bad status", func() error {
			_, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Status: muster.Ptr("down")})
			return err
		}, muster.EInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) { wantCode(t, tc.call(), tc.code) })
	}
	if got := h.machine(t, "1").Status; got != muster.StatusPending {
		t.Errorf("machine 1: got %s, want pending", got)
	}
	// A second login revokes the first token.
	if _, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce}); err != nil {
		t.Fatal(err)
	}
	_, err = agent.AgentMachine(ctx, "default", "0")
	wantCode(t, err, muster.EUnauthorized)
}

func TestHeartbeatDownAndUp(t *testing.T) {
	h := newHarness(t)
	h.srv.Start()
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{})
	pw, nonce := h.provision(t, "0", "a")
	res, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	agent := h.anon.WithToken(res.Token)
	if _, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Status: muster.Ptr("started")}); err != nil {
		t.Fatal(err)
	}
	status := func() muster.MachineStatus { return h.machine(t, "0").Status }

	// Heartbeats every period keep it started: after each advance, wait
	// until the monitor has re-armed its timer, then look.
	<-h.clock.WaitForTimers(1)
	for i := 0; i < 4; i++ {
		h.clock.Advance(10 * time.Second)
		if _, err := agent.Heartbeat(ctx, "default", "0"); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Advance(25 * time.Second) // 25s after the last heartbeat: fewer than 3 missed
	<-h.clock.WaitForTimers(1)
	if got := status(); got != muster.StatusStarted {
		t.Fatalf("after 2.5 missed heartbeats: got %s, want started", got)
	}
	h.clock.Advance(5 * time.Second) // 3 missed
	testutil.Eventually(t, "machine down", func() bool { return status() == muster.StatusDown })
	if msg := h.machine(t, "0").StatusMessage; msg == "" {
		t.Errorf("got empty status message for a down machine")
	}

	if _, err := agent.Heartbeat(ctx, "default", "0"); err != nil {
		t.Fatal(err)
	}
	if got := status(); got != muster.StatusStarted {
		t.Fatalf("after heartbeats resumed: got %s, want started", got)
	}
	// And it can go down again.
	<-h.clock.WaitForTimers(1)
	h.clock.Advance(30 * time.Second)
	testutil.Eventually(t, "machine down again", func() bool { return status() == muster.StatusDown })

	// The monitor appends its event just after the status change.
	want := "add-machine login started down up down"
	var got string
	testutil.Eventually(t, "events "+want, func() bool {
		es, err := h.admin.Events(ctx, "default", api.EventQuery{Machine: "0"})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, e := range es {
			kinds = append(kinds, e.Kind)
		}
		got = strings.Join(kinds, " ")
		return got == want
	})
}

// TestHeartbeatAdoptsStarted: machines already started when the monitor
// starts (a controller restart) go down if their agents never come back.
func TestHeartbeatAdoptsStarted(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	h.provision(t, "0", "a")
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{ID: "0", Status: muster.Ptr(muster.StatusStarted)}}); err != nil {
		t.Fatal(err)
	}
	h.srv.Start()
	<-h.clock.WaitForTimers(1)
	h.clock.Advance(30 * time.Second)
	testutil.Eventually(t, "machine down", func() bool { return h.machine(t, "0").Status == muster.StatusDown })
	if got := h.machine(t, "1").Status; got != muster.StatusPending {
		t.Errorf("pending machine: got %s, want pending", got)
	}
}

// TestHeartbeatAdoptsStartedOnTakeover: a machine started after the
// monitor began (its agent heartbeating to the controller that ran its
// model then) is adopted when this controller begins to monitor the model
// (MonitorModel, after a takeover): it counts as having just heartbeaten,
// and goes down once its agent has stayed silent for three periods.
func TestHeartbeatAdoptsStartedOnTakeover(t *testing.T) {
	h := newHarness(t)
	h.addMachines(t, api.AddMachinesRequest{Count: 2})
	h.provision(t, "0", "a")
	h.provision(t, "1", "b")
	h.setStarted(t, "1")
	h.srv.Start()
	h.armed(t, "for machine 1, adopted at the start")
	h.clock.Advance(20 * time.Second)
	h.setStarted(t, "0") // by an agent of another controller
	h.srv.MonitorModel(h.model.UUID)
	h.clock.Advance(10 * time.Second)
	testutil.Eventually(t, "machine 1 down", func() bool { return h.machine(t, "1").Status == muster.StatusDown })
	if got := h.machine(t, "0").Status; got != muster.StatusStarted {
		t.Fatalf("machine 0, adopted 10 s ago: got %s, want started", got)
	}
	h.armed(t, "for machine 0, adopted by MonitorModel")
	h.clock.Advance(30 * time.Second)
	testutil.Eventually(t, "machine 0 down", func() bool { return h.machine(t, "0").Status == muster.StatusDown })
}

// TestHeartbeatHeardByAnotherController: the monitor does not set a
// machine down whose agent heartbeats to another controller sharing the
// store (its flush writes the machine's last seen); it watches the
// deadline from that heartbeat, and sets the machine down once those stop
// too.
func TestHeartbeatHeardByAnotherController(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{})
	h.provision(t, "0", "a")
	h.setStarted(t, "0")
	h.srv.Start()
	h.armed(t, "for the adopted machine")
	h.clock.Advance(20 * time.Second)
	// Another controller's flush of the agent's heartbeat.
	if _, err := h.store.RecordHeartbeats(ctx, h.model.UUID, []string{"0"}, h.clock.Now()); err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(10 * time.Second) // the deadline of the adoption
	h.armed(t, "from the other controller's heartbeat")
	if got := h.machine(t, "0").Status; got != muster.StatusStarted {
		t.Fatalf("heartbeating to another controller: got %s, want started", got)
	}
	h.clock.Advance(20 * time.Second) // 30 s after that heartbeat
	testutil.Eventually(t, "machine down", func() bool { return h.machine(t, "0").Status == muster.StatusDown })
}

// TestRemovedMachineTokenRevoked: once the monitor notices that a machine
// is gone, its agent's token stops working.
func TestRemovedMachineTokenRevoked(t *testing.T) {
	h := newHarness(t)
	h.srv.Start()
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{})
	pw, nonce := h.provision(t, "0", "a")
	res, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	agent := h.anon.WithToken(res.Token)
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"0"}, Force: true}); err != nil {
		t.Fatal(err)
	}
	if err := h.store.RemoveMachines(ctx, h.model.UUID, []string{"0"}); err != nil {
		t.Fatal(err)
	}
	// Not found, or already revoked if the monitor's flush saw the
	// removal first.
	if _, err = agent.AgentMachine(ctx, "default", "0"); !muster.IsCode(err, muster.ENotFound) && !muster.IsCode(err, muster.EUnauthorized) {
		t.Fatalf("removed machine: got %v, want not-found or unauthorized", err)
	}
	<-h.clock.WaitForTimers(1)
	h.clock.Advance(30 * time.Second)
	testutil.Eventually(t, "token revoked", func() bool {
		_, err := agent.AgentMachine(ctx, "default", "0")
		return muster.IsCode(err, muster.EUnauthorized)
	})
}

// TestAgentMakesDyingMachineDead: the heartbeat tells the agent its
// machine's life; an agent may make its machine dead only once it is
// dying, and only dead.
func TestAgentMakesDyingMachineDead(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{})
	pw, nonce := h.provision(t, "0", "a")
	res, err := h.anon.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: pw, Nonce: nonce})
	if err != nil {
		t.Fatal(err)
	}
	agent := h.anon.WithToken(res.Token)
	hb, err := agent.Heartbeat(ctx, "default", "0")
	if err != nil || hb.Life != "alive" {
		t.Fatalf("heartbeat: %+v, %v; want life alive", hb, err)
	}
	_, err = agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Life: muster.Ptr("dead")})
	wantCode(t, err, muster.EConflict)
	if got := h.machine(t, "0").Life; got != muster.LifeAlive {
		t.Fatalf("refused update changed life to %s", got)
	}
	if err := h.admin.RemoveMachines(ctx, "default", api.RemoveMachinesRequest{IDs: []string{"0"}}); err != nil {
		t.Fatal(err)
	}
	if hb, err = agent.Heartbeat(ctx, "default", "0"); err != nil || hb.Life != "dying" {
		t.Fatalf("heartbeat: %+v, %v; want life dying", hb, err)
	}
	_, err = agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Life: muster.Ptr("alive")})
	wantCode(t, err, muster.EInvalid)
	m, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Life: muster.Ptr("dead")})
	if err != nil || m.Life != "dead" {
		t.Fatalf("set dead: %+v, %v", m, err)
	}
	if got := h.machine(t, "0").Life; got != muster.LifeDead {
		t.Fatalf("store life %s, want dead", got)
	}
}

// TestHeartbeatMonitorsOnlyItsModels: a controller that does not run a
// model's provisioner (Monitors false) never sets its machines down: their
// agents heartbeat to the controller that does. A monitored model beside
// it shows that the monitor did run.
func TestHeartbeatMonitorsOnlyItsModels(t *testing.T) {
	var watched string
	h := newHarness(t, withRuntime(&testRuntime{monitors: func(m string) bool { return m == watched }}))
	ctx := context.Background()
	other, err := h.store.CreateModel(ctx, muster.Model{Name: "other", Provider: "sim", Settings: muster.DefaultSettings()})
	if err != nil {
		t.Fatal(err)
	}
	watched = other.UUID
	if _, err := h.store.AddMachines(ctx, other.UUID, []muster.MachineTemplate{{}}); err != nil {
		t.Fatal(err)
	}
	h.addMachines(t, api.AddMachinesRequest{})
	h.provision(t, "0", "a")
	started := []muster.MachineUpdate{{ID: "0", Status: muster.Ptr(muster.StatusStarted)}}
	if err := h.store.UpdateMachines(ctx, h.model.UUID, started); err != nil {
		t.Fatal(err)
	}
	if err := h.store.UpdateMachines(ctx, other.UUID, started); err != nil {
		t.Fatal(err)
	}
	h.srv.Start()
	h.srv.MonitorModel(other.UUID) // as the runtime announces a model it runs
	<-h.clock.WaitForTimers(1)
	h.clock.Advance(30 * time.Second)
	testutil.Eventually(t, "the watched model's machine down", func() bool {
		mc, err := h.store.Machine(ctx, other.UUID, "0")
		return err == nil && mc.Status == muster.StatusDown
	})
	if got := h.machine(t, "0").Status; got != muster.StatusStarted {
		t.Fatalf("unwatched model's machine: got status %s, want started", got)
	}
}

// setStarted sets machine id started in the store, as an agent's report
// to another controller would.
func (h *harness) setStarted(t *testing.T, id string) {
	t.Helper()
	up := []muster.MachineUpdate{{ID: id, Status: muster.Ptr(muster.StatusStarted)}}
	if err := h.store.UpdateMachines(context.Background(), h.model.UUID, up); err != nil {
		t.Fatal(err)
	}
}

// armed waits until the heartbeat monitor has armed a deadline (a timer
// on the fake clock), what naming it.
func (h *harness) armed(t *testing.T, what string) {
	t.Helper()
	select {
	case <-h.clock.WaitForTimers(1):
	case <-time.After(30 * time.Second):
		t.Fatalf("the monitor armed no deadline %s", what)
	}
}
