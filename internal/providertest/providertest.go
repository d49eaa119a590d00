// Package providertest is the conformance suite every muster.Provider
// passes (SPEC §3): Run it from the provider's tests with a function that
// makes a fresh Fixture.
package providertest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// Fixture is a provider under test and the hooks the suite may use. Hooks
// left nil make the subtests that need them skip.
type Fixture struct {
	// Provider is the provider under test, for ControllerUUID and ModelUUID.
	Provider       muster.Provider
	ControllerUUID string
	ModelUUID      string
	// Base is a base the provider can start; default "ubuntu@24.04".
	Base string
	// Other returns a provider on the same cloud for another controller
	// or model, to check that instances of others are invisible (H7).
	Other func(tb testing.TB, controllerUUID, modelUUID string) muster.Provider
	// UnknownBase is a base the provider has no image for; its start must
	// fail zone-independently.
	UnknownBase string
	// Unfittable are constraints no instance of the provider satisfies;
	// a start with them must fail zone-independently.
	Unfittable *muster.Constraints
	// ExhaustZone makes the next start in zone fail for lack of capacity.
	ExhaustZone func(tb testing.TB, zone string)
	// Slow makes the provider's calls take far longer than a test, so
	// that cancelling their context is what ends them.
	Slow func(tb testing.TB)
	// Wait is how long the suite waits for a change to show in
	// Instances (listing lag); default 30s.
	Wait time.Duration
}

// Run runs the conformance suite; newFixture makes a fresh fixture for
// each subtest (and registers its own cleanup with tb).
func Run(t *testing.T, newFixture func(tb testing.TB) Fixture) {
	tests := []struct {
		name string
		fn   func(t *testing.T, f Fixture)
	}{
		{"StartListStop", testStartListStop},
		{"IdempotentStart", testIdempotentStart},
		{"StopIdempotentAndUnknown", testStopIdempotent},
		{"OthersInvisible", testOthersInvisible},
		{"ZoneIndependentErrors", testZoneIndependent},
		{"CapacityError", testCapacity},
		{"CancelledContext", testCancelled},
		{"CancelInFlight", testCancelInFlight},
		{"Zones", testZones},
		{"DeriveZonesPlacement", testDeriveZones},
		{"BatchStart", testBatch},
		{"Quarantine", testQuarantine},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFixture(t)
			if f.Base == "" {
				f.Base = "ubuntu@24.04"
			}
			if f.Wait == 0 {
				f.Wait = 30 * time.Second
			}
			tt.fn(t, f)
		})
	}
}

func randomID(tb testing.TB) string {
	tb.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		tb.Fatal(err)
	}
	return hex.EncodeToString(b)
}

func ctxFor(tb testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	tb.Cleanup(cancel)
	return ctx
}

// params returns start params for machine id of f's model.
func params(tb testing.TB, f Fixture, p muster.Provider, controller, model, machine string) muster.StartParams {
	tb.Helper()
	token := randomID(tb)
	return muster.StartParams{
		ControllerUUID: controller,
		ModelUUID:      model,
		MachineID:      machine,
		Base:           f.Base,
		Arch:           "amd64",
		Nonce:          "machine-0:" + token,
		LaunchToken:    token,
		Zone:           firstZone(tb, p),
		Tags: map[string]string{
			muster.TagController:  controller,
			muster.TagModel:       model,
			muster.TagMachine:     machine,
			muster.TagLaunchToken: token,
			"providertest":        "yes",
		},
	}
}

// firstZone returns the provider's first available zone, "" without zones.
func firstZone(tb testing.TB, p muster.Provider) string {
	tb.Helper()
	zs, err := p.Zones(ctxFor(tb))
	if err != nil {
		tb.Fatalf("Zones: %v", err)
	}
	for _, z := range zs {
		if z.Available {
			return z.Name
		}
	}
	return ""
}

// start starts an instance and stops it when the test ends.
func start(tb testing.TB, p muster.Provider, sp muster.StartParams) muster.StartResult {
	tb.Helper()
	res, err := p.StartInstance(ctxFor(tb), sp)
	if err != nil {
		tb.Fatalf("StartInstance(machine %s): %v", sp.MachineID, err)
	}
	if res.Instance.ID == "" {
		tb.Fatalf("StartInstance(machine %s) returned an empty instance id", sp.MachineID)
	}
	tb.Cleanup(func() { p.StopInstances(context.Background(), res.Instance.ID) })
	return res
}

