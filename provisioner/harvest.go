package provisioner

import (
	"context"
	"fmt"
	"maps"
	"sort"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// planDead applies H1 and H3 to dead machines: which instances to stop and
// which machines to remove. inView reports whether the provider still
// lists an instance; tagged returns the listed instances tagged with a
// machine id. It is pure.
func planDead(dead []muster.Machine, mode muster.HarvestMode, inView func(id string) bool, tagged func(machineID string) []string) (stop, remove []string) {
	seen := map[string]bool{}
	add := func(id string) {
		if !seen[id] {
			seen[id] = true
			stop = append(stop, id)
		}
	}
	for _, m := range dead {
		remove = append(remove, m.ID)
		if !mode.Destroyed() {
			continue
		}
		rec := m.InstanceID()
		if rec != "" && !m.KeepInstance && inView(rec) {
			add(rec)
		}
		// Instances launched for the machine but never recorded (a crash
		// between start and record) are its instances too.
		for _, id := range tagged(m.ID) {
			if id != rec {
				add(id)
			}
		}
	}
	return stop, remove
}

// adoptionPlan is what planAdoption decides.
type adoptionPlan struct {
	Adopt []muster.InstanceRecord // instances to record for their machines (C2)
	Stop  map[string]string       // instance id → "duplicate" (C3)
}

// planAdoption applies C2 and C3 to the machines of a full pass. tagged
// returns the listed instances tagged with a machine id that are neither
// being stopped nor released; recorded holds the instance ids machines
// have recorded. An alive machine without an instance adopts the instance
// of its current launch token: only that one has the credentials stored
// for it (C1). Every other tagged instance of a machine that is not some
// machine's recorded instance is a duplicate, or one launched by an
// earlier attempt whose credentials are gone, and is stopped. Machines
// that are starting, stopping or dead are left to those paths. It is pure.
func planAdoption(ms []muster.Machine, flagsOf func(id string) flags, tagged func(machineID string) []muster.Instance, recorded map[string]bool) adoptionPlan {
	plan := adoptionPlan{Stop: map[string]string{}}
	for _, m := range ms {
		f := flagsOf(m.ID)
		if f.starting || f.stopping || f.deferred || m.Life == muster.LifeDead {
			continue
		}
		insts := tagged(m.ID)
		if len(insts) == 0 {
			continue
		}
		keep := m.InstanceID()
		if keep == "" && m.Life == muster.LifeAlive && m.LaunchToken != "" {
			for _, k := range insts {
				if k.LaunchToken != m.LaunchToken {
					continue
				}
				keep = k.ID
				plan.Adopt = append(plan.Adopt, muster.InstanceRecord{MachineID: m.ID, Nonce: m.Nonce, Info: muster.InstanceInfo{
					InstanceID: k.ID, Zone: k.Zone, Hardware: muster.Hardware{AvailabilityZone: k.Zone},
				}})
				break
			}
		}
		for _, inst := range insts {
			if inst.ID != keep && !recorded[inst.ID] {
				plan.Stop[inst.ID] = "duplicate"
			}
		}
	}
	return plan
}

// unknownInput is one listed instance for findUnknown.
type unknownInput struct {
	Inst muster.Instance
	Seen time.Time // when the provisioner first saw it; used when Created is zero
}

// findUnknown applies H2, H6 and H8: instances that belong to no machine,
// split into those old enough to harvest and the young ones with the time
// they become old. owned reports whether an instance belongs to a machine
// (recorded, or tagged with an existing machine's id); skip reports
// instances released or already being stopped. It is pure.
func findUnknown(insts []unknownInput, owned, skip func(muster.Instance) bool, now time.Time, minAge time.Duration) (old []string, young map[string]time.Time) {
	young = map[string]time.Time{}
	for _, in := range insts {
		if skip(in.Inst) || owned(in.Inst) {
			continue
		}
		born := in.Inst.Created
		if born.IsZero() {
			born = in.Seen
		}
		if mature := born.Add(minAge); now.Before(mature) {
			young[in.Inst.ID] = mature
			continue
		}
		old = append(old, in.Inst.ID)
	}
	sort.Strings(old)
	return old, young
}

// stopJob stops instances in one provider call and then removes dead
// machines in one transaction (H4).
type stopJob struct {
	instances []string          // every instance to stop
	kinds     map[string]string // instance id → "dead", "unknown", "duplicate", "quarantine" or "expired"
	machines  []muster.Machine  // dead machines to remove
	since     time.Time         // the time a "quarantine" instance is marked with (R6)
}

type stopResult struct {
	job *stopJob
	err error
}

func (p *Provisioner) runStop(ctx context.Context, j *stopJob) {
	err := p.stop(ctx, j)
	p.send(ctx, stopResult{job: j, err: err})
}

func (p *Provisioner) stop(ctx context.Context, j *stopJob) error {
	// Quarantines first (R6): if one fails, nothing of the job is done
	// and the next pass tries it all again (marking is idempotent).
	var term []string
	for _, id := range j.instances {
		if j.kinds[id] != "quarantine" {
			term = append(term, id)
			continue
		}
		qr, _ := p.cfg.Provider.(muster.Quarantiner) // harvestUnknown checked
		err := p.call(ctx, "quarantine", func(ctx context.Context) error { return qr.Quarantine(ctx, id, j.since) })
		if err != nil {
			return fmt.Errorf("quarantine instance %s: %w", id, err)
		}
	}
	if len(j.instances) > 0 {
		if len(term) > 0 {
			err := p.call(ctx, "stop", func(ctx context.Context) error {
				return p.cfg.Provider.StopInstances(ctx, term...)
			})
			if err != nil {
				return fmt.Errorf("stop instances %s: %w", strings.Join(term, ","), err)
			}
		}
		counts := map[string]int{}
		for _, id := range j.instances {
			counts[j.kinds[id]]++
		}
		for k, n := range counts {
			p.obs.Harvested(k, n)
		}
	}
	var ids []string
	for _, m := range j.machines {
		ids = append(ids, m.ID)
	}
	if len(ids) > 0 {
		if err := p.cfg.Store.RemoveMachines(ctx, p.modelUUID, ids); err != nil {
			return fmt.Errorf("remove machines %s: %w", strings.Join(ids, ","), err)
		}
	}
	var evs []muster.Event
	stopped := map[string]bool{}
	for _, id := range j.instances {
		stopped[id] = true
	}
	for _, m := range j.machines {
		msg := "machine removed"
		switch {
		case m.KeepInstance && m.InstanceID() != "":
			msg = "machine removed; instance " + m.InstanceID() + " kept and released"
		case stopped[m.InstanceID()]:
			msg = "instance " + m.InstanceID() + " stopped; machine removed"
		}
		evs = append(evs, p.newEvent(m.ID, "harvest", msg))
	}
	for _, id := range j.instances {
		switch j.kinds[id] {
		case "unknown":
			evs = append(evs, p.newEvent("", "harvest", "unknown instance "+id+" stopped"))
		case "duplicate":
			evs = append(evs, p.newEvent("", "harvest", "duplicate instance "+id+" stopped"))
		case "quarantine":
			q := p.settings.Load().HarvestQuarantine
			evs = append(evs, p.newEvent("", "harvest", fmt.Sprintf("unknown instance %s quarantined: stopped, terminated at %s unless restored (muster harvest --restore %s)",
				id, j.since.Add(q).UTC().Format(time.RFC3339), id)))
		case "expired":
			evs = append(evs, p.newEvent("", "harvest", "quarantined instance "+id+" terminated at the end of its quarantine"))
		}
	}
	p.appendEvents(ctx, evs...)
	p.log.Info("instances harvested", "instances", j.instances, "machines", ids)
	return nil
}

// harvestAction says what harvest does with an unknown instance that is
// old enough (R6): "unknown" terminates it, "quarantine" stops and marks
// it, "expired" terminates one whose quarantine is over, and "" leaves a
// quarantined one until due. It is pure.
func harvestAction(inst muster.Instance, now time.Time, quarantine time.Duration) (kind string, due time.Time) {
	if since, ok := muster.QuarantinedSince(inst); ok {
		if due := since.Add(quarantine); now.Before(due) {
			return "", due
		}
		return "expired", time.Time{}
	}
	if quarantine > 0 {
		return "quarantine", time.Time{}
	}
	return "unknown", time.Time{}
}

// breakerTrips applies R7: whether stopping n unknown instances (expired
// quarantines not counted: they are stopped already) out of live running
// ones would stop more than the fraction allows. It is pure.
func breakerTrips(n, live int, fraction float64) bool {
	return n > 0 && float64(n) > fraction*float64(live)
}

// harvestUnknown decides for unknown instances old enough to harvest
// (ids) what to do now (R6) and puts those kinds into into, unless the
// breaker trips (R7): then none is harvested, the pass says why (log,
// event, status) and they wait for the next full pass. Quarantined
// instances not yet due go back to p.young with their due time. Only a
// full pass, or a step with new instances to stop, resets the breaker.
func (p *Provisioner) harvestUnknown(ids []string, into map[string]string, now time.Time, full bool) {
	s := p.settings.Load()
	_, canQuarantine := p.cfg.Provider.(muster.Quarantiner)
	cands := map[string]string{}
	fresh := 0
	for _, id := range ids {
		kind, due := harvestAction(p.view[id].inst, now, s.HarvestQuarantine)
		switch {
		case kind == "":
			p.young[id] = due
			continue
		case kind == "quarantine" && !canQuarantine:
			p.log.Error("provider cannot quarantine: unknown instance left alone", "instance", id)
			continue
		case kind != "expired":
			fresh++
		}
		cands[id] = kind
	}
	live := 0
	for _, e := range p.view {
		if _, q := muster.QuarantinedSince(e.inst); !q {
			live++
		}
	}
	if fresh == 0 && !full {
		maps.Copy(into, cands) // quarantines ending: the breaker's state stands
		return
	}
	p.tripped = nil
	if !breakerTrips(fresh, live, s.HarvestMaxFraction) {
		maps.Copy(into, cands)
		p.setBreaker("")
		return
	}
	for id := range cands {
		p.tripped = append(p.tripped, id)
	}
	sort.Strings(p.tripped)
	p.setBreaker(fmt.Sprintf("harvest breaker: %d of %d live instances are unknown, more than harvest-max-fraction %g allows; nothing harvested (instances %s)",
		fresh, live, s.HarvestMaxFraction, strings.Join(p.tripped, ",")))
}

// setBreaker records the breaker's state (R7); a new trip is logged as an
// error and recorded as an event once, not on every pass.
func (p *Provisioner) setBreaker(msg string) {
	if msg == p.breakerMsg {
		return
	}
	p.breakerMsg = msg
	if msg == "" {
		p.log.Info("harvest breaker reset")
		return
	}
	p.log.Error("harvest breaker tripped", "reason", msg)
	ev := p.newEvent("", "harvest-blocked", msg)
	p.submit(func(ctx context.Context) { p.appendEvents(ctx, ev) })
}

// stopped updates the view for an instance a stop job dealt with: a
// quarantined one stays, stopped and marked, until its quarantine ends;
// any other is gone.
func (p *Provisioner) stopped(j *stopJob, id string) {
	if j.kinds[id] != "quarantine" {
		p.viewRemove(id)
		delete(p.young, id)
		return
	}
	e := p.view[id]
	if e == nil {
		return
	}
	e.inst.Tags = maps.Clone(e.inst.Tags)
	if e.inst.Tags == nil {
		e.inst.Tags = map[string]string{}
	}
	e.inst.Tags[muster.TagQuarantined] = muster.FormatQuarantineTag(j.since)
	e.inst.State = "stopped"
	p.young[id] = j.since.Add(p.settings.Load().HarvestQuarantine)
}

// HarvestPlan is what harvest holds and is about to do (R6, R7), as of
// the loop's last step.
type HarvestPlan struct {
	Quarantined []PlannedHarvest // stopped and marked, waiting for termination
	Next        []PlannedHarvest // unknown instances harvest will act on next
	Breaker     string           // why the last pass harvested nothing; "" when it was fine
}

// PlannedHarvest is one instance in a HarvestPlan.
type PlannedHarvest struct {
	Instance string
	Zone     string
	Machine  string    // the machine tag it carries, if any
	Action   string    // "terminate" or "quarantine"
	Since    time.Time // quarantined since; zero for Next
	At       time.Time // when the action is due; zero: not while harvest-mode excludes unknown instances, or released
	Held     bool      // held back by the breaker (R7)
	Released bool      // restored: never harvested again (H8)
}

// HarvestPlan returns the harvest plan. It is safe for concurrent use.
func (p *Provisioner) HarvestPlan() HarvestPlan {
	p.harvestMu.Lock()
	defer p.harvestMu.Unlock()
	return p.harvestView
}

// publishHarvest makes the loop's harvest state what HarvestPlan reports.
func (p *Provisioner) publishHarvest() {
	var plan HarvestPlan
	q := p.settings.Load().HarvestQuarantine
	for id, e := range p.view {
		since, ok := muster.QuarantinedSince(e.inst)
		if !ok {
			continue
		}
		ph := PlannedHarvest{Instance: id, Zone: e.inst.Zone, Machine: e.inst.MachineID, Action: "terminate", Since: since, Released: p.released[id]}
		if !ph.Released && p.harvest.Unknown() {
			ph.At = since.Add(q)
		}
		plan.Quarantined = append(plan.Quarantined, ph)
	}
	action := "terminate"
	if q > 0 {
		action = "quarantine"
	}
	next := func(id string, at time.Time, held bool) {
		if e := p.view[id]; e != nil {
			if _, ok := muster.QuarantinedSince(e.inst); !ok {
				plan.Next = append(plan.Next, PlannedHarvest{Instance: id, Zone: e.inst.Zone, Machine: e.inst.MachineID, Action: action, At: at, Held: held})
			}
		}
	}
	for id, at := range p.young {
		next(id, at, false)
	}
	for _, id := range p.tripped {
		next(id, time.Time{}, true)
	}
	for _, l := range [][]PlannedHarvest{plan.Quarantined, plan.Next} {
		sort.Slice(l, func(i, j int) bool { return l[i].Instance < l[j].Instance })
	}
	plan.Breaker = p.breakerMsg
	p.harvestMu.Lock()
	p.harvestView = plan
	p.harvestMu.Unlock()
}

// loopFunc is a step for the loop to run: how workers and callers hand
// it work that needs its state.
type loopFunc func(p *Provisioner)

// Restore starts a quarantined instance again and releases it from muster
// (R6, H8): it is never harvested again. ENotFound for an instance the
// model's provider does not list, EConflict for one not quarantined.
// It waits for the provisioner's loop, so it fails with ctx when the
// provisioner is not running.
func (p *Provisioner) Restore(ctx context.Context, id string) error {
	done := make(chan error, 1)
	select {
	case p.results <- loopFunc(func(p *Provisioner) { p.restore(id, done) }):
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// restore checks and starts a restore in the loop: the release is stored
// before the instance is started, so no crash can leave a running
// instance that harvest would quarantine again, or a released one that
// it would terminate.
func (p *Provisioner) restore(id string, done chan<- error) {
	e := p.view[id]
	if e == nil {
		done <- muster.Errorf(muster.ENotFound, "instance %s not found in model %s", id, p.cfg.Model.Name)
		return
	}
	if _, ok := muster.QuarantinedSince(e.inst); !ok {
		done <- muster.Errorf(muster.EConflict, "instance %s is not quarantined", id)
		return
	}
	if p.stoppingInst[id] {
		done <- muster.Errorf(muster.EConflict, "instance %s is being terminated", id)
		return
	}
	qr, ok := p.cfg.Provider.(muster.Quarantiner)
	if !ok {
		done <- muster.Errorf(muster.EInvalid, "the provider of model %s cannot restore instances", p.cfg.Model.Name)
		return
	}
	was := p.released[id]
	p.released[id] = true
	delete(p.young, id)
	p.armYoung()
	p.submit(func(ctx context.Context) {
		err := p.cfg.Store.ReleaseInstances(ctx, p.modelUUID, []string{id})
		stored := err == nil
		if err == nil {
			err = p.call(ctx, "restore", func(ctx context.Context) error { return qr.Restore(ctx, id) })
		}
		if err == nil {
			p.appendEvents(ctx, p.newEvent("", "harvest", "quarantined instance "+id+" restored and released: never harvested again"))
			p.log.Info("quarantined instance restored", "instance", id)
		}
		p.send(ctx, loopFunc(func(p *Provisioner) {
			if !stored {
				p.released[id] = was
			}
			if e := p.view[id]; e != nil && err == nil {
				e.inst.Tags = maps.Clone(e.inst.Tags)
				delete(e.inst.Tags, muster.TagQuarantined)
				e.inst.State = "running"
			}
			p.armYoung()
			done <- err
		}))
	})
}

// Provisioner returns the running provisioner, nil when none runs. It is
// safe for concurrent use.
func (s *Supervisor) Provisioner() *Provisioner {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}
