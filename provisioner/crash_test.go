package provisioner_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
)

// crashStore wraps the real store to crash the provisioner around the
// record of an instance.
type crashStore struct {
	provisioner.Store
	crash func(ctx context.Context, where string) error
}

func (s *crashStore) RecordInstances(ctx context.Context, model string, rs []muster.InstanceRecord) ([]error, error) {
	kind := ""
	if len(rs) > 0 && rs[0].Replaces != "" {
		kind = " (replacement)"
	}
	if err := s.crash(ctx, "before record"+kind); err != nil {
		return nil, err
	}
	errs, err := s.Store.RecordInstances(ctx, model, rs)
	if err == nil {
		if err := s.crash(ctx, "after record"+kind); err != nil {
			return nil, err
		}
	}
	return errs, err
}

// TestCrashSafety crashes the provisioner (cancels its run) at random
// points around StartInstance and the record, restarts it on the same
// store and cloud, and checks C4 once it converges: every alive machine
// has exactly one instance, the recorded one; dead machines are gone with
// their instances; no tagged instance is left without a machine.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	t.Run("no listing lag", func(t *testing.T) { testCrashSafety(t, 0) })
	// With listing lag, an instance launched just before a crash is not
	// listed at the restart: the machine is started again with a new
	// launch token, and the older instance is stopped as a duplicate once
	// a full pass sees it (C3).
	t.Run("listing lag", func(t *testing.T) { testCrashSafety(t, 30*time.Second) })
}

// TestCrashSafetyReplacements is TestCrashSafety with replacements in
// flight: no agent ever starts and registration-timeout is short, so
// machines are replaced again and again (R1) while the provisioner
// crashes around starts and records.
func TestCrashSafetyReplacements(t *testing.T) {
	t.Parallel()
	testCrashSafety(t, 0, 2*time.Second)
}

