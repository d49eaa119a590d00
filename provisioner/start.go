package provisioner

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
)

// ControllerMachineTag prefixes every nonce: the nonce is
// "machine-0:<uuid>", as the controller is machine 0 in Juju's terms.
const ControllerMachineTag = "machine-0"

// startJob is one machine's start. It is built by the loop and handed to
// a worker for each step that does I/O (preparing, one attempt, writing a
// status); between steps the loop owns it. Only deferred and ended are
// read by both at once.
type startJob struct {
	id          string
	info        muster.ProvisioningInfo
	token       string
	nonce       string
	password    string
	autoRetries int
	queued      time.Time
	replace     *replacement // set for a replacement (R1–R5)
	deferred    atomic.Bool  // the machine became dead while starting (P13)
	ended       atomic.Bool  // the provisioning error is being written

	// Owned by whoever runs the current step.
	clearToken   bool // the failure clears the launch token
	params       muster.StartParams
	req          zoneRequest
	attemptsLeft int
	withZones    bool // set by the loop: the provider has zones (Z5)
	throttles    int  // throttled calls in a row of the current attempt (E2)
	again        bool // the next call repeats the last one in its zone (throttled)
	calls        int  // zone choices made so far: the attempt number (R8)
	// dec records the current attempt for `muster explain` (R8): filled
	// by the loop when it chooses the zone, by the worker with the
	// limiter wait, and recorded as an event with the attempt's outcome.
	dec muster.AttemptDecision
}

// prepared is what a worker reports when it has built the start
// parameters of jobs (P8, P9): the loop chooses their zones and queues
// their attempts. bs is set when the jobs go in batch starts (E3).
type prepared struct {
	jobs   []*startJob
	bs     muster.BatchStarter
	blocks []muster.CapacityBlock // the store's capacity memory of the cloud (Z7)
}

// attemptFailed is what a worker reports when a start attempt failed: the
// loop applies P10.4–P10.6 to its zone table and either ends the start or
// schedules the next attempt.
type attemptFailed struct {
	job  *startJob
	zone string // "" without zones
	err  error
}

// retryNoted is what a worker reports when the retry status of a failed
// attempt is written (P10.6): the loop's timer for the delay starts now.
type retryNoted struct {
	job   *startJob
	delay time.Duration
}

// startResult is what a worker reports when a start job ends.
type startResult struct {
	job     *startJob
	inst    *muster.Instance // the recorded instance
	stopped string           // an instance started and stopped at once (P11, P13)
	err     error            // the provisioning error, if any
	retryAt time.Time        // when an automatic retry is due (P16); zero = none
	aborted bool             // shutdown: nothing was recorded
}

// startChunk is how many pending machines are recorded and queued
// together: after a bulk add the first starts go out once the first
// chunk is recorded, not the whole add.
const startChunk = 1000

