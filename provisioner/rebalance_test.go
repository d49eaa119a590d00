package provisioner_test

import (
	"slices"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

func (h *harness) setZone(name string, available bool) {
	h.tb.Helper()
	if _, err := h.cloud.SetZone(name, sim.ZoneUpdate{Available: muster.Ptr(available)}); err != nil {
		h.tb.Fatal(err)
	}
}

// zoneCounts counts the machines' recorded instances by zone.
func (h *harness) zoneCounts(ids []string) map[string]int {
	out := map[string]int{}
	for _, id := range ids {
		out[h.machine(id).Instance.Zone]++
	}
	return out
}

func TestScenario28_RebalanceLaunchBeforeStop(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.setZone("c", false)
	h.start()
	var ids []string
	for _, m := range h.add(6, muster.MachineTemplate{Group: "g"}) {
		ids = append(ids, m.ID)
	}
	for _, id := range ids {
		h.waitFor("machine "+id+" running", h.running(id))
	}
	h.started(ids...)
	h.quiesce()
	if got := h.zoneCounts(ids); got["a"] != 3 || got["b"] != 3 {
		t.Fatalf("converged %v, want 3/3 over a, b", got)
	}
	h.setZone("c", true)
	before := map[string]string{}
	for _, id := range ids {
		before[id] = h.machine(id).InstanceID()
	}

	plan, err := h.p.Rebalance(h.ctx, "g", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 2 || plan[0].To != "c" || plan[1].To != "c" || plan[0].From == plan[1].From {
		t.Fatalf("plan %+v, want 2 moves to c, one from a and one from b", plan)
	}
	h.quiesce()
	if got := len(h.prov.startCalls()); got != 6 {
		t.Fatalf("--plan started %d instances, want none", got-6)
	}
	if _, err := h.p.Rebalance(h.ctx, "nope", true); !muster.IsCode(err, muster.ENotFound) {
		t.Fatalf("unknown group: got %v, want not-found", err)
	}

	moves, err := h.p.Rebalance(h.ctx, "g", false)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(moves, plan) {
		t.Fatalf("moves %+v, want the plan %+v", moves, plan)
	}
	// max-in-flight 10% of 6: one at a time, each launched before its old
	// instance stops.
	for i, mv := range moves {
		id := mv.MachineID
		h.waitFor("machine "+id+" on a new instance", func() bool { return h.machine(id).InstanceID() != before[id] })
		h.quiesce()
		m := h.machine(id)
		if m.Instance.Zone != mv.To || m.Status != muster.StatusPending {
			t.Fatalf("moved machine %s: zone %s status %s, want %s pending", id, m.Instance.Zone, m.Status, mv.To)
		}
		if _, ok := h.cloudInstances()[before[id]]; !ok {
			t.Fatalf("machine %s: old instance %s stopped before the new one was started", id, before[id])
		}
		if got := len(h.prov.startCalls()); got != 7+i {
			t.Fatalf("got %d starts while move %d waits, want %d (one move at a time)", got, i+1, 7+i)
		}
		// A full pass meanwhile does not take the old instance for a
		// duplicate (C3): it is kept until the new one is started.
		h.resync()
		if _, ok := h.cloudInstances()[before[id]]; !ok {
			t.Fatalf("machine %s: old instance %s stopped by a full pass while its move waits", id, before[id])
		}
		h.started(id)
		h.waitFor("old instance of "+id+" stopped", func() bool { _, ok := h.cloudInstances()[before[id]]; return !ok })
	}
	h.quiesce()
	if got := h.zoneCounts(ids); got["a"] != 2 || got["b"] != 2 || got["c"] != 2 {
		t.Fatalf("after rebalance %v, want 2/2/2", got)
	}
	for _, id := range ids {
		h.onlyInstance(id)
	}
	if lines := h.eventLines(moves[0].MachineID); !hasLine(lines, "replaced", "rebalance") {
		t.Fatalf("events %q: want a replaced event naming rebalance", lines)
	}
	again, err := h.p.Rebalance(h.ctx, "g", true)
	if err != nil || len(again) != 0 {
		t.Fatalf("plan after rebalance: %+v %v, want no moves", again, err)
	}
}

func TestScenario29_DriftRollingUpdate(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.MaxInFlight = 50 })) // of 4: 2 at a time
	h.start()
	var ids []string
	for _, m := range h.add(4, muster.MachineTemplate{Group: "g", Constraints: muster.MustParseConstraints("cores=2")}) {
		ids = append(ids, m.ID)
	}
	for _, id := range ids {
		h.waitFor("machine "+id+" running", h.running(id))
	}
	h.started(ids...)
	h.quiesce()
	before := map[string]string{}
	c := muster.MustParseConstraints("cores=4")
	for _, id := range ids {
		before[id] = h.machine(id).InstanceID()
		h.update(muster.MachineUpdate{ID: id, Constraints: &c}) // apply records the new template
	}
	h.quiesce()
	if err := h.p.ReplaceDrifted(h.ctx, []string{"99"}); !muster.IsCode(err, muster.EInvalid) {
		t.Fatalf("unknown machine: got %v, want invalid", err)
	}
	if err := h.p.ReplaceDrifted(h.ctx, ids); err != nil {
		t.Fatal(err)
	}
	done := map[string]bool{}
	for len(done) < len(ids) {
		var waiting []string
		h.waitFor("replacements waiting to be started", func() bool {
			waiting = nil
			for _, id := range ids {
				if !done[id] && h.machine(id).InstanceID() != before[id] {
					waiting = append(waiting, id)
				}
			}
			return len(waiting) > 0
		})
		h.quiesce()
		if len(waiting) > 2 {
			t.Fatalf("%d replacements at once, want at most 2 (max-in-flight 50%% of 4)", len(waiting))
		}
		for _, id := range waiting {
			if _, ok := h.cloudInstances()[before[id]]; !ok {
				t.Fatalf("machine %s: old instance stopped before the new one was started", id)
			}
			if got := h.cloudInstances()[h.machine(id).InstanceID()].Cores; got < 4 {
				t.Fatalf("machine %s: new instance has %d cores, want at least 4", id, got)
			}
			h.started(id)
			done[id] = true
		}
		for _, id := range waiting {
			h.waitFor("old instance of "+id+" stopped", func() bool { _, ok := h.cloudInstances()[before[id]]; return !ok })
		}
	}
	h.quiesce()
	for _, id := range ids {
		h.onlyInstance(id)
	}
	if got := len(h.prov.startCalls()); got != 8 {
		t.Fatalf("got %d starts, want 8 (4 + 4 replacements)", got)
	}
}
