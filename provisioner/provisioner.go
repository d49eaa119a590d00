package provisioner

import (
	"context"
	"maps"

	"fmt"
	"log/slog"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
)

// Actor is the actor of the events the provisioner appends.
const Actor = "provisioner"

// Provisioner runs the engine for one model. Create it with New and run it
// with Run, once.
type Provisioner struct {
	cfg         Config
	modelUUID   string
	cloud       string // the key of the capacity memory (Z7)
	clock       muster.Clock
	log         *slog.Logger
	obs         Observer
	lim         *limiter
	settings    atomic.Pointer[muster.Settings] // read by workers
	zoneView    atomic.Pointer[[]ZoneInfo]      // the zone table as Zones reports it
	harvestMu   sync.Mutex                      // guards harvestView
	harvestView HarvestPlan                     // what HarvestPlan reports (R6, R7)

	rndMu sync.Mutex
	rnd   *rand.Rand

	binMu    sync.Mutex
	binCache map[string]binariesEntry // arch → agent binaries

	results chan any
	fatal   chan error // a worker panicked
	ran     atomic.Bool

	w *writer // batches records and events (E4)

	// Owned by the loop.
	zones        *zoneTable
	zoneGen      int  // zones.gen when zoneView was taken
	withZones    bool // the provider has zones (Z5)
	pool         *pool
	busy         int                     // pool jobs submitted and not yet done
	rev          int64                   // revision of the last change set handled
	waiting      map[*startJob]time.Time // starts waiting out a retry delay → when it ends
	delayTimer   muster.Timer
	delayNext    time.Time // when delayTimer fires
	harvest      muster.HarvestMode
	firstDone    bool
	state        map[string]*mstate
	view         map[string]*viewEntry      // listed instances by id
	byMachine    map[string]map[string]bool // machine id → listed instance ids tagged with it
	released     map[string]bool
	stoppingInst map[string]bool
	retryAt      map[string]retryEntry
	young        map[string]time.Time // young or quarantined unknown instance → when it may be harvested
	tripped      []string             // unknown instances the harvest breaker held back (R7)
	breakerMsg   string               // why the last pass harvested nothing, "" when it was fine
	// groups are the spread groups whose members the zone table knows:
	// every group seen by the last full pass or read since (E1: a start
	// does not read its whole group again).
	groups     map[string]bool
	resync     muster.Timer
	retryTimer muster.Timer
	retryNext  time.Time // when retryTimer fires
	youngTimer muster.Timer
	// counted is every machine's key as last read, counts their totals
	// (Observer.Machines); countsChanged says they are to be reported.
	counted       map[string]MachineKey
	counts        map[MachineKey]int
	countsChanged bool

	fleetHealth // R1–R5 (health.go, replace.go, rebalance.go)
}

// mstate is the loop's marks for one machine.
type mstate struct {
	job      *startJob // non-nil while starting (P6)
	stopping bool
	deferred bool
	recheck  bool // changed after its start failed: read again when the start ends
}

type viewEntry struct {
	inst muster.Instance
	seen time.Time
	own  bool // started by this provisioner and not yet seen in a listing
}

type retryEntry struct {
	at time.Time
	n  int
}

// New checks cfg and returns a provisioner.
func New(cfg Config) (*Provisioner, error) {
	switch {
	case cfg.ControllerUUID == "":
		return nil, muster.Errorf(muster.EInvalid, "provisioner: no controller uuid")
	case cfg.Model.UUID == "":
		return nil, muster.Errorf(muster.EInvalid, "provisioner: no model uuid")
	case cfg.Store == nil:
		return nil, muster.Errorf(muster.EInvalid, "provisioner: no store")
	case cfg.Provider == nil:
		return nil, muster.Errorf(muster.EInvalid, "provisioner: no provider")
	}
	if err := cfg.Model.Settings.Validate(); err != nil {
		return nil, fmt.Errorf("provisioner: model %s settings: %w", cfg.Model.Name, err)
	}
	if cfg.Clock == nil {
		cfg.Clock = muster.SystemClock
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	p := &Provisioner{
		cfg:          cfg,
		modelUUID:    cfg.Model.UUID,
		cloud:        cfg.Cloud,
		clock:        cfg.Clock,
		log:          cfg.Logger.With("model", cfg.Model.Name),
		obs:          cfg.Observer,
		results:      make(chan any, 64),
		fatal:        make(chan error, 1),
		harvest:      cfg.Model.Settings.HarvestMode,
		state:        map[string]*mstate{},
		view:         map[string]*viewEntry{},
		byMachine:    map[string]map[string]bool{},
		released:     map[string]bool{},
		stoppingInst: map[string]bool{},
		retryAt:      map[string]retryEntry{},
		young:        map[string]time.Time{},
		waiting:      map[*startJob]time.Time{},
		groups:       map[string]bool{},
		binCache:     map[string]binariesEntry{},
		counted:      map[string]MachineKey{},
		counts:       map[MachineKey]int{},
		fleetHealth:  newFleetHealth(),
	}
	if p.obs == nil {
		p.obs = nopObserver{}
	}
	if p.cloud == "" {
		p.cloud = "model/" + cfg.Model.UUID
	}
	p.rnd = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	s := cfg.Model.Settings
	p.settings.Store(&s)
	p.lim = newLimiter(p.clock, s.RateLimitRate, s.RateLimitBurst)
	p.zones = newZoneTable(p.intN)
	return p, nil
}

func (p *Provisioner) intN(n int) int {
	p.rndMu.Lock()
	defer p.rndMu.Unlock()
	return p.rnd.IntN(n)
}

// jitter returns d plus up to a fifth of d at random: never shorter than
// d, so a wait is at least what the settings say.
func (p *Provisioner) jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	p.rndMu.Lock()
	defer p.rndMu.Unlock()
	return d + time.Duration(p.rnd.Int64N(int64(d)/5+1))
}

