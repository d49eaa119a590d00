package provisioner_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
)

// started plays the agent of machine id's current instance: it checks the
// agent could log in (the instance's password matches the machine's) and
// reports started.
func (h *harness) started(ids ...string) {
	h.tb.Helper()
	for _, id := range ids {
		m := h.machine(id)
		if !muster.SecretMatches(h.passwords.get(m.InstanceID()), m.PasswordHash) {
			h.tb.Fatalf("machine %s: the agent of instance %s could not log in: its password is not the machine's", id, m.InstanceID())
		}
		h.update(muster.MachineUpdate{ID: id, Status: muster.Ptr(muster.StatusStarted)})
	}
}

func (h *harness) setStatus(st muster.MachineStatus, ids ...string) {
	h.tb.Helper()
	for _, id := range ids {
		h.update(muster.MachineUpdate{ID: id, Status: muster.Ptr(st)})
	}
}

// eventKinds returns the kinds and messages of a machine's events, one
// "kind: message" each.
func (h *harness) eventLines(machineID string) []string {
	var out []string
	for _, e := range h.events(machineID) {
		out = append(out, e.Kind+": "+e.Message)
	}
	return out
}

func hasLine(lines []string, kind, part string) bool {
	return slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, kind+": ") && strings.Contains(l, part) })
}

// onlyInstance asserts that machine id has exactly one instance in the
// cloud and that it is the recorded one.
func (h *harness) onlyInstance(id string) string {
	h.tb.Helper()
	rec := h.machine(id).InstanceID()
	if got := h.byMachine()[id]; len(got) != 1 || got[0] != rec {
		h.tb.Fatalf("machine %s: cloud instances %v, want only the recorded %s", id, got, rec)
	}
	return rec
}

func TestScenario26_RegistrationTimeoutReplaces(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.RegistrationTimeout = 30 * time.Second }))
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	first := h.machine("0")
	h.quiesce()
	h.clock.Advance(29 * time.Second)
	h.quiesce()
	if got := h.machine("0").InstanceID(); got != first.InstanceID() || len(h.prov.startCalls()) != 1 {
		t.Fatalf("before the timeout: instance %s and %d starts, want %s and 1", got, len(h.prov.startCalls()), first.InstanceID())
	}
	h.clock.Advance(time.Second)
	h.waitFor("machine 0 on a new instance", func() bool {
		m := h.machine("0")
		return m.HasInstance() && m.InstanceID() != first.InstanceID()
	})
	h.waitFor("the first instance stopped", func() bool { _, ok := h.cloudInstances()[first.InstanceID()]; return !ok })
	h.quiesce()
	m := h.machine("0")
	if m.Status != muster.StatusPending || m.InstanceStatus != muster.InstanceRunning || m.Nonce == first.Nonce || m.LaunchToken == first.LaunchToken {
		t.Fatalf("replaced machine: status %s/%s, nonce changed %v, token changed %v; want pending/running and both changed",
			m.Status, m.InstanceStatus, m.Nonce != first.Nonce, m.LaunchToken != first.LaunchToken)
	}
	h.onlyInstance("0")
	lines := h.eventLines("0")
	if !hasLine(lines, "replace", "registration-timeout") || !hasLine(lines, "replaced", first.InstanceID()+" stopped, replaced by "+m.InstanceID()) {
		t.Fatalf("events %q: want a replace event naming registration-timeout and a replaced event", lines)
	}
	// The agent of the second instance works: nothing more happens.
	h.started("0")
	h.quiesce()
	h.clock.Advance(time.Hour)
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 2 || h.machine("0").InstanceID() != m.InstanceID() {
		t.Fatalf("got %d starts and instance %s after the agent started, want 2 and %s", got, h.machine("0").InstanceID(), m.InstanceID())
	}
}

