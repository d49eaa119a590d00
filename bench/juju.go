package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
)

// Juju's provisioner policy, as its provisioner task behaves (see
// README.md, "--policy juju"): a model written for this benchmark from a
// reading of that behaviour, not a port of its code.
const (
	jujuWorkers    = 16
	jujuRetryDelay = 10 * time.Second
	jujuRetries    = 10 // retries after the first attempt
)

// jujuConfig configures a jujuPolicy.
type jujuConfig struct {
	ControllerUUID string
	ModelUUID      string
	Store          muster.Store
	Provider       muster.Provider
	Clock          muster.Clock  // for the retry delay; default muster.SystemClock
	Workers        int           // default jujuWorkers
	RetryDelay     time.Duration // default jujuRetryDelay
	Retries        int           // default jujuRetries; < 0 means none
}

// jujuPolicy provisions a model's machines the way Juju's provisioner task
// does: every machines-changed event from a lifecycle watcher (machines
// added, or whose life changed) is handled by listing every instance from
// the provider, refreshing the zones, and handing each pending machine to
// a fixed pool of workers, which start it with one StartInstance call each
// and, on any failure, wait a fixed delay and try again, a fixed number of
// times, with no client-side rate limit.
type jujuPolicy struct {
	cfg   jujuConfig
	tasks chan jujuTask

	mu    sync.Mutex
	zones []*jujuZone // nil until the first event

	events     atomic.Int64 // machines-changed events handled
	queued     atomic.Int64 // pending machines seen in events
	unfinished atomic.Int64 // of those, not yet done with by a worker
}

// jujuZone is one zone and the machines the policy counts in it.
type jujuZone struct {
	name     string
	machines map[string]bool // placed here (counted from the listing or chosen)
	failed   map[string]bool // a zone-specific start failure here
	excluded map[string]bool // not allowed by the machine's placement
}

// jujuTask is one machine handed to a worker.
type jujuTask struct {
	info  muster.ProvisioningInfo
	group []string // the machines of its distribution group (itself too)
}

func newJujuPolicy(cfg jujuConfig) *jujuPolicy {
	if cfg.Clock == nil {
		cfg.Clock = muster.SystemClock
	}
	if cfg.Workers == 0 {
		cfg.Workers = jujuWorkers
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = jujuRetryDelay
	}
	if cfg.Retries == 0 {
		cfg.Retries = jujuRetries
	}
	// The pool's queue is unbuffered: the event loop waits for a free
	// worker to take each machine.
	return &jujuPolicy{cfg: cfg, tasks: make(chan jujuTask)}
}

// Run handles machines-changed events until ctx ends (nil) or a store or
// provider call of the event loop fails.
func (p *jujuPolicy) Run(ctx context.Context) error {
	err := p.run(ctx)
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func (p *jujuPolicy) run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	for range p.cfg.Workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case t := <-p.tasks:
					p.start(ctx, t)
				case <-ctx.Done():
					return
				}
			}
		}()
	}
	events := make(chan []string)
	errc := make(chan error, 1)
	go func() { errc <- p.watchLifecycle(ctx, events) }()
	for {
		select {
		case ids := <-events:
			if err := p.processMachines(ctx, ids); err != nil {
				return fmt.Errorf("processing machines: %w", err)
			}
		case err := <-errc:
			return err
		}
	}
}