func testCrashSafety(t *testing.T, lag time.Duration, regTimeout ...time.Duration) {
	replacing := len(regTimeout) > 0
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.HarvestMode = muster.HarvestAll
		s.HarvestMaxFraction = 1 // crashes leave many unknown at once; the breaker has its own tests
		s.RetryDelay = time.Second
		if replacing {
			s.RegistrationTimeout = regTimeout[0]
			s.RetryCount = 100
			s.MaxUnhealthy = 100 // every machine is unhealthy here
			s.MaxInFlight = 50
		}
	}), withFaults(sim.Faults{ListingLag: lag}))
	rng := rand.New(rand.NewPCG(42, 7))
	var (
		mu      sync.Mutex
		armed   bool
		crashes = make(chan string, 1)
		// interrupted counts the crashes that the cancellation of a run
		// ended while they held up a start or a record.
		interrupted = map[string]int{}
	)
	crash := func(ctx context.Context, where string) error {
		if replacing && !strings.HasSuffix(where, " (replacement)") {
			return nil // this mode crashes replacements only
		}
		mu.Lock()
		fire := armed && rng.Float64() < 0.2
		if fire {
			armed = false
		}
		mu.Unlock()
		if !fire {
			return nil
		}
		crashes <- where
		<-ctx.Done()
		mu.Lock()
		interrupted[where]++
		mu.Unlock()
		return ctx.Err()
	}
	h.store2 = &crashStore{Store: h.store, crash: crash}
	// where names a start's crash point, and whether it is a replacement's
	// (its machine has an instance recorded already).
	where := func(sp muster.StartParams, at string) string {
		if m, err := h.store.Machine(context.Background(), h.model.UUID, sp.MachineID); err == nil && m.HasInstance() {
			return at + " (replacement)"
		}
		return at
	}
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(ctx context.Context, sp muster.StartParams) error { return crash(ctx, where(sp, "before start")) }
		r.afterStart = func(ctx context.Context, sp muster.StartParams, res muster.StartResult, err error) (muster.StartResult, error) {
			if err == nil {
				if cerr := crash(ctx, where(sp, "after start")); cerr != nil {
					return res, cerr
				}
			}
			return res, err
		}
	})

	var seen []string
	for round := 0; round < 20; round++ {
		mu.Lock()
		armed = true
		n := 1 + rng.IntN(6)
		mu.Unlock()
		h.clock.Advance(time.Second) // a restart takes time; replacements come due
		h.start()
		added := h.add(n, muster.MachineTemplate{})
		for _, m := range added {
			seen = append(seen, m.ID)
			// With replacements, every third machine is keep-instance: its
			// replaced instances are released, never stopped (H8).
			if replacing && len(seen)%3 == 0 {
				h.update(muster.MachineUpdate{ID: m.ID, KeepInstance: muster.Ptr(true)})
			}
		}
		// Kill a few machines too.
		for _, id := range seen {
			mu.Lock()
			kill := rng.IntN(8) == 0
			mu.Unlock()
			if !kill {
				continue
			}
			err := h.store.UpdateMachines(h.ctx, h.model.UUID, []muster.MachineUpdate{{ID: id, Life: muster.Ptr(muster.LifeDead)}})
			if err != nil && !muster.IsCode(err, muster.ENotFound) {
				t.Fatal(err)
			}
		}
		// The round ends with a crash, or with the provisioner idle
		// having done everything the round asked (no crash came up).
		// With replacements, time passes within the run (twice the
		// registration timeout), so that some come due and are in flight.
		for step := 0; ; step++ {
			h.markIdle()
			testutil.Eventually(t, "a crash or the provisioner idle", func() bool { return len(crashes) > 0 || h.idle() })
			if len(crashes) > 0 || !replacing || step == 2 {
				break
			}
			h.clock.Advance(regTimeout[0])
		}
		select {
		case where := <-crashes:
			t.Logf("round %d: crash %s", round, where)
		default:
		}
		h.stop()
	}
	mu.Lock()
	starts := interrupted["before start"] + interrupted["after start"]
	replacements := interrupted["before start (replacement)"] + interrupted["after start (replacement)"] +
		interrupted["before record (replacement)"] + interrupted["after record (replacement)"]
	t.Logf("crashes that interrupted a run: %v", interrupted)
	mu.Unlock()
	if starts+replacements == 0 || (replacing && replacements == 0) {
		t.Fatalf("no crash interrupted a start (replacement: %v) in flight (%v): the test proved nothing", replacing, interrupted)
	}
	mu.Lock()
	armed = false
	mu.Unlock()
	if replacing {
		// Convergence is judged with replacements over: the last run
		// cleans up after the crashes, and no new ones begin.
		h.setSettings(func(s *muster.Settings) { s.RegistrationTimeout = 0 })
	}
	h.start()
	var last error
	t.Cleanup(func() {
		if t.Failed() && last != nil {
			t.Logf("last C4 violation: %v", last)
		}
	})
	h.advanceUntil("convergence (C4)", 20*time.Second, func() bool {
		last = c4(h, seen)
		return last == nil
	})
	dups, kept := 0, 0
	rel := h.released()
	for _, e := range h.events("") {
		if strings.HasPrefix(e.Message, "duplicate instance") {
			dups++
		}
		// A keep-instance machine's replaced instance stays released and
		// running whatever crashed later.
		if rest, ok := strings.CutPrefix(e.Message, "instance "); ok && strings.Contains(rest, " kept running and released") {
			kept++
			id, _, _ := strings.Cut(rest, " ")
			if _, running := h.cloudInstances()[id]; !running || !rel[id] {
				t.Errorf("keep-instance machine %s: replaced instance %s running %v, released %v; want both", e.MachineID, id, running, rel[id])
			}
		}
	}
	if replacing && kept == 0 {
		t.Errorf("no keep-instance machine was replaced: the test proved nothing for them")
	}
	t.Logf("%d machines, %d starts, %d duplicates stopped, %d kept instances released", len(seen), len(h.prov.startCalls()), dups, kept)
}