func TestRegistrationTimeoutBoundedByRetryCount(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.RegistrationTimeout = 30 * time.Second
		s.RetryCount = 2
	}))
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.advanceUntil("3 starts", 10*time.Second, func() bool { return len(h.prov.startCalls()) >= 3 })
	h.advanceUntil("the limit event", 10*time.Second, func() bool { return hasLine(h.eventLines("0"), "replace-limit", "2 replacements") })
	h.quiesce()
	h.clock.Advance(time.Hour)
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 3 {
		t.Fatalf("got %d starts, want 3 (the first and retry-count=2 replacements)", got)
	}
	h.onlyInstance("0")
}

// A machine that comes due while its start is still being finished (the
// instance recorded, the worker not back yet) is not replaceable then; it
// is looked at again once the start is done, with nothing else changing.
func TestRegistrationTimeoutDuringStartInFlight(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.RegistrationTimeout = 30 * time.Second }))
	hold := make(chan struct{})
	release := sync.OnceFunc(func() { close(hold) })
	t.Cleanup(release)
	var first sync.Once
	h.afterRecord = func() { first.Do(func() { <-hold }) }
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.quiesceLoop()
	h.clock.Advance(30 * time.Second) // due, but its start has not ended
	h.quiesceLoop()
	if got := len(h.prov.startCalls()); got != 1 {
		t.Fatalf("got %d starts while the first is in flight, want 1", got)
	}
	release()
	h.advanceUntil("the replacement", time.Second, func() bool { return len(h.prov.startCalls()) >= 2 })
	if !hasLine(h.eventLines("0"), "replace", "registration-timeout") {
		t.Fatalf("events %q: want a registration-timeout replace event", h.eventLines("0"))
	}
}

func TestScenario27_UnhealthyReplacedOnceAndBreaker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.UnhealthyAfter = 30 * time.Second
		s.MaxUnhealthy = 40
	}))
	h.start()
	h.add(4, muster.MachineTemplate{Group: "g"})
	ids := []string{"0", "1", "2", "3"}
	for _, id := range ids {
		h.waitFor("machine "+id+" running", h.running(id))
	}
	h.started(ids...)
	h.quiesce()

	// One agent down: replaced once, after unhealthy-after.
	old := h.machine("1").InstanceID()
	h.setStatus(muster.StatusDown, "1")
	h.quiesce()
	h.clock.Advance(29 * time.Second)
	h.quiesce()
	if len(h.prov.startCalls()) != 4 {
		t.Fatalf("replaced before unhealthy-after")
	}
	h.clock.Advance(time.Second)
	h.waitFor("machine 1 on a new instance", func() bool { return h.machine("1").InstanceID() != old && h.machine("1").HasInstance() })
	h.waitFor("the old instance stopped", func() bool { _, ok := h.cloudInstances()[old]; return !ok })
	h.started("1")
	h.quiesce()
	h.clock.Advance(time.Hour)
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 5 {
		t.Fatalf("got %d starts, want 5: one replacement", got)
	}
	if !hasLine(h.eventLines("1"), "replace", "unhealthy (agent down for 30s)") {
		t.Fatalf("events %q: want a replace event with reason unhealthy", h.eventLines("1"))
	}

	// Three of four down: the breaker opens, nothing is replaced.
	before := map[string]string{}
	for _, id := range ids {
		before[id] = h.machine(id).InstanceID()
	}
	h.setStatus(muster.StatusDown, "0", "2", "3")
	h.quiesce()
	h.clock.Advance(time.Hour)
	h.quiesce()
	for _, id := range ids {
		if got := h.machine(id).InstanceID(); got != before[id] {
			t.Fatalf("machine %s replaced (%s → %s) with 3 of 4 down and max-unhealthy 40%%", id, before[id], got)
		}
	}
	want := []provisioner.RemediationPause{{Group: "g", Unhealthy: 3, Total: 4}}
	if got := h.p.Remediation(); !slices.Equal(got, want) {
		t.Fatalf("Remediation() = %v, want %v", got, want)
	}
	if got := want[0].String(); got != "remediation paused: 3 of 4 unhealthy" {
		t.Fatalf("got %q", got)
	}
	// Two come back: 1 of 4 is under the limit, the one left is replaced.
	h.setStatus(muster.StatusStarted, "0", "2")
	h.waitFor("machine 3 on a new instance", func() bool { return h.machine("3").InstanceID() != before["3"] })
	h.quiesce()
	if got := h.p.Remediation(); len(got) != 0 {
		t.Fatalf("Remediation() = %v after recovery, want none", got)
	}
	for _, id := range ids {
		h.onlyInstance(id)
	}
	evs, err := h.store.Events(h.ctx, h.model.UUID, muster.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, e := range evs {
		if strings.HasPrefix(e.Kind, "remediation-") {
			kinds = append(kinds, e.Kind+": "+e.Message)
		}
	}
	if len(kinds) != 2 || !strings.Contains(kinds[0], "group g: remediation paused: ") || !strings.HasPrefix(kinds[1], "remediation-resumed") {
		t.Fatalf("breaker events %q: want paused then resumed", kinds)
	}
}

