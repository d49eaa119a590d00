package provisioner_test

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sqlstore"
)

const controllerUUID = "c0ffee00-0000-4000-8000-000000000000"

// recProvider wraps the real sim provider to record and, where a test
// asks, block or fail calls. It deliberately offers no batch start.
type recProvider struct {
	p *sim.Provider

	mu     sync.Mutex
	starts []muster.StartParams // every StartInstance call, in order
	stops  [][]string           // every StopInstances call
	lists  int

	// Hooks, set before the provisioner runs or under mu.
	beforeStart func(ctx context.Context, sp muster.StartParams) error
	afterStart  func(ctx context.Context, sp muster.StartParams, r muster.StartResult, err error) (muster.StartResult, error)
	beforeStop  func(ctx context.Context, ids []string) error
	listState   string // when set, every listed instance reports this state
	// extraList, when set, adds instances to every listing: a provider
	// that does not filter by tags itself (H7 is then the engine's job).
	extraList func(ctx context.Context) ([]muster.Instance, error)
}

var (
	_ muster.Provider    = (*recProvider)(nil)
	_ muster.Networking  = (*recProvider)(nil)
	_ muster.Quarantiner = (*recProvider)(nil)
)

func (r *recProvider) StartInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	r.mu.Lock()
	r.starts = append(r.starts, sp)
	before, after := r.beforeStart, r.afterStart
	r.mu.Unlock()
	if before != nil {
		if err := before(ctx, sp); err != nil {
			return muster.StartResult{}, err
		}
	}
	res, err := r.p.StartInstance(ctx, sp)
	if after != nil {
		return after(ctx, sp, res, err)
	}
	return res, err
}

func (r *recProvider) StopInstances(ctx context.Context, ids ...string) error {
	r.mu.Lock()
	r.stops = append(r.stops, append([]string(nil), ids...))
	before := r.beforeStop
	r.mu.Unlock()
	if before != nil {
		if err := before(ctx, ids); err != nil {
			return err
		}
	}
	return r.p.StopInstances(ctx, ids...)
}

func (r *recProvider) Instances(ctx context.Context) ([]muster.Instance, error) {
	r.mu.Lock()
	r.lists++
	state, extra := r.listState, r.extraList
	r.mu.Unlock()
	insts, err := r.p.Instances(ctx)
	if err == nil && extra != nil {
		var more []muster.Instance
		more, err = extra(ctx)
		insts = append(insts, more...)
	}
	if state != "" {
		for i := range insts {
			insts[i].State = state
		}
	}
	return insts, err
}

func (r *recProvider) Zones(ctx context.Context) ([]muster.Zone, error) { return r.p.Zones(ctx) }

func (r *recProvider) Quarantine(ctx context.Context, id string, since time.Time) error {
	return r.p.Quarantine(ctx, id, since)
}

func (r *recProvider) Restore(ctx context.Context, id string) error { return r.p.Restore(ctx, id) }

func (r *recProvider) DeriveZones(ctx context.Context, sp muster.StartParams) ([]string, error) {
	return r.p.DeriveZones(ctx, sp)
}

func (r *recProvider) Subnets(ctx context.Context) ([]muster.Subnet, error) { return r.p.Subnets(ctx) }

func (r *recProvider) startCalls() []muster.StartParams {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]muster.StartParams(nil), r.starts...)
}

func (r *recProvider) stopCalls() [][]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([][]string(nil), r.stops...)
}

func (r *recProvider) listCalls() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lists
}

func (r *recProvider) setHooks(fn func(r *recProvider)) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fn(r)
}

// binaries is an agent binary catalogue (amd64 only unless added to).
type binaries struct {
	mu     sync.Mutex
	arches []string
}

func (b *binaries) add(arch string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.arches = append(b.arches, arch)
}

func (b *binaries) FindAgentBinaries(_ context.Context, version, os, arch string) ([]muster.AgentBinary, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, a := range b.arches {
		if a == arch {
			return []muster.AgentBinary{{Version: version, OS: os, Arch: arch, URL: "https://example.invalid/muster-" + arch}}, nil
		}
	}
	return nil, muster.Errorf(muster.ENotFound, "no agent binaries for %s/%s", os, arch)
}