// watchLifecycle turns the store's change sets into machines-changed
// events as Juju's machine watcher reports them: an initial event with
// every machine, then the machines added, removed or whose life changed,
// coalesced while the consumer is busy. Changes of status or instance
// (the policy's own writes) are not events.
func (p *jujuPolicy) watchLifecycle(ctx context.Context, out chan<- []string) error {
	w, err := p.cfg.Store.Watch(ctx, p.cfg.ModelUUID, 0, muster.ChangeMachine)
	if err != nil {
		return err
	}
	defer w.Close()
	life := map[string]muster.Life{}
	pending := map[string]bool{}
	// The initial event (every machine, from the watcher's first change
	// set) is sent even when empty.
	first, initial := true, true
	for {
		var send chan<- []string
		var ids []string
		if !first && (initial || len(pending) > 0) {
			send = out
			for id := range pending {
				ids = append(ids, id)
			}
			muster.SortMachineIDs(ids)
		}
		select {
		case send <- ids:
			pending, initial = map[string]bool{}, false
		case cs, ok := <-w.Changes():
			if !ok {
				return fmt.Errorf("machine watcher: %v", w.Err())
			}
			first = false
			if len(cs.Machines) == 0 {
				continue
			}
			ms, err := p.cfg.Store.Machines(ctx, p.cfg.ModelUUID, cs.Machines)
			if err != nil {
				return err
			}
			seen := map[string]bool{}
			for _, m := range ms {
				seen[m.ID] = true
				if old, ok := life[m.ID]; !ok || old != m.Life {
					life[m.ID] = m.Life
					pending[m.ID] = true
				}
			}
			for _, id := range cs.Machines {
				if _, ok := life[id]; ok && !seen[id] {
					delete(life, id)
					pending[id] = true
				}
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// processMachines handles one machines-changed event: a full instance
// listing, the zones refreshed, and every pending machine of the event
// queued for a worker.
func (p *jujuPolicy) processMachines(ctx context.Context, ids []string) error {
	p.events.Add(1)
	insts, err := p.cfg.Provider.Instances(ctx)
	if err != nil {
		return fmt.Errorf("listing instances: %w", err)
	}
	if err := p.updateZones(ctx, insts); err != nil {
		return err
	}
	if len(ids) == 0 {
		return nil
	}
	ms, err := p.cfg.Store.Machines(ctx, p.cfg.ModelUUID, ids)
	if err != nil {
		return err
	}
	// Dead machines (stopping their instances) are left out: the
	// benchmark never removes one.
	var pending []string
	for _, m := range ms {
		if m.Life == muster.LifeAlive && !m.HasInstance() &&
			m.InstanceStatus != muster.InstanceProvisioningError && m.Status != muster.StatusError {
			pending = append(pending, m.ID)
		}
	}
	if len(pending) == 0 {
		return nil
	}
	// Counted unfinished from here until a worker is done with each.
	p.unfinished.Add(int64(len(pending)))
	p.queued.Add(int64(len(pending)))
	queued := 0
	defer func() { p.unfinished.Add(int64(queued - len(pending))) }()
	groups, err := p.cfg.Store.DistributionGroups(ctx, p.cfg.ModelUUID, pending)
	if err != nil {
		return err
	}
	infos, err := p.cfg.Store.ProvisioningInfo(ctx, p.cfg.ModelUUID, pending)
	if err != nil {
		return err
	}
	for _, id := range pending {
		info, ok := infos[id]
		if !ok {
			continue // removed meanwhile
		}
		select {
		case p.tasks <- jujuTask{info: info, group: groups[id]}:
			queued++
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// updateZones asks the provider for its zones. The first time it also
// counts the listed instances in their zones; later it keeps the zones
// it knows that are still available (or hold machines) and adds new ones.
func (p *jujuPolicy) updateZones(ctx context.Context, insts []muster.Instance) error {
	zs, err := p.cfg.Provider.Zones(ctx)
	if err != nil {
		return fmt.Errorf("listing zones: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	avail := map[string]bool{}
	for _, z := range zs {
		if z.Available {
			avail[z.Name] = true
		}
	}
	if p.zones == nil {
		p.zones = []*jujuZone{}
		byName := map[string]*jujuZone{}
		for _, z := range zs {
			if avail[z.Name] {
				jz := newJujuZone(z.Name)
				p.zones = append(p.zones, jz)
				byName[z.Name] = jz
			}
		}
		for _, inst := range insts {
			if jz := byName[inst.Zone]; jz != nil && inst.MachineID != "" {
				jz.machines[inst.MachineID] = true
			}
		}
		return nil
	}
	kept := p.zones[:0]
	for _, jz := range p.zones {
		if avail[jz.name] || len(jz.machines) > 0 {
			kept = append(kept, jz)
			delete(avail, jz.name)
		}
	}
	p.zones = kept
	for _, z := range zs {
		if avail[z.Name] {
			p.zones = append(p.zones, newJujuZone(z.Name))
		}
	}
	return nil
}

func newJujuZone(name string) *jujuZone {
	return &jujuZone{name: name, machines: map[string]bool{}, failed: map[string]bool{}, excluded: map[string]bool{}}
}

// pickZone chooses a zone for machine id: among the zones its constraints
// allow and it has not failed in or been excluded from, one with the
// fewest other machines of its group (of all machines when it has no
// group),
// at random among equals. The machine is counted in the chosen zone at
// once, before its start.
func (p *jujuPolicy) pickZone(id string, group []string, cons muster.Constraints) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.zones) == 0 {
		return "", nil
	}
	count := func(jz *jujuZone) int {
		if len(group) == 0 || len(group) == 1 && group[0] == id {
			return len(jz.machines) // no other machine in its group
		}
		n := 0
		for _, g := range group {
			if g != id && jz.machines[g] {
				n++
			}
		}
		return n
	}
	type cand struct {
		jz *jujuZone
		n  int
	}
	var cs []cand
	for _, jz := range p.zones {
		if cons.AllowsZone(jz.name) && !jz.failed[id] && !jz.excluded[id] {
			cs = append(cs, cand{jz, count(jz)})
		}
	}
	if len(cs) == 0 {
		return "", fmt.Errorf("suitable availability zone for machine %s not found", id)
	}
	rand.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
	sort.SliceStable(cs, func(i, j int) bool { return cs[i].n < cs[j].n })
	cs[0].jz.machines[id] = true
	return cs[0].jz.name, nil
}

// failIn moves machine id from the machines of zone to its failures and
// reports whether a zone is left that it has not failed in.
func (p *jujuPolicy) failIn(id, zone string, cons muster.Constraints) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, jz := range p.zones {
		if jz.name == zone {
			delete(jz.machines, id)
			jz.failed[id] = true
		}
	}
	for _, jz := range p.zones {
		if cons.AllowsZone(jz.name) && !jz.failed[id] && !jz.excluded[id] {
			return true
		}
	}
	return false
}

// clearFailures forgets machine id's zone failures; forget also its
// placements.
func (p *jujuPolicy) clearFailures(id string, forget bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, jz := range p.zones {
		delete(jz.failed, id)
		if forget {
			delete(jz.machines, id)
		}
	}
}

// exclude marks the zones not in allowed as excluded for machine id.
func (p *jujuPolicy) exclude(id string, allowed []string) {
	ok := map[string]bool{}
	for _, z := range allowed {
		ok[z] = true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, jz := range p.zones {
		if !ok[jz.name] {
			jz.excluded[id] = true
		}
	}
}

// start is one worker's job for one machine: status "starting", one
// StartInstance call per attempt, a fixed delay between attempts, the
// instance recorded on success and a provisioning error after the last
// attempt. A zone-specific failure (capacity) moves on to another zone
// without using up an attempt until every zone has failed; every other
// failure, throttling included, uses one (Juju's EC2 provider marks all
// errors but zone or subnet constraints as zone-independent).
func (p *jujuPolicy) start(ctx context.Context, t jujuTask) {
	defer p.unfinished.Add(-1)
	id := t.info.MachineID
	nonce := "machine-" + id + ":" + muster.NewUUID()
	// A failed status write is only logged by Juju; here it is ignored.
	p.update(ctx, muster.MachineUpdate{ID: id, Nonce: &nonce,
		InstanceStatus: muster.Ptr(muster.InstanceAllocating), InstanceMessage: muster.Ptr("starting")})
	sp := muster.StartParams{
		ControllerUUID: p.cfg.ControllerUUID,
		ModelUUID:      p.cfg.ModelUUID,
		MachineID:      id,
		Constraints:    t.info.Constraints,
		Base:           t.info.Base,
		Placement:      t.info.Placement,
		Nonce:          nonce,
	}
	derived, err := p.cfg.Provider.DeriveZones(ctx, sp)
	if err != nil {
		p.fail(ctx, id, fmt.Errorf("deriving zones: %w", err))
		return
	}
	if len(derived) > 0 {
		p.exclude(id, derived)
	}
	for attemptsLeft := p.cfg.Retries; ; {
		sp.Zone, err = p.pickZone(id, t.group, t.info.Constraints)
		if err != nil {
			p.fail(ctx, id, err)
			return
		}
		res, err := p.cfg.Provider.StartInstance(ctx, sp)
		if err == nil {
			p.record(ctx, id, nonce, res)
			return
		}
		if ctx.Err() != nil {
			return
		}
		if attemptsLeft <= 0 {
			p.clearFailures(id, true)
			p.fail(ctx, id, fmt.Errorf("cannot start instance for machine %q: %w", id, err))
			return
		}
		used := true
		if sp.Zone != "" && muster.ProviderErrorKindOf(err) == muster.ErrCapacity {
			if p.failIn(id, sp.Zone, t.info.Constraints) {
				used = false // another zone to try first
			} else {
				p.clearFailures(id, false)
			}
		}
		if used {
			attemptsLeft--
		}
		msg := fmt.Sprintf("failed to start machine %s (%v), retrying in %s (%d more attempts)", id, err, p.cfg.RetryDelay, attemptsLeft)
		p.update(ctx, muster.MachineUpdate{ID: id, InstanceMessage: &msg})
		if muster.Sleep(ctx, p.cfg.Clock, p.cfg.RetryDelay) != nil {
			return
		}
	}
}

// record records a started instance; a refused record stops it.
func (p *jujuPolicy) record(ctx context.Context, id, nonce string, res muster.StartResult) {
	errs, err := p.cfg.Store.RecordInstances(ctx, p.cfg.ModelUUID, []muster.InstanceRecord{{MachineID: id, Nonce: nonce, Info: res.Info()}})
	if err == nil && len(errs) > 0 {
		err = errs[0]
	}
	if err != nil && ctx.Err() == nil {
		p.fail(ctx, id, fmt.Errorf("cannot register instance for machine %s: %w", id, err))
		p.cfg.Provider.StopInstances(ctx, res.Instance.ID)
	}
}

// fail marks machine id in provisioning error: it is not tried again.
func (p *jujuPolicy) fail(ctx context.Context, id string, err error) {
	p.update(ctx, muster.MachineUpdate{ID: id, InstanceStatus: muster.Ptr(muster.InstanceProvisioningError), InstanceMessage: muster.Ptr(err.Error())})
}

func (p *jujuPolicy) update(ctx context.Context, u muster.MachineUpdate) error {
	return p.cfg.Store.UpdateMachines(ctx, p.cfg.ModelUUID, []muster.MachineUpdate{u})
}