// c4 checks the invariant C4 and returns what is wrong. Released
// instances (H8) belong to no machine; every one must still be running.
func c4(h *harness, ids []string) error {
	by := h.byMachine()
	rel, err := h.store.ReleasedInstances(h.ctx, h.model.UUID)
	if err != nil {
		return err
	}
	running := h.cloudInstances()
	for id := range rel {
		if _, ok := running[id]; !ok {
			return fmt.Errorf("released instance %s was stopped", id)
		}
	}
	for mid, insts := range by {
		by[mid] = slices.DeleteFunc(insts, func(id string) bool { return rel[id] })
		if len(by[mid]) == 0 {
			delete(by, mid)
		}
	}
	for _, id := range ids {
		m, err := h.store.Machine(h.ctx, h.model.UUID, id)
		if muster.IsCode(err, muster.ENotFound) {
			if len(by[id]) != 0 {
				return fmt.Errorf("removed machine %s has instances %v", id, by[id])
			}
			continue
		}
		if err != nil {
			return err
		}
		if m.Life != muster.LifeAlive {
			return fmt.Errorf("machine %s is %s, not yet removed", id, m.Life)
		}
		if !m.HasInstance() || m.InstanceStatus != muster.InstanceRunning {
			return fmt.Errorf("machine %s has no running instance (%s: %s)", id, m.InstanceStatus, m.InstanceMessage)
		}
		if len(by[id]) != 1 || by[id][0] != m.InstanceID() {
			return fmt.Errorf("machine %s records %s, the cloud has %v", id, m.InstanceID(), by[id])
		}
		// The agent on the instance can log in: its password matches the
		// stored hash and its nonce the recorded one.
		if !muster.SecretMatches(h.passwords.get(m.InstanceID()), m.PasswordHash) {
			return fmt.Errorf("machine %s: the password instance %s was started with does not match the stored hash", id, m.InstanceID())
		}
		if tok := h.cloudInstances()[m.InstanceID()].Tags[muster.TagLaunchToken]; tok != m.LaunchToken {
			return fmt.Errorf("machine %s: instance token %q, machine token %q", id, tok, m.LaunchToken)
		}
		delete(by, id)
	}
	for mid, insts := range by {
		return fmt.Errorf("instances %v tagged with machine %q that does not exist", insts, mid)
	}
	return nil
}

// TestCrashInFlightStartRepeatsLaunchToken: a crash after the cloud made an
// instance but before it was recorded, with a listing lag that hides the
// instance from the restarted provisioner. With a password key, the
// restart repeats the start with the recorded launch token (the cloud's
// idempotency token, C1) and the cloud hands back the first instance: no
// second instance is ever launched, and the agent's password still
// matches. Without a key (random passwords) a second instance is launched
// and the first is later stopped as a duplicate (C3).
func TestCrashInFlightStartRepeatsLaunchToken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		key     []byte
		wantNew int64 // instances launched in all
	}{
		{"derived passwords", []byte("controller secret"), 1},
		{"random passwords", nil, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, withPasswordKey(tc.key), withFaults(sim.Faults{ListingLag: time.Hour}),
				withSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestAll }))
			crashed := make(chan string, 1)
			var once sync.Once
			h.prov.setHooks(func(r *recProvider) {
				r.afterStart = func(ctx context.Context, _ muster.StartParams, res muster.StartResult, err error) (muster.StartResult, error) {
					if err != nil {
						return res, err
					}
					first := false
					once.Do(func() { first = true })
					if !first {
						return res, nil
					}
					crashed <- res.Instance.ID
					<-ctx.Done() // the controller dies before the record
					return res, ctx.Err()
				}
			})
			h.start()
			m := h.add(1, muster.MachineTemplate{})[0]
			var first string
			testutil.Eventually(t, "a start crashed", func() bool { return len(crashed) > 0 })
			first = <-crashed
			h.stop()
			if got := h.machine(m.ID); got.HasInstance() {
				t.Fatalf("instance recorded before the crash: %s", got.InstanceID())
			}
			h.start()
			h.waitFor("the machine recorded", h.running(m.ID))
			got := h.machine(m.ID)
			if n := h.cloud.Stats().InstancesStarted; n != tc.wantNew {
				t.Errorf("%d instances launched, want %d", n, tc.wantNew)
			}
			if tc.key != nil && got.InstanceID() != first {
				t.Errorf("recorded instance %s, want the one launched before the crash, %s", got.InstanceID(), first)
			}
			if !muster.SecretMatches(h.passwords.get(got.InstanceID()), got.PasswordHash) {
				t.Errorf("the password instance %s was started with does not match the stored hash", got.InstanceID())
			}
		})
	}
}