// harness is a real sqlstore in a temp dir, a real in-process sim, a fake
// clock, and a provisioner that can be started and stopped.
type harness struct {
	tb       testing.TB
	ctx      context.Context
	clock    *fakeclock.Clock
	store    *sqlstore.Store
	dbPath   string
	cloud    *sim.Cloud
	prov     *recProvider
	model    muster.Model
	binaries *binaries
	observer provisioner.Observer
	store2   provisioner.Store // the store the provisioner uses; default store
	// passwordKey is Config.PasswordKey.
	passwordKey []byte
	// passwords holds the agent password each sim instance was started
	// with, as its agent would use it.
	passwords *passwords

	// model, when set, is the model a provisioner is started with instead
	// of the store's (a controller's stale copy).
	startModel *muster.Model
	// afterRecord, when set before start, runs after every
	// RecordInstances of the provisioner's store returns.
	afterRecord func()

	cancel context.CancelFunc
	done   chan error
	p      *provisioner.Provisioner

	idleMu   sync.Mutex
	idleRev  int64 // revision of the running provisioner's last idle report; -1 = none
	idleJobs int   // pool jobs out at that report
}

type harnessOpt func(*harnessConfig)

type harnessConfig struct {
	zones    []sim.ZoneConfig
	settings func(*muster.Settings)
	faults   sim.Faults
	maxBatch int
	// passwordKey is Config.PasswordKey of every provisioner started.
	passwordKey []byte
}

func withZones(names ...string) harnessOpt {
	return func(c *harnessConfig) {
		c.zones = nil
		for _, n := range names {
			c.zones = append(c.zones, sim.ZoneConfig{Name: n, Available: true, Capacity: sim.Unlimited})
		}
	}
}

func withSettings(fn func(*muster.Settings)) harnessOpt {
	return func(c *harnessConfig) { c.settings = fn }
}

func withFaults(f sim.Faults) harnessOpt { return func(c *harnessConfig) { c.faults = f } }

func withPasswordKey(k []byte) harnessOpt { return func(c *harnessConfig) { c.passwordKey = k } }

func withMaxBatch(n int) harnessOpt { return func(c *harnessConfig) { c.maxBatch = n } }

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newHarness(tb testing.TB, opts ...harnessOpt) *harness {
	tb.Helper()
	cfg := harnessConfig{}
	withZones("a", "b", "c")(&cfg)
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	clk := fakeclock.New(epoch)
	discard := slog.New(slog.DiscardHandler)
	dbPath := filepath.Join(tb.TempDir(), "muster.db")
	st, err := sqlstore.Open(ctx, dbPath, sqlstore.WithClock(clk), sqlstore.WithLogger(discard),
		sqlstore.WithPollInterval(20*time.Millisecond))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	s := muster.DefaultSettings()
	s.RateLimitRate = 100000
	s.RateLimitBurst = 100000
	s.SimAgents = false
	s.RegistrationTimeout = 0 // no agents here unless a test plays them
	if cfg.settings != nil {
		cfg.settings(&s)
	}
	m, err := st.CreateModel(ctx, muster.Model{Name: "default", Provider: "sim", Settings: s})
	if err != nil {
		tb.Fatal(err)
	}
	pw := &passwords{m: map[string]string{}}
	cloud, err := sim.Open(sim.Config{Clock: clk, Zones: cfg.zones, Faults: cfg.faults, MaxBatch: cfg.maxBatch, Seed: 7, Logger: discard,
		OnStart: func(inst sim.Instance, p muster.StartParams) { pw.set(inst.ID, p.Password) }})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cloud.Close() })
	h := &harness{
		tb: tb, ctx: ctx, clock: clk, store: st, dbPath: dbPath, cloud: cloud, model: m, passwords: pw,
		prov:     &recProvider{p: cloud.Provider(controllerUUID, m.UUID)},
		binaries: &binaries{arches: []string{"amd64"}},
	}
	h.store2 = st
	h.passwordKey = cfg.passwordKey
	tb.Cleanup(h.stop)
	return h
}

// start runs a provisioner (a new one each time, as after a restart).
func (h *harness) start() {
	h.tb.Helper()
	h.start2(h.prov)
}

