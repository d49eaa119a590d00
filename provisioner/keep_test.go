package provisioner_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
)

// keepHarness is a harness with harvest-mode all (so anything taken for
// unknown or duplicate would be stopped) and a 30s registration timeout.
func keepHarness(t *testing.T) *harness {
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.HarvestMode = muster.HarvestAll
		s.HarvestMaxFraction = 1
		s.RegistrationTimeout = 30 * time.Second
	}))
	return h
}

// addKept adds machine 0 as keep-instance and returns it once running.
func (h *harness) addKept() muster.Machine {
	h.tb.Helper()
	h.add(1, muster.MachineTemplate{})
	h.update(muster.MachineUpdate{ID: "0", KeepInstance: muster.Ptr(true)})
	h.waitFor("machine 0 running", h.running("0"))
	h.quiesce()
	return h.machine("0")
}

// stoppedAny reports whether any stop call named instance id.
func (h *harness) stoppedAny(id string) bool {
	return slices.ContainsFunc(h.prov.stopCalls(), func(ids []string) bool { return slices.Contains(ids, id) })
}

// laterPasses lets harvest-min-age pass and the provisioner make two more
// full passes, then restarts it and lets it make two more.
func (h *harness) laterPasses() {
	h.tb.Helper()
	h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
	h.resync()
	h.resync()
	h.stop()
	h.start()
	h.quiesce()
	h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
	h.resync()
	h.resync()
}

func (h *harness) released() map[string]bool {
	h.tb.Helper()
	rel, err := h.store.ReleasedInstances(h.ctx, h.model.UUID)
	if err != nil {
		h.tb.Fatal(err)
	}
	return rel
}

// A keep-instance machine whose agent never starts is replaced (R1) like
// any other, but its old instance is released (H8), not stopped: it keeps
// running and is never harvested afterwards, even with harvest-mode all,
// the machine's removal and a restart; the machine ends on one new
// instance.
func TestRegistrationTimeoutReleasesKeepInstance(t *testing.T) {
	t.Parallel()
	h := keepHarness(t)
	h.start()
	first := h.addKept()
	old := first.InstanceID()
	h.clock.Advance(30 * time.Second)
	h.waitFor("machine 0 on a new instance", func() bool {
		m := h.machine("0")
		return m.HasInstance() && m.InstanceID() != old
	})
	h.waitFor("the replaced event", func() bool { return hasLine(h.eventLines("0"), "replaced", old+" kept running and released") })
	h.quiesce()
	m := h.machine("0")
	if m.Status != muster.StatusPending || m.LaunchToken == first.LaunchToken {
		t.Fatalf("replaced machine: status %s, token changed %v; want pending and a new token", m.Status, m.LaunchToken != first.LaunchToken)
	}
	if rel := h.released(); !rel[old] || rel[m.InstanceID()] {
		t.Fatalf("released %v: want %s released, not the new %s", rel, old, m.InstanceID())
	}
	h.started("0")
	h.quiesce()
	if got := h.machine("0"); got.InstanceID() != m.InstanceID() || len(h.prov.startCalls()) != 2 {
		t.Fatalf("machine 0 on %s after %d starts, want %s after 2", got.InstanceID(), len(h.prov.startCalls()), m.InstanceID())
	}
	if got, want := h.byMachine()["0"], sortedPair(old, m.InstanceID()); !slices.Equal(got, want) {
		t.Fatalf("cloud instances of machine 0: %v, want %v (the kept old one and the recorded new one)", got, want)
	}
	// Removed before any full pass re-reads the released ids: neither
	// instance is stopped, both stay released through later passes and
	// a restart.
	h.makeDead("0")
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	h.laterPasses()
	if stops := h.prov.stopCalls(); len(stops) != 0 {
		t.Fatalf("stop calls %v, want none: both instances are kept", stops)
	}
	if rel := h.released(); !rel[old] || !rel[m.InstanceID()] {
		t.Fatalf("released %v, want %s and %s", rel, old, m.InstanceID())
	}
	if got, want := h.byMachine()["0"], sortedPair(old, m.InstanceID()); !slices.Equal(got, want) {
		t.Fatalf("cloud instances tagged 0 after removal: %v, want %v still running", got, want)
	}
}

func sortedPair(a, b string) []string {
	s := []string{a, b}
	slices.Sort(s)
	return s
}

