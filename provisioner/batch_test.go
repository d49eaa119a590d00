package provisioner_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
)

// batchProvider is recProvider with the sim's batch start (E3).
type batchProvider struct {
	*recProvider
	mu      sync.Mutex
	batches [][]muster.StartParams
}

var _ muster.BatchStarter = (*batchProvider)(nil)

func (b *batchProvider) StartInstances(ctx context.Context, ps []muster.StartParams) []muster.StartOutcome {
	b.mu.Lock()
	b.batches = append(b.batches, append([]muster.StartParams(nil), ps...))
	b.mu.Unlock()
	return b.p.StartInstances(ctx, ps)
}

func (b *batchProvider) MaxBatch() int { return b.p.MaxBatch() }

func (b *batchProvider) batchCalls() [][]muster.StartParams {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([][]muster.StartParams(nil), b.batches...)
}

func allRunning(h *harness, n int) func() bool {
	return func() bool {
		ms, err := h.store.Machines(h.ctx, h.model.UUID, nil)
		if err != nil || len(ms) != n {
			return false
		}
		for _, m := range ms {
			if !m.HasInstance() || m.InstanceStatus != muster.InstanceRunning {
				return false
			}
		}
		return true
	}
}

func zoneCounts(h *harness) map[string]int {
	ms, err := h.store.Machines(h.ctx, h.model.UUID, nil)
	if err != nil {
		h.tb.Fatal(err)
	}
	out := map[string]int{}
	for _, m := range ms {
		out[m.Instance.Zone]++
	}
	return out
}

func TestE3_BatchStarts(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	bp := &batchProvider{recProvider: h.prov}
	h.start2(bp)
	h.add(60, muster.MachineTemplate{Group: "web"})
	h.waitFor("60 machines running", allRunning(h, 60))
	calls := bp.batchCalls()
	if len(calls)+len(h.prov.startCalls()) > 12 {
		t.Errorf("got %d batch and %d single start calls for 60 machines, want at most 0.2 per machine", len(calls), len(h.prov.startCalls()))
	}
	n := 0
	for _, c := range calls {
		n += len(c)
		for _, p := range c[1:] {
			if p.Zone != c[0].Zone {
				t.Errorf("one batch call spans zones %s and %s", c[0].Zone, p.Zone)
			}
		}
	}
	if n != 60 {
		t.Errorf("got %d machines in batch calls, want 60", n)
	}
	if got := zoneCounts(h); got["a"] != 20 || got["b"] != 20 || got["c"] != 20 {
		t.Errorf("got zones %v, want 20 each (Z8)", got)
	}
	if got := len(h.cloudInstances()); got != 60 {
		t.Errorf("got %d instances, want 60", got)
	}
}

func TestE3_BatchFailuresRetriedAlone(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withFaults(sim.Faults{FailNext: map[string]int{"a": 100}}))
	bp := &batchProvider{recProvider: h.prov}
	h.start2(bp)
	h.add(9, muster.MachineTemplate{})
	h.advanceUntil("9 machines running", time.Second, allRunning(h, 9))
	got := zoneCounts(h)
	if got["a"] != 0 || got["b"]+got["c"] != 9 || got["b"]-got["c"] > 1 || got["c"]-got["b"] > 1 {
		t.Errorf("got zones %v, want none in the full zone a and b, c within one", got)
	}
	if n := len(h.prov.startCalls()); n != 3 {
		t.Errorf("got %d single starts, want the 3 machines that failed in a", n)
	}
	for _, c := range h.prov.startCalls() {
		if c.Zone == "a" {
			t.Errorf("machine %s retried in the full zone a", c.MachineID)
		}
	}
	for i := 0; i < 9; i++ {
		if m := h.machine(fmt.Sprint(i)); m.AutoRetries != 0 {
			t.Errorf("machine %d: got %d automatic retries, want 0", i, m.AutoRetries)
		}
	}
}