func TestMaxInFlightBoundsReplacements(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.UnhealthyAfter = 30 * time.Second
		s.MaxUnhealthy = 100
		s.MaxInFlight = 20 // of 10: 2
	}))
	h.start()
	var ids []string
	for _, m := range h.add(10, muster.MachineTemplate{Group: "g"}) {
		ids = append(ids, m.ID)
	}
	for _, id := range ids {
		h.waitFor("machine "+id+" running", h.running(id))
	}
	h.started(ids...)
	h.quiesce()
	release := make(chan struct{})
	var inFlight, peak atomic.Int32
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(ctx context.Context, _ muster.StartParams) error {
			n := inFlight.Add(1)
			defer inFlight.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			select {
			case <-release:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	})
	h.setStatus(muster.StatusDown, ids[:5]...)
	h.quiesce()
	h.clock.Advance(30 * time.Second)
	h.waitFor("2 replacements in flight", func() bool { return inFlight.Load() == 2 })
	h.quiesceLoop()
	// Another one going down makes the loop look again, and still only
	// two may be in flight.
	h.setStatus(muster.StatusDown, ids[5])
	h.quiesceLoop()
	h.clock.Advance(30 * time.Second)
	h.quiesceLoop()
	if got := inFlight.Load(); got != 2 {
		t.Fatalf("got %d replacements in flight, want 2 (max-in-flight 20%% of 10)", got)
	}
	close(release)
	h.waitFor("10 + 6 starts", func() bool { return len(h.prov.startCalls()) == 16 })
	h.quiesce()
	if got := peak.Load(); got != 2 {
		t.Fatalf("got at most %d replacements at once, want 2", got)
	}
	for _, id := range ids {
		h.onlyInstance(id)
	}
}

// TestGroupSettingsOverride: unhealthy-after off for the model and 30s for
// group g (as a fleet file sets it): only g's down machine is replaced.
func TestGroupSettingsOverride(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		if err := s.Set(muster.GroupSettingKey("g", "unhealthy-after"), "30s"); err != nil {
			t.Fatal(err)
		}
	}))
	h.start()
	h.add(1, muster.MachineTemplate{Group: "g"})
	h.add(1, muster.MachineTemplate{})
	for _, id := range []string{"0", "1"} {
		h.waitFor("machine "+id+" running", h.running(id))
	}
	h.started("0", "1")
	before0, before1 := h.machine("0").InstanceID(), h.machine("1").InstanceID()
	h.setStatus(muster.StatusDown, "0", "1")
	h.quiesce()
	h.clock.Advance(time.Minute)
	h.waitFor("machine 0 replaced", func() bool { return h.machine("0").InstanceID() != before0 })
	h.quiesce()
	h.clock.Advance(time.Hour)
	h.quiesce()
	if got := h.machine("1").InstanceID(); got != before1 {
		t.Fatalf("ungrouped machine 1 replaced (%s → %s) with unhealthy-after off for the model", before1, got)
	}
}