func listed(tb testing.TB, p muster.Provider) map[string]muster.Instance {
	tb.Helper()
	insts, err := p.Instances(ctxFor(tb))
	if err != nil {
		tb.Fatalf("Instances: %v", err)
	}
	out := map[string]muster.Instance{}
	for _, in := range insts {
		if _, dup := out[in.ID]; dup {
			tb.Fatalf("Instances lists %s twice", in.ID)
		}
		out[in.ID] = in
	}
	return out
}

// eventually polls cond until it holds or f.Wait passes.
func eventually(tb testing.TB, f Fixture, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(f.Wait)
	for delay := time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(delay)
	}
}

func testStartListStop(t *testing.T, f Fixture) {
	p := f.Provider
	sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
	res := start(t, p, sp)
	if sp.Zone != "" && res.Instance.Zone != sp.Zone {
		t.Errorf("started in zone %q, want %q", res.Instance.Zone, sp.Zone)
	}
	id := res.Instance.ID
	var got muster.Instance
	eventually(t, f, "started instance listed", func() bool {
		in, ok := listed(t, p)[id]
		got = in
		return ok
	})
	want := map[string]string{
		muster.TagController:  f.ControllerUUID,
		muster.TagModel:       f.ModelUUID,
		muster.TagMachine:     "0",
		muster.TagLaunchToken: sp.LaunchToken,
		"providertest":        "yes",
	}
	for k, v := range want {
		if got.Tags[k] != v {
			t.Errorf("listed tag %s = %q, want %q", k, got.Tags[k], v)
		}
	}
	if got.MachineID != "0" {
		t.Errorf("listed MachineID = %q, want %q", got.MachineID, "0")
	}
	if got.LaunchToken != sp.LaunchToken {
		t.Errorf("listed LaunchToken = %q, want %q", got.LaunchToken, sp.LaunchToken)
	}
	if got.Created.IsZero() {
		t.Errorf("listed Created is zero")
	}
	if sp.Zone != "" && got.Zone != sp.Zone {
		t.Errorf("listed zone %q, want %q", got.Zone, sp.Zone)
	}
	if err := p.StopInstances(ctxFor(t), id); err != nil {
		t.Fatalf("StopInstances: %v", err)
	}
	eventually(t, f, "stopped instance gone from listing", func() bool {
		_, ok := listed(t, p)[id]
		return !ok
	})
}

func testIdempotentStart(t *testing.T, f Fixture) {
	p := f.Provider
	sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
	first := start(t, p, sp)
	second := start(t, p, sp)
	if second.Instance.ID != first.Instance.ID {
		t.Fatalf("second start with the same launch token gave %s, want %s", second.Instance.ID, first.Instance.ID)
	}
	eventually(t, f, "instance listed", func() bool {
		_, ok := listed(t, p)[first.Instance.ID]
		return ok
	})
	n := 0
	for _, in := range listed(t, p) {
		if in.LaunchToken == sp.LaunchToken {
			n++
		}
	}
	if n != 1 {
		t.Errorf("got %d instances with the launch token, want 1", n)
	}
}

func testStopIdempotent(t *testing.T, f Fixture) {
	p := f.Provider
	ctx := ctxFor(t)
	if err := p.StopInstances(ctx); err != nil {
		t.Errorf("StopInstances() with no ids: %v", err)
	}
	if err := p.StopInstances(ctx, "i-providertest-unknown"); err != nil {
		t.Errorf("StopInstances(unknown id): %v", err)
	}
	res := start(t, p, params(t, f, p, f.ControllerUUID, f.ModelUUID, "0"))
	for i := 0; i < 2; i++ {
		if err := p.StopInstances(ctx, res.Instance.ID, "i-providertest-unknown"); err != nil {
			t.Fatalf("StopInstances #%d: %v", i+1, err)
		}
	}
	eventually(t, f, "stopped instance gone from listing", func() bool {
		_, ok := listed(t, p)[res.Instance.ID]
		return !ok
	})
}

