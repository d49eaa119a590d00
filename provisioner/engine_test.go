package provisioner_test

import (
	"context"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
)

// TestImports checks the house rule: the engine imports only the standard
// library (without net/http or database/sql), the root package and
// golang.org/x/time/rate.
func TestImports(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			std := !strings.Contains(strings.Split(path, "/")[0], ".")
			ok := path == "github.com/musterhq/muster" || path == "golang.org/x/time/rate" ||
				std && path != "net/http" && path != "database/sql"
			if !ok {
				t.Errorf("%s imports %s", f, path)
			}
		}
	}
}

func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	good := provisioner.Config{ControllerUUID: controllerUUID, Model: h.model, Store: h.store, Provider: h.prov}
	tests := []struct {
		name string
		edit func(*provisioner.Config)
		want string
	}{
		{"no controller", func(c *provisioner.Config) { c.ControllerUUID = "" }, "provisioner: no controller uuid"},
		{"no model", func(c *provisioner.Config) { c.Model = muster.Model{} }, "provisioner: no model uuid"},
		{"no store", func(c *provisioner.Config) { c.Store = nil }, "provisioner: no store"},
		{"no provider", func(c *provisioner.Config) { c.Provider = nil }, "provisioner: no provider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := good
			tt.edit(&c)
			_, err := provisioner.New(c)
			if err == nil || err.Error() != tt.want || !muster.IsCode(err, muster.EInvalid) {
				t.Errorf("got %v, want invalid %q", err, tt.want)
			}
		})
	}
	if _, err := provisioner.New(good); err != nil {
		t.Errorf("got %v for a good config, want nil", err)
	}
}

func TestP15_RetryProvisioning(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{Constraints: muster.MustParseConstraints("arch=arm64")})
	h.waitFor("provisioning error", h.instStatus("0", muster.InstanceProvisioningError))
	if m := h.machine("0"); !m.NextRetry.IsZero() {
		t.Errorf("got automatic retry at %v for a permanent cause, want none (P16)", m.NextRetry)
	}
	h.binaries.add("arm64")
	// What `muster retry-provisioning 0` writes through the API.
	h.update(muster.MachineUpdate{ID: "0", Status: muster.Ptr(muster.StatusPending), InstanceStatus: muster.Ptr(muster.InstanceAllocating),
		InstanceMessage: muster.Ptr("retry requested"), AutoRetries: muster.Ptr(0)})
	h.waitFor("machine 0 running", h.running("0"))
	if got := len(h.prov.startCalls()); got != 1 {
		t.Errorf("got %d StartInstance calls, want 1", got)
	}
	if m := h.machine("0"); m.Instance.Hardware.Arch != "arm64" {
		t.Errorf("got arch %q, want arm64", m.Instance.Hardware.Arch)
	}
}

func TestP18_HarvestModeChange(t *testing.T) {
	t.Parallel()
	h := newHarness(t) // harvest mode destroyed
	unknown, err := h.cloud.AddInstance("a", controllerUUID, h.model.UUID)
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
	h.start()
	h.listed(1)
	h.quiesce()
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Fatalf("got stops %v in mode destroyed, want none", got)
	}
	h.setSettings(func(s *muster.Settings) { s.HarvestMode, s.HarvestMaxFraction = muster.HarvestUnknown, 1 }) // one of one: not the breaker's test (R7)
	h.waitFor("unknown instance stopped", func() bool { _, ok := h.cloudInstances()[unknown.ID]; return !ok })
	if got := h.prov.listCalls(); got != 2 {
		t.Errorf("got %d listings, want 2 (a full pass on the change to unknown)", got)
	}
	// A change that does not add unknown does not list again.
	h.setSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestAll })
	h.setSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestNone })
	h.waitFor("mode none in force", func() bool { return h.p.Settings().HarvestMode == muster.HarvestNone })
	if got := h.prov.listCalls(); got != 2 {
		t.Errorf("got %d listings, want still 2", got)
	}
}

func TestE1_NoListingPerEvent(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.add(30, muster.MachineTemplate{})
	h.start()
	for i := 0; i < 30; i++ {
		h.waitFor("running", h.running(fmt.Sprint(i)))
	}
	lists := h.prov.listCalls()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 30 running", h.running("30"))
	h.makeDead("5")
	h.waitFor("machine 5 removed", func() bool { return !h.exists("5") })
	if got := h.prov.listCalls(); got != lists {
		t.Errorf("got %d listings, want %d: no full listing per event", got, lists)
	}
	if got := len(h.prov.startCalls()); got != 31 {
		t.Errorf("got %d StartInstance calls, want 31", got)
	}
}

