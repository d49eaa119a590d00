package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/provisioner"
	"github.com/musterhq/muster/sim"
	"github.com/musterhq/muster/sqlstore"
)

// The cloud of every scenario (SPEC §7): three zones of unlimited
// capacity, starts taking 50 ms, a request bucket for starts of 10 burst
// and 50 a second; batched runs also allow 100 instances a call and an
// instance bucket of 2,000 burst and 500 a second.
const (
	startLatency   = 50 * time.Millisecond
	requestBurst   = 10
	requestRate    = 50.0
	batchSize      = 100
	instanceBurst  = 2000
	instanceRate   = 500.0
	controllerUUID = "b3c4e000-0000-4000-8000-000000000007"
	groupName      = "web"
)

var zoneNames = []string{"a", "b", "c"}

// Scenario is the outcome of one convergence run.
type Scenario struct {
	Seconds              float64 `json:"seconds"`
	LowerBoundSeconds    float64 `json:"lower_bound_seconds"`
	Ratio                float64 `json:"ratio"`
	StartCallsPerMachine float64 `json:"start_calls_per_machine"`

	// For the table only.
	startCalls int64
	throttled  int64
	zones      map[string]int
	skew       int
}

// Convergence is the outcome of the convergence scenario (the --json line).
type Convergence struct {
	Machines    int      `json:"machines"`
	Single      Scenario `json:"single"`
	Batched     Scenario `json:"batched"`
	MaxZoneSkew int      `json:"max_zone_skew"`
	PeakRSSMB   float64  `json:"peak_rss_mb"`
	CPUSeconds  float64  `json:"cpu_seconds"`
}

// EventLatency is the outcome of the event-latency scenario (E1).
type EventLatency struct {
	Scenario string  `json:"scenario"`
	Machines int     `json:"machines"` // running before the adds
	Adds     int     `json:"adds"`
	MedianMS float64 `json:"median_ms"`
	P90MS    float64 `json:"p90_ms"`
	MaxMS    float64 `json:"max_ms"`
	// FullListings counts the instance listings the sim saw during the
	// adds; E1 wants 0.
	FullListings     int64   `json:"full_listings"`
	ProvisionSeconds float64 `json:"provision_seconds"` // bringing up the fleet first
	PeakRSSMB        float64 `json:"peak_rss_mb"`
	CPUSeconds       float64 `json:"cpu_seconds"`
}

// singleLowerBound is the least time the sim allows for n starts of one
// instance a call: the request bucket lets burst calls through at once and
// then rate a second, so the last call enters at (n-burst)/rate and returns
// one latency later.
func singleLowerBound(n int) float64 {
	return math.Max(0, float64(n-requestBurst))/requestRate + startLatency.Seconds()
}

// batchedLowerBound is the least time for n starts of up to batchSize
// instances a call: the later of what the request bucket allows for
// ceil(n/batchSize) calls and what the instance bucket allows for n
// instances, plus one latency.
func batchedLowerBound(n int) float64 {
	calls := (n + batchSize - 1) / batchSize
	req := math.Max(0, float64(calls-requestBurst)) / requestRate
	inst := math.Max(0, float64(n-instanceBurst)) / instanceRate
	return math.Max(req, inst) + startLatency.Seconds()
}

// env is one run's store, cloud and provisioner.
type env struct {
	dir    string
	store  *sqlstore.Store
	cloud  *sim.Cloud
	model  muster.Model
	prov   *provisioner.Provisioner
	juju   *jujuPolicy // instead of prov, for --policy juju
	cancel context.CancelFunc
	done   chan error
	calls  *callTimes
}

type envConfig struct {
	batched bool
	workers int  // 0 = the default setting
	juju    bool // Juju's policy instead of muster's engine
}

