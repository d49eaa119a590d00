package provisioner_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
)

func zoneNames(zs []provisioner.ZoneInfo) string {
	var parts []string
	for _, z := range zs {
		s := z.Name
		if !z.Available {
			s += "(unavailable)"
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, ",")
}

func TestScenario08_ZoneTableFollowsProvider(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	for _, z := range []string{"b", "c"} {
		if _, err := h.cloud.SetZone(z, sim.ZoneUpdate{Available: muster.Ptr(false)}); err != nil {
			t.Fatal(err)
		}
	}
	h.start()
	h.listed(1)
	h.waitFor("zone table [a]", func() bool { return zoneNames(h.p.Zones()) == "a" })
	for _, z := range []string{"b", "c"} {
		if _, err := h.cloud.SetZone(z, sim.ZoneUpdate{Available: muster.Ptr(true)}); err != nil {
			t.Fatal(err)
		}
	}
	// A pending machine refreshes the table (P2).
	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("zones=c")})
	h.waitFor("machine 0 running", h.running("0"))
	if got := zoneNames(h.p.Zones()); got != "a,b,c" {
		t.Errorf("got zones %s, want a,b,c", got)
	}
	for _, z := range []string{"b", "c"} {
		if _, err := h.cloud.SetZone(z, sim.ZoneUpdate{Available: muster.Ptr(false)}); err != nil {
			t.Fatal(err)
		}
	}
	h.clock.Advance(h.model.Settings.ResyncInterval)
	h.waitFor("zone table [a, c]", func() bool { return zoneNames(h.p.Zones()) == "a,c(unavailable)" })
	if zs := h.p.Zones(); zs[1].Machines != 1 {
		t.Errorf("got %d machines in c, want 1", zs[1].Machines)
	}
}

func TestScenario09_RetryCountExhausted(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withZones("a"), withSettings(func(s *muster.Settings) { s.RetryCount = 1 }),
		withFaults(sim.Faults{ZoneErrorRate: map[string]float64{"a": 1}}))
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("first start", func() bool { return len(h.prov.startCalls()) == 1 })
	h.waitFor("retry message", func() bool {
		return strings.Contains(h.machine("0").InstanceMessage, "retrying in 1")
	})
	if m := h.machine("0"); m.InstanceStatus != muster.InstanceAllocating {
		t.Errorf("got instance status %q during the retry delay, want allocating", m.InstanceStatus)
	}
	// The retry delay is retry-delay plus up to a fifth of it as jitter.
	h.waitTimers(2) // resync and the retry delay
	h.clock.Advance(h.model.Settings.RetryDelay * 6 / 5)
	h.waitFor("provisioning error", h.instStatus("0", muster.InstanceProvisioningError))
	failedAt := h.clock.Now()
	if got := len(h.prov.startCalls()); got != 2 {
		t.Fatalf("got %d StartInstance calls, want 2", got)
	}
	m := h.machine("0")
	if !strings.Contains(m.InstanceMessage, "injected") || m.Status != muster.StatusError {
		t.Errorf("got %q / %q, want machine error with the provider's cause", m.Status, m.InstanceMessage)
	}
	// The cause is retryable (unavailable): an automatic retry is due
	// after the backoff, not before (P16).
	if m.NextRetry.IsZero() {
		t.Fatalf("got no automatic retry time, want one")
	}
	if wait := m.NextRetry.Sub(failedAt); wait < h.model.Settings.RetryDelay || wait > h.model.Settings.AutoRetryMax {
		t.Errorf("got automatic retry %s after the error, want between retry-delay %s and auto-retry-max", wait, h.model.Settings.RetryDelay)
	}
	h.clock.Advance(m.NextRetry.Sub(h.clock.Now()) - time.Second)
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 2 {
		t.Fatalf("got %d StartInstance calls before the backoff elapsed, want 2", got)
	}
	h.cloud.SetFaults(sim.Faults{})
	h.clock.Advance(time.Second)
	h.waitFor("machine 0 running after the automatic retry", h.running("0"))
	if got := len(h.prov.startCalls()); got != 3 {
		t.Errorf("got %d StartInstance calls, want 3", got)
	}
	if m := h.machine("0"); m.AutoRetries != 1 {
		t.Errorf("got auto retries %d, want 1", m.AutoRetries)
	}
}

