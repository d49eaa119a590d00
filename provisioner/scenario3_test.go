package provisioner_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

func TestScenario17_ResizeWorkersKeepsQueuedWork(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.NumProvisionWorkers = 4 }))
	release := make(chan struct{})
	var inFlight, peak atomic.Int32
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(ctx context.Context, _ muster.StartParams) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for {
				p := peak.Load()
				if n <= p || peak.CompareAndSwap(p, n) {
					break
				}
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	h.start()
	h.add(10, muster.MachineTemplate{})
	h.waitFor("4 starts in flight", func() bool { return inFlight.Load() == 4 })
	h.quiesceLoop()
	if got := inFlight.Load(); got != 4 {
		t.Fatalf("got %d starts in flight with 4 workers, want 4", got)
	}
	h.setSettings(func(s *muster.Settings) { s.NumProvisionWorkers = 5 })
	h.waitFor("5 starts in flight", func() bool { return inFlight.Load() == 5 })
	close(release)
	for i := 0; i < 10; i++ {
		h.waitFor(fmt.Sprintf("machine %d running", i), h.running(fmt.Sprint(i)))
	}
	if got := len(h.prov.startCalls()); got != 10 {
		t.Errorf("got %d StartInstance calls, want 10", got)
	}
	if got := peak.Load(); got != 5 {
		t.Errorf("got at most %d starts in flight, want 5", got)
	}
	if got := h.p.Settings().NumProvisionWorkers; got != 5 {
		t.Errorf("got %d workers in the settings in force, want 5", got)
	}
}

func TestScenario18_Spaces(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("spaces=beta,alpha,^gamma")})
	h.waitFor("machine 0 running", h.running("0"))
	c := h.prov.startCalls()[0]
	if len(c.SubnetsToZones) != 2 {
		t.Fatalf("got %d subnet maps, want 2 (one per space)", len(c.SubnetsToZones))
	}
	subnets, err := h.prov.Subnets(h.ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, space := range []string{"alpha", "beta"} {
		for id, zones := range c.SubnetsToZones[i] {
			var sn muster.Subnet
			for _, s := range subnets {
				if s.ID == id {
					sn = s
				}
			}
			if sn.Space != space || !slices.Equal(zones, []string{sn.Zone}) {
				t.Errorf("map %d: subnet %s → %v is in space %q zone %q, want space %s", i, id, zones, sn.Space, sn.Zone, space)
			}
		}
		if len(c.SubnetsToZones[i]) != 3 {
			t.Errorf("map %d: got %d subnets, want one per zone (3)", i, len(c.SubnetsToZones[i]))
		}
	}

	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("spaces=missing")})
	h.waitFor("provisioning error", h.instStatus("1", muster.InstanceProvisioningError))
	if got, want := h.machine("1").InstanceMessage, `space "missing" not found`; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	h.stop()
	h.start()
	h.listed(2)
	h.clock.Advance(time.Hour)
	h.quiesce()
	if got := len(startsFor(h.prov.startCalls(), "1")); got != 0 {
		t.Errorf("got %d StartInstance calls for machine 1, want 0 (permanent error, no retry on restart)", got)
	}
	if m := h.machine("1"); m.InstanceStatus != muster.InstanceProvisioningError {
		t.Errorf("got %q after restart, want provisioning error", m.InstanceStatus)
	}
}

func TestScenario19_Storage(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	sd, err := muster.ParseStorage("data=10G")
	if err != nil {
		t.Fatal(err)
	}
	h.add(1, muster.MachineTemplate{Storage: []muster.StorageDirective{sd}})
	h.waitFor("machine 0 running", h.running("0"))
	c := h.prov.startCalls()[0]
	if len(c.Volumes) != 1 || c.Volumes[0].Name != "data" || c.Volumes[0].Size != 10<<10 {
		t.Errorf("got volumes %+v, want data of 10240M", c.Volumes)
	}
	if len(c.Attachments) != 1 || c.Attachments[0].MachineID != "0" || c.Attachments[0].InstanceID != "" {
		t.Errorf("got attachments %+v, want one naming machine 0 and no instance", c.Attachments)
	}
	m := h.machine("0")
	if len(m.Instance.Volumes) != 1 || m.Instance.Volumes[0].VolumeID == "" || m.Instance.Volumes[0].Name != "data" {
		t.Errorf("got recorded volumes %+v, want data with an id", m.Instance.Volumes)
	}
}

func TestScenario20_NoAgentBinaries(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("arch=arm64")})
	h.waitFor("provisioning error", h.instStatus("0", muster.InstanceProvisioningError))
	if got := h.machine("0").InstanceMessage; !strings.HasPrefix(got, "no matching agent binaries available") {
		t.Errorf("got %q, want no matching agent binaries available", got)
	}
	if got := len(h.prov.startCalls()); got != 0 {
		t.Errorf("got %d StartInstance calls, want 0", got)
	}
}

