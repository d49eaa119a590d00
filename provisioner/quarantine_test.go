package provisioner_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
	_ "modernc.org/sqlite"
)

// addUnknown adds n instances of the model that no machine of the store
// knows: tagged with machine ids the store never had.
func addUnknown(t *testing.T, h *harness, n int) []string {
	t.Helper()
	var ids []string
	for i := 0; i < n; i++ {
		inst, err := h.cloud.AddInstance("a", controllerUUID, h.model.UUID)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, inst.ID)
	}
	return ids
}

func stoppedIDs(h *harness) []string {
	var out []string
	for _, s := range h.prov.stopCalls() {
		out = append(out, s...)
	}
	return out
}

func cloudState(h *harness, id string) (state string, quarantined bool) {
	inst, ok := h.cloudInstances()[id]
	if !ok {
		return "gone", false
	}
	_, q := muster.QuarantinedSince(muster.Instance{Tags: inst.Tags})
	return inst.State, q
}

// TestScenario30_Quarantine: with harvest-quarantine an unknown instance is
// stopped and tagged, not terminated; the plan lists it; a restore starts
// it and releases it for good; an unrestored one is terminated once the
// period is over, also across a restart (R6).
func TestScenario30_Quarantine(t *testing.T) {
	t.Parallel()
	const period = 10 * time.Minute
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.HarvestMode, s.HarvestMinAge, s.HarvestQuarantine = muster.HarvestUnknown, time.Second, period
	}))
	ms := h.add(3, muster.MachineTemplate{})
	h.start()
	for _, m := range ms {
		h.waitFor("machine running", h.running(m.ID))
	}
	unknown := addUnknown(t, h, 2)
	keep, drop := unknown[0], unknown[1]
	h.resync()
	h.advanceUntil("unknown instances quarantined", time.Second, func() bool {
		s1, q1 := cloudState(h, keep)
		s2, q2 := cloudState(h, drop)
		return s1 == "stopped" && q1 && s2 == "stopped" && q2
	})
	quarantinedAt := h.clock.Now()
	if got := stoppedIDs(h); len(got) != 0 {
		t.Fatalf("got StopInstances of %v, want none: quarantine stops without terminating", got)
	}
	h.quiesce()
	plan := h.p.HarvestPlan()
	if len(plan.Quarantined) != 2 || plan.Quarantined[0].Instance != min(keep, drop) {
		t.Fatalf("plan quarantined %+v, want %s and %s", plan.Quarantined, keep, drop)
	}
	for _, q := range plan.Quarantined {
		if want := q.Since.Add(period); !q.At.Equal(want) || q.Since.After(quarantinedAt) {
			t.Errorf("plan: %s terminated at %v, want %v", q.Instance, q.At, want)
		}
	}

	// Restore one; errors for the others.
	if err := h.p.Restore(h.ctx, keep); err != nil {
		t.Fatalf("restore: %v", err)
	}
	if st, q := cloudState(h, keep); st != "running" || q {
		t.Errorf("restored instance is %s (quarantined %v), want running, untagged", st, q)
	}
	if err := h.p.Restore(h.ctx, keep); !muster.IsCode(err, muster.EConflict) {
		t.Errorf("second restore: got %v, want conflict (not quarantined)", err)
	}
	if err := h.p.Restore(h.ctx, "i-nope"); !muster.IsCode(err, muster.ENotFound) {
		t.Errorf("restore of an unknown id: got %v, want not-found", err)
	}
	rel, err := h.store.ReleasedInstances(h.ctx, h.model.UUID)
	if err != nil || !rel[keep] {
		t.Fatalf("released instances %v (%v), want %s", rel, err, keep)
	}

	// A restart in the middle of the period changes nothing.
	h.stop()
	h.clock.Advance(period / 2)
	h.start()
	h.listed(3)
	h.quiesce()
	if st, q := cloudState(h, drop); st != "stopped" || !q {
		t.Fatalf("after a restart within the period the quarantined instance is %s, want stopped", st)
	}
	h.advanceUntil("quarantine over: instance terminated", time.Minute, func() bool { st, _ := cloudState(h, drop); return st == "gone" })
	if h.clock.Now().Before(quarantinedAt.Add(period)) {
		t.Errorf("terminated at %v, before the end of its quarantine %v", h.clock.Now(), quarantinedAt.Add(period))
	}
	// The restored one is never harvested again, in any pass.
	h.resync()
	h.resync()
	if st, _ := cloudState(h, keep); st != "running" {
		t.Errorf("restored instance is %s after later passes, want running", st)
	}
	if got := stoppedIDs(h); !slices.Equal(got, []string{drop}) {
		t.Errorf("stopped %v, want only %s", got, drop)
	}
}