func TestScenario10_CapacityRetriedInAnotherZone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withZones("a", "b"), withSettings(func(s *muster.Settings) { s.RetryCount = 1 }))
	h.start()
	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("zones=b")})
	h.waitFor("machine 0 running", h.running("0"))
	if err := h.cloud.FailNext("a", 1); err != nil {
		t.Fatal(err)
	}
	h.add(1, muster.MachineTemplate{})
	h.waitFor("the failed start in a", func() bool { return len(startsFor(h.prov.startCalls(), "1")) == 1 })
	h.advanceUntil("machine 1 running", time.Second, h.running("1"))
	if m := h.machine("1"); m.InstanceMessage != "" {
		t.Errorf("got instance message %q on a running machine, want the retry message cleared (P12)", m.InstanceMessage)
	}
	calls := startsFor(h.prov.startCalls(), "1")
	if got := zonesOf(calls); !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("got start zones %v, want [a b]", got)
	}
	var retry string
	for _, e := range h.events("1") {
		if e.Kind == "retry" {
			retry = e.Message
		}
	}
	if !strings.Contains(retry, "retrying in another zone") || strings.Contains(retry, "more attempts") {
		t.Errorf("got retry event %q, want a zone retry that uses up no attempt", retry)
	}
	// The capacity memory keeps the next machine of the shape out of a (Z7).
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 2 running", h.running("2"))
	if z := h.machine("2").Instance.Zone; z != "b" {
		t.Errorf("got machine 2 in %s, want b while a is remembered full", z)
	}
}

func TestScenario11_AllZonesFail(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withZones("a", "b"), withSettings(func(s *muster.Settings) { s.RetryCount = 2 }),
		withFaults(sim.Faults{ZoneErrorRate: map[string]float64{"a": 1, "b": 1}}))
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.advanceUntil("provisioning error", time.Second, h.instStatus("0", muster.InstanceProvisioningError))
	calls := h.prov.startCalls()
	// Each round tries both zones and uses up one attempt: 2 rounds with
	// retries left, then the last attempt.
	if len(calls) != 5 {
		t.Fatalf("got %d StartInstance calls (zones %v), want 5", len(calls), zonesOf(calls))
	}
	for r := 0; r < 2; r++ {
		got := zonesOf(calls[2*r : 2*r+2])
		slices.Sort(got)
		if !slices.Equal(got, []string{"a", "b"}) {
			t.Errorf("round %d: got zones %v, want a and b", r, got)
		}
	}
	var msgs []string
	for _, e := range h.events("0") {
		if e.Kind == "retry" {
			msgs = append(msgs, e.Message)
		}
	}
	if len(msgs) != 4 || !strings.Contains(msgs[1], "(1 more attempts)") || !strings.Contains(msgs[3], "(0 more attempts)") {
		t.Errorf("got retry events %q, want zone retries then attempts used up", msgs)
	}
}

func TestScenario12_ShutdownDuringRetryDelay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withZones("a"), withFaults(sim.Faults{ZoneErrorRate: map[string]float64{"a": 1}}))
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("retry delay", func() bool { return strings.Contains(h.machine("0").InstanceMessage, "retrying") })
	h.stop()
	h.clock.Advance(time.Hour)
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 1 {
		t.Errorf("got %d StartInstance calls, want 1", got)
	}
	if m := h.machine("0"); m.InstanceStatus != muster.InstanceAllocating || m.Status == muster.StatusError {
		t.Errorf("got %q/%q, want allocating and no error", m.Status, m.InstanceStatus)
	}
}

func TestScenario13_HarvestAllKeepsKeepInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestAll }))
	h.start()
	h.add(2, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.waitFor("machine 1 running", h.running("1"))
	kept, other := h.machine("0").InstanceID(), h.machine("1").InstanceID()
	h.update(muster.MachineUpdate{ID: "0", KeepInstance: muster.Ptr(true)})
	h.makeDead("0", "1")
	h.waitFor("both removed", func() bool { return !h.exists("0") && !h.exists("1") })
	if stops := h.prov.stopCalls(); countStopped(stops) != 1 || stops[0][0] != other {
		t.Errorf("got stop calls %v, want only %s", stops, other)
	}
	// Later full passes leave the kept instance alone (H8).
	h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
	for i := 0; i < 2; i++ {
		h.resync()
	}
	h.quiesce()
	if _, ok := h.cloudInstances()[kept]; !ok {
		t.Errorf("kept instance %s was stopped", kept)
	}
	if got := countStopped(h.prov.stopCalls()); got != 1 {
		t.Errorf("got %d instances stopped, want 1", got)
	}
}