func TestScenario21_RecordFailsStopsInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	// While the start is in flight, the machine's nonce changes (as if
	// another attempt had begun), so the guarded record is refused (P11).
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(ctx context.Context, sp muster.StartParams) error {
			return h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{ID: sp.MachineID, Nonce: muster.Ptr("machine-0:other")}})
		}
	})
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("provisioning error", h.instStatus("0", muster.InstanceProvisioningError))
	h.waitFor("one stop", func() bool { return len(h.prov.stopCalls()) == 1 })
	calls := h.prov.startCalls()
	if len(calls) != 1 {
		t.Fatalf("got %d starts, want 1", len(calls))
	}
	if n := len(h.cloudInstances()); n != 0 {
		t.Errorf("got %d instances, want 0 (the unrecorded one stopped)", n)
	}
	m := h.machine("0")
	if !strings.Contains(m.InstanceMessage, "record instance") || m.HasInstance() || m.LaunchToken != "" {
		t.Errorf("got message %q instance %v token %q, want the record error, no instance and a cleared token", m.InstanceMessage, m.Instance, m.LaunchToken)
	}
}

func TestScenario22_CrashBetweenStartAndRecord(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	crashed := make(chan struct{})
	h.prov.setHooks(func(r *recProvider) {
		r.afterStart = func(ctx context.Context, _ muster.StartParams, res muster.StartResult, err error) (muster.StartResult, error) {
			close(crashed)
			<-ctx.Done() // the controller dies before the record
			return res, ctx.Err()
		}
	})
	h.start()
	h.add(1, muster.MachineTemplate{})
	<-crashed
	h.stop()
	if m := h.machine("0"); m.HasInstance() {
		t.Fatalf("instance recorded although the run was cancelled before the record")
	}
	if n := len(h.cloudInstances()); n != 1 {
		t.Fatalf("got %d instances after the crash, want 1", n)
	}
	h.prov.setHooks(func(r *recProvider) { r.afterStart = nil })
	h.start()
	h.waitFor("machine 0 running", h.running("0"))
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 1 {
		t.Errorf("got %d StartInstance calls, want 1 (adopted, not started again)", got)
	}
	insts := h.cloudInstances()
	if len(insts) != 1 {
		t.Fatalf("got %d instances, want 1", len(insts))
	}
	m := h.machine("0")
	if _, ok := insts[m.InstanceID()]; !ok {
		t.Errorf("recorded %s, want the instance started before the crash", m.InstanceID())
	}
	var adopted bool
	for _, e := range h.events("0") {
		adopted = adopted || e.Kind == "adopt"
	}
	if !adopted {
		t.Errorf("no adopt event")
	}
}

func TestScenario23_UnknownMinAge(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode, s.HarvestMaxFraction = muster.HarvestUnknown, 1 }))
	inst, err := h.cloud.AddInstance("a", controllerUUID, h.model.UUID)
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	h.listed(1)
	h.clock.Advance(h.model.Settings.HarvestMinAge / 2)
	h.quiesce()
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Fatalf("got stops %v for an instance younger than harvest-min-age, want none", got)
	}
	h.clock.Advance(h.model.Settings.HarvestMinAge / 2)
	h.waitFor("unknown instance stopped", func() bool { _, ok := h.cloudInstances()[inst.ID]; return !ok })
	if got := h.prov.stopCalls(); len(got) != 1 || !slices.Equal(got[0], []string{inst.ID}) {
		t.Errorf("got stops %v, want one of %s", got, inst.ID)
	}
	if got := h.prov.listCalls(); got != 1 {
		t.Errorf("got %d listings, want 1: the matured instance is harvested without listing again", got)
	}
}

func TestScenario24_OtherModelsNeverTouched(t *testing.T) {
	t.Parallel()
	for _, mode := range []muster.HarvestMode{muster.HarvestNone, muster.HarvestDestroyed, muster.HarvestUnknown, muster.HarvestAll} {
		t.Run(string(mode), func(t *testing.T) {
			h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode = mode }))
			other, err := h.cloud.AddInstance("a", controllerUUID, "another-model")
			if err != nil {
				t.Fatal(err)
			}
			foreign, err := h.cloud.AddInstance("b", "another-controller", h.model.UUID)
			if err != nil {
				t.Fatal(err)
			}
			untagged, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "c"})
			if err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
			h.start()
			h.add(1, muster.MachineTemplate{})
			h.waitFor("machine 0 running", h.running("0"))
			h.makeDead("0")
			h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
			h.resync()
			all := map[string]bool{}
			for _, i := range h.cloud.AllInstances() {
				all[i.ID] = true
			}
			for _, id := range []string{other.ID, foreign.ID, untagged.ID} {
				if !all[id] {
					t.Errorf("instance %s of another controller or model, or untagged, was stopped", id)
				}
				for _, s := range h.prov.stopCalls() {
					if slices.Contains(s, id) {
						t.Errorf("StopInstances was called with %s", id)
					}
				}
			}
		})
	}
}
