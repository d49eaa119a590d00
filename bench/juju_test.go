package main

import (
	"context"
	"log/slog"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sqlstore"
)

// probe is a provider that notes every start call (the fake time it
// reached the cloud and whether it failed) and how many are in flight.
// Its first calls wait until hold of them are in flight at once.
type probe struct {
	muster.Provider
	clock *fakeclock.Clock
	hold  int

	mu          sync.Mutex
	inFlight    int
	maxInFlight int
	open        chan struct{}
	calls       map[string][]probeCall
}

type probeCall struct {
	at   time.Time
	kind muster.ProviderErrorKind // 0 for success
}

func (p *probe) StartInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	p.mu.Lock()
	p.inFlight++
	p.maxInFlight = max(p.maxInFlight, p.inFlight)
	if p.inFlight >= p.hold {
		select {
		case <-p.open:
		default:
			close(p.open)
		}
	}
	p.mu.Unlock()
	select {
	case <-p.open:
	case <-ctx.Done():
	}
	at := p.clock.Now()
	res, err := p.Provider.StartInstance(ctx, sp)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.inFlight--
	p.calls[sp.MachineID] = append(p.calls[sp.MachineID], probeCall{at, muster.ProviderErrorKindOf(err)})
	return res, err
}

// jujuRig is Juju's policy on a SQLite store and a sim that both run on a
// fake clock (the sim with no latency, so only the retry delay and the
// request bucket's refill depend on it).
type jujuRig struct {
	store  *sqlstore.Store
	cloud  *sim.Cloud
	model  muster.Model
	clock  *fakeclock.Clock
	probe  *probe
	policy *jujuPolicy
	done   chan error
}

func newJujuRig(t *testing.T, bucket sim.Bucket, retries, hold int) *jujuRig {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	r := &jujuRig{clock: fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), done: make(chan error, 1)}
	discard := slog.New(slog.DiscardHandler)
	var err error
	r.store, err = sqlstore.Open(ctx, filepath.Join(t.TempDir(), "muster.db"), sqlstore.WithLogger(discard))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.store.Close() })
	s := muster.DefaultSettings()
	s.SimAgents = false
	if r.model, err = r.store.CreateModel(ctx, muster.Model{Name: "juju", Provider: "sim", Settings: s}); err != nil {
		t.Fatal(err)
	}
	r.cloud, err = sim.Open(sim.Config{Clock: r.clock, Zones: sim.ZoneConfigs(zoneNames...), Logger: discard,
		Faults: sim.Faults{RateLimits: map[string]sim.Bucket{sim.CallStart: bucket}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.cloud.Close() })
	r.probe = &probe{Provider: r.cloud.Provider(controllerUUID, r.model.UUID), clock: r.clock, hold: hold,
		open: make(chan struct{}), calls: map[string][]probeCall{}}
	r.policy = newJujuPolicy(jujuConfig{ControllerUUID: controllerUUID, ModelUUID: r.model.UUID, Store: r.store,
		Provider: r.probe, Clock: r.clock, Retries: retries})
	go func() { r.done <- r.policy.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-r.done; err != nil {
			t.Errorf("policy: %v", err)
		}
	})
	// Its initial event (no machines yet), so that the adds are events
	// of their own.
	r.waitFor(t, "the initial event", func() bool { return r.policy.events.Load() == 1 })
	return r
}

