package provisioner_test

import (
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"testing"

	"github.com/musterhq/muster"
)

var nonceRE = regexp.MustCompile(`^machine-0:[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

func TestScenario01_NoMachinesNoCalls(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.listed(1)
	h.quiesce()
	h.stop()
	if got := len(h.prov.startCalls()); got != 0 {
		t.Errorf("got %d StartInstance calls, want 0", got)
	}
	if got := len(h.prov.stopCalls()); got != 0 {
		t.Errorf("got %d StopInstances calls, want 0", got)
	}
	if got := h.prov.listCalls(); got != 1 {
		t.Errorf("got %d listings, want 1 (at start only)", got)
	}
}

func TestScenario02_StartOneThenStopIt(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	calls := h.prov.startCalls()
	if len(calls) != 1 {
		t.Fatalf("got %d StartInstance calls, want 1", len(calls))
	}
	c := calls[0]
	m := h.machine("0")
	if !nonceRE.MatchString(c.Nonce) {
		t.Errorf("got nonce %q, want machine-0:<uuid>", c.Nonce)
	}
	if m.Nonce != c.Nonce || m.LaunchToken != c.LaunchToken || c.LaunchToken == "" {
		t.Errorf("got stored nonce %q token %q, want those passed: %q %q", m.Nonce, m.LaunchToken, c.Nonce, c.LaunchToken)
	}
	if !muster.SecretMatches(c.Password, m.PasswordHash) {
		t.Errorf("stored password hash does not match the password passed at start")
	}
	if c.Arch != "amd64" || c.Base != muster.DefaultBase || len(c.AgentBinaries) != 1 {
		t.Errorf("got arch %q base %q binaries %v, want amd64, %s, one binary", c.Arch, c.Base, c.AgentBinaries, muster.DefaultBase)
	}
	wantTags := map[string]string{muster.TagController: controllerUUID, muster.TagModel: h.model.UUID, muster.TagMachine: "0", muster.TagLaunchToken: c.LaunchToken}
	for k, v := range wantTags {
		if c.Tags[k] != v {
			t.Errorf("got tag %s=%q, want %q", k, c.Tags[k], v)
		}
	}
	var ac muster.AgentConfig
	if err := json.Unmarshal(c.UserData, &ac); err != nil {
		t.Fatalf("user data: %v", err)
	}
	want := muster.AgentConfig{Controller: controllerUUID, Model: h.model.UUID, Machine: "0", Nonce: c.Nonce, Password: c.Password,
		APIAddresses: []string{"https://127.0.0.1:17070"}, CACert: "test-ca"}
	if fmt.Sprint(ac) != fmt.Sprint(want) {
		t.Errorf("got agent config %+v, want %+v", ac, want)
	}
	insts := h.cloudInstances()
	if len(insts) != 1 {
		t.Fatalf("got %d sim instances, want 1", len(insts))
	}
	inst := insts[m.InstanceID()]
	if inst.ID == "" || m.Instance.Zone != inst.Zone || m.Instance.Hardware.Cores == 0 || len(m.Instance.Addresses) == 0 {
		t.Errorf("got recorded %+v, want the sim's instance %s in zone %s with hardware and addresses", *m.Instance, inst.ID, inst.Zone)
	}
	if m.InstanceStatus != muster.InstanceRunning || m.InstanceMessage != "" {
		t.Errorf("got instance status %q %q, want running and no message", m.InstanceStatus, m.InstanceMessage)
	}

	h.makeDead("0")
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	stops := h.prov.stopCalls()
	if len(stops) != 1 || !slices.Equal(stops[0], []string{inst.ID}) {
		t.Errorf("got stop calls %v, want one for %s", stops, inst.ID)
	}
	if n := len(h.cloudInstances()); n != 0 {
		t.Errorf("got %d sim instances after the stop, want 0", n)
	}
}

func TestScenario03_RestartDoesNotStartAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.stop()
	h.start()
	h.listed(2)
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 1 {
		t.Errorf("got %d StartInstance calls after restart, want 1 in total", got)
	}
	if got := len(h.cloudInstances()); got != 1 {
		t.Errorf("got %d instances, want 1", got)
	}
}

func TestScenario04_Dying(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.update(muster.MachineUpdate{ID: "0", Life: muster.Ptr(muster.LifeDying)})
	h.quiesce()
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Errorf("got stop calls %v for a dying machine, want none until dead", got)
	}
	if m := h.machine("0"); m.Life != muster.LifeDying {
		t.Errorf("got life %s, want dying", m.Life)
	}
	h.stop()

	// A dying machine without an instance is made dead and removed with no
	// provider call.
	ms := h.add(1, muster.MachineTemplate{})
	h.update(muster.MachineUpdate{ID: ms[0].ID, Life: muster.Ptr(muster.LifeDying)})
	h.start()
	h.waitFor("machine 1 removed", func() bool { return !h.exists(ms[0].ID) })
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 1 {
		t.Errorf("got %d StartInstance calls, want only machine 0's", got)
	}
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Errorf("got stop calls %v, want none", got)
	}
	if m := h.machine("0"); m.Life != muster.LifeDying {
		t.Errorf("machine 0: got life %s, want still dying", m.Life)
	}
}

func TestScenario05_FourMachinesThreeZones(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(4, muster.MachineTemplate{})
	count := map[string]int{}
	for _, id := range []string{"0", "1", "2", "3"} {
		h.waitFor("machine "+id+" running", h.running(id))
		count[h.machine(id).Instance.Zone]++
	}
	if len(count) != 3 {
		t.Errorf("got zones %v, want all three used", count)
	}
	for z, n := range count {
		if n > 2 {
			t.Errorf("zone %s has %d machines, want at most 2", z, n)
		}
	}
}

func TestScenario06_UnknownZoneConstraint(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("zones=z9")})
	h.waitFor("provisioning error", h.instStatus("0", muster.InstanceProvisioningError))
	m := h.machine("0")
	if want := "suitable availability zone for machine 0 not found"; m.InstanceMessage != want {
		t.Errorf("got message %q, want %q", m.InstanceMessage, want)
	}
	if m.Status != muster.StatusError || !m.NextRetry.IsZero() {
		t.Errorf("got machine status %q next retry %v, want error and no automatic retry", m.Status, m.NextRetry)
	}
	if got := len(h.prov.startCalls()); got != 0 {
		t.Errorf("got %d StartInstance calls, want 0", got)
	}
}

func TestScenario07_GroupSpreads(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{Group: "web", Constraints: muster.MustParseConstraints("zones=a")})
	h.waitFor("machine 0 running", h.running("0"))
	// Unrelated machines load b and c, which a group-blind planner would
	// avoid.
	h.add(2, muster.MachineTemplate{Constraints: muster.MustParseConstraints("zones=b")})
	h.add(2, muster.MachineTemplate{Constraints: muster.MustParseConstraints("zones=c")})
	for _, id := range []string{"1", "2", "3", "4"} {
		h.waitFor("machine "+id+" running", h.running(id))
	}
	h.add(2, muster.MachineTemplate{Group: "web"})
	var got []string
	for _, id := range []string{"5", "6"} {
		h.waitFor("machine "+id+" running", h.running(id))
		got = append(got, h.machine(id).Instance.Zone)
	}
	slices.Sort(got)
	if !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("got group members in %v, want [b c]", got)
	}
}
