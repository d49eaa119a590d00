package provisioner_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

// TestRetryDelayLeavesThePoolFree: with one worker, a start waiting out
// its retry delay (P10.7), or the short delay after a throttled call (E2),
// holds no worker: a harvest stop and another machine's start go ahead
// before the fake clock moves, and the waiting start is made again once
// the delay has passed.
func TestRetryDelayLeavesThePoolFree(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		kind    muster.ProviderErrorKind
		waiting func(m muster.Machine) bool // the start waits to be made again
	}{
		{"retry delay", muster.ErrUnavailable, func(m muster.Machine) bool { return strings.Contains(m.InstanceMessage, "retrying in") }},
		{"throttled", muster.ErrThrottled, func(muster.Machine) bool { return true }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withZones("a"), withSettings(func(s *muster.Settings) {
				s.NumProvisionWorkers = 1
				s.RetryCount = 3
				s.RetryDelay = 10 * time.Second
			}))
			h.start()
			h.add(1, muster.MachineTemplate{}) // machine 0, stopped later
			h.waitFor("machine 0 running", h.running("0"))
			inst0 := h.machine("0").InstanceID()

			h.prov.setHooks(func(r *recProvider) {
				r.beforeStart = func(_ context.Context, sp muster.StartParams) error {
					if sp.MachineID == "1" {
						return muster.NewProviderError(tc.kind, "", "cloud api says no")
					}
					return nil
				}
			})
			h.add(1, muster.MachineTemplate{}) // machine 1: fails, waits to be made again
			h.waitFor("machine 1 waiting", func() bool {
				return len(startsFor(h.prov.startCalls(), "1")) == 1 && tc.waiting(h.machine("1"))
			})
			// Idle with no job out: the waiting start holds no worker.
			h.quiesce()

			h.makeDead("0")
			h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
			if _, ok := h.cloudInstances()[inst0]; ok {
				t.Errorf("instance %s of dead machine 0 still runs while machine 1 waits", inst0)
			}
			h.add(1, muster.MachineTemplate{}) // machine 2
			h.waitFor("machine 2 running", h.running("2"))
			h.quiesce()
			if got := len(startsFor(h.prov.startCalls(), "1")); got != 1 {
				t.Fatalf("got %d StartInstance calls for machine 1 before its delay passed, want 1", got)
			}

			h.prov.setHooks(func(r *recProvider) { r.beforeStart = nil })
			h.clock.Advance(h.model.Settings.RetryDelay * 2) // more than the delay with its jitter
			h.waitFor("machine 1 running", h.running("1"))
			if got := len(startsFor(h.prov.startCalls(), "1")); got != 2 {
				t.Errorf("got %d StartInstance calls for machine 1, want 2", got)
			}
			if m := h.machine("1"); m.InstanceMessage != "" {
				t.Errorf("got instance message %q on a running machine, want none (P12)", m.InstanceMessage)
			}
		})
	}
}

// TestTaggedWithLiveMachineIsNotUnknown: an instance tagged with a machine
// that exists is that machine's, not unknown (H2), even while the machine
// has no instance recorded (its start in flight): a full pass in harvest
// mode unknown or all leaves it alone.
func TestTaggedWithLiveMachineIsNotUnknown(t *testing.T) {
	t.Parallel()
	for _, mode := range []muster.HarvestMode{muster.HarvestUnknown, muster.HarvestAll} {
		t.Run(string(mode), func(t *testing.T) {
			h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode = mode }))
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
			// An earlier launch for machine 0 (say, before a crash).
			earlier, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "a", Controller: controllerUUID, Model: h.model.UUID,
				MachineID: "0", LaunchToken: "earlier"})
			if err != nil {
				t.Fatal(err)
			}
			h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
			n := h.prov.listCalls()
			h.advanceUntil("a full pass", h.model.Settings.ResyncInterval/4, func() bool { return h.prov.listCalls() > n })
			h.quiesceLoop()
			for _, s := range h.prov.stopCalls() {
				if slices.Contains(s, earlier.ID) {
					t.Fatalf("instance %s tagged with machine 0 (starting) was stopped as unknown: stop calls %v", earlier.ID, h.prov.stopCalls())
				}
			}
			for _, e := range h.events("") {
				if strings.Contains(e.Message, "unknown instance "+earlier.ID) {
					t.Fatalf("got event %q, want instance %s not taken for unknown", e.Message, earlier.ID)
				}
			}
			close(release)
			h.waitFor("machine 0 running", h.running("0"))
		})
	}
}