// waitFor polls cond; the deadline is only there to fail a stuck test.
func (r *jujuRig) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		select {
		case err := <-r.done:
			r.done <- err
			t.Fatalf("policy ended waiting for %s: %v", what, err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// add adds n machines of the group and waits until the policy has seen
// them as pending in a machines-changed event.
func (r *jujuRig) add(t *testing.T, n int) {
	t.Helper()
	before := r.policy.queued.Load()
	ts := make([]muster.MachineTemplate, n)
	for i := range ts {
		ts[i] = muster.MachineTemplate{Group: groupName}
	}
	if _, err := r.store.AddMachines(context.Background(), r.model.UUID, ts); err != nil {
		t.Fatal(err)
	}
	r.waitFor(t, "the event", func() bool { return r.policy.queued.Load() == before+int64(n) })
}

// Juju's pool and retry delay, as the tests expect them.
const (
	wantWorkers    = 16
	wantRetryDelay = 10 * time.Second
)

// settle advances the fake clock a second at a time, each time every
// unfinished machine is waiting out its delay (or every worker is), until
// none is left, for at most the given seconds.
func (r *jujuRig) settle(t *testing.T, seconds int) {
	t.Helper()
	for i := 0; r.policy.unfinished.Load() > 0; i++ {
		if i == seconds {
			t.Fatalf("%d machines unfinished after %d s", r.policy.unfinished.Load(), seconds)
		}
		r.waitFor(t, "every worker idle or waiting", func() bool {
			u := r.policy.unfinished.Load()
			// >= so that a pool larger than 16 is reported below, not hung.
			return u == 0 || int64(r.clock.Timers()) >= min(u, wantWorkers)
		})
		if r.policy.unfinished.Load() > 0 {
			r.clock.Advance(time.Second)
		}
	}
}

func (r *jujuRig) machines(t *testing.T) []muster.Machine {
	t.Helper()
	ms, err := r.store.Machines(context.Background(), r.model.UUID, nil)
	if err != nil {
		t.Fatal(err)
	}
	return ms
}

// TestJujuPolicy runs Juju's policy to convergence on 30 machines added in
// three events, against a request bucket of 10 burst refilled at 1 a
// (fake) second, so most starts are throttled at first.
func TestJujuPolicy(t *testing.T) {
	r := newJujuRig(t, sim.Bucket{Burst: 10, PerSecond: 1}, 0, wantWorkers)
	r.add(t, 20) // 16 starts reach the cloud at once: 10 pass, 6 are throttled
	r.add(t, 5)
	r.add(t, 5)
	// 10 started; the other 20 were throttled and are waiting out the
	// delay, 16 of them in the workers, 4 still queued.
	r.waitFor(t, "16 workers waiting", func() bool { return r.clock.Timers() >= wantWorkers })
	if got, u := r.clock.Timers(), r.policy.unfinished.Load(); got != wantWorkers || u != 20 {
		t.Fatalf("got %d machines waiting out the retry delay, %d unfinished; want %d (the pool) and 20", got, u, wantWorkers)
	}
	r.settle(t, 100)

	for _, m := range r.machines(t) {
		if !m.HasInstance() || m.InstanceStatus != muster.InstanceRunning {
			t.Errorf("machine %s: instance %q, status %q %q; want running", m.ID, m.InstanceID(), m.InstanceStatus, m.InstanceMessage)
		}
	}
	if got := len(r.machines(t)); got != 30 {
		t.Fatalf("got %d machines, want 30", got)
	}
	// One full listing per machines-changed event: the initial one and
	// one per add.
	events, st := r.policy.events.Load(), r.cloud.Stats()
	if events != 4 {
		t.Errorf("got %d machines-changed events, want 4 (initial + 3 adds)", events)
	}
	if got := st.Calls[sim.CallList]; got != events {
		t.Errorf("the sim saw %d instance listings for %d events, want one per event", got, events)
	}
	if st.Instances != 30 {
		t.Errorf("got %d instances, want 30", st.Instances)
	}
	r.probe.mu.Lock()
	defer r.probe.mu.Unlock()
	if r.probe.maxInFlight != wantWorkers {
		t.Errorf("got at most %d starts in flight, want %d (the pool)", r.probe.maxInFlight, wantWorkers)
	}
	// Every start after a failed one comes exactly one retry delay later,
	// and a machine is started once it succeeds.
	retried := 0
	for id, calls := range r.probe.calls {
		for i, c := range calls {
			last := i == len(calls)-1
			if last != (c.kind == 0) {
				t.Errorf("machine %s: call %d of %d failed with %v", id, i+1, len(calls), c.kind)
			}
			if i > 0 {
				retried++
				if d := c.at.Sub(calls[i-1].at); d != wantRetryDelay {
					t.Errorf("machine %s: call %d came %s after a %v failure, want %s", id, i+1, d, calls[i-1].kind, wantRetryDelay)
				}
				if calls[i-1].kind != muster.ErrThrottled {
					t.Errorf("machine %s: call %d failed with %v, want throttled", id, i, calls[i-1].kind)
				}
			}
		}
	}
	if throttled := st.Throttled[sim.CallStart]; retried == 0 || int64(retried) != throttled {
		t.Errorf("got %d retried starts for %d throttled calls, want as many, and some", retried, throttled)
	}
}

// TestJujuPolicyGivesUp: with the bucket empty after its burst, a machine
// is tried 1 + retries times, each a retry delay apart, then left in
// provisioning error.
func TestJujuPolicyGivesUp(t *testing.T) {
	r := newJujuRig(t, sim.Bucket{Burst: 10, PerSecond: 0.001}, 2, 1)
	r.add(t, 12)
	r.settle(t, 50)
	var failed []string
	for _, m := range r.machines(t) {
		switch m.InstanceStatus {
		case muster.InstanceRunning:
		case muster.InstanceProvisioningError:
			failed = append(failed, m.ID)
		default:
			t.Errorf("machine %s: status %q, want running or provisioning error", m.ID, m.InstanceStatus)
		}
	}
	if len(failed) != 2 {
		t.Fatalf("got %d machines in provisioning error, want 2", len(failed))
	}
	r.probe.mu.Lock()
	defer r.probe.mu.Unlock()
	for _, id := range failed {
		calls := r.probe.calls[id]
		kinds := make([]muster.ProviderErrorKind, len(calls))
		for i, c := range calls {
			kinds[i] = c.kind
			if i > 0 && c.at.Sub(calls[i-1].at) != wantRetryDelay {
				t.Errorf("machine %s: call %d came %s after the previous", id, i+1, c.at.Sub(calls[i-1].at))
			}
		}
		if want := []muster.ProviderErrorKind{muster.ErrThrottled, muster.ErrThrottled, muster.ErrThrottled}; !slices.Equal(kinds, want) {
			t.Errorf("machine %s: got calls %v, want %v (1 + 2 retries)", id, kinds, want)
		}
	}
	if got := r.cloud.Stats().Instances; got != 10 {
		t.Errorf("got %d instances, want 10", got)
	}
}

// TestSideBySideJSON runs --policy juju on a few machines (the real sim
// settings and retry delay, so it takes over 10 s) and checks the JSON
// line: every machine converged under both policies.
func TestSideBySideJSON(t *testing.T) {
	if testing.Short() {
		t.Skip("waits out a 10 s retry delay")
	}
	m := runJSON(t, "--policy", "juju", "--machines", "30", "--adds", "2", "--json")
	want := []string{"adds", "cpu_seconds", "juju", "machines", "muster", "muster_batched", "peak_rss_mb", "ratio", "ratio_batched"}
	if got := keys(m); !slices.Equal(got, want) {
		t.Fatalf("got keys %v, want %v", got, want)
	}
	for _, name := range []string{"muster", "muster_batched", "juju"} {
		p := m[name].(map[string]any)
		if p["machines_converged"] != 30.0 || p["machines_in_error"] != 0.0 {
			t.Errorf("%s: got %v converged, %v in error, want 30 and 0", name, p["machines_converged"], p["machines_in_error"])
		}
		if p["instance_listings"].(float64) < 1 {
			t.Errorf("%s: got %v listings, want at least the first pass's", name, p["instance_listings"])
		}
		want := map[string]float64{"muster": 0, "muster_batched": 0, "juju": 2}[name] // E1; one per add
		if got := p["listings_during_adds"]; got != want {
			t.Errorf("%s: got %v listings during 2 single adds, want %v", name, got, want)
		}
	}
	j := m["juju"].(map[string]any)
	if j["instance_listings"] != j["machines_changed_events"] {
		t.Errorf("juju: got %v listings for %v events, want one per event", j["instance_listings"], j["machines_changed_events"])
	}
	if got := j["start_calls"].(float64); got < 30 {
		t.Errorf("juju: got %v start calls, want at least one per machine", got)
	}
	if got := keys(m["ratio"].(map[string]any)); !slices.Equal(got, []string{"listings", "seconds", "start_calls"}) {
		t.Errorf("got ratio keys %v", got)
	}
}