// TestCrashDuringKeepInstanceReplacement crashes the provisioner around
// the record of a keep-instance machine's replacement. Before the record
// the old instance stays the machine's and the new one is a duplicate;
// after it the old one is released by the record's own transaction. In
// neither case is the old instance ever stopped (C3 never takes it for a
// duplicate), and the machine ends with exactly one recorded instance.
func TestCrashDuringKeepInstanceReplacement(t *testing.T) {
	t.Parallel()
	for _, at := range []string{"before record (replacement)", "after record (replacement)"} {
		t.Run(at, func(t *testing.T) {
			t.Parallel()
			h := keepHarness(t)
			var (
				mu    sync.Mutex
				fired bool
			)
			crashed := make(chan struct{})
			h.store2 = &crashStore{Store: h.store, crash: func(ctx context.Context, where string) error {
				mu.Lock()
				fire := !fired && where == at
				fired = fired || fire
				mu.Unlock()
				if !fire {
					return nil
				}
				close(crashed)
				<-ctx.Done()
				return ctx.Err()
			}}
			h.start()
			old := h.addKept().InstanceID()
			h.clock.Advance(30 * time.Second)
			testutil.Eventually(t, "the crash "+at, func() bool {
				select {
				case <-crashed:
					return true
				default:
					return false
				}
			})
			h.stop()
			h.setSettings(func(s *muster.Settings) { s.RegistrationTimeout = 0 }) // no new replacement
			h.start()
			h.quiesce()
			h.laterPasses()

			if h.stoppedAny(old) {
				t.Fatalf("stop calls %v: the keep-instance machine's old instance %s was stopped", h.prov.stopCalls(), old)
			}
			m := h.machine("0")
			starts := h.prov.startCalls()
			if len(starts) != 2 {
				t.Fatalf("%d starts, want the first and the replacement's", len(starts))
			}
			byM := h.byMachine()["0"]
			rel := h.released()
			if at == "after record (replacement)" {
				if m.InstanceID() == old || !rel[old] || !slices.Equal(byM, sortedPair(old, m.InstanceID())) {
					t.Fatalf("machine 0 on %s, released %v, cloud %v: want a new instance, %s released and both running", m.InstanceID(), rel, byM, old)
				}
				return
			}
			// The new instance was never recorded: a duplicate, stopped.
			if m.InstanceID() != old || rel[old] || !slices.Equal(byM, []string{old}) {
				t.Fatalf("machine 0 on %s, released %v, cloud %v: want still on %s, nothing released, only it running", m.InstanceID(), rel, byM, old)
			}
		})
	}
}

// Rebalance (R4) never moves a keep-instance machine, now that R1/R2 may
// replace one: of two machines crowded into one zone, only the other one
// moves.
func TestRebalanceNeverMovesKeepInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withZones("a", "b"))
	h.setZone("b", false)
	h.start()
	h.add(2, muster.MachineTemplate{Group: "g"})
	h.waitFor("machine 0 running", h.running("0"))
	h.waitFor("machine 1 running", h.running("1"))
	h.update(muster.MachineUpdate{ID: "1", KeepInstance: muster.Ptr(true)})
	h.started("0", "1")
	h.quiesce()
	h.setZone("b", true)
	plan, err := h.p.Rebalance(h.ctx, "g", true)
	if err != nil {
		t.Fatal(err)
	}
	if len(plan) != 1 || plan[0].MachineID != "0" || plan[0].To != "b" {
		t.Fatalf("plan %+v, want machine 0 (not the keep-instance 1) moved to b", plan)
	}
}

// Drift (R5) replaces a keep-instance machine launch before stop like any
// other; once it is started on the new instance, the old one is released
// and left running rather than stopped.
func TestDriftReplacesKeepInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{Group: "g", Constraints: muster.MustParseConstraints("cores=2")})
	h.waitFor("machine 0 running", h.running("0"))
	h.update(muster.MachineUpdate{ID: "0", KeepInstance: muster.Ptr(true)})
	h.started("0")
	h.quiesce()
	old := h.machine("0").InstanceID()
	c := muster.MustParseConstraints("cores=4")
	h.update(muster.MachineUpdate{ID: "0", Constraints: &c})
	h.quiesce()
	if err := h.p.ReplaceDrifted(h.ctx, []string{"0"}); err != nil {
		t.Fatalf("replace drifted keep-instance machine: %v", err)
	}
	h.waitFor("machine 0 on a new instance", func() bool { return h.machine("0").InstanceID() != old })
	h.quiesce()
	h.started("0")
	h.waitFor("the replaced event", func() bool { return hasLine(h.eventLines("0"), "replaced", old+" kept running and released") })
	h.quiesce()
	m := h.machine("0")
	if got := h.cloudInstances()[m.InstanceID()].Cores; got < 4 {
		t.Fatalf("new instance has %d cores, want at least 4", got)
	}
	if h.stoppedAny(old) || !h.released()[old] {
		t.Fatalf("old instance %s: stopped %v, released %v; want running and released", old, h.stoppedAny(old), h.released()[old])
	}
	if got, want := h.byMachine()["0"], sortedPair(old, m.InstanceID()); !slices.Equal(got, want) {
		t.Fatalf("cloud instances of machine 0: %v, want %v", got, want)
	}
}