// Zones returns the zone table (Z1) as of the loop's last step. It is safe
// for concurrent use.
func (p *Provisioner) Zones() []ZoneInfo {
	if v := p.zoneView.Load(); v != nil {
		return append([]ZoneInfo(nil), (*v)...)
	}
	return nil
}

// Settings returns the settings in force.
func (p *Provisioner) Settings() muster.Settings { return *p.settings.Load() }

// Run runs the provisioner until ctx ends (it returns nil then) or a fatal
// error occurs (P1): a failure to watch the model, to list instances or
// to read or write machines. On return every worker has stopped.
func (p *Provisioner) Run(ctx context.Context) error {
	if !p.ran.CompareAndSwap(false, true) {
		return muster.Errorf(muster.EInvalid, "provisioner: Run called twice")
	}
	defer close(p.ended)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w, err := p.cfg.Store.Watch(ctx, p.modelUUID, 0, muster.ChangeMachine, muster.ChangeModel)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("watch model %s: %w", p.cfg.Model.Name, err)
	}
	defer w.Close()
	// The settings of the store, not those the controller started with:
	// a restarted provisioner must not make its first pass with a stale
	// harvest mode.
	m, err := p.cfg.Store.Model(ctx, p.modelUUID)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("read model %s: %w", p.cfg.Model.Name, err)
	}
	if err := m.Settings.Validate(); err == nil {
		s := m.Settings
		p.settings.Store(&s)
		p.harvest = s.HarvestMode
		p.lim.configure(s.RateLimitRate, s.RateLimitBurst)
	}
	s := p.settings.Load()
	p.w = newWriter(ctx, p.cfg.Store, p.modelUUID)
	p.pool = newPool(ctx, s.NumProvisionWorkers, p.obs.Queue)
	p.pool.onPanic = func(v any) {
		select {
		case p.fatal <- muster.Errorf(muster.EInternal, "provisioner worker panic: %v", v):
		default:
		}
	}
	defer func() {
		cancel()
		p.pool.close()
		p.w.wait()
		for _, t := range []muster.Timer{p.resync, p.retryTimer, p.youngTimer, p.delayTimer, p.healthTimer} {
			if t != nil {
				t.Stop()
			}
		}
	}()
	p.log.Info("provisioner started")
	err = p.loop(ctx, w)
	if ctx.Err() != nil {
		p.log.Info("provisioner stopped")
		return nil
	}
	p.log.Error("provisioner failed", "err", err)
	return err
}

func timerC(t muster.Timer) <-chan time.Time {
	if t == nil {
		return nil
	}
	return t.C()
}

// wake is what woke the loop.
type wake int

const (
	wakeNone wake = iota // nothing was ready (non-blocking receive only)
	wakeDone
	wakeChanges
	wakeFatal
	wakeResult
	wakeResync
	wakeRetry
	wakeYoung
	wakeDelay
	wakeHealth
	wakeRequest
)

// received is one thing the loop received.
type received struct {
	wake wake
	cs   muster.ChangeSet
	ok   bool // the watcher's channel was open
	err  error
	r    any
	req  func(ctx context.Context) error
}

// receive takes the next thing for the loop to do; without block it
// returns wakeNone at once when nothing is ready.
func (p *Provisioner) receive(ctx context.Context, w muster.Watcher, block bool) received {
	if !block {
		select {
		case <-ctx.Done():
			return received{wake: wakeDone}
		case cs, ok := <-w.Changes():
			return received{wake: wakeChanges, cs: cs, ok: ok}
		case err := <-p.fatal:
			return received{wake: wakeFatal, err: err}
		case r := <-p.results:
			return received{wake: wakeResult, r: r}
		case <-timerC(p.resync):
			return received{wake: wakeResync}
		case <-timerC(p.retryTimer):
			return received{wake: wakeRetry}
		case <-timerC(p.youngTimer):
			return received{wake: wakeYoung}
		case <-timerC(p.delayTimer):
			return received{wake: wakeDelay}
		case <-timerC(p.healthTimer):
			return received{wake: wakeHealth}
		case fn := <-p.requests:
			return received{wake: wakeRequest, req: fn}
		default:
			return received{wake: wakeNone}
		}
	}
	select {
	case <-ctx.Done():
		return received{wake: wakeDone}
	case cs, ok := <-w.Changes():
		return received{wake: wakeChanges, cs: cs, ok: ok}
	case err := <-p.fatal:
		return received{wake: wakeFatal, err: err}
	case r := <-p.results:
		return received{wake: wakeResult, r: r}
	case <-timerC(p.resync):
		return received{wake: wakeResync}
	case <-timerC(p.retryTimer):
		return received{wake: wakeRetry}
	case <-timerC(p.youngTimer):
		return received{wake: wakeYoung}
	case <-timerC(p.delayTimer):
		return received{wake: wakeDelay}
	case <-timerC(p.healthTimer):
		return received{wake: wakeHealth}
	case fn := <-p.requests:
		return received{wake: wakeRequest, req: fn}
	}
}