// start2 runs a provisioner on the given provider.
func (h *harness) start2(prov muster.Provider) {
	h.tb.Helper()
	if h.cancel != nil {
		h.tb.Fatal("provisioner already running")
	}
	m, err := h.store.Model(h.ctx, h.model.UUID)
	if err != nil {
		h.tb.Fatal(err)
	}
	if h.startModel != nil {
		m = *h.startModel
	}
	h.idleMu.Lock()
	h.idleRev = -1
	h.idleMu.Unlock()
	p, err := provisioner.New(provisioner.Config{
		ControllerUUID: controllerUUID,
		Model:          m,
		Store:          eventWatching{Store: h.store2, afterRecord: h.afterRecord},
		Idle: func(rev int64, jobs int) {
			h.idleMu.Lock()
			h.idleRev, h.idleJobs = rev, jobs
			h.idleMu.Unlock()
		},
		Provider:      prov,
		AgentBinaries: h.binaries,
		Clock:         h.clock,
		Observer:      h.observer,
		APIAddresses:  []string{"https://127.0.0.1:17070"},
		CACert:        "test-ca",
		PasswordKey:   h.passwordKey,
	})
	if err != nil {
		h.tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(h.ctx)
	h.cancel, h.done, h.p = cancel, make(chan error, 1), p
	go func() { h.done <- p.Run(ctx) }()
}

// stop cancels the provisioner and checks it returns promptly (P21).
func (h *harness) stop() {
	if h.cancel == nil {
		return
	}
	h.cancel()
	select {
	case err := <-h.done:
		if err != nil {
			h.tb.Errorf("Run returned %v, want nil after cancel", err)
		}
	case <-time.After(5 * time.Second):
		h.tb.Errorf("Run did not return within 5s of cancel (P21)")
	}
	h.cancel = nil
}

// waitFor waits until cond holds (the engine runs in goroutines).
func (h *harness) waitFor(what string, cond func() bool) {
	h.tb.Helper()
	testutil.Eventually(h.tb, what, cond)
}

// advanceUntil moves the fake clock on in steps until cond holds.
func (h *harness) advanceUntil(what string, step time.Duration, cond func() bool) {
	h.tb.Helper()
	testutil.Eventually(h.tb, what, func() bool {
		if cond() {
			return true
		}
		h.clock.Advance(step)
		return false
	})
}

// eventWatching is the provisioner's store with one change for the
// tests: its watcher delivers event changes too (the provisioner ignores
// them), so that the revision of the last change set the loop handled
// can be compared with the store's (quiesce).
type eventWatching struct {
	provisioner.Store
	afterRecord func()
}

func (s eventWatching) RecordInstances(ctx context.Context, model string, rs []muster.InstanceRecord) ([]error, error) {
	errs, err := s.Store.RecordInstances(ctx, model, rs)
	if s.afterRecord != nil {
		s.afterRecord()
	}
	return errs, err
}

func (s eventWatching) Watch(ctx context.Context, model string, from int64, kinds ...muster.ChangeKind) (muster.Watcher, error) {
	return s.Store.Watch(ctx, model, from, append(kinds, muster.ChangeEvent)...)
}

// quiesce waits until the running provisioner is idle (Config.Idle) having
// handled every change in the store: nothing more happens until the store
// changes or the clock moves, so a test can then assert that something
// did NOT happen.
func (h *harness) quiesce() {
	h.tb.Helper()
	if h.cancel == nil {
		return // not running: nothing can happen
	}
	h.markIdle()
	testutil.Eventually(h.tb, "the provisioner idle at the store's revision", h.idle)
}

// quiesceLoop is quiesce for a provisioner with jobs held up on purpose
// (a provider hook that blocks): it waits until the loop has handled
// every change in the store and every result, whatever jobs are still
// out.
func (h *harness) quiesceLoop() {
	h.tb.Helper()
	h.markIdle()
	testutil.Eventually(h.tb, "the provisioner's loop idle at the store's revision", func() bool {
		_, ok := h.loopIdle()
		return ok
	})
}

// markIdle appends a marker event, so that the loop reports idle afresh:
// an idle report from before the test's last step does not count.
func (h *harness) markIdle() {
	h.tb.Helper()
	if err := h.store.AppendEvents(h.ctx, []muster.Event{{ModelUUID: h.model.UUID, Time: h.clock.Now(),
		Actor: "test", Kind: "test", Message: "quiesce"}}); err != nil {
		h.tb.Fatal(err)
	}
}

// idle reports whether the provisioner's last idle report came after it
// had handled every change the store holds (see markIdle), with no job
// out.
func (h *harness) idle() bool {
	jobs, ok := h.loopIdle()
	return ok && jobs == 0
}

// loopIdle reports whether the loop's last idle report came after it had
// handled every change the store holds, and how many jobs were out then.
func (h *harness) loopIdle() (jobs int, ok bool) {
	rev, err := h.store.Revision(h.ctx)
	if err != nil {
		h.tb.Fatal(err)
	}
	h.idleMu.Lock()
	defer h.idleMu.Unlock()
	return h.idleJobs, h.idleRev >= rev
}

func (h *harness) add(n int, t muster.MachineTemplate) []muster.Machine {
	h.tb.Helper()
	ts := make([]muster.MachineTemplate, n)
	for i := range ts {
		ts[i] = t
	}
	ms, err := h.store.AddMachines(h.ctx, h.model.UUID, ts)
	if err != nil {
		h.tb.Fatal(err)
	}
	return ms
}

func (h *harness) machine(id string) muster.Machine {
	h.tb.Helper()
	m, err := h.store.Machine(h.ctx, h.model.UUID, id)
	if err != nil {
		h.tb.Fatalf("machine %s: %v", id, err)
	}
	return m
}

func (h *harness) exists(id string) bool {
	_, err := h.store.Machine(h.ctx, h.model.UUID, id)
	if err != nil && !muster.IsCode(err, muster.ENotFound) {
		h.tb.Fatal(err)
	}
	return err == nil
}

func (h *harness) update(us ...muster.MachineUpdate) {
	h.tb.Helper()
	if err := h.store.UpdateMachines(h.ctx, h.model.UUID, us); err != nil {
		h.tb.Fatal(err)
	}
}

func (h *harness) setSettings(fn func(*muster.Settings)) {
	h.tb.Helper()
	m, err := h.store.Model(h.ctx, h.model.UUID)
	if err != nil {
		h.tb.Fatal(err)
	}
	s := m.Settings
	fn(&s)
	if err := h.store.UpdateModelSettings(h.ctx, h.model.UUID, s); err != nil {
		h.tb.Fatal(err)
	}
}

func (h *harness) makeDead(ids ...string) {
	h.tb.Helper()
	for _, id := range ids {
		h.update(muster.MachineUpdate{ID: id, Life: muster.Ptr(muster.LifeDead)})
	}
}

func (h *harness) running(id string) func() bool {
	return func() bool {
		m, err := h.store.Machine(h.ctx, h.model.UUID, id)
		return err == nil && m.HasInstance() && m.InstanceStatus == muster.InstanceRunning
	}
}

func (h *harness) instStatus(id string, want muster.InstanceStatus) func() bool {
	return func() bool {
		m, err := h.store.Machine(h.ctx, h.model.UUID, id)
		return err == nil && m.InstanceStatus == want
	}
}

// firstPassDone waits until the provisioner has listed the instances n
// times in total.
func (h *harness) listed(n int) {
	h.tb.Helper()
	h.waitFor(fmt.Sprintf("%d listings", n), func() bool { return h.prov.listCalls() >= n })
}

// cloudInstances returns this model's instances in the sim by id.
func (h *harness) cloudInstances() map[string]sim.Instance {
	out := map[string]sim.Instance{}
	for _, i := range h.cloud.AllInstances() {
		if i.Model() == h.model.UUID {
			out[i.ID] = i
		}
	}
	return out
}

// byMachine returns the sim instance ids tagged with each machine.
func (h *harness) byMachine() map[string][]string {
	out := map[string][]string{}
	for _, i := range h.cloudInstances() {
		out[i.Tags[muster.TagMachine]] = append(out[i.Tags[muster.TagMachine]], i.ID)
	}
	for _, ids := range out {
		sort.Strings(ids)
	}
	return out
}

func (h *harness) events(machineID string) []muster.Event {
	h.tb.Helper()
	evs, err := h.store.Events(h.ctx, h.model.UUID, muster.EventFilter{MachineID: machineID})
	if err != nil {
		h.tb.Fatal(err)
	}
	return evs
}

func startsFor(calls []muster.StartParams, id string) []muster.StartParams {
	var out []muster.StartParams
	for _, c := range calls {
		if c.MachineID == id {
			out = append(out, c)
		}
	}
	return out
}

func zonesOf(calls []muster.StartParams) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Zone)
	}
	return out
}

func countStopped(stops [][]string) int {
	n := 0
	for _, s := range stops {
		n += len(s)
	}
	return n
}

// resync moves the clock on until the provisioner has made another full
// pass (P19) and finished it.
func (h *harness) resync() {
	h.tb.Helper()
	n := h.prov.listCalls()
	h.advanceUntil("a full pass", h.model.Settings.ResyncInterval/4, func() bool { return h.prov.listCalls() > n })
	h.quiesce()
}

// waitTimers waits until at least n timers of the fake clock are pending.
func (h *harness) waitTimers(n int) {
	h.tb.Helper()
	select {
	case <-h.clock.WaitForTimers(n):
	case <-time.After(10 * time.Second):
		h.tb.Fatalf("timed out waiting for %d timers (have %d)", n, h.clock.Timers())
	}
}

type passwords struct {
	mu sync.Mutex
	m  map[string]string
}

func (p *passwords) set(id, pw string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.m[id] = pw
}

func (p *passwords) get(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[id]
}
