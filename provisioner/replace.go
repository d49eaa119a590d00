package provisioner

import (
	"context"
	"fmt"
	"maps"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
)

// Replacement (SPEC §2 R rules) gives a machine a new instance under a new
// launch token, keeping its id, group, constraints and storage, and then
// stops the old instance. It is a start like any other (P7–P12) with two
// differences: only the launch token is recorded before the provider call
// (C1) — the machine keeps its nonce and password, so the old instance's
// agent can still log in should the controller restart in between — and
// the record is a replacement (muster.InstanceRecord.Replaces), which
// swaps the instance, nonce and password in one transaction and sets the
// machine pending until the new agent reports started.
//
// Crash safety follows from C2/C3 unchanged: after a restart the machine
// has exactly one recorded instance (the old one before the swap, the new
// one after), and every other instance tagged with it — the new one
// launched but not recorded, or the old one not yet stopped — is not the
// recorded one and carries another launch token, so the full pass stops it
// as a duplicate.
//
// A keep-instance machine's old instance is released instead of stopped
// (H8): the record releases it in the transaction that swaps in the new
// one (muster.InstanceRecord.ReleaseReplaced), so no crash leaves it
// recorded by nobody yet unreleased, to be stopped as a duplicate.

// Replacement reasons, as events name them.
const (
	ReasonRegistrationTimeout = "registration-timeout" // R1
	ReasonUnhealthy           = "unhealthy"            // R2
	ReasonRebalance           = "rebalance"            // R4
	ReasonDrift               = "drift"                // R5
)

// replacement is one machine's replacement, from its queueing until its
// old instance is stopped. Owned by the loop.
type replacement struct {
	reason string
	why    string // the reason in words, for events
	old    string // the instance replaced
	oldTok string // its launch token, restored if the replacement fails
	group  string
	zone   string // the zone to move to (R4); "" = the planner's choice
	// launchFirst keeps the old instance until the machine is started on
	// the new one (R4, R5); R1 and R2 stop it as soon as the new one is
	// recorded, since it is of no use.
	launchFirst bool
	// release leaves the old instance running, released from muster
	// (keep-instance, H8), instead of stopping it.
	release bool
	newInst string // the new instance once recorded
}

// replaceStopped is what a worker reports when a replaced instance was
// stopped (or not).
type replaceStopped struct {
	id  string
	rep *replacement
	err error
}

// fleetHealth is the loop's state for R1–R5.
type fleetHealth struct {
	requests    chan func(ctx context.Context) error // calls run on the loop (Rebalance)
	healthDirty bool                                 // remediate has something new to look at
	ended       chan struct{}                        // closed when Run returns
	healthTimer muster.Timer
	healthNext  time.Time
	health      map[string]*healthEntry // alive machines by id
	replacing   map[string]*replacement // machine id → replacement in flight
	// autoReplaced counts a machine's R1/R2 replacements since it was
	// last started; retry-count bounds it.
	autoReplaced  map[string]int
	paused        map[string]RemediationPause // groups whose breaker is open (R3)
	moves         []move                      // moves waiting for max-in-flight (R4, R5)
	remediation   atomic.Pointer[[]RemediationPause]
	replacingView atomic.Pointer[map[string]string] // Replacing
}

func newFleetHealth() fleetHealth {
	return fleetHealth{
		requests:     make(chan func(ctx context.Context) error),
		ended:        make(chan struct{}),
		health:       map[string]*healthEntry{},
		replacing:    map[string]*replacement{},
		autoReplaced: map[string]int{},
		paused:       map[string]RemediationPause{},
	}
}

// replaceable reports whether the loop may start replacing m now: alive
// with an instance and nothing else in flight for it. A keep-instance
// machine is replaceable too; its old instance is released, not stopped.
func (p *Provisioner) replaceable(m muster.Machine) bool {
	f := p.flagsOf(m.ID)
	return m.Life == muster.LifeAlive && m.HasInstance() &&
		!f.starting && !f.stopping && !f.deferred && p.replacing[m.ID] == nil && !p.stoppingInst[m.InstanceID()]
}