func newEnv(ctx context.Context, cfg envConfig) (*env, error) {
	dir, err := os.MkdirTemp("", "muster-bench-")
	if err != nil {
		return nil, err
	}
	e := &env{dir: dir, calls: &callTimes{at: map[string]time.Time{}}}
	discard := slog.New(slog.DiscardHandler)
	e.store, err = sqlstore.Open(ctx, filepath.Join(dir, "muster.db"), sqlstore.WithLogger(discard))
	if err != nil {
		e.close()
		return nil, err
	}
	s := muster.DefaultSettings()
	s.SimAgents = false
	s.BatchStarts = cfg.batched
	if cfg.workers > 0 {
		s.NumProvisionWorkers = cfg.workers
	}
	e.model, err = e.store.CreateModel(ctx, muster.Model{Name: "bench", Provider: "sim", Settings: s})
	if err != nil {
		e.close()
		return nil, err
	}
	faults := sim.Faults{
		Latency:    map[string]sim.Latency{sim.CallStart: {Fixed: startLatency}},
		RateLimits: map[string]sim.Bucket{sim.CallStart: {Burst: requestBurst, PerSecond: requestRate}},
	}
	if cfg.batched {
		faults.InstanceRate = sim.Bucket{Burst: instanceBurst, PerSecond: instanceRate}
	}
	e.cloud, err = sim.Open(sim.Config{Zones: sim.ZoneConfigs(zoneNames...), Faults: faults, MaxBatch: batchSize, Logger: discard})
	if err != nil {
		e.close()
		return nil, err
	}
	if os.Getenv("MUSTER_BENCH_LOG") != "" {
		discard = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	provider := &timedProvider{Provider: e.cloud.Provider(controllerUUID, e.model.UUID), calls: e.calls}
	if cfg.juju {
		e.juju = newJujuPolicy(jujuConfig{ControllerUUID: controllerUUID, ModelUUID: e.model.UUID, Store: e.store, Provider: provider})
		rctx, cancel := context.WithCancel(ctx)
		e.cancel, e.done = cancel, make(chan error, 1)
		go func() { e.done <- e.juju.Run(rctx) }()
		// Its first event (no machines yet) lists the instances and zones.
		return e, e.waitFirstPass(func() bool { return e.juju.events.Load() > 0 })
	}
	e.prov, err = provisioner.New(provisioner.Config{
		ControllerUUID: controllerUUID,
		Model:          e.model,
		Store:          e.store,
		Provider:       provider,
		AgentBinaries:  binaries{},
		Logger:         discard,
		APIAddresses:   []string{"https://127.0.0.1:17070"},
	})
	if err != nil {
		e.close()
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	e.cancel, e.done = cancel, make(chan error, 1)
	go func() { e.done <- e.prov.Run(rctx) }()
	// The first pass lists the instances and the zones.
	return e, e.waitFirstPass(func() bool { return len(e.prov.Zones()) == len(zoneNames) })
}

// waitFirstPass waits until done reports the provisioner's first pass
// over; on failure it closes e.
func (e *env) waitFirstPass(done func() bool) error {
	for !done() {
		select {
		case err := <-e.done:
			e.done <- err
			e.close()
			return fmt.Errorf("provisioner ended before its first pass: %v", err)
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

func (e *env) close() error {
	var err error
	if e.cancel != nil {
		e.cancel()
		err = <-e.done
		e.cancel = nil
	}
	if e.cloud != nil {
		e.cloud.Close()
	}
	if e.store != nil {
		e.store.Close()
	}
	os.RemoveAll(e.dir)
	return err
}

// add adds n machines of the group in one call.
func (e *env) add(ctx context.Context, n int) ([]muster.Machine, error) {
	ts := make([]muster.MachineTemplate, n)
	for i := range ts {
		ts[i] = muster.MachineTemplate{Group: groupName}
	}
	return e.store.AddMachines(ctx, e.model.UUID, ts)
}

// runningWatch counts the model's machines recorded running (and, for
// until with failed set, those in provisioning error), reading only the
// machines each change names.
type runningWatch struct {
	e       *env
	w       muster.Watcher
	running map[string]bool
	failed  map[string]bool
}

func (e *env) watchRunning(ctx context.Context) (*runningWatch, error) {
	rev, err := e.store.Revision(ctx)
	if err != nil {
		return nil, err
	}
	w, err := e.store.Watch(ctx, e.model.UUID, max(rev, 1), muster.ChangeMachine)
	if err != nil {
		return nil, err
	}
	return &runningWatch{e: e, w: w, running: map[string]bool{}, failed: map[string]bool{}}, nil
}

// until waits until n machines are running, or timeout.
func (rw *runningWatch) until(ctx context.Context, n int, timeout time.Duration) error {
	return rw.wait(ctx, n, timeout, false)
}

// wait waits until n machines are running (or, with settled, running or
// in provisioning error), or timeout.
func (rw *runningWatch) wait(ctx context.Context, n int, timeout time.Duration, settled bool) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	done := func() int {
		if settled {
			return len(rw.running) + len(rw.failed)
		}
		return len(rw.running)
	}
	for done() < n {
		select {
		case cs, ok := <-rw.w.Changes():
			if !ok {
				return fmt.Errorf("watch: %v", rw.w.Err())
			}
			var ids []string
			for _, id := range cs.Machines {
				if !rw.running[id] {
					ids = append(ids, id)
				}
			}
			if len(ids) == 0 {
				continue
			}
			ms, err := rw.e.store.Machines(ctx, rw.e.model.UUID, ids)
			if err != nil {
				return err
			}
			for _, m := range ms {
				if m.HasInstance() && m.InstanceStatus == muster.InstanceRunning {
					rw.running[m.ID] = true
					delete(rw.failed, m.ID)
				} else if m.InstanceStatus == muster.InstanceProvisioningError {
					rw.failed[m.ID] = true
				}
			}
		case err := <-rw.e.done:
			rw.e.done <- err
			return fmt.Errorf("provisioner ended: %v", err)
		case <-t.C:
			return fmt.Errorf("%d of %d machines running (%d in error) after %s", len(rw.running), n, len(rw.failed), timeout)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// PolicyRun is what one policy did with one fleet.
type PolicyRun struct {
	Seconds              float64 `json:"seconds"`
	StartCalls           int64   `json:"start_calls"`
	StartCallsPerMachine float64 `json:"start_calls_per_machine"`
	ThrottledCalls       int64   `json:"throttled_calls"`
	// Listings counts the full instance listings the sim saw, the
	// provisioner's first pass (before the add) included.
	Listings int64 `json:"instance_listings"`
	// Events is the machines-changed events Juju's policy handled, its
	// initial one included (juju only).
	Events      int64 `json:"machines_changed_events,omitempty"`
	Converged   int   `json:"machines_converged"`
	InError     int   `json:"machines_in_error"`
	MaxZoneSkew int   `json:"max_zone_skew"`
	// AddListings counts the listings the sim saw while machines were
	// then added one at a time to the converged fleet (--policy juju's
	// --adds), each after the previous one was recorded running.
	AddListings int64 `json:"listings_during_adds"`

	zones map[string]int
}

// runPolicy adds n machines of one group at once to a fresh store and
// cloud run by cfg's provisioner and measures the time until every one is
// recorded running or (Juju's policy only) in provisioning error. Then it
// adds adds machines one at a time and counts the listings meanwhile.
func runPolicy(ctx context.Context, n, adds int, cfg envConfig, timeout time.Duration) (PolicyRun, error) {
	var r PolicyRun
	e, err := newEnv(ctx, cfg)
	if err != nil {
		return r, err
	}
	defer e.close()
	rw, err := e.watchRunning(ctx)
	if err != nil {
		return r, err
	}
	defer rw.w.Close()
	firstPass := e.cloud.Stats().Calls[sim.CallList]
	e.cloud.ResetStats()
	start := time.Now()
	if _, err := e.add(ctx, n); err != nil {
		return r, err
	}
	if os.Getenv("MUSTER_BENCH_TRACE") != "" {
		tctx, stop := context.WithCancel(ctx)
		defer stop()
		go trace(tctx, e, start)
	}
	if err := rw.wait(ctx, n, timeout, cfg.juju); err != nil {
		return r, err
	}
	r.Seconds = time.Since(start).Seconds()
	st := e.cloud.Stats()
	r.StartCalls = st.Calls[sim.CallStart]
	r.ThrottledCalls = st.Throttled[sim.CallStart]
	r.StartCallsPerMachine = float64(r.StartCalls) / float64(n)
	r.Listings = firstPass + st.Calls[sim.CallList]
	if e.juju != nil {
		r.Events = e.juju.events.Load()
	}
	r.Converged, r.InError = len(rw.running), len(rw.failed)
	r.zones = st.InstancesByZone
	lo, hi := math.MaxInt, 0
	for _, z := range zoneNames {
		lo, hi = min(lo, r.zones[z]), max(hi, r.zones[z])
	}
	r.MaxZoneSkew = hi - lo
	if st.Instances != r.Converged {
		return r, fmt.Errorf("%d instances for %d running machines", st.Instances, r.Converged)
	}
	for i := range adds {
		time.Sleep(100 * time.Millisecond) // the request bucket refills
		if _, err := e.add(ctx, 1); err != nil {
			return r, err
		}
		// A throttled start of Juju's policy waits 10 s before its retry.
		if err := rw.wait(ctx, n+i+1, time.Minute, cfg.juju); err != nil {
			return r, fmt.Errorf("single add %d: %w", i+1, err)
		}
	}
	r.AddListings = e.cloud.Stats().Calls[sim.CallList] - st.Calls[sim.CallList]
	return r, e.close()
}

// converge runs one convergence scenario of muster's engine on n machines.
func converge(ctx context.Context, n int, batched bool, timeout time.Duration) (Scenario, error) {
	r, err := runPolicy(ctx, n, 0, envConfig{batched: batched}, timeout)
	if err != nil {
		return Scenario{}, err
	}
	sc := Scenario{
		Seconds:              r.Seconds,
		StartCallsPerMachine: r.StartCallsPerMachine,
		startCalls:           r.StartCalls,
		throttled:            r.ThrottledCalls,
		zones:                r.zones,
		skew:                 r.MaxZoneSkew,
	}
	if batched {
		sc.LowerBoundSeconds = batchedLowerBound(n)
	} else {
		sc.LowerBoundSeconds = singleLowerBound(n)
	}
	sc.Ratio = sc.Seconds / sc.LowerBoundSeconds
	return sc, nil
}

// runConvergence runs both convergence scenarios on n machines.
func runConvergence(ctx context.Context, n int, timeout time.Duration) (Convergence, error) {
	out := Convergence{Machines: n}
	var err error
	if out.Single, err = converge(ctx, n, false, timeout); err != nil {
		return out, fmt.Errorf("single: %w", err)
	}
	if out.Batched, err = converge(ctx, n, true, timeout); err != nil {
		return out, fmt.Errorf("batched: %w", err)
	}
	out.MaxZoneSkew = max(out.Single.skew, out.Batched.skew)
	out.PeakRSSMB, out.CPUSeconds = footprint()
	return out, nil
}

// runEventLatency brings up n machines (batched), lets the provisioner
// settle, then adds one machine at a time, adds times, measuring from
// AddMachines to the provider's StartInstance (E1).
func runEventLatency(ctx context.Context, n, adds int, timeout time.Duration) (EventLatency, error) {
	out := EventLatency{Scenario: "event-latency", Machines: n, Adds: adds}
	e, err := newEnv(ctx, envConfig{batched: true})
	if err != nil {
		return out, err
	}
	defer e.close()
	rw, err := e.watchRunning(ctx)
	if err != nil {
		return out, err
	}
	defer rw.w.Close()
	start := time.Now()
	if _, err := e.add(ctx, n); err != nil {
		return out, err
	}
	if err := rw.until(ctx, n, timeout); err != nil {
		return out, err
	}
	out.ProvisionSeconds = math.Round(time.Since(start).Seconds()*1000) / 1000
	time.Sleep(time.Second) // settle: events written, the loop idle
	lists := e.cloud.Stats().Calls[sim.CallList]
	var lat []time.Duration
	for i := 0; i < adds; i++ {
		t0 := time.Now()
		ms, err := e.add(ctx, 1)
		if err != nil {
			return out, err
		}
		if err := rw.until(ctx, n+i+1, 10*time.Second); err != nil {
			return out, err
		}
		at, ok := e.calls.get(ms[0].ID)
		if !ok {
			return out, fmt.Errorf("machine %s running without a start call", ms[0].ID)
		}
		lat = append(lat, at.Sub(t0))
		time.Sleep(100 * time.Millisecond) // the request bucket refills
	}
	out.FullListings = e.cloud.Stats().Calls[sim.CallList] - lists
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	ms := func(d time.Duration) float64 { return math.Round(float64(d)/1e4) / 100 }
	out.MedianMS = ms(lat[len(lat)/2])
	out.P90MS = ms(lat[min(len(lat)-1, int(math.Ceil(0.9*float64(len(lat))))-1)])
	out.MaxMS = ms(lat[len(lat)-1])
	if err := e.close(); err != nil {
		return out, err
	}
	out.PeakRSSMB, out.CPUSeconds = footprint()
	return out, nil
}

// callTimes remembers when the provider was first asked to start each
// machine.
type callTimes struct {
	mu sync.Mutex
	at map[string]time.Time
}

func (c *callTimes) note(ps ...muster.StartParams) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range ps {
		if _, ok := c.at[p.MachineID]; !ok {
			c.at[p.MachineID] = now
		}
	}
}

func (c *callTimes) get(id string) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.at[id]
	return t, ok
}

// timedProvider is the sim's provider noting when starts reach it.
type timedProvider struct {
	*sim.Provider
	calls *callTimes
}

var (
	_ muster.Provider     = (*timedProvider)(nil)
	_ muster.BatchStarter = (*timedProvider)(nil)
	_ muster.Networking   = (*timedProvider)(nil)
)

func (t *timedProvider) StartInstance(ctx context.Context, p muster.StartParams) (muster.StartResult, error) {
	t.calls.note(p)
	return t.Provider.StartInstance(ctx, p)
}

func (t *timedProvider) StartInstances(ctx context.Context, ps []muster.StartParams) []muster.StartOutcome {
	t.calls.note(ps...)
	return t.Provider.StartInstances(ctx, ps)
}

// binaries is an agent binary catalogue that has every arch.
type binaries struct{}

func (binaries) FindAgentBinaries(_ context.Context, version, os, arch string) ([]muster.AgentBinary, error) {
	return []muster.AgentBinary{{Version: version, OS: os, Arch: arch, URL: "https://example.invalid/muster-" + arch}}, nil
}

// trace prints the sim's counters every 250ms (MUSTER_BENCH_TRACE set).
func trace(ctx context.Context, e *env, start time.Time) {
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		st := e.cloud.Stats()
		fmt.Fprintf(os.Stderr, "%6.2fs instances %5d calls %5d throttled %5d\n", time.Since(start).Seconds(), st.Instances, st.Calls[sim.CallStart], st.Throttled[sim.CallStart])
	}
}
