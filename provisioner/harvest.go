package provisioner

import (
	"context"
	"fmt"
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
	kinds     map[string]string // instance id → "dead", "unknown" or "duplicate"
	machines  []muster.Machine  // dead machines to remove
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
	if len(j.instances) > 0 {
		err := p.call(ctx, "stop", func(ctx context.Context) error {
			return p.cfg.Provider.StopInstances(ctx, j.instances...)
		})
		if err != nil {
			return fmt.Errorf("stop instances %s: %w", strings.Join(j.instances, ","), err)
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
		}
	}
	p.appendEvents(ctx, evs...)
	p.log.Info("instances harvested", "instances", j.instances, "machines", ids)
	return nil
}