// startReplacements records a new launch token for each machine (C1) and
// queues its start as a replacement. reps[i] is for ms[i].
func (p *Provisioner) startReplacements(ctx context.Context, ms []muster.Machine, reps []*replacement) error {
	if len(ms) == 0 {
		return nil
	}
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	infos, err := p.cfg.Store.ProvisioningInfo(ctx, p.modelUUID, ids)
	if err != nil {
		return fmt.Errorf("read provisioning info: %w", err)
	}
	now := p.clock.Now()
	var (
		jobs []*startJob
		us   []muster.MachineUpdate
	)
	for i, m := range ms {
		info, ok := infos[m.ID]
		if !ok {
			continue
		}
		r := reps[i]
		r.old, r.oldTok, r.group, r.release = m.InstanceID(), m.LaunchToken, m.Group, m.KeepInstance
		j := &startJob{id: m.ID, info: info, queued: now, replace: r}
		p.newCredentials(j)
		jobs = append(jobs, j)
		us = append(us, muster.MachineUpdate{ID: m.ID, LaunchToken: muster.Ptr(j.token),
			InstanceMessage: muster.Ptr(fmt.Sprintf("replacing instance %s: %s", r.old, r.reason))})
	}
	done, err := p.updateEach(ctx, us)
	if err != nil {
		return fmt.Errorf("record replacement launch tokens: %w", err)
	}
	var (
		queued []*startJob
		evs    []muster.Event
	)
	for _, j := range jobs {
		if !done[j.id] {
			continue
		}
		r := j.replace
		p.stateOf(j.id).job = j
		p.replacing[j.id] = r
		queued = append(queued, j)
		msg := fmt.Sprintf("replacing instance %s: %s (%s)", r.old, r.reason, r.why)
		evs = append(evs, p.newEvent(j.id, "replace", msg))
		p.log.Info("replacing instance", "machine", j.id, "instance", r.old, "reason", r.reason, "why", r.why)
	}
	p.publishReplacing()
	p.appendEvents(ctx, evs...)
	p.submitStarts(queued)
	return nil
}

// replacementStarted goes on with a replacement whose start ended: with
// the new instance recorded, the old one is stopped now or, launch before
// stop, once the machine is started on the new one (observeHealth).
func (p *Provisioner) replacementStarted(r startResult) {
	id := r.job.id
	rep := p.replacing[id]
	if rep != r.job.replace {
		return
	}
	if r.inst == nil {
		delete(p.replacing, id) // failed, aborted or dead meanwhile
		p.publishReplacing()
		return
	}
	rep.newInst = r.inst.ID
	if rep.release {
		p.released[rep.old] = true // by the record's transaction
	}
	// The record made the machine pending on the new instance; the loop
	// reads that change later, and must not judge it by the old one
	// meanwhile.
	if e := p.health[id]; e != nil {
		m := e.m
		m.Instance = &muster.InstanceInfo{InstanceID: r.inst.ID, Zone: r.inst.Zone}
		m.Status, m.InstanceStatus = muster.StatusPending, muster.InstanceRunning
		p.observeHealth([]muster.Machine{m})
	}
	if !rep.launchFirst {
		p.stopReplaced(id, rep, "")
	}
}

// stopReplaced stops the instance a replacement replaced, on a worker, or
// for a keep-instance machine only says that it was released and kept.
func (p *Provisioner) stopReplaced(id string, rep *replacement, note string) {
	if p.stoppingInst[rep.old] {
		return
	}
	p.stoppingInst[rep.old] = true
	p.submit(func(ctx context.Context) {
		var err error
		done := "kept running and released (keep-instance)"
		if !rep.release {
			done = "stopped"
			err = p.call(ctx, "stop", func(ctx context.Context) error { return p.cfg.Provider.StopInstances(ctx, rep.old) })
			if err == nil {
				p.obs.Harvested("replaced", 1)
			}
		}
		if err == nil {
			msg := fmt.Sprintf("instance %s %s, replaced by %s: %s", rep.old, done, rep.newInst, rep.reason)
			if note != "" {
				msg += " (" + note + ")"
			}
			p.appendEvents(ctx, p.newEvent(id, "replaced", msg))
		}
		p.send(ctx, replaceStopped{id: id, rep: rep, err: err})
	})
}