// TestScenario31_BreakerHoldsHarvest: 6 of 10 instances unknown at once →
// the pass harvests nothing, says why (event, plan), and a later fraction
// that allows it harvests them (R7).
func TestScenario31_BreakerHoldsHarvest(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode, s.HarvestMinAge = muster.HarvestAll, 0 }))
	ms := h.add(4, muster.MachineTemplate{})
	h.start()
	for _, m := range ms {
		h.waitFor("machine running", h.running(m.ID))
	}
	unknown := addUnknown(t, h, 6)
	h.resync()
	h.resync()
	if got := stoppedIDs(h); len(got) != 0 {
		t.Fatalf("stopped %v, want nothing: 6 of 10 is over harvest-max-fraction 0.5", got)
	}
	plan := h.p.HarvestPlan()
	if !strings.Contains(plan.Breaker, "6 of 10 live instances are unknown") {
		t.Errorf("plan breaker %q, want it to say 6 of 10", plan.Breaker)
	}
	held := 0
	for _, n := range plan.Next {
		if n.Held {
			held++
		}
	}
	if held != 6 {
		t.Errorf("plan holds %d instances, want 6: %+v", held, plan.Next)
	}
	var blocked []muster.Event
	for _, e := range h.events("") {
		if e.Kind == "harvest-blocked" {
			blocked = append(blocked, e)
		}
	}
	if len(blocked) != 1 || !strings.Contains(blocked[0].Message, "6 of 10") {
		t.Errorf("harvest-blocked events %+v, want one naming 6 of 10 (once, not per pass)", blocked)
	}
	h.setSettings(func(s *muster.Settings) { s.HarvestMaxFraction = 0.6 })
	h.waitFor("fraction 0.6 in force", func() bool { return h.p.Settings().HarvestMaxFraction == 0.6 })
	h.resync()
	h.waitFor("unknown instances harvested once the fraction allows", func() bool { return len(stoppedIDs(h)) == 6 })
	got := stoppedIDs(h)
	slices.Sort(got)
	slices.Sort(unknown)
	if !slices.Equal(got, unknown) {
		t.Errorf("stopped %v, want %v", got, unknown)
	}
	if b := h.p.HarvestPlan().Breaker; b != "" {
		t.Errorf("breaker still says %q after a pass that harvested", b)
	}
}

// TestRestoredOldDatabaseHarvestsNothing: the store is replaced by an older
// copy that lacks most machines whose instances run; with the breaker on
// nothing is terminated.
func TestRestoredOldDatabaseHarvestsNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode, s.HarvestMinAge = muster.HarvestAll, 0 }))
	ms := h.add(10, muster.MachineTemplate{})
	h.start()
	for _, m := range ms {
		h.waitFor("machine running", h.running(m.ID))
	}
	h.stop()
	// What the older database lacks: machines 4 to 9.
	db, err := sql.Open("sqlite", h.dbPath)
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	if _, err := db.Exec(`PRAGMA busy_timeout = 10000`); err != nil { // the store's own connections may still be closing
		t.Fatal(err)
	}
	if _, err := db.Exec(`DELETE FROM machines WHERE model_uuid = ? AND id >= 4`, h.model.UUID); err != nil {
		t.Fatal(err)
	}
	db.Close()
	h.start()
	h.listed(1)
	h.quiesce()
	h.resync()
	if got := stoppedIDs(h); len(got) != 0 {
		t.Fatalf("stopped %v after the restore of an older database, want nothing", got)
	}
	if n := len(h.cloudInstances()); n != 10 {
		t.Errorf("%d instances left, want all 10", n)
	}
	if b := h.p.HarvestPlan().Breaker; !strings.Contains(b, "6 of 10") {
		t.Errorf("breaker %q, want it to name 6 of 10", b)
	}
}