// queueStarts queues a start for each pending machine (P5, P6), after
// recording the launch token, nonce and password hash of each, in one
// transaction per chunk of startChunk machines (C1, E4).
func (p *Provisioner) queueStarts(ctx context.Context, ms []muster.Machine) error {
	for len(ms) > 0 {
		c := ms[:min(len(ms), startChunk)]
		ms = ms[len(c):]
		if err := p.queueChunk(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// queueChunk is queueStarts for up to startChunk machines.
func (p *Provisioner) queueChunk(ctx context.Context, ms []muster.Machine) error {
	ids := make([]string, len(ms))
	for i, m := range ms {
		ids[i] = m.ID
	}
	infos, err := p.cfg.Store.ProvisioningInfo(ctx, p.modelUUID, ids)
	if err != nil {
		return fmt.Errorf("read provisioning info: %w", err)
	}
	// The members of each group the zone table does not know yet (Z3),
	// asked for one machine per group: the answer for every pending
	// machine would grow with the square of the group's size. A known
	// group is kept current by the loop itself, which sees every machine
	// added (E1).
	var reps []string
	seen := map[string]bool{}
	for _, id := range ids {
		if info, ok := infos[id]; ok && info.Group != "" && !seen[info.Group] && !p.groups[info.Group] {
			seen[info.Group] = true
			reps = append(reps, id)
		}
	}
	var groupErr error
	if len(reps) > 0 {
		var groups map[string][]string
		groups, groupErr = p.cfg.Store.DistributionGroups(ctx, p.modelUUID, reps)
		if groupErr == nil {
			for _, id := range reps {
				g := infos[id].Group
				for _, member := range groups[id] {
					p.zones.setGroup(member, g)
				}
				p.groups[g] = true
			}
		}
	}
	now := p.clock.Now()
	var (
		jobs    []*startJob
		us      []muster.MachineUpdate
		failed  []muster.MachineUpdate
		failEvs []muster.Event
	)
	for _, m := range ms {
		info, ok := infos[m.ID]
		if !ok {
			continue // removed meanwhile
		}
		j := &startJob{id: m.ID, info: info, autoRetries: m.AutoRetries, queued: now}
		if info.Group != "" {
			if groupErr != nil && seen[info.Group] {
				msg := fmt.Sprintf("distribution group of machine %s: %v", m.ID, groupErr)
				failed = append(failed, failureUpdate(m.ID, msg, nil))
				failEvs = append(failEvs, p.newEvent(m.ID, "error", msg))
				continue
			}
			p.zones.setGroup(m.ID, info.Group)
		}
		// Every start gets a fresh launch token, nonce and password,
		// recorded together before the provider is called (C1): an
		// instance carrying a token therefore has the credentials stored
		// with it, and only such an instance is ever adopted (C2). A
		// start a crash left in flight (a token recorded, no instance, no
		// failure) is repeated with its token and nonce when passwords
		// are derived from them, so the cloud's idempotency token returns
		// the instance that start may have made.
		if inFlight(m) && p.cfg.PasswordKey != nil {
			j.token, j.nonce = m.LaunchToken, m.Nonce
			j.password = p.agentPassword(m.ID, j.token)
		} else {
			p.newCredentials(j)
		}
		jobs = append(jobs, j)
		u := muster.MachineUpdate{
			ID:              m.ID,
			Status:          muster.Ptr(muster.StatusPending),
			StatusMessage:   muster.Ptr(""),
			InstanceStatus:  muster.Ptr(muster.InstanceAllocating),
			InstanceMessage: muster.Ptr("starting"),
			LaunchToken:     muster.Ptr(j.token),
			Nonce:           muster.Ptr(j.nonce),
			NextRetry:       muster.Ptr(time.Time{}),
		}
		u.PasswordHash = muster.Ptr(muster.HashSecret(j.password))
		us = append(us, u)
	}
	if len(failed) > 0 {
		if _, err := p.updateEach(ctx, failed); err != nil {
			return fmt.Errorf("set provisioning errors: %w", err)
		}
		p.appendEvents(ctx, failEvs...)
	}
	if len(us) == 0 {
		return nil
	}
	done, err := p.updateEach(ctx, us)
	if err != nil {
		return fmt.Errorf("record launch tokens: %w", err)
	}
	var (
		queued []*startJob
		evs    []muster.Event
	)
	for _, j := range jobs {
		if !done[j.id] {
			continue
		}
		p.stateOf(j.id).job = j
		delete(p.retryAt, j.id)
		queued = append(queued, j)
		evs = append(evs, p.newEvent(j.id, "start", "provisioning started"))
	}
	p.appendEvents(ctx, evs...)
	p.submitStarts(queued)
	return nil
}

// submitStarts queues the preparation of start jobs: machines of the same
// launch shape go in batches when the provider offers batch starts and the
// model allows them (E3); the others one by one.
func (p *Provisioner) submitStarts(jobs []*startJob) {
	for _, j := range jobs {
		j.withZones = p.withZones
	}
	bs, ok := p.cfg.Provider.(muster.BatchStarter)
	if !ok || !p.settings.Load().BatchStarts || bs.MaxBatch() < 2 || len(jobs) < 2 {
		for _, j := range jobs {
			p.submit(func(ctx context.Context) { p.runPrepare(ctx, []*startJob{j}, nil) })
		}
		return
	}
	var keys []string
	byShape := map[string][]*startJob{}
	for _, j := range jobs {
		k := launchShape(j.info)
		if byShape[k] == nil {
			keys = append(keys, k)
		}
		byShape[k] = append(byShape[k], j)
	}
	// A job carries up to a full call for each zone: planBatch splits it by
	// zone (Z3, Z4), so that the calls are full rather than a third full.
	size := bs.MaxBatch() * max(1, len(p.zones.avail))
	for _, k := range keys {
		js := byShape[k]
		if len(js) == 1 {
			p.submit(func(ctx context.Context) { p.runPrepare(ctx, js, nil) })
			continue
		}
		// Spread the batches over the workers rather than filling one.
		n := (len(js) + size - 1) / size
		per := (len(js) + n - 1) / n
		for len(js) > 0 {
			c := js[:min(per, len(js))]
			js = js[len(c):]
			p.submit(func(ctx context.Context) { p.runPrepare(ctx, c, bs) })
		}
	}
}

// launchShape is what machines must share to be started in one batch.
func launchShape(info muster.ProvisioningInfo) string {
	var st []string
	for _, s := range info.Storage {
		st = append(st, s.String())
	}
	return info.Constraints.String() + "|" + info.Base + "|" + info.Placement + "|" + strings.Join(st, " ")
}

// failureUpdate is the update for a provisioning error: instance status
// "provisioning error" with the cause, machine status "error", and the
// time of the next automatic retry (zero for none).
func failureUpdate(id, msg string, next *time.Time) muster.MachineUpdate {
	if next == nil {
		next = &time.Time{}
	}
	return muster.MachineUpdate{
		ID:              id,
		Status:          muster.Ptr(muster.StatusError),
		StatusMessage:   muster.Ptr(msg),
		InstanceStatus:  muster.Ptr(muster.InstanceProvisioningError),
		InstanceMessage: muster.Ptr(msg),
		NextRetry:       next,
	}
}

// handleStartResult ends a start in the loop: the machine is no longer
// starting; a deferred stop is queued now (P13).
func (p *Provisioner) handleStartResult(ctx context.Context, r startResult) error {
	id := r.job.id
	st := p.state[id]
	if st == nil || st.job != r.job {
		return nil
	}
	st.job = nil
	delete(p.waiting, r.job)
	if r.inst != nil {
		p.viewAdd(*r.inst, p.clock.Now(), true)
		p.zones.set(id, r.inst.Zone)
	}
	if r.stopped != "" {
		p.viewRemove(r.stopped)
	}
	if r.job.replace != nil {
		p.replacementStarted(r)
	}
	if !r.retryAt.IsZero() && !st.deferred {
		p.retryAt[id] = retryEntry{at: r.retryAt, n: r.job.autoRetries}
		p.armRetry()
	}
	if st.deferred || st.recheck {
		// Dead while starting (P13), or changed (e.g. a retry request)
		// after the provisioning error was written: look again.
		st.deferred, st.recheck = false, false
		ms, err := p.cfg.Store.Machines(ctx, p.modelUUID, []string{id})
		if err != nil {
			return fmt.Errorf("read machines: %w", err)
		}
		if len(ms) == 0 {
			p.forget(id)
			return nil
		}
		return p.process(ctx, ms, nil, nil)
	}
	p.tidy(id)
	return nil
}

// runPrepare builds the start parameters of jobs (P8, P9) on a worker. A
// job that cannot be prepared ends with its provisioning error; the others
// go back to the loop to have their zones chosen.
func (p *Provisioner) runPrepare(ctx context.Context, jobs []*startJob, bs muster.BatchStarter) {
	var ready []*startJob
	for _, j := range jobs {
		if err := p.prepare(ctx, j); err != nil {
			p.report(ctx, p.fail(ctx, j, err))
			continue
		}
		ready = append(ready, j)
	}
	if len(ready) > 0 {
		p.send(ctx, prepared{jobs: ready, bs: bs, blocks: p.readBlocks(ctx)})
	}
}

// prepare builds the start parameters (P8) and the zone request with the
// zones the provider allows (P9).
func (p *Provisioner) prepare(ctx context.Context, j *startJob) error {
	s := p.settings.Load()
	params, err := p.buildParams(ctx, j)
	if err != nil {
		return err
	}
	j.params = params
	j.attemptsLeft = s.RetryCount
	j.req = zoneRequest{
		MachineID: j.id,
		Allowed:   j.info.Constraints.Zones,
		Group:     j.info.Group,
		Shape:     shapeOf(j.info.Constraints, params.Arch),
	}
	if j.req.Placement, err = muster.ParsePlacement(j.info.Placement); err != nil {
		return err
	}
	if j.withZones && (j.info.Placement != "" || len(j.info.Storage) > 0 || len(params.SubnetsToZones) > 0) {
		err := p.call(ctx, "derive-zones", func(ctx context.Context) error {
			var err error
			j.req.Derived, err = p.cfg.Provider.DeriveZones(ctx, params)
			return err
		})
		if err != nil {
			return fmt.Errorf("derive zones for machine %s: %w", j.id, err)
		}
	}
	return nil
}

// chooseZone picks the zone of the next attempt (P10.1); "" without
// zones. Called by the loop only: the choice counts the machine in its
// zone at once (Z4), so starts queued together spread.
func (p *Provisioner) chooseZone(j *startJob) (string, error) {
	j.calls++
	now := p.clock.Now()
	if !j.withZones {
		j.dec = muster.AttemptDecision{Shape: j.req.Shape}
	} else {
		j.dec = p.zones.describe(j.req, now)
	}
	j.dec.Attempt, j.dec.Time = j.calls, now
	if !j.withZones {
		return "", nil
	}
	zone, err := p.zones.choose(j.req, now)
	j.dec.Zone = zone
	return zone, err
}

// handlePrepared plans the first attempt of prepared jobs, in batches by
// zone when they came prepared for batch starts.
func (p *Provisioner) handlePrepared(r prepared) {
	p.zones.learn(r.blocks)
	if r.bs == nil {
		for _, j := range r.jobs {
			p.attempt(j)
		}
		return
	}
	p.planBatch(r.bs, r.jobs)
}

// errDead is the end of a start whose machine died meanwhile (P13).
func errDead(id string) error { return muster.Errorf(muster.EConflict, "machine %s is dead", id) }

// submitFail ends a start with its provisioning error on a worker.
func (p *Provisioner) submitFail(j *startJob, err error) {
	p.submit(func(ctx context.Context) { p.report(ctx, p.fail(ctx, j, err)) })
}

// attempt plans the next attempt of a start (P10.1) and queues it.
func (p *Provisioner) attempt(j *startJob) {
	if j.deferred.Load() {
		p.submitFail(j, errDead(j.id))
		return
	}
	if j.again {
		j.again = false
	} else {
		if j.replace != nil && j.replace.zone != "" {
			j.req.Placement = j.replace.zone // a move (R4)
		}
		zone, err := p.chooseZone(j)
		if err != nil {
			p.submitFail(j, err)
			return
		}
		j.params.Zone = zone
	}
	p.submit(func(ctx context.Context) { p.runAttempt(ctx, j) })
}

// runAttempt makes one start attempt (P10.2) on a worker and records the
// instance (P11, P12), or reports the failure to the loop.
func (p *Provisioner) runAttempt(ctx context.Context, j *startJob) {
	var res muster.StartResult
	queued := p.clock.Now()
	err := p.callOnce(ctx, "start", func(ctx context.Context) error {
		j.dec.LimiterWait = p.clock.Now().Sub(queued).Seconds()
		var err error
		res, err = p.cfg.Provider.StartInstance(ctx, j.params)
		if err == nil && res.Instance.ID == "" {
			err = muster.NewProviderError(muster.ErrUnavailable, "", "provider returned no instance id")
		}
		return err
	}, j.throttles >= maxThrottleRetries)
	switch {
	case err == nil:
		p.report(ctx, p.finish(ctx, []*startJob{j}, []muster.StartResult{res})[0])
	case ctx.Err() != nil:
		// Shutdown: nothing is recorded (P21).
	default:
		p.send(ctx, attemptFailed{job: j, zone: j.params.Zone, err: err})
	}
}

// markDead flags the job's machine as dead (P13); called by the loop.
func (j *startJob) markDead() { j.deferred.Store(true) }

// handleAttemptFailed applies P10.4–P10.6 to a failed attempt: the start
// ends with its provisioning error, or the zone table learns of the
// failure and the next attempt waits for retry-delay on a timer of the
// loop, leaving the worker free (a zone outage must not tie up the pool).
func (p *Provisioner) handleAttemptFailed(r attemptFailed) {
	j, zone := r.job, r.zone
	if st := p.state[j.id]; st == nil || st.job != j {
		return
	}
	s := p.settings.Load()
	kind := muster.ProviderErrorKindOf(r.err)
	if kind == muster.ErrThrottled && j.throttles < maxThrottleRetries && !j.deferred.Load() {
		// The call is made again in the same zone after a short, spread
		// delay, without using up an attempt (E2); the limiter has slowed
		// down meanwhile.
		d := p.spread(throttleDelay(j.throttles, p.lim.rateNow()))
		j.throttles++
		j.again = true
		p.wait(j, d)
		return
	}
	j.throttles = 0
	if j.attemptsLeft <= 0 || j.deferred.Load() {
		p.zones.forget(j.id)
		p.submitFail(j, r.err)
		return
	}
	sameAttempt := false
	var block *muster.CapacityBlock
	if zone != "" && zoneSpecific(r.err) {
		if kind == muster.ErrCapacity && s.ZoneFailureTTL > 0 {
			block = &muster.CapacityBlock{Cloud: p.cloud, Zone: zone, Shape: j.req.Shape, Until: p.clock.Now().Add(s.ZoneFailureTTL)}
			p.zones.block(zone, j.req.Shape, block.Until)
		}
		sameAttempt = p.zones.markFailed(j.req, zone, p.clock.Now())
	}
	delay := p.jitter(s.RetryDelay)
	var msg string
	if sameAttempt {
		msg = fmt.Sprintf("start in zone %s failed: %v; retrying in another zone in %s", zone, r.err, delay.Round(time.Second))
	} else {
		j.attemptsLeft--
		msg = fmt.Sprintf("start failed: %v; retrying in %s (%d more attempts)", r.err, delay.Round(time.Second), j.attemptsLeft)
	}
	p.log.Info("start failed; retrying", "machine", j.id, "zone", zone, "err", r.err, "attempts-left", j.attemptsLeft)
	dec := p.decisionEvent(j, r.err, msg, p.clock.Now().Add(delay))
	// The status is written before the delay starts, so that the next
	// attempt's record can never be overtaken by a stale retry message.
	p.submit(func(ctx context.Context) {
		if block != nil {
			p.rememberBlock(ctx, *block)
		}
		p.noteRetry(ctx, j, msg, dec)
		p.send(ctx, retryNoted{job: j, delay: delay})
	})
}

// noteRetry sets the instance status of a start that will be retried
// (P10.6) on a worker, and appends its events.
func (p *Provisioner) noteRetry(ctx context.Context, j *startJob, msg string, evs ...muster.Event) {
	if err := p.cfg.Store.UpdateMachines(ctx, p.modelUUID, []muster.MachineUpdate{{
		ID: j.id, InstanceStatus: muster.Ptr(muster.InstanceAllocating), InstanceMessage: muster.Ptr(msg),
	}}); err != nil && ctx.Err() == nil && !muster.IsCode(err, muster.ENotFound) {
		p.log.Warn("retry status not set", "machine", j.id, "err", err)
	}
	p.appendEvents(ctx, append(evs, p.newEvent(j.id, "retry", msg))...)
}

// handleRetryNoted starts the retry delay of a start (P10.7): the job
// waits in the loop, not on a worker. A machine that died meanwhile ends
// its start at once (P13).
func (p *Provisioner) handleRetryNoted(r retryNoted) {
	if st := p.state[r.job.id]; st == nil || st.job != r.job {
		return
	}
	p.wait(r.job, r.delay)
}

// wait makes a start wait d in the loop before its next attempt; a machine
// that died meanwhile ends its start at once (P13).
func (p *Provisioner) wait(j *startJob, d time.Duration) {
	if j.deferred.Load() || d <= 0 {
		p.attempt(j)
		return
	}
	p.waiting[j] = p.clock.Now().Add(d)
	p.armDelay()
}

// armDelay arms the loop's one timer for the earliest retry delay to end.
func (p *Provisioner) armDelay() {
	var next time.Time
	for _, at := range p.waiting {
		if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if p.delayTimer != nil && next.Equal(p.delayNext) {
		return
	}
	if p.delayTimer != nil {
		p.delayTimer.Stop()
		p.delayTimer = nil
	}
	p.delayNext = next
	if !next.IsZero() {
		p.delayTimer = p.clock.NewTimer(max(next.Sub(p.clock.Now()), 0))
	}
}

// delaysOver queues the next attempt of every start whose retry delay has
// ended, in the order the delays end.
func (p *Provisioner) delaysOver() {
	now := p.clock.Now()
	var due []*startJob
	for j, at := range p.waiting {
		if !at.After(now) {
			due = append(due, j)
		}
	}
	sort.Slice(due, func(a, b int) bool {
		if ta, tb := p.waiting[due[a]], p.waiting[due[b]]; !ta.Equal(tb) {
			return ta.Before(tb)
		}
		return due[a].id < due[b].id
	})
	for _, j := range due {
		delete(p.waiting, j)
		p.attempt(j)
	}
	p.armDelay()
}

// zoneSpecific reports whether another zone may help after err (P10.5):
// not for zone-independent errors, throttling, a used-up quota (the
// region's, so every zone would refuse), or a transient failure
// that names no zone (which says nothing about the zone, and moving
// machines away from it would skew the spread); unclassified errors count
// as zone-specific, as in Juju.
func zoneSpecific(err error) bool {
	var pe *muster.ProviderError
	if !errors.As(err, &pe) {
		return true
	}
	switch pe.Kind {
	case muster.ErrZoneIndependent, muster.ErrThrottled, muster.ErrQuota:
		return false
	case muster.ErrUnavailable:
		return pe.Zone != ""
	}
	return true
}

// finish records the instances started for jobs (P11, P12) in one
// transaction (E4) and returns one result per job.
func (p *Provisioner) finish(ctx context.Context, jobs []*startJob, results []muster.StartResult) []startResult {
	out := make([]startResult, len(jobs))
	insts := make([]muster.Instance, len(jobs))
	var (
		recs []muster.InstanceRecord
		idx  []int
	)
	for i, j := range jobs {
		inst := results[i].Instance
		if inst.MachineID == "" {
			inst.MachineID = j.id
		}
		if inst.LaunchToken == "" {
			inst.LaunchToken = j.token
		}
		if inst.Tags == nil {
			inst.Tags = j.params.Tags
		}
		if inst.Created.IsZero() {
			inst.Created = p.clock.Now()
		}
		if inst.Zone == "" {
			inst.Zone = j.params.Zone
		}
		insts[i] = inst
		if j.deferred.Load() {
			// Dead while starting: the record would be refused; stop the
			// instance now (P13).
			out[i] = p.stopUnrecorded(ctx, j, inst.ID, nil)
			continue
		}
		info := results[i].Info()
		info.Zone = inst.Zone
		if info.Hardware.AvailabilityZone == "" {
			info.Hardware.AvailabilityZone = inst.Zone
		}
		recs = append(recs, j.record(info))
		idx = append(idx, i)
	}
	if len(recs) == 0 {
		return out
	}
	errs, err := p.w.record(ctx, recs)
	var evs []muster.Event
	for k, i := range idx {
		j, inst := jobs[i], insts[i]
		rerr := err
		if rerr == nil && k < len(errs) && errs[k] != nil {
			rerr = errs[k]
		}
		if rerr != nil {
			if ctx.Err() != nil {
				// Left for adoption by the next run (C2).
				out[i] = startResult{job: j, aborted: true}
				continue
			}
			out[i] = p.stopUnrecorded(ctx, j, inst.ID, fmt.Errorf("record instance %s of machine %s: %w", inst.ID, j.id, rerr))
			continue
		}
		msg := fmt.Sprintf("instance %s running", inst.ID)
		if inst.Zone != "" {
			msg += " in zone " + inst.Zone
		}
		j.dec.Instance = inst.ID
		evs = append(evs, p.decisionEvent(j, nil, "", time.Time{}), p.newEvent(j.id, "provisioned", msg))
		p.log.Info("instance started", "machine", j.id, "instance", inst.ID, "zone", inst.Zone)
		out[i] = startResult{job: j, inst: &inst}
	}
	p.appendEvents(ctx, evs...)
	return out
}

// report hands a start's result to the loop.
func (p *Provisioner) report(ctx context.Context, r startResult) {
	if !r.aborted {
		p.obs.Provisioned(r.inst != nil, p.clock.Now().Sub(r.job.queued))
	}
	p.send(ctx, r)
}

// planBatch chooses the zones of prepared jobs of one launch shape (Z3,
// Z4) and queues one batch start (E3) per zone and MaxBatch machines.
// Machines whose start fails go on alone, each with its own attempts
// (P10).
func (p *Provisioner) planBatch(bs muster.BatchStarter, jobs []*startJob) {
	byZone := map[string][]*startJob{}
	var zones []string
	for _, j := range jobs {
		if j.deferred.Load() {
			p.submitFail(j, errDead(j.id))
			continue
		}
		zone, err := p.chooseZone(j)
		if err != nil {
			p.submitFail(j, err)
			continue
		}
		j.params.Zone = zone
		if byZone[zone] == nil {
			zones = append(zones, zone)
		}
		byZone[zone] = append(byZone[zone], j)
	}
	most := bs.MaxBatch()
	for _, zone := range zones {
		for all := byZone[zone]; len(all) > 0; {
			js := all[:min(len(all), most)]
			all = all[len(js):]
			p.submit(func(ctx context.Context) { p.startBatch(ctx, bs, zone, js) })
		}
	}
}

// startBatch starts machines in one zone with one batch start call, on a
// worker; each failed start goes back to the loop.
func (p *Provisioner) startBatch(ctx context.Context, bs muster.BatchStarter, zone string, js []*startJob) {
	ps := make([]muster.StartParams, len(js))
	for i, j := range js {
		ps[i] = j.params
	}
	if e, ok := bs.(muster.BatchEnroller); ok && e.EnrolsBatches() {
		var err error
		if ps, err = p.enrolParams(ctx, js); err != nil {
			if ctx.Err() != nil {
				return
			}
			for _, j := range js {
				p.send(ctx, attemptFailed{job: j, zone: zone, err: muster.NewProviderError(muster.ErrUnavailable, "", "%v", err)})
			}
			return
		}
	}
	var outs []muster.StartOutcome
	queued := p.clock.Now()
	err := p.call(ctx, "start-batch", func(ctx context.Context) error {
		wait := p.clock.Now().Sub(queued).Seconds()
		for _, j := range js {
			j.dec.LimiterWait = wait
		}
		outs = bs.StartInstances(ctx, ps)
		if len(outs) != len(ps) {
			return muster.NewProviderError(muster.ErrUnavailable, "", "batch start returned %d outcomes for %d starts", len(outs), len(ps))
		}
		// A throttled call fails every start: make it again.
		for _, o := range outs {
			if muster.ProviderErrorKindOf(o.Err) != muster.ErrThrottled {
				return nil
			}
		}
		return outs[0].Err
	})
	if ctx.Err() != nil {
		return // shutdown: nothing is recorded (P21)
	}
	if err != nil && len(outs) != len(ps) {
		outs = make([]muster.StartOutcome, len(ps))
		for i := range outs {
			outs[i].Err = err
		}
	}
	var (
		okJobs []*startJob
		okRes  []muster.StartResult
	)
	for i, j := range js {
		if outs[i].Err == nil {
			okJobs = append(okJobs, j)
			okRes = append(okRes, outs[i].Result)
			continue
		}
		if muster.ProviderErrorKindOf(outs[i].Err) == muster.ErrThrottled {
			// call has made its throttle retries already: the failure
			// uses up an attempt (P10), as for a single start.
			j.throttles = maxThrottleRetries
		}
		p.send(ctx, attemptFailed{job: j, zone: zone, err: outs[i].Err})
	}
	if len(okJobs) > 0 {
		for _, r := range p.finish(ctx, okJobs, okRes) {
			p.report(ctx, r)
		}
	}
}

// stopUnrecorded stops an instance that could not be recorded at once, so
// that no instance is left without a machine (P11), and reports cause.
func (p *Provisioner) stopUnrecorded(ctx context.Context, j *startJob, id string, cause error) startResult {
	err := p.call(ctx, "stop", func(ctx context.Context) error { return p.cfg.Provider.StopInstances(ctx, id) })
	if ctx.Err() != nil {
		return startResult{job: j, aborted: true}
	}
	if err != nil {
		p.log.Warn("unrecorded instance not stopped", "machine", j.id, "instance", id, "err", err)
	} else {
		p.obs.Harvested("unrecorded", 1)
	}
	r := startResult{job: j, stopped: id}
	if cause != nil {
		// The next start needs a fresh launch token: the old one names the
		// stopped instance.
		j.clearToken = true
		r = p.fail(ctx, j, cause)
		r.stopped = id
	}
	return r
}

// fail sets the provisioning error of a start (P8, P10, P11), unless the
// machine died meanwhile (P13) or the provisioner is shutting down. A
// retryable cause gets an automatic retry time (P16).
func (p *Provisioner) fail(ctx context.Context, j *startJob, cause error) startResult {
	if ctx.Err() != nil {
		return startResult{job: j, aborted: true}
	}
	r := startResult{job: j, err: cause}
	if j.deferred.Load() {
		return r
	}
	if j.replace != nil {
		return p.failReplacement(ctx, j, cause)
	}
	j.ended.Store(true)
	s := p.settings.Load()
	msg := cause.Error()
	var next *time.Time
	if muster.ProviderErrorKindOf(cause).Retryable() {
		t := p.clock.Now().Add(p.autoRetryDelay(s, j.autoRetries))
		next = &t
		r.retryAt = t
	}
	u := failureUpdate(j.id, msg, next)
	if j.clearToken {
		u.LaunchToken = muster.Ptr("")
	}
	if err := p.cfg.Store.UpdateMachines(ctx, p.modelUUID, []muster.MachineUpdate{u}); err != nil &&
		!muster.IsCode(err, muster.ENotFound) && ctx.Err() == nil {
		p.log.Warn("provisioning error not recorded", "machine", j.id, "err", err)
	}
	evMsg := msg
	var evs []muster.Event
	if next != nil {
		evMsg += fmt.Sprintf(" (automatic retry at %s)", next.UTC().Format(time.RFC3339))
	}
	if j.calls > 0 {
		at := time.Time{}
		if next != nil {
			at = *next
		}
		evs = append(evs, p.decisionEvent(j, cause, "provisioning error"+strings.TrimPrefix(evMsg, msg), at))
	}
	p.appendEvents(ctx, append(evs, p.newEvent(j.id, "error", evMsg))...)
	p.log.Warn("provisioning error", "machine", j.id, "err", cause, "retryable", next != nil)
	return r
}

// autoRetryDelay is the backoff of P16: retry-delay (at least a second)
// doubling with each automatic retry, up to auto-retry-max, plus jitter
// (still capped).
func (p *Provisioner) autoRetryDelay(s *muster.Settings, n int) time.Duration {
	d := max(s.RetryDelay, time.Second)
	for i := 0; i < n && d < s.AutoRetryMax; i++ {
		d *= 2
	}
	return min(p.jitter(min(d, s.AutoRetryMax)), s.AutoRetryMax)
}

// buildParams builds the start parameters of P8.
func (p *Provisioner) buildParams(ctx context.Context, j *startJob) (muster.StartParams, error) {
	info := j.info
	arch := info.Constraints.Arch
	if arch == "" {
		arch = "amd64"
	}
	base := info.Base
	if base == "" {
		base = muster.DefaultBase
	}
	if _, _, err := muster.ParseBase(base); err != nil {
		return muster.StartParams{}, err
	}
	bins, err := p.findAgentBinaries(ctx, arch)
	if err != nil {
		return muster.StartParams{}, err
	}
	params := muster.StartParams{
		ControllerUUID: p.cfg.ControllerUUID,
		ModelUUID:      p.modelUUID,
		MachineID:      j.id,
		Constraints:    info.Constraints,
		Base:           base,
		Arch:           arch,
		Placement:      info.Placement,
		Nonce:          j.nonce,
		LaunchToken:    j.token,
		Password:       j.password,
		AgentBinaries:  bins,
		Tags: map[string]string{
			muster.TagController:  p.cfg.ControllerUUID,
			muster.TagModel:       p.modelUUID,
			muster.TagMachine:     j.id,
			muster.TagLaunchToken: j.token,
		},
	}
	for _, sd := range info.Storage {
		params.Volumes = append(params.Volumes, muster.Volume{Name: sd.Name, Size: sd.Size, Pool: sd.Pool})
		params.Attachments = append(params.Attachments, muster.VolumeAttachment{Volume: sd.Name, MachineID: j.id})
	}
	for _, a := range params.Attachments {
		if a.MachineID != j.id || a.InstanceID != "" {
			return muster.StartParams{}, muster.Errorf(muster.EInvalid, "volume attachment %s does not belong to machine %s", a.Volume, j.id)
		}
	}
	if params.SubnetsToZones, err = p.subnetsToZones(ctx, info.Constraints.Spaces); err != nil {
		return muster.StartParams{}, err
	}
	ud, err := json.Marshal(muster.AgentConfig{
		Controller: p.cfg.ControllerUUID, Model: p.modelUUID, Machine: j.id, Nonce: j.nonce,
		Password: j.password, APIAddresses: p.agentAddresses(), CACert: p.cfg.CACert,
	})
	if err != nil {
		return muster.StartParams{}, fmt.Errorf("agent config: %w", err)
	}
	params.UserData = ud
	return params, nil
}

// newCredentials gives a start a fresh launch token, nonce and password.
func (p *Provisioner) newCredentials(j *startJob) {
	j.token = muster.NewSecret()
	j.nonce = ControllerMachineTag + ":" + muster.NewUUID()
	j.password = p.agentPassword(j.id, j.token)
}

// record is the guarded record of the instance a start made (P11); a
// replacement's names the instance it replaces and hands the machine to
// the new instance's credentials.
func (j *startJob) record(info muster.InstanceInfo) muster.InstanceRecord {
	r := muster.InstanceRecord{MachineID: j.id, Nonce: j.nonce, Info: info}
	if j.replace != nil {
		r.Replaces, r.LaunchToken, r.PasswordHash = j.replace.old, j.token, muster.HashSecret(j.password)
		r.ReleaseReplaced = j.replace.release
	}
	return r
}

// inFlight reports whether m's last start may have launched an instance
// nobody recorded: a launch token was recorded with the start, and neither
// an instance nor a failure followed.
func inFlight(m muster.Machine) bool {
	return m.LaunchToken != "" && m.Nonce != "" && m.InstanceID() == "" &&
		m.InstanceStatus == muster.InstanceAllocating
}

// agentPassword returns the agent password of a start: a keyed hash of
// the model, machine and launch token when Config.PasswordKey is set, else
// random.
func (p *Provisioner) agentPassword(machineID, token string) string {
	if p.cfg.PasswordKey == nil {
		return muster.NewSecret()
	}
	mac := hmac.New(sha256.New, p.cfg.PasswordKey)
	mac.Write([]byte(p.modelUUID + "\x00" + machineID + "\x00" + token))
	return hex.EncodeToString(mac.Sum(nil))
}

// binariesTTL is how long found agent binaries are reused: a burst of
// starts asks the catalogue once per arch, not once per machine.
const binariesTTL = 30 * time.Second

type binariesEntry struct {
	bins  []muster.AgentBinary
	until time.Time
}

func (p *Provisioner) findAgentBinaries(ctx context.Context, arch string) ([]muster.AgentBinary, error) {
	none := muster.Errorf(muster.ENotFound, "no matching agent binaries available for arch %s", arch)
	if p.cfg.AgentBinaries == nil {
		return nil, none
	}
	now := p.clock.Now()
	p.binMu.Lock()
	e, ok := p.binCache[arch]
	p.binMu.Unlock()
	if ok && now.Before(e.until) {
		return e.bins, nil
	}
	bins, err := p.cfg.AgentBinaries.FindAgentBinaries(ctx, muster.Version, "linux", arch)
	if err != nil {
		if muster.IsCode(err, muster.ENotFound) {
			return nil, none
		}
		return nil, fmt.Errorf("find agent binaries for arch %s: %w", arch, err)
	}
	if len(bins) == 0 {
		return nil, none
	}
	p.binMu.Lock()
	p.binCache[arch] = binariesEntry{bins: bins, until: now.Add(binariesTTL)}
	p.binMu.Unlock()
	return bins, nil
}

// subnetsToZones returns one map subnet id → zones per requested space, in
// space-name order; excluded spaces ("^name") are not requested.
func (p *Provisioner) subnetsToZones(ctx context.Context, spaces []string) ([]map[string][]string, error) {
	var want []string
	for _, s := range spaces {
		if !strings.HasPrefix(s, "^") {
			want = append(want, s)
		}
	}
	if len(want) == 0 {
		return nil, nil
	}
	sort.Strings(want)
	want = slices.Compact(want)
	nw, ok := p.cfg.Provider.(muster.Networking)
	if !ok {
		return nil, muster.Errorf(muster.ENotFound, "space %q not found", want[0])
	}
	var subnets []muster.Subnet
	err := p.call(ctx, "subnets", func(ctx context.Context) error {
		var err error
		subnets, err = nw.Subnets(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("list subnets: %w", err)
	}
	out := make([]map[string][]string, 0, len(want))
	for _, space := range want {
		m := map[string][]string{}
		for _, sn := range subnets {
			if sn.Space == space {
				m[sn.ID] = append(m[sn.ID], sn.Zone)
			}
		}
		if len(m) == 0 {
			return nil, muster.Errorf(muster.ENotFound, "space %q not found", space)
		}
		out = append(out, m)
	}
	return out, nil
}