func (p *Provisioner) loop(ctx context.Context, w muster.Watcher) error {
	for {
		// The zone table is the loop's; readers get a copy of each step's
		// that changed it.
		if p.zoneGen != p.zones.gen || p.zoneView.Load() == nil {
			p.zoneGen = p.zones.gen
			zs := p.zones.snapshot()
			p.zoneView.Store(&zs)
		}
		if p.countsChanged {
			p.countsChanged = false
			p.obs.Machines(maps.Clone(p.counts))
		}
		in := p.receive(ctx, w, p.cfg.Idle == nil)
		if in.wake == wakeNone {
			// Nothing is ready: the loop has handled everything up to
			// p.rev and waits for a change, a timer or its p.busy jobs.
			p.cfg.Idle(p.rev, p.busy)
			in = p.receive(ctx, w, true)
		}
		var err error
		switch in.wake {
		case wakeDone:
			return nil
		case wakeChanges:
			if !in.ok {
				if ctx.Err() != nil {
					return nil
				}
				return fmt.Errorf("watch model %s: %w", p.cfg.Model.Name, w.Err())
			}
			err = p.handleChanges(ctx, in.cs)
			p.rev = in.cs.Revision
		case wakeFatal:
			return in.err
		case wakeResult:
			switch r := in.r.(type) {
			case startResult:
				err = p.handleStartResult(ctx, r)
			case stopResult:
				p.handleStopResult(r)
			case prepared:
				p.handlePrepared(r)
			case attemptFailed:
				p.handleAttemptFailed(r)
			case retryNoted:
				p.handleRetryNoted(r)
			case jobDone:
				p.busy--
			case replaceStopped:
				err = p.handleReplaceStopped(ctx, r)
			case loopFunc:
				r(p)
			}
		case wakeResync:
			err = p.fullPass(ctx)
		case wakeRetry:
			p.retryTimer = nil
			err = p.autoRetry(ctx)
		case wakeYoung:
			p.youngTimer = nil
			p.harvestMatured()
		case wakeDelay:
			p.delayTimer = nil
			p.delayNext = time.Time{}
			p.delaysOver()
		case wakeHealth:
			p.healthTimer = nil
			err = p.remediate(ctx)
		case wakeRequest:
			err = in.req(ctx)
		}
		if err != nil {
			return err
		}
	}
}

// jobDone is what every pool job sends last, so that the loop knows how
// many are still queued or running (Config.Idle).
type jobDone struct{}

// submit queues a job on the pool; called by the loop only.
func (p *Provisioner) submit(job func(ctx context.Context)) {
	p.busy++
	p.pool.submit(func(ctx context.Context) {
		defer p.send(ctx, jobDone{})
		job(ctx)
	})
}

// send hands a worker's result to the loop, or drops it on shutdown.
func (p *Provisioner) send(ctx context.Context, r any) {
	select {
	case p.results <- r:
	case <-ctx.Done():
	}
}

func (p *Provisioner) handleChanges(ctx context.Context, cs muster.ChangeSet) error {
	// A resync (the watcher fell behind a trimmed change log, S10) names
	// only the machines that still exist: a full pass forgets the others.
	if !p.firstDone || cs.Resync {
		p.healthDirty = true
		if err := p.fullPass(ctx); err != nil {
			return err
		}
	} else if len(cs.Machines) > 0 {
		if err := p.incremental(ctx, cs.Machines); err != nil {
			return err
		}
	}
	if cs.Model {
		p.healthDirty = true
		if err := p.reloadModel(ctx); err != nil {
			return err
		}
	}
	return p.remediateIfDirty(ctx)
}