func testOthersInvisible(t *testing.T, f Fixture) {
	if f.Other == nil {
		t.Skip("fixture offers no Other provider")
	}
	p := f.Provider
	mine := start(t, p, params(t, f, p, f.ControllerUUID, f.ModelUUID, "0"))
	others := []struct {
		name              string
		controller, model string
	}{
		{"other model", f.ControllerUUID, randomID(t)},
		{"other controller", randomID(t), f.ModelUUID},
	}
	var foreign []string
	for _, o := range others {
		op := f.Other(t, o.controller, o.model)
		res := start(t, op, params(t, f, op, o.controller, o.model, "0"))
		foreign = append(foreign, res.Instance.ID)
		eventually(t, f, o.name+" instance listed by its own provider", func() bool {
			_, ok := listed(t, op)[res.Instance.ID]
			return ok
		})
		if _, ok := listed(t, op)[mine.Instance.ID]; ok {
			t.Errorf("%s lists our instance %s", o.name, mine.Instance.ID)
		}
	}
	eventually(t, f, "own instance listed", func() bool {
		_, ok := listed(t, p)[mine.Instance.ID]
		return ok
	})
	own := listed(t, p)
	for _, id := range foreign {
		if _, ok := own[id]; ok {
			t.Errorf("Instances lists foreign instance %s", id)
		}
	}
	if err := p.StopInstances(ctxFor(t), foreign...); err != nil {
		t.Fatalf("StopInstances(foreign ids): %v", err)
	}
	for i, o := range others {
		op := f.Other(t, o.controller, o.model)
		if _, ok := listed(t, op)[foreign[i]]; !ok {
			t.Errorf("%s instance %s was stopped by another model's provider", o.name, foreign[i])
		}
	}
}

func wantKind(t *testing.T, what string, err error, kind muster.ProviderErrorKind, zone string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: got no error, want a %s error", what, kind)
	}
	var pe *muster.ProviderError
	if !errors.As(err, &pe) {
		t.Fatalf("%s: got %v (%T), want a *muster.ProviderError", what, err, err)
	}
	if pe.Kind != kind {
		t.Errorf("%s: got kind %s, want %s (%v)", what, pe.Kind, kind, err)
	}
	if zone != "" && pe.Zone != zone {
		t.Errorf("%s: got zone %q, want %q", what, pe.Zone, zone)
	}
}

func testZoneIndependent(t *testing.T, f Fixture) {
	if f.UnknownBase == "" && f.Unfittable == nil {
		t.Skip("fixture offers neither UnknownBase nor Unfittable")
	}
	p := f.Provider
	before := len(listed(t, p))
	if f.UnknownBase != "" {
		sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
		sp.Base = f.UnknownBase
		_, err := p.StartInstance(ctxFor(t), sp)
		wantKind(t, "start with unknown base", err, muster.ErrZoneIndependent, "")
	}
	if f.Unfittable != nil {
		sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "1")
		sp.Constraints = *f.Unfittable
		_, err := p.StartInstance(ctxFor(t), sp)
		wantKind(t, "start with unfittable constraints", err, muster.ErrZoneIndependent, "")
	}
	if got := len(listed(t, p)); got != before {
		t.Errorf("got %d instances after failed starts, want %d", got, before)
	}
}

func testCapacity(t *testing.T, f Fixture) {
	if f.ExhaustZone == nil {
		t.Skip("fixture cannot exhaust a zone")
	}
	p := f.Provider
	sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
	if sp.Zone == "" {
		t.Skip("provider has no zones")
	}
	f.ExhaustZone(t, sp.Zone)
	_, err := p.StartInstance(ctxFor(t), sp)
	wantKind(t, "start in exhausted zone", err, muster.ErrCapacity, sp.Zone)
	if muster.IsZoneIndependent(err) {
		t.Errorf("capacity error counts as zone-independent")
	}
}

func testCancelled(t *testing.T, f Fixture) {
	p := f.Provider
	sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.StartInstance(ctx, sp); err == nil {
		t.Errorf("StartInstance with a cancelled context: got no error")
	}
	if _, err := p.Instances(ctx); err == nil {
		t.Errorf("Instances with a cancelled context: got no error")
	}
	if err := p.StopInstances(ctx, "i-providertest-unknown"); err == nil {
		t.Errorf("StopInstances with a cancelled context: got no error")
	}
	if _, err := p.Zones(ctx); err == nil {
		t.Errorf("Zones with a cancelled context: got no error")
	}
	for _, in := range listed(t, p) {
		if in.LaunchToken == sp.LaunchToken {
			t.Errorf("cancelled start left instance %s", in.ID)
			p.StopInstances(context.Background(), in.ID)
		}
	}
}