func TestScenario14_HarvestModes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		mode        muster.HarvestMode
		deadStopped bool
		unknownGone bool
	}{
		{muster.HarvestUnknown, false, true},
		{muster.HarvestDestroyed, true, false},
		{muster.HarvestNone, false, false},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode, s.HarvestMaxFraction = tt.mode, 1 }))
			unknown, err := h.cloud.AddInstance("a", controllerUUID, h.model.UUID)
			if err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
			h.add(1, muster.MachineTemplate{})
			h.start()
			h.waitFor("machine 0 running", h.running("0"))
			inst := h.machine("0").InstanceID()
			h.makeDead("0")
			h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
			h.quiesce()
			var want []string
			if tt.unknownGone {
				want = append(want, unknown.ID)
			}
			if tt.deadStopped {
				want = append(want, inst)
			}
			var got []string
			for _, s := range h.prov.stopCalls() {
				got = append(got, s...)
			}
			if !slices.Equal(got, want) {
				t.Errorf("got stopped %v, want %v", got, want)
			}
			cloud := h.cloudInstances()
			if _, ok := cloud[inst]; ok == tt.deadStopped {
				t.Errorf("dead machine's instance present=%v, want %v", ok, !tt.deadStopped)
			}
			if _, ok := cloud[unknown.ID]; ok == tt.unknownGone {
				t.Errorf("unknown instance present=%v, want %v", ok, !tt.unknownGone)
			}
		})
	}
}

func TestScenario15_DeadWhileStarting(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(ctx context.Context, _ muster.StartParams) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("start in flight", func() bool { return len(h.prov.startCalls()) == 1 })
	h.makeDead("0")
	h.quiesceLoop()
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Fatalf("got stop calls %v while the start is in flight, want none", got)
	}
	if !h.exists("0") {
		t.Fatalf("machine removed while its start is in flight")
	}
	close(release)
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	h.quiesce()
	if got := h.prov.stopCalls(); countStopped(got) != 1 {
		t.Errorf("got stop calls %v, want exactly one instance stopped", got)
	}
	if n := len(h.cloudInstances()); n != 0 {
		t.Errorf("got %d instances left, want 0", n)
	}
	for _, e := range h.events("0") {
		if e.Kind == "error" {
			t.Errorf("got error event %q for a machine that died while starting (P13)", e.Message)
		}
	}
}

func TestScenario16_DeadEventsWhileStopping(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStop = func(ctx context.Context, _ []string) error {
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	h.makeDead("0")
	h.waitFor("stop in flight", func() bool { return len(h.prov.stopCalls()) == 1 })
	for i := 0; i < 3; i++ {
		h.update(muster.MachineUpdate{ID: "0", StatusMessage: muster.Ptr(fmt.Sprint("change ", i))})
	}
	h.quiesceLoop()
	close(release)
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	h.quiesce()
	if got := h.prov.stopCalls(); len(got) != 1 {
		t.Errorf("got %d StopInstances calls, want 1", len(got))
	}
}

// TestStoppedInstanceIsStillHarvested: an instance stopped behind muster's
// back (EC2 "stopped", an exited container) still exists, so when its
// machine dies it is stopped for good rather than forgotten (no leak).
func TestStoppedInstanceIsStillHarvested(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	inst := h.machine("0").InstanceID()
	h.prov.setHooks(func(r *recProvider) { r.listState = "stopped" })
	h.resync()
	h.makeDead("0")
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	stops := h.prov.stopCalls()
	if len(stops) != 1 || len(stops[0]) != 1 || stops[0][0] != inst {
		t.Fatalf("got stop calls %v, want one for %s", stops, inst)
	}
	if _, ok := h.cloudInstances()[inst]; ok {
		t.Errorf("instance %s still in the cloud", inst)
	}
}