// reloadModel applies changed settings: pool size (P17), rate limits,
// resync interval and harvest mode (P18).
func (p *Provisioner) reloadModel(ctx context.Context) error {
	m, err := p.cfg.Store.Model(ctx, p.modelUUID)
	if err != nil {
		return fmt.Errorf("read model %s: %w", p.cfg.Model.Name, err)
	}
	old := *p.settings.Load()
	s := m.Settings
	p.settings.Store(&s)
	if s.NumProvisionWorkers != old.NumProvisionWorkers {
		p.log.Info("provision workers resized", "from", old.NumProvisionWorkers, "to", s.NumProvisionWorkers)
		p.pool.resize(s.NumProvisionWorkers)
	}
	if s.RateLimitRate != old.RateLimitRate || s.RateLimitBurst != old.RateLimitBurst {
		p.lim.configure(s.RateLimitRate, s.RateLimitBurst)
	}
	if s.ResyncInterval != old.ResyncInterval && p.resync != nil {
		p.resync.Reset(s.ResyncInterval)
	}
	if s.HarvestMode != p.harvest {
		prev := p.harvest
		p.harvest = s.HarvestMode
		p.log.Info("harvest mode changed", "from", prev, "to", s.HarvestMode)
		if s.HarvestMode.Unknown() && !prev.Unknown() {
			return p.fullPass(ctx)
		}
	}
	return nil
}

// flagsOf returns the loop's marks for a machine.
func (p *Provisioner) flagsOf(id string) flags {
	st := p.state[id]
	if st == nil {
		return flags{}
	}
	return flags{starting: st.job != nil, stopping: st.stopping, deferred: st.deferred}
}

func (p *Provisioner) stateOf(id string) *mstate {
	st := p.state[id]
	if st == nil {
		st = &mstate{}
		p.state[id] = st
	}
	return st
}

func (p *Provisioner) tidy(id string) {
	if st := p.state[id]; st != nil && st.job == nil && !st.stopping && !st.deferred && !st.recheck {
		delete(p.state, id)
	}
}

// count counts m as read now.
func (p *Provisioner) count(m *muster.Machine) {
	k := MachineKey{m.Status, m.InstanceStatus}
	old, ok := p.counted[m.ID]
	if ok && old == k {
		return
	}
	if ok {
		p.discount(old)
	}
	p.counted[m.ID] = k
	p.counts[k]++
	p.countsChanged = true
}

// uncount stops counting a machine that no longer exists.
func (p *Provisioner) uncount(id string) {
	if k, ok := p.counted[id]; ok {
		delete(p.counted, id)
		p.discount(k)
		p.countsChanged = true
	}
}

func (p *Provisioner) discount(k MachineKey) {
	if p.counts[k]--; p.counts[k] <= 0 {
		delete(p.counts, k)
	}
}

// clearCounts forgets every count, before the machines are read in full.
func (p *Provisioner) clearCounts() {
	clear(p.counted)
	clear(p.counts)
	p.countsChanged = true
}

// forget drops a machine that no longer exists (P1).
func (p *Provisioner) forget(id string) {
	p.zones.forget(id)
	p.forgetHealth(id)
	delete(p.retryAt, id)
	if st := p.state[id]; st != nil && st.job == nil && !st.stopping {
		delete(p.state, id)
	}
}

// incremental handles a change of some machines (E1: no listing).
func (p *Provisioner) incremental(ctx context.Context, ids []string) error {
	ms, err := p.cfg.Store.Machines(ctx, p.modelUUID, ids)
	if err != nil {
		return fmt.Errorf("read machines: %w", err)
	}
	found := make(map[string]bool, len(ms))
	for i := range ms {
		found[ms[i].ID] = true
		p.count(&ms[i])
	}
	for _, id := range ids {
		if !found[id] {
			p.forget(id)
			p.uncount(id)
		}
	}
	return p.process(ctx, ms, nil, nil)
}