// startOther runs a provisioner for another model of the harness's store
// on the same sim cloud, with the same cloud key, until the test ends.
func startOther(t *testing.T, h *harness, cloudKey string) (*provisioner.Provisioner, muster.Model) {
	t.Helper()
	s := h.model.Settings
	m, err := h.store.CreateModel(h.ctx, muster.Model{Name: "second", Provider: "sim", Settings: s})
	if err != nil {
		t.Fatal(err)
	}
	p, err := provisioner.New(provisioner.Config{ControllerUUID: controllerUUID, Model: m, Store: h.store, Cloud: cloudKey,
		Provider: h.cloud.Provider(controllerUUID, m.UUID), AgentBinaries: h.binaries, Clock: h.clock})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	return p, m
}

// TestCapacityMemorySharedAndKept: a capacity failure in zone a blocks a for
// that shape for a second model on the same cloud (Z7, through the store),
// is kept across a restart, and is recorded in the decision events (R8).
func TestCapacityMemorySharedAndKept(t *testing.T) {
	t.Parallel()
	h := newHarness(t, func(c *harnessConfig) {
		c.zones = []sim.ZoneConfig{{Name: "a", Available: true, Capacity: 0},
			{Name: "b", Available: true, Capacity: sim.Unlimited}, {Name: "c", Available: true, Capacity: sim.Unlimited}}
	}, withSettings(func(s *muster.Settings) { s.RetryDelay, s.ZoneFailureTTL = time.Second, 3*time.Minute }))
	// b is made busier first, so that the next machine tries a first.
	inB := h.add(1, muster.MachineTemplate{Constraints: muster.Constraints{Cores: 2, Zones: []string{"b"}}})[0]
	h.start()
	// The second model on the same cloud key runs from before the failure,
	// so it learns of it from the store when it prepares starts, not at
	// its first pass.
	p2, m2 := startOther(t, h, "model/"+h.model.UUID)
	h.waitFor("second model's first pass", func() bool { return len(p2.Zones()) == 3 })
	h.waitFor("machine in b running", h.running(inB.ID))
	first := h.add(1, muster.MachineTemplate{Constraints: muster.Constraints{Cores: 2, Zones: []string{"a", "b"}}})[0]
	h.advanceUntil("machine running after a capacity failure in a", time.Second, h.running(first.ID))
	if zones := zonesOf(startsFor(h.prov.startCalls(), first.ID)); !slices.Equal(zones, []string{"a", "b"}) {
		t.Fatalf("starts in %v, want a then b", zones)
	}
	blocks, err := h.store.CapacityBlocks(h.ctx, "model/"+h.model.UUID, h.clock.Now())
	if err != nil || len(blocks) != 1 || blocks[0].Zone != "a" {
		t.Fatalf("stored blocks %+v (%v), want zone a", blocks, err)
	}
	// The decision events name the zone, the error and where it went.
	var decs []muster.AttemptDecision
	h.waitFor("the successful attempt recorded", func() bool {
		decs = decs[:0]
		for _, e := range h.events(first.ID) {
			if e.Kind == muster.EventDecision {
				var d muster.AttemptDecision
				if err := json.Unmarshal([]byte(e.Message), &d); err != nil {
					t.Fatal(err)
				}
				decs = append(decs, d)
			}
		}
		return len(decs) > 0 && decs[len(decs)-1].Instance != ""
	})
	if len(decs) < 2 || decs[0].Zone != "a" || decs[0].ErrorKind != "capacity" || decs[len(decs)-1].Zone != "b" || decs[len(decs)-1].Instance == "" {
		t.Fatalf("decisions %+v, want a failed for capacity, then started in b", decs)
	}
	if d := decs[len(decs)-1]; !slices.Contains(d.Failed, "a") || !slices.Contains(d.Excluded, "c") {
		t.Errorf("last decision %+v: want a failed and c excluded", d)
	}

	// A second model on the same cloud key never tries a for that shape.
	tpl := muster.MachineTemplate{Constraints: muster.Constraints{Cores: 2}}
	if _, err := h.store.AddMachines(h.ctx, m2.UUID, []muster.MachineTemplate{tpl, tpl, tpl, tpl, tpl, tpl}); err != nil {
		t.Fatal(err)
	}
	h.waitFor("second model's machines running", func() bool {
		got, err := h.store.Machines(h.ctx, m2.UUID, nil)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, m := range got {
			if m.HasInstance() {
				n++
			}
		}
		return n == len(got)
	})
	// Every attempt is a decision event: none of them tried a.
	var decided []muster.Event
	h.waitFor("six decisions recorded", func() bool {
		evs, err := h.store.Events(h.ctx, m2.UUID, muster.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		decided = decided[:0]
		for _, e := range evs {
			if e.Kind == muster.EventDecision {
				decided = append(decided, e)
			}
		}
		return len(decided) >= 6
	})
	for _, e := range decided {
		var d muster.AttemptDecision
		if err := json.Unmarshal([]byte(e.Message), &d); err != nil {
			t.Fatal(err)
		}
		if d.Zone == "a" || len(d.Blocked) != 1 || d.Blocked[0].Zone != "a" {
			t.Errorf("second model, machine %s: decision %+v, want a blocked and not tried", e.MachineID, d)
		}
	}
	if len(decided) != 6 {
		t.Errorf("second model: %d decisions, want 6 (one attempt each)", len(decided))
	}
	// The block survives a restart of the first model's provisioner.
	h.stop()
	h.start()
	h.listed(1)
	h.quiesce()
	var blockedA []provisioner.BlockedShape
	for _, z := range h.p.Zones() {
		if z.Name == "a" {
			blockedA = z.Blocked
		}
	}
	if len(blockedA) != 1 || blockedA[0].Shape != "arch=amd64 cores=2" {
		t.Errorf("zone a blocked %+v after a restart, want arch=amd64 cores=2", blockedA)
	}
}

// TestBreakerStandsWhileQuarantineEnds: a quarantine that ends between
// full passes is terminated, and does not reset a tripped breaker.
func TestBreakerStandsWhileQuarantineEnds(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.HarvestMode, s.HarvestMinAge, s.HarvestQuarantine = muster.HarvestAll, 0, 7*time.Minute
	}))
	ms := h.add(4, muster.MachineTemplate{})
	h.start()
	for _, m := range ms {
		h.waitFor("machine running", h.running(m.ID))
	}
	first := addUnknown(t, h, 1)[0]
	h.resync()
	h.waitFor("first unknown quarantined", func() bool { st, q := cloudState(h, first); return st == "stopped" && q })
	addUnknown(t, h, 6)
	h.resync()
	if b := h.p.HarvestPlan().Breaker; !strings.Contains(b, "6 of 10") {
		t.Fatalf("breaker %q, want 6 of 10", b)
	}
	h.advanceUntil("first quarantine over", time.Minute, func() bool { st, _ := cloudState(h, first); return st == "gone" })
	h.quiesce()
	if b := h.p.HarvestPlan().Breaker; !strings.Contains(b, "6 of 10") {
		t.Errorf("breaker %q after a quarantine ended between passes, want it to stand", b)
	}
}