// handleReplaceStopped ends a replacement. An old instance that could not
// be stopped is no longer protected (adoptable): the next full pass stops
// it as a duplicate (C3).
func (p *Provisioner) handleReplaceStopped(ctx context.Context, r replaceStopped) error {
	delete(p.stoppingInst, r.rep.old)
	if r.err == nil && !r.rep.release {
		p.viewRemove(r.rep.old)
	} else {
		p.log.Warn("replaced instance not stopped; left to the next full pass", "machine", r.id, "instance", r.rep.old, "err", r.err)
	}
	if p.replacing[r.id] == r.rep {
		delete(p.replacing, r.id)
		p.publishReplacing()
	}
	return p.remediate(ctx) // a place in max-in-flight is free
}

// failReplacement ends a replacement whose start failed: the machine keeps
// its instance (it was never given up), so no provisioning error is set.
func (p *Provisioner) failReplacement(ctx context.Context, j *startJob, cause error) startResult {
	msg := fmt.Sprintf("replacement of instance %s failed: %v", j.replace.old, cause)
	u := muster.MachineUpdate{ID: j.id, InstanceStatus: muster.Ptr(muster.InstanceRunning), InstanceMessage: muster.Ptr(msg),
		LaunchToken: muster.Ptr(j.replace.oldTok)}
	if err := p.cfg.Store.UpdateMachines(ctx, p.modelUUID, []muster.MachineUpdate{u}); err != nil &&
		!muster.IsCode(err, muster.ENotFound) && ctx.Err() == nil {
		p.log.Warn("replacement failure not recorded", "machine", j.id, "err", err)
	}
	p.appendEvents(ctx, p.newEvent(j.id, "error", msg))
	p.log.Warn("replacement failed", "machine", j.id, "instance", j.replace.old, "err", cause)
	return startResult{job: j, err: cause}
}

// repairTokens gives back to each machine the launch token of its recorded
// instance where a replacement a crash cut off left another (the new
// instance, if any, is stopped as a duplicate by the same pass).
func (p *Provisioner) repairTokens(ctx context.Context, ms []muster.Machine) error {
	var us []muster.MachineUpdate
	for i := range ms {
		m := &ms[i]
		e := p.view[m.InstanceID()]
		if m.Life != muster.LifeAlive || e == nil || e.inst.LaunchToken == "" || e.inst.LaunchToken == m.LaunchToken ||
			p.flagsOf(m.ID).starting || p.replacing[m.ID] != nil {
			continue
		}
		us = append(us, muster.MachineUpdate{ID: m.ID, LaunchToken: muster.Ptr(e.inst.LaunchToken), InstanceMessage: muster.Ptr("")})
		m.LaunchToken = e.inst.LaunchToken
	}
	if len(us) == 0 {
		return nil
	}
	if _, err := p.updateEach(ctx, us); err != nil {
		return fmt.Errorf("restore launch tokens: %w", err)
	}
	for _, u := range us {
		p.log.Info("interrupted replacement abandoned", "machine", u.ID)
	}
	return nil
}

// adoptable is taggedInstances for the adoption plan (C2, C3), less the
// old instance of a replacement waiting to launch before it stops.
func (p *Provisioner) adoptable(machineID string) []muster.Instance {
	insts := p.taggedInstances(machineID)
	rep := p.replacing[machineID]
	if rep == nil {
		return insts
	}
	out := insts[:0:0]
	for _, inst := range insts {
		if inst.ID != rep.old {
			out = append(out, inst)
		}
	}
	return out
}

// Replacing returns the machines being replaced, with the reason of each
// (R1–R5). Safe for concurrent use.
func (p *Provisioner) Replacing() map[string]string {
	if v := p.replacingView.Load(); v != nil {
		return maps.Clone(*v)
	}
	return nil
}

// publishReplacing refreshes what Replacing returns; called by the loop
// whenever replacing changes.
func (p *Provisioner) publishReplacing() {
	v := make(map[string]string, len(p.replacing))
	for id, r := range p.replacing {
		v[id] = r.reason
	}
	p.replacingView.Store(&v)
}

// ask runs fn on the loop and waits for it; EUnavailable when the
// provisioner is not running.
func (p *Provisioner) ask(ctx context.Context, fn func(ctx context.Context) error) error {
	done := make(chan error, 1)
	req := func(ctx context.Context) error {
		done <- fn(ctx)
		return nil
	}
	notRunning := muster.Errorf(muster.EUnavailable, "the provisioner of model %s is not running", p.cfg.Model.Name)
	if !p.ran.Load() {
		return notRunning
	}
	select {
	case p.requests <- req:
	case <-p.ended:
		return notRunning
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