// fullPass lists the instances, reads every machine, adopts and
// de-duplicates instances (C2, C3), finds unknown instances (H5) and
// handles every machine. It runs at start, every resync-interval (P19) and
// when the harvest mode comes to include unknown instances (P18).
func (p *Provisioner) fullPass(ctx context.Context) error {
	s := p.settings.Load()
	defer func() {
		if p.resync == nil {
			p.resync = p.clock.NewTimer(s.ResyncInterval)
		} else {
			p.resync.Stop()
			p.resync.Reset(s.ResyncInterval)
		}
	}()
	var insts []muster.Instance
	err := p.call(ctx, "instances", func(ctx context.Context) error {
		var err error
		insts, err = p.cfg.Provider.Instances(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("list instances: %w", err)
	}
	ms, err := p.cfg.Store.Machines(ctx, p.modelUUID, nil)
	if err != nil {
		return fmt.Errorf("read machines: %w", err)
	}
	p.clearCounts()
	for i := range ms {
		p.count(&ms[i])
	}
	rel, err := p.cfg.Store.ReleasedInstances(ctx, p.modelUUID)
	if err != nil {
		return fmt.Errorf("read released instances: %w", err)
	}
	p.released = rel
	if err := p.refreshZones(ctx); err != nil {
		return err
	}
	p.zones.learn(p.readBlocks(ctx))
	now := p.clock.Now()
	p.rebuildView(insts, now, s.HarvestMinAge)

	known := make(map[string]*muster.Machine, len(ms))
	recorded := map[string]bool{}
	for i := range ms {
		m := &ms[i]
		known[m.ID] = m
		if id := m.InstanceID(); id != "" {
			recorded[id] = true
		}
	}
	p.rebuildZones(ms, known)

	// C2 and C3.
	plan := planAdoption(ms, p.flagsOf, p.adoptable, recorded)
	stops := plan.Stop
	if err := p.applyAdoption(ctx, ms, plan, recorded); err != nil {
		return err
	}
	if err := p.repairTokens(ctx, ms); err != nil {
		return err
	}

	// H2, H5, H6.
	if p.harvest.Unknown() {
		in := make([]unknownInput, 0, len(p.view))
		for _, e := range p.view {
			in = append(in, unknownInput{Inst: e.inst, Seen: e.seen})
		}
		old, young := findUnknown(in,
			func(inst muster.Instance) bool { return recorded[inst.ID] || known[inst.MachineID] != nil },
			func(inst muster.Instance) bool { return p.released[inst.ID] || p.stoppingInst[inst.ID] },
			now, s.HarvestMinAge)
		p.young = young
		p.harvestUnknown(old, stops, now, true)
		p.armYoung()
	} else {
		p.young = map[string]time.Time{}
		p.tripped = nil
		p.setBreaker("")
		p.armYoung()
	}
	wasFirst := !p.firstDone
	err = p.process(ctx, ms, stops, known)
	p.firstDone = true
	if wasFirst {
		p.log.Info("first pass done", "machines", len(ms), "instances", len(p.view))
	}
	return err
}

// rebuildZones forgets the machines that are gone and rebuilds the zone
// table from the machines and the listed instances (Z1), keeping the zones
// planned for starting machines.
func (p *Provisioner) rebuildZones(ms []muster.Machine, known map[string]*muster.Machine) {
	for id := range p.state {
		if known[id] == nil {
			p.forget(id)
		}
	}
	for id := range p.retryAt {
		if known[id] == nil {
			delete(p.retryAt, id)
		}
	}
	for _, id := range p.zones.machines() {
		if known[id] == nil && p.state[id] == nil {
			p.zones.forget(id)
		}
	}
	p.groups = map[string]bool{}
	for _, m := range ms {
		p.zones.setGroup(m.ID, m.Group)
		if m.Group != "" {
			p.groups[m.Group] = true
		}
		if p.flagsOf(m.ID).starting {
			continue
		}
		zone := ""
		if m.HasInstance() {
			zone = m.Instance.Zone
			if e := p.view[m.InstanceID()]; e != nil && e.inst.Zone != "" {
				zone = e.inst.Zone
			}
		} else {
			for id := range p.byMachine[m.ID] {
				zone = p.view[id].inst.Zone
				break
			}
		}
		p.zones.set(m.ID, zone)
	}

}

// applyAdoption records the instances plan adopts (C2) in one transaction
// and updates ms, recorded and the zone table to match. An instance whose
// record is refused is not adopted, and not stopped either.
func (p *Provisioner) applyAdoption(ctx context.Context, ms []muster.Machine, plan adoptionPlan, recorded map[string]bool) error {
	adopt, stops := plan.Adopt, plan.Stop
	if len(adopt) == 0 {
		return nil
	}
	index := make(map[string]int, len(ms))
	for i := range ms {
		index[ms[i].ID] = i
	}
	errs, err := p.cfg.Store.RecordInstances(ctx, p.modelUUID, adopt)
	if err != nil {
		return fmt.Errorf("record adopted instances: %w", err)
	}
	var evs []muster.Event
	for i, r := range adopt {
		if errs != nil && errs[i] != nil {
			p.log.Warn("instance not adopted", "machine", r.MachineID, "instance", r.Info.InstanceID, "err", errs[i])
			delete(stops, r.Info.InstanceID)
			continue
		}
		m := &ms[index[r.MachineID]]
		info := r.Info
		m.Instance = &info
		m.InstanceStatus = muster.InstanceRunning
		recorded[info.InstanceID] = true
		p.zones.set(m.ID, info.Zone)
		evs = append(evs, p.newEvent(m.ID, "adopt", "instance "+info.InstanceID+" adopted"))
		p.log.Info("instance adopted", "machine", m.ID, "instance", info.InstanceID, "zone", info.Zone)
	}
	p.appendEvents(ctx, evs...)
	return nil
}

// gone reports whether a listed instance is on its way out. A "stopped"
// instance is not: it still exists (an EC2 instance can be started again, a
// Docker container stopped behind muster's back still holds its volumes),
// so it must still be harvested when its machine dies.
func gone(state string) bool {
	switch state {
	case "terminated", "shutting-down":
		return true
	}
	return false
}

// normalize fills MachineID and LaunchToken from the tags and reports
// whether the instance is this model's (H7).
func (p *Provisioner) normalize(inst *muster.Instance) bool {
	if len(inst.Tags) > 0 {
		if inst.Tags[muster.TagController] != p.cfg.ControllerUUID || inst.Tags[muster.TagModel] != p.modelUUID {
			return false
		}
		if inst.MachineID == "" {
			inst.MachineID = inst.Tags[muster.TagMachine]
		}
		if inst.LaunchToken == "" {
			inst.LaunchToken = inst.Tags[muster.TagLaunchToken]
		}
	}
	return true
}

// rebuildView replaces the view with a listing, keeping instances this
// provisioner started recently that the listing does not show yet
// (listing lag).
func (p *Provisioner) rebuildView(insts []muster.Instance, now time.Time, minAge time.Duration) {
	old := p.view
	p.view = make(map[string]*viewEntry, len(insts))
	p.byMachine = map[string]map[string]bool{}
	for _, inst := range insts {
		if gone(inst.State) || !p.normalize(&inst) {
			continue
		}
		seen := now
		if e := old[inst.ID]; e != nil {
			seen = e.seen
		}
		p.viewAdd(inst, seen, false)
	}
	for id, e := range old {
		if e.own && p.view[id] == nil && now.Sub(e.seen) < max(minAge, time.Minute) {
			p.viewAdd(e.inst, e.seen, true)
		}
	}
}

func (p *Provisioner) viewAdd(inst muster.Instance, seen time.Time, own bool) {
	p.view[inst.ID] = &viewEntry{inst: inst, seen: seen, own: own}
	if inst.MachineID != "" {
		set := p.byMachine[inst.MachineID]
		if set == nil {
			set = map[string]bool{}
			p.byMachine[inst.MachineID] = set
		}
		set[inst.ID] = true
	}
}

func (p *Provisioner) viewRemove(id string) {
	e := p.view[id]
	if e == nil {
		return
	}
	delete(p.view, id)
	if set := p.byMachine[e.inst.MachineID]; set != nil {
		delete(set, id)
		if len(set) == 0 {
			delete(p.byMachine, e.inst.MachineID)
		}
	}
}

// taggedInstances returns the listed instances tagged with a machine id
// that are neither being stopped nor released, by id.
func (p *Provisioner) taggedInstances(machineID string) []muster.Instance {
	ids := p.taggedWith(machineID)
	out := make([]muster.Instance, len(ids))
	for i, id := range ids {
		out[i] = p.view[id].inst
	}
	return out
}

func (p *Provisioner) taggedWith(machineID string) []string {
	var out []string
	for id := range p.byMachine[machineID] {
		if !p.stoppingInst[id] && !p.released[id] {
			out = append(out, id)
		}
	}
	sort.Strings(out)
	return out
}

// refreshZones refreshes the zone table from the provider (P2, Z2).
func (p *Provisioner) refreshZones(ctx context.Context) error {
	var zs []muster.Zone
	err := p.call(ctx, "zones", func(ctx context.Context) error {
		var err error
		zs, err = p.cfg.Provider.Zones(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("list zones: %w", err)
	}
	p.withZones = len(zs) > 0
	for _, z := range p.zones.refresh(zs) {
		p.log.Warn("zone unavailable but kept for its machines", "zone", z)
	}
	return nil
}

// process handles machines read from the store (P3–P5). stops are extra
// instances to stop in the same call as the dead machines' (H4), with
// their kind. known, when set, holds every machine of the model.
func (p *Provisioner) process(ctx context.Context, ms []muster.Machine, stops map[string]string, known map[string]*muster.Machine) error {
	byID := make(map[string]*muster.Machine, len(ms))
	for i := range ms {
		byID[ms[i].ID] = &ms[i]
	}
	p.scheduleRetries(ms)
	p.observeHealth(ms)
	for _, m := range ms {
		if st := p.state[m.ID]; st != nil && st.job != nil && st.job.ended.Load() {
			st.recheck = true
		}
	}
	pl := classifyAll(ms, p.flagsOf)

	if len(pl.MakeDead) > 0 {
		us := make([]muster.MachineUpdate, len(pl.MakeDead))
		for i, id := range pl.MakeDead {
			us[i] = muster.MachineUpdate{ID: id, Life: muster.Ptr(muster.LifeDead)}
		}
		done, err := p.updateEach(ctx, us)
		if err != nil {
			return fmt.Errorf("make machines dead: %w", err)
		}
		for _, id := range pl.MakeDead {
			if done[id] {
				byID[id].Life = muster.LifeDead
			}
		}
	}
	for _, id := range pl.Defer {
		st := p.stateOf(id)
		st.deferred = true
		if st.job != nil {
			st.job.markDead()
			// A start waiting out a retry delay ends now (P13).
			if _, ok := p.waiting[st.job]; ok {
				delete(p.waiting, st.job)
				p.attempt(st.job)
			}
		}
		p.log.Info("machine dead while starting; stop deferred", "machine", id)
	}
	var dead []muster.Machine
	for _, id := range pl.Dead {
		if byID[id].Life == muster.LifeDead {
			dead = append(dead, *byID[id])
		}
	}
	p.handleDead(dead, stops)
	if len(pl.Pending) > 0 {
		if known == nil { // a full pass has just refreshed the zones
			if err := p.refreshZones(ctx); err != nil {
				return err
			}
		}
		pending := make([]muster.Machine, len(pl.Pending))
		for i, id := range pl.Pending {
			pending[i] = *byID[id]
		}
		return p.queueStarts(ctx, pending)
	}
	return nil
}

// updateEach applies updates in one transaction; if a machine is gone it
// falls back to one update per machine, skipping the missing ones. It
// returns the ids updated.
func (p *Provisioner) updateEach(ctx context.Context, us []muster.MachineUpdate) (map[string]bool, error) {
	done := make(map[string]bool, len(us))
	err := p.cfg.Store.UpdateMachines(ctx, p.modelUUID, us)
	if err == nil {
		for _, u := range us {
			done[u.ID] = true
		}
		return done, nil
	}
	if !muster.IsCode(err, muster.ENotFound) {
		return nil, err
	}
	for _, u := range us {
		err := p.cfg.Store.UpdateMachines(ctx, p.modelUUID, []muster.MachineUpdate{u})
		switch {
		case err == nil:
			done[u.ID] = true
		case muster.IsCode(err, muster.ENotFound):
		default:
			return nil, err
		}
	}
	return done, nil
}

// handleDead queues one stop job for the dead machines and the extra
// instances (P4, H1–H4, P14).
func (p *Provisioner) handleDead(dead []muster.Machine, extra map[string]string) {
	stop, _ := planDead(dead, p.harvest,
		func(id string) bool { return p.view[id] != nil },
		p.taggedWith)
	j := &stopJob{kinds: map[string]string{}, machines: dead, since: p.clock.Now()}
	for _, id := range stop {
		if !p.stoppingInst[id] {
			j.instances = append(j.instances, id)
			j.kinds[id] = "dead"
		}
	}
	extraIDs := make([]string, 0, len(extra))
	for id := range extra {
		extraIDs = append(extraIDs, id)
	}
	sort.Strings(extraIDs)
	for _, id := range extraIDs {
		if _, dup := j.kinds[id]; !dup && !p.stoppingInst[id] && !p.released[id] {
			j.instances = append(j.instances, id)
			j.kinds[id] = extra[id]
		}
	}
	if len(j.instances) == 0 && len(j.machines) == 0 {
		return
	}
	for _, id := range j.instances {
		p.stoppingInst[id] = true
	}
	for _, m := range dead {
		p.stateOf(m.ID).stopping = true
	}
	p.submit(func(ctx context.Context) { p.runStop(ctx, j) })
}

func (p *Provisioner) handleStopResult(r stopResult) {
	for _, id := range r.job.instances {
		delete(p.stoppingInst, id)
		if r.err == nil {
			p.stopped(r.job, id)
		}
	}
	p.armYoung()
	for _, m := range r.job.machines {
		if st := p.state[m.ID]; st != nil {
			st.stopping = false
		}
		if r.err == nil {
			if m.KeepInstance && m.InstanceID() != "" {
				p.released[m.InstanceID()] = true
			}
			p.forget(m.ID)
		}
		p.tidy(m.ID)
	}
	if r.err != nil {
		// The machines stay dead and are handled again on the next pass (H4).
		p.log.Warn("harvest failed", "err", r.err)
	}
}

// scheduleRetries notes the machines waiting for an automatic retry (P16)
// and arms the retry timer.
func (p *Provisioner) scheduleRetries(ms []muster.Machine) {
	for _, m := range ms {
		if m.Life == muster.LifeAlive && !m.HasInstance() && m.InstanceStatus == muster.InstanceProvisioningError &&
			m.Status != muster.StatusPending && !m.NextRetry.IsZero() && !p.flagsOf(m.ID).starting {
			p.retryAt[m.ID] = retryEntry{at: m.NextRetry, n: m.AutoRetries}
		} else {
			delete(p.retryAt, m.ID)
		}
	}
	p.armRetry()
}

func (p *Provisioner) armRetry() {
	var next time.Time
	for _, e := range p.retryAt {
		if next.IsZero() || e.at.Before(next) {
			next = e.at
		}
	}
	if p.retryTimer != nil && next.Equal(p.retryNext) {
		return // armed for that time already
	}
	if p.retryTimer != nil {
		p.retryTimer.Stop()
		p.retryTimer = nil
	}
	p.retryNext = next
	if next.IsZero() {
		return
	}
	p.retryTimer = p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0))
}

// autoRetry resets the machines whose automatic retry is due to pending
// (P16); the store's change brings them back to be started.
func (p *Provisioner) autoRetry(ctx context.Context) error {
	now := p.clock.Now()
	var us []muster.MachineUpdate
	for id, e := range p.retryAt {
		if e.at.After(now) {
			continue
		}
		delete(p.retryAt, id)
		us = append(us, muster.MachineUpdate{
			ID:              id,
			Status:          muster.Ptr(muster.StatusPending),
			StatusMessage:   muster.Ptr(""),
			InstanceStatus:  muster.Ptr(muster.InstanceAllocating),
			InstanceMessage: muster.Ptr(fmt.Sprintf("automatic retry %d", e.n+1)),
			AutoRetries:     muster.Ptr(e.n + 1),
			NextRetry:       muster.Ptr(time.Time{}),
		})
	}
	defer p.armRetry()
	if len(us) == 0 {
		return nil
	}
	sort.Slice(us, func(i, j int) bool { return us[i].ID < us[j].ID })
	done, err := p.updateEach(ctx, us)
	if err != nil {
		return fmt.Errorf("schedule automatic retries: %w", err)
	}
	var evs []muster.Event
	for _, u := range us {
		if done[u.ID] {
			evs = append(evs, p.newEvent(u.ID, "retry", *u.InstanceMessage))
		}
	}
	p.appendEvents(ctx, evs...)
	return nil
}

func (p *Provisioner) armYoung() {
	if p.youngTimer != nil {
		p.youngTimer.Stop()
		p.youngTimer = nil
	}
	p.publishHarvest()
	var next time.Time
	for _, at := range p.young {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if next.IsZero() {
		return
	}
	p.youngTimer = p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0))
}

// harvestMatured stops the unknown instances that have become old enough
// since the last full pass (H6), so none outlives harvest-min-age by a
// whole resync interval.
func (p *Provisioner) harvestMatured() {
	defer p.armYoung()
	if !p.harvest.Unknown() {
		p.young = map[string]time.Time{}
		return
	}
	now := p.clock.Now()
	var due []string
	for id, at := range p.young {
		if at.After(now) {
			continue
		}
		delete(p.young, id)
		if p.view[id] != nil && !p.stoppingInst[id] && !p.released[id] {
			due = append(due, id)
		}
	}
	sort.Strings(due)
	extra := map[string]string{}
	p.harvestUnknown(due, extra, now, false)
	if len(extra) > 0 {
		p.handleDead(nil, extra)
	}
}

func (p *Provisioner) newEvent(machineID, kind, msg string) muster.Event {
	return muster.Event{ModelUUID: p.modelUUID, MachineID: machineID, Time: p.clock.Now(), Actor: Actor, Kind: kind, Message: msg}
}

// appendEvents appends to the model's event log; a failure is logged only:
// the events are a record, not state.
func (p *Provisioner) appendEvents(ctx context.Context, evs ...muster.Event) {
	if len(evs) == 0 || ctx.Err() != nil {
		return
	}
	if err := p.w.events(ctx, evs); err != nil && ctx.Err() == nil {
		p.log.Warn("events not appended", "err", err)
	}
}

// call makes one provider call through the model's rate limiter (E2).
// A throttled call is made again, without counting as a failed attempt,
// up to maxThrottleRetries times; then the throttled error is returned.
// It waits a short, randomly spread delay (so that the calls throttled
// together do not come back in lockstep) and then queues in the limiter
// again, whose rate the throttle has cut; only a call throttled again and
// again backs off for longer (throttleDelay). A start attempt does not
// wait here but in the loop (callOnce, handleThrottled).
func (p *Provisioner) call(ctx context.Context, kind string, fn func(ctx context.Context) error) error {
	for n := 0; ; n++ {
		err := p.callOnce(ctx, kind, fn, n >= maxThrottleRetries)
		if muster.ProviderErrorKindOf(err) != muster.ErrThrottled || ctx.Err() != nil || n >= maxThrottleRetries {
			return err
		}
		if err := p.sleep(ctx, p.spread(throttleDelay(n, p.lim.rateNow()))); err != nil {
			return err
		}
	}
}

// callOnce makes one provider call through the rate limiter (E2) and
// reports its outcome. A throttled call slows the limiter down, unless it
// is the last one its caller will make (last).
func (p *Provisioner) callOnce(ctx context.Context, kind string, fn func(ctx context.Context) error, last bool) error {
	if err := p.lim.wait(ctx); err != nil {
		return err
	}
	start := p.clock.Now()
	err := fn(ctx)
	d := p.clock.Now().Sub(start)
	switch {
	case err == nil:
		p.obs.ProviderCall(kind, "ok", d)
		p.lim.succeeded()
		return nil
	case ctx.Err() != nil:
		p.obs.ProviderCall(kind, "cancelled", d)
		return err
	}
	k := muster.ProviderErrorKindOf(err)
	p.obs.ProviderCall(kind, k.String(), d)
	if k == muster.ErrThrottled && !last {
		p.lim.throttled()
		p.obs.Throttled(kind, p.lim.rateNow())
		p.log.Debug("provider call throttled", "call", kind)
	}
	return err
}

// maxThrottleRetries bounds how often one call is made again after being
// throttled.
const maxThrottleRetries = 16

// spread returns a random duration between d/2 and 3d/2.
func (p *Provisioner) spread(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	p.rndMu.Lock()
	defer p.rndMu.Unlock()
	return d/2 + time.Duration(p.rnd.Int64N(int64(d)+1))
}

// sleep waits d on the clock, or until ctx ends.
func (p *Provisioner) sleep(ctx context.Context, d time.Duration) error {
	return muster.Sleep(ctx, p.clock, d)
}