func TestC3_DuplicateStopped(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	kept := h.machine("0").InstanceID()
	dup, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "b", Controller: controllerUUID, Model: h.model.UUID, MachineID: "0", LaunchToken: "older"})
	if err != nil {
		t.Fatal(err)
	}
	// The next full pass (P19) finds and stops the duplicate.
	h.advanceUntil("duplicate stopped", h.model.Settings.ResyncInterval/4, func() bool { _, ok := h.cloudInstances()[dup.ID]; return !ok })
	if _, ok := h.cloudInstances()[kept]; !ok {
		t.Errorf("the recorded instance %s was stopped", kept)
	}
	if m := h.machine("0"); m.InstanceID() != kept {
		t.Errorf("got recorded %s, want %s", m.InstanceID(), kept)
	}
}

func TestC2_AdoptKeepsLaunchTokenInstance(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	ms := h.add(1, muster.MachineTemplate{})
	token := "tok-current"
	h.update(muster.MachineUpdate{ID: ms[0].ID, LaunchToken: muster.Ptr(token), Nonce: muster.Ptr("machine-0:n"),
		InstanceStatus: muster.Ptr(muster.InstanceAllocating)})
	older, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "a", Controller: controllerUUID, Model: h.model.UUID, MachineID: "0", LaunchToken: "tok-old"})
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(time.Second)
	current, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "b", Controller: controllerUUID, Model: h.model.UUID, MachineID: "0", LaunchToken: token})
	if err != nil {
		t.Fatal(err)
	}
	h.start()
	h.waitFor("machine 0 running", h.running("0"))
	h.waitFor("older stopped", func() bool { _, ok := h.cloudInstances()[older.ID]; return !ok })
	if m := h.machine("0"); m.InstanceID() != current.ID || m.Instance.Zone != "b" {
		t.Errorf("got adopted %s in %s, want %s in b", m.InstanceID(), m.Instance.Zone, current.ID)
	}
	if got := len(h.prov.startCalls()); got != 0 {
		t.Errorf("got %d starts, want 0", got)
	}
}

// obs counts observer calls.
type obs struct {
	mu        sync.Mutex
	calls     map[string]int // kind/outcome
	throttles []float64
	ok, fail  int
}

func (o *obs) ProviderCall(kind, outcome string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.calls == nil {
		o.calls = map[string]int{}
	}
	o.calls[kind+"/"+outcome]++
}

func (o *obs) Provisioned(ok bool, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if ok {
		o.ok++
	} else {
		o.fail++
	}
}
func (o *obs) Queue(int, int)                          {}
func (o *obs) Machines(map[provisioner.MachineKey]int) {}
func (o *obs) Harvested(string, int)                   {}
func (o *obs) Throttled(_ string, rate float64) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.throttles = append(o.throttles, rate)
}

func TestE2_ThrottledStartsAreRetriedAndSlowDown(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) {
		s.RetryCount = 0 // a throttled start must not use up an attempt
		s.RateLimitRate = 50
		s.RateLimitBurst = 10
	}), withFaults(sim.Faults{RateLimits: map[string]sim.Bucket{sim.CallStart: {Burst: 2, PerSecond: 1}}}))
	o := &obs{}
	h.observer = o
	h.start()
	h.add(6, muster.MachineTemplate{})
	h.advanceUntil("all running", 50*time.Millisecond, func() bool {
		for i := 0; i < 6; i++ {
			if !h.running(fmt.Sprint(i))() {
				return false
			}
		}
		return true
	})
	h.waitFor("6 provisioned reports", func() bool { o.mu.Lock(); defer o.mu.Unlock(); return o.ok+o.fail >= 6 })
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.ok != 6 || o.fail != 0 {
		t.Errorf("got %d provisioned, %d failed, want 6 and 0", o.ok, o.fail)
	}
	if o.calls["start/throttled"] == 0 || len(o.throttles) == 0 {
		t.Fatalf("got calls %v, want some throttled starts", o.calls)
	}
	if o.throttles[0] >= 50 {
		t.Errorf("got rate %v after the first throttle, want below the configured 50/s", o.throttles[0])
	}
	if o.calls["start/ok"] != 6 {
		t.Errorf("got %d successful starts, want 6", o.calls["start/ok"])
	}
}

// failingWatchStore fails Watch a number of times.
type failingWatchStore struct {
	provisioner.Store
	mu    sync.Mutex
	fails int
}

func (s *failingWatchStore) Watch(ctx context.Context, model string, from int64, kinds ...muster.ChangeKind) (muster.Watcher, error) {
	s.mu.Lock()
	fail := s.fails > 0
	s.fails--
	s.mu.Unlock()
	if fail {
		return nil, errors.New("store unavailable")
	}
	return s.Store.Watch(ctx, model, from, kinds...)
}