// TestFaultsTarget is the faults target of SPEC §7 at test scale: 20%
// injected start errors and one zone with no capacity; every machine
// converges, none in the full zone, and the spread over the usable zones
// holds (Z8).
func TestFaultsTarget(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.BatchStarts = false }),
		withFaults(sim.Faults{ErrorRate: map[string]float64{sim.CallStart: 0.2}}))
	if _, err := h.cloud.SetZone("a", sim.ZoneUpdate{Capacity: muster.Ptr(0)}); err != nil {
		t.Fatal(err)
	}
	h.start()
	h.add(30, muster.MachineTemplate{Group: "web"})
	h.advanceUntil("30 machines running", 2*time.Second, allRunning(h, 30))
	got := zoneCounts(h)
	if got["a"] != 0 {
		t.Errorf("got %d machines in the full zone a", got["a"])
	}
	if d := got["b"] - got["c"]; d > 1 || d < -1 {
		t.Errorf("got zones %v, want b and c within one (Z8)", got)
	}
	inA := 0
	for _, c := range h.prov.startCalls() {
		if c.Zone == "a" {
			inA++
		}
	}
	// Only starts already in flight when the first capacity error came
	// back may go to a (Z7).
	if inA > h.model.Settings.NumProvisionWorkers {
		t.Errorf("got %d starts in the full zone, want at most one per worker", inA)
	}
	t.Logf("%d starts, %d in the full zone", len(h.prov.startCalls()), inA)
}

// groupCountingStore counts the machines DistributionGroups is asked about.
type groupCountingStore struct {
	provisioner.Store
	mu    sync.Mutex
	asked []string
}

func (s *groupCountingStore) DistributionGroups(ctx context.Context, model string, ids []string) (map[string][]string, error) {
	s.mu.Lock()
	s.asked = append(s.asked, ids...)
	s.mu.Unlock()
	return s.Store.DistributionGroups(ctx, model, ids)
}

func (s *groupCountingStore) askedFor() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.asked...)
}

// TestE1_GroupReadOnce: the members of a spread group are read once per
// group (not once per machine, which grows with the square of the group),
// and adding to a group the provisioner knows reads no group at all,
// while the spread still counts every member (Z3, Z8).
func TestE1_GroupReadOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	cs := &groupCountingStore{Store: h.store}
	h.store2 = cs
	h.start()
	// The first full pass reads every machine with its group: machines
	// added before it ends would never need DistributionGroups. Its zone
	// table is filled after that read.
	h.waitFor("the first full pass", func() bool { return len(h.p.Zones()) > 0 })
	h.add(5, muster.MachineTemplate{Group: "web"})
	h.waitFor("5 machines running", allRunning(h, 5))
	if got := cs.askedFor(); len(got) != 1 {
		t.Fatalf("got DistributionGroups asked about %v, want one machine for the one group", got)
	}
	h.add(4, muster.MachineTemplate{Group: "web"})
	h.waitFor("9 machines running", allRunning(h, 9))
	if got := cs.askedFor(); len(got) != 1 {
		t.Errorf("got DistributionGroups asked about %v, want nothing more for a known group", got)
	}
	if got := zoneCounts(h); got["a"] != 3 || got["b"] != 3 || got["c"] != 3 {
		t.Errorf("got zones %v, want 3 each (Z8)", got)
	}
}

// TestE3_BatchesSplitAtMaxBatch: a zone's share of the pending machines
// goes in calls of at most MaxBatch, each within one zone.
func TestE3_BatchesSplitAtMaxBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withMaxBatch(4))
	bp := &batchProvider{recProvider: h.prov}
	h.start2(bp)
	h.listed(1)
	h.add(30, muster.MachineTemplate{Group: "web"})
	h.waitFor("30 machines running", allRunning(h, 30))
	n := 0
	for _, c := range bp.batchCalls() {
		n += len(c)
		if len(c) > 4 {
			t.Errorf("got a batch call of %d starts, want at most MaxBatch 4", len(c))
		}
		for _, p := range c[1:] {
			if p.Zone != c[0].Zone {
				t.Errorf("one batch call spans zones %s and %s", c[0].Zone, p.Zone)
			}
		}
	}
	if n+len(h.prov.startCalls()) != 30 {
		t.Errorf("got %d machines in batch calls and %d single starts, want 30 in all", n, len(h.prov.startCalls()))
	}
	if got := zoneCounts(h); got["a"] != 10 || got["b"] != 10 || got["c"] != 10 {
		t.Errorf("got zones %v, want 10 each (Z8)", got)
	}
}