func testCancelInFlight(t *testing.T, f Fixture) {
	if f.Slow == nil {
		t.Skip("fixture cannot slow the provider down")
	}
	p := f.Provider
	sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
	f.Slow(t)
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"StartInstance", func(ctx context.Context) error { _, err := p.StartInstance(ctx, sp); return err }},
		{"Instances", func(ctx context.Context) error { _, err := p.Instances(ctx); return err }},
		{"StopInstances", func(ctx context.Context) error { return p.StopInstances(ctx, "i-providertest-unknown") }},
	}
	for _, c := range calls {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- c.call(ctx) }()
		time.Sleep(10 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("%s cancelled in flight: got %v, want context.Canceled", c.name, err)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("%s did not return after its context was cancelled", c.name)
		}
	}
}

func testZones(t *testing.T, f Fixture) {
	zs, err := f.Provider.Zones(ctxFor(t))
	if err != nil {
		t.Fatalf("Zones: %v", err)
	}
	seen := map[string]bool{}
	for _, z := range zs {
		if z.Name == "" {
			t.Errorf("zone with an empty name in %v", zs)
		}
		if seen[z.Name] {
			t.Errorf("zone %q listed twice", z.Name)
		}
		seen[z.Name] = true
	}
}

func testDeriveZones(t *testing.T, f Fixture) {
	p := f.Provider
	sp := params(t, f, p, f.ControllerUUID, f.ModelUUID, "0")
	got, err := p.DeriveZones(ctxFor(t), muster.StartParams{Base: f.Base})
	if err != nil {
		t.Fatalf("DeriveZones without placement: %v", err)
	}
	if len(got) != 0 {
		t.Errorf("DeriveZones without placement: got %v, want none (any zone)", got)
	}
	if sp.Zone == "" {
		t.Skip("provider has no zones")
	}
	sp.Zone = ""
	zs, _ := p.Zones(ctxFor(t))
	var last string
	for _, z := range zs {
		if z.Available {
			last = z.Name
		}
	}
	sp.Placement = "zone=" + last
	got, err = p.DeriveZones(ctxFor(t), sp)
	if err != nil {
		t.Fatalf("DeriveZones(zone=%s): %v", last, err)
	}
	if len(got) != 1 || got[0] != last {
		t.Errorf("DeriveZones(zone=%s): got %v, want [%s]", last, got, last)
	}
}

func testBatch(t *testing.T, f Fixture) {
	bs, ok := f.Provider.(muster.BatchStarter)
	if !ok {
		t.Skip("provider does not start batches")
	}
	if bs.MaxBatch() < 1 {
		t.Fatalf("MaxBatch() = %d, want at least 1", bs.MaxBatch())
	}
	p := f.Provider
	n := min(3, bs.MaxBatch())
	var ps []muster.StartParams
	for i := 0; i < n; i++ {
		ps = append(ps, params(t, f, p, f.ControllerUUID, f.ModelUUID, string(rune('0'+i))))
	}
	outs := bs.StartInstances(ctxFor(t), ps)
	if len(outs) != n {
		t.Fatalf("got %d outcomes, want %d", len(outs), n)
	}
	var ids []string
	for i, o := range outs {
		if o.Err != nil {
			t.Fatalf("outcome %d: %v", i, o.Err)
		}
		id := o.Result.Instance.ID
		t.Cleanup(func() { p.StopInstances(context.Background(), id) })
		ids = append(ids, id)
	}
	eventually(t, f, "batch instances listed", func() bool {
		l := listed(t, p)
		for _, id := range ids {
			if _, ok := l[id]; !ok {
				return false
			}
		}
		return true
	})
	l := listed(t, p)
	seen := map[string]bool{}
	for i, id := range ids {
		if seen[id] {
			t.Errorf("instance id %s returned twice in one batch", id)
		}
		seen[id] = true
		if got, want := l[id].LaunchToken, ps[i].LaunchToken; got != want {
			t.Errorf("instance %d: got launch token %q, want %q", i, got, want)
		}
		if got, want := l[id].MachineID, ps[i].MachineID; got != want {
			t.Errorf("instance %d: got machine %q, want %q", i, got, want)
		}
	}
}