func TestSupervisorRestartsWithBackoff(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	st := &failingWatchStore{Store: h.store, fails: 3}
	ctx, cancel := context.WithCancel(h.ctx)
	var errsMu sync.Mutex
	var errs []string
	sup := provisioner.Supervise(ctx, provisioner.Config{
		ControllerUUID: controllerUUID, Model: h.model, Store: st, Provider: h.prov,
		AgentBinaries: h.binaries, Clock: h.clock,
	}, provisioner.SupervisorOptions{MinBackoff: time.Second, MaxBackoff: 4 * time.Second, OnError: func(err error) {
		errsMu.Lock()
		defer errsMu.Unlock()
		errs = append(errs, err.Error())
	}})
	h.add(1, muster.MachineTemplate{})
	h.advanceUntil("machine 0 running", 500*time.Millisecond, h.running("0"))
	s := sup.Status()
	if s.Restarts != 3 || !s.Running || !strings.Contains(s.LastError, "store unavailable") {
		t.Errorf("got status %+v, want 3 restarts, running, last error naming the cause", s)
	}
	if zs := sup.Zones(); len(zs) != 3 {
		t.Errorf("got zone table %v from the supervisor, want 3 zones", zs)
	}
	errsMu.Lock()
	if len(errs) != 3 {
		t.Errorf("got errors %q, want 3", errs)
	}
	errsMu.Unlock()
	cancel()
	select {
	case <-sup.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("supervisor did not stop within 5s")
	}
	if sup.Status().Running {
		t.Errorf("got running after stop")
	}
}

// noZones is a provider without zones (Z5).
type noZones struct{ *recProvider }

func (noZones) Zones(context.Context) ([]muster.Zone, error) { return nil, nil }

func TestZ5_ProviderWithoutZones(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start2(noZones{h.prov})
	h.add(2, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	h.waitFor("machine 1 running", h.running("1"))
	for _, c := range h.prov.startCalls() {
		if c.Zone != "" {
			t.Errorf("got zone %q passed for machine %s, want none (the provider's business)", c.Zone, c.MachineID)
		}
	}
	if zs := h.p.Zones(); len(zs) != 0 {
		t.Errorf("got zone table %v, want empty", zs)
	}
}

func TestP13_DeadWhileStartingAndStartFails(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	release := make(chan struct{})
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStart = func(ctx context.Context, _ muster.StartParams) error {
			select {
			case <-release:
				return muster.NewProviderError(muster.ErrZoneIndependent, "", "no image")
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
	close(release)
	h.waitFor("machine 0 removed", func() bool { return !h.exists("0") })
	if got := h.prov.stopCalls(); len(got) != 0 {
		t.Errorf("got stop calls %v, want none (nothing was started)", got)
	}
	for _, e := range h.events("0") {
		if e.Kind == "error" {
			t.Errorf("got error event %q, want the start error of a dead machine not reported", e.Message)
		}
	}
}

func TestH4_StopFailureRetriedOnNextPass(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("machine 0 running", h.running("0"))
	// Let the loop take in the record's change first: a change of the
	// dead machine arriving after the failed stop would make it try again
	// at once, not on the next pass.
	h.quiesce()
	inst := h.machine("0").InstanceID()
	var fail sync.Once
	h.prov.setHooks(func(r *recProvider) {
		r.beforeStop = func(context.Context, []string) error {
			var err error
			fail.Do(func() { err = muster.NewProviderError(muster.ErrUnavailable, "", "cloud down") })
			return err
		}
	})
	h.makeDead("0")
	h.waitFor("failed stop", func() bool { return len(h.prov.stopCalls()) == 1 })
	h.quiesce()
	if m := h.machine("0"); m.Life != muster.LifeDead {
		t.Fatalf("got life %s after a failed stop, want the machine still dead", m.Life)
	}
	h.advanceUntil("machine 0 removed", h.model.Settings.ResyncInterval/4, func() bool { return !h.exists("0") })
	if got := h.prov.stopCalls(); len(got) != 2 || got[1][0] != inst {
		t.Errorf("got stop calls %v, want a second one for %s", got, inst)
	}
	if _, ok := h.cloudInstances()[inst]; ok {
		t.Errorf("instance %s still runs", inst)
	}
}

func TestRestartUsesStoredSettings(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestAll }))
	unknown, err := h.cloud.AddInstance("a", controllerUUID, h.model.UUID)
	if err != nil {
		t.Fatal(err)
	}
	h.clock.Advance(2 * h.model.Settings.HarvestMinAge)
	stale := h.model // what the controller read at its start: harvest all
	h.setSettings(func(s *muster.Settings) { s.HarvestMode = muster.HarvestNone })
	h.startModel = &stale
	h.start()
	h.listed(1)
	h.quiesce()
	p := h.p
	h.stop()
	if _, ok := h.cloudInstances()[unknown.ID]; !ok {
		t.Errorf("unknown instance harvested with the stale mode all; the stored mode is none")
	}
	if got := p.Settings().HarvestMode; got != muster.HarvestNone {
		t.Errorf("got harvest mode %s, want none", got)
	}
}