// TestH7_EngineFiltersForeignTags: a provider that lists instances of other
// controllers and models too (it does not filter by tags) still gets no
// call to stop them, in harvest mode all, even when they carry this
// model's machine id: the engine's own tag check (H7) drops them.
func TestH7_EngineFiltersForeignTags(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestAll }))
	otherModel, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "a", Controller: controllerUUID, Model: "another-model", MachineID: "0", LaunchToken: "x"})
	if err != nil {
		t.Fatal(err)
	}
	otherController, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "b", Controller: "another-controller", Model: h.model.UUID, MachineID: "0", LaunchToken: "y"})
	if err != nil {
		t.Fatal(err)
	}
	otherUnowned, err := h.cloud.AddInstance("c", "another-controller", "another-model")
	if err != nil {
		t.Fatal(err)
	}
	h.prov.setHooks(func(r *recProvider) {
		r.extraList = func(ctx context.Context) ([]muster.Instance, error) {
			var out []muster.Instance
			for _, p := range []muster.Provider{
				h.cloud.Provider(controllerUUID, "another-model"),
				h.cloud.Provider("another-controller", h.model.UUID),
				h.cloud.Provider("another-controller", "another-model"),
			} {
				insts, err := p.Instances(ctx)
				if err != nil {
					return nil, err
				}
				out = append(out, insts...)
			}
			return out, nil
		}
	})
	h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	own := h.machine("0").InstanceID()
	h.resync()
	h.makeDead("0")
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	h.resync()
	for _, id := range []string{otherModel.ID, otherController.ID, otherUnowned.ID} {
		for _, s := range h.prov.stopCalls() {
			if slices.Contains(s, id) {
				t.Errorf("StopInstances was called with %s, an instance of another controller or model", id)
				break
			}
		}
	}
	if got, want := h.prov.stopCalls(), [][]string{{own}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("got stop calls %v, want %v (machine 0's own instance only)", got, want)
	}
}

// TestZ4_StartsInFlightSpread: machines whose starts are all in flight at
// once (none recorded yet) still spread evenly, because the loop counts a
// machine in its zone the moment it chooses it (Z4).
func TestZ4_StartsInFlightSpread(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.BatchStarts = false }))
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
	h.add(6, muster.MachineTemplate{})
	h.waitFor("6 starts in flight", func() bool { return len(h.prov.startCalls()) == 6 })
	perZone := map[string]int{}
	for _, z := range zonesOf(h.prov.startCalls()) {
		perZone[z]++
	}
	if want := map[string]int{"a": 2, "b": 2, "c": 2}; !maps.Equal(perZone, want) {
		t.Errorf("got starts per zone %v, want %v", perZone, want)
	}
	close(release)
	for i := 0; i < 6; i++ {
		h.waitFor(fmt.Sprintf("machine %d running", i), h.running(fmt.Sprint(i)))
	}
}

// TestP13_DeadDuringRetryDelay: a machine that dies while its start waits
// out a retry delay is removed at once, without waiting for the delay or
// trying to start it again (P13).
func TestP13_DeadDuringRetryDelay(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withZones("a"), withSettings(func(s *muster.Settings) {
		s.RetryCount = 3
		s.RetryDelay = time.Minute
	}))
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(context.Context, muster.StartParams) error {
			return muster.NewProviderError(muster.ErrUnavailable, "", "cloud api down")
		}
	})
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 waiting to retry", func() bool { return strings.Contains(h.machine("0").InstanceMessage, "retrying in") })
	h.makeDead("0")
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	if got := len(h.prov.startCalls()); got != 1 {
		t.Errorf("got %d StartInstance calls, want 1 (none after the machine died)", got)
	}
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Errorf("got stop calls %v, want none (nothing was started)", got)
	}
}
