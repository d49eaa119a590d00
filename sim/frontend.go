package sim

import (
	"context"
	"errors"
	"sort"
	"time"

	"github.com/musterhq/muster"
)

// The cloud's API for front ends besides the sim's own (sim/ec2api, the
// EC2 Query API): calls under the cloud's accounting, lookups, and
// launching and terminating instances by reservation.

// Do runs f as one call of kind: it waits, is rate limited and may fail
// as Faults say for kind (instances is the number of instances the call
// asks the instance bucket for), counts an error when f fails, and then
// holds or loses the reply as Faults say (ErrReplyLost). f must not call
// Do.
func (c *Cloud) Do(ctx context.Context, kind string, instances int, f func() error) error {
	if err := c.enter(ctx, kind, instances); err != nil {
		return err
	}
	err := f()
	if err != nil {
		c.mu.Lock()
		c.stats.Errors[kind]++
		c.mu.Unlock()
	}
	if lerr := c.leave(ctx, kind); lerr != nil {
		return lerr
	}
	return err
}

// SubnetState is a subnet with what a front end shows of it.
type SubnetState struct {
	muster.Subnet
	// Default is whether the subnet is its zone's first, where an
	// instance without a subnet gets its address.
	Default bool
	// Free is the number of addresses still free.
	Free int
}

// Subnets returns every subnet, zone by zone (admin; not counted).
func (c *Cloud) Subnets() []SubnetState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SubnetState, 0, len(c.subnets))
	for _, s := range c.subnets {
		out = append(out, SubnetState{Subnet: s.Subnet, Default: c.firstSubnet(s.Zone) == s, Free: s.free()})
	}
	return out
}

// Listed returns the instances a listing shows now, oldest first: the
// running ones and those terminated less than TombstoneTTL ago (State
// "terminated"), both after Faults.ListingLag (admin; not counted).
func (c *Cloud) Listed() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := c.clock.Now()
	c.pruneTombsLocked(now)
	lag := c.faults.ListingLag
	var out []Instance
	add := func(inst *Instance) {
		settle(inst, now)
		if lag <= 0 || now.Sub(inst.Created) >= lag {
			out = append(out, cloneInstance(inst))
		}
	}
	for _, inst := range c.instances {
		add(inst)
	}
	for _, t := range c.tombs {
		add(&t.Instance)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

// UserData returns the user data a running instance was started with.
func (c *Cloud) UserData(id string) []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.params[id]; p != nil && c.instances[id] != nil {
		return append([]byte(nil), p.UserData...)
	}
	return nil
}

// LaunchRequest asks for a reservation of Min to Max instances.
type LaunchRequest struct {
	// ClientToken, when set, makes the request idempotent for the cloud's
	// lifetime: a repeat returns the first reservation as it is now.
	ClientToken string
	// Fingerprint sums up what the request asked for; a repeat of
	// ClientToken with another fingerprint fails with ErrTokenMismatch.
	Fingerprint string
	// Zone is where the instances go: "" for the least used available
	// zone (that of SubnetID when set).
	Zone string
	// SubnetID is the subnet of the instances' one address; "" for the
	// zone's first subnet. It must be in Zone when both are set.
	SubnetID string
	Type     InstanceType
	Base     string
	Min, Max int
	RootDisk uint64 // MiB
	// Tags are every instance's, complete.
	Tags map[string]string
	// Volumes are created with each instance (VolumeID is set here) and
	// attached as Attachments say.
	Volumes     []muster.Volume
	Attachments []muster.VolumeAttachment
	UserData    []byte
	// Attrs are the EC2 attributes every instance gets; the cloud sets
	// SubnetID, ReservationID, LaunchIndex, ClientToken and RootVolumeID.
	Attrs EC2Attrs
}

// Reservation is the result of a launch.
type Reservation struct {
	ID        string
	Instances []Instance
	// Replayed is whether the reservation is an earlier one of the same
	// client token.
	Replayed bool
}

// ErrTokenMismatch is the error of a client token repeated with another
// request.
var ErrTokenMismatch = errors.New("sim: client token reused with different parameters")

// Launch launches a reservation as r says, in one zone, subject to the
// zone's faults and capacity: it fails, starting nothing, when fewer than
// r.Min instances can start. It does not count a call; run it inside Do.
func (c *Cloud) Launch(r LaunchRequest) (Reservation, error) {
	if r.Min < 1 || r.Max < r.Min {
		return Reservation{}, muster.Errorf(muster.EInvalid, "sim: launch of %d to %d instances", r.Min, r.Max)
	}
	c.mu.Lock()
	if r.ClientToken != "" {
		if res := c.reservations[r.ClientToken]; res != nil {
			defer c.mu.Unlock()
			if res.Fingerprint != "" && res.Fingerprint != r.Fingerprint {
				return Reservation{}, ErrTokenMismatch
			}
			return c.replayLocked(res), nil
		}
	}
	z, s, err := c.placeLocked(r)
	if err != nil {
		c.mu.Unlock()
		return Reservation{}, err
	}
	n := min(r.Max, c.maxBatch)
	rid := c.newID("r-")
	created := c.clock.Now()
	var launched []*Instance
	var firstErr error
	failed := 0
	for i := 0; i < n; i++ {
		inst, err := c.launch(r.spec(z, s, rid, len(launched), created, c.newID("vol-")))
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			if len(launched)+n-i-1 < r.Min {
				break
			}
			continue
		}
		launched = append(launched, inst)
	}
	if len(launched) < r.Min {
		for _, inst := range launched {
			c.unlaunchLocked(inst)
		}
		c.mu.Unlock()
		c.persist()
		return Reservation{}, firstErr
	}
	c.stats.Errors[CallStart] += int64(failed)
	out := Reservation{ID: rid}
	res := &reservation{ID: rid, ClientToken: r.ClientToken, Fingerprint: r.Fingerprint}
	for _, inst := range launched {
		out.Instances = append(out.Instances, cloneInstance(inst))
		res.Instances = append(res.Instances, cloneInstance(inst))
	}
	if r.ClientToken != "" {
		c.reservations[r.ClientToken] = res
		if c.file != "" {
			c.logRecord(record{Reservation: res})
		}
	}
	c.started(launched)
	return out, nil
}

// placeLocked returns the zone and subnet of a launch; c.mu is held.
func (c *Cloud) placeLocked(r LaunchRequest) (*zone, *subnet, error) {
	var s *subnet
	zoneName := r.Zone
	if r.SubnetID != "" {
		if s = c.subnetByID(r.SubnetID); s == nil {
			return nil, nil, muster.Errorf(muster.ENotFound, "sim: subnet %q not found", r.SubnetID)
		}
		if zoneName != "" && zoneName != s.Zone {
			return nil, nil, muster.Errorf(muster.EInvalid, "sim: subnet %s is in zone %s, not %s", s.ID, s.Zone, zoneName)
		}
		zoneName = s.Zone
	} else if zoneName != "" && c.zone(zoneName) == nil {
		return nil, nil, muster.Errorf(muster.ENotFound, "sim: zone %q not found", zoneName)
	}
	z, err := c.chooseZone(muster.StartParams{Zone: zoneName}, r.Type.Cores)
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		s = c.firstSubnet(z.Name)
	}
	return z, s, nil
}

// spec is the launch of the instance with launch index idx.
func (r LaunchRequest) spec(z *zone, s *subnet, rid string, idx int, created time.Time, rootVolumeID string) launchSpec {
	tags := copyTags(r.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	atts := append([]muster.VolumeAttachment(nil), r.Attachments...)
	for i := range atts {
		atts[i].MachineID = tags[muster.TagMachine]
	}
	p := muster.StartParams{
		ControllerUUID: tags[muster.TagController], ModelUUID: tags[muster.TagModel], MachineID: tags[muster.TagMachine],
		Zone: z.Name, Base: r.Base, Arch: r.Type.Arch, LaunchToken: tags[muster.TagLaunchToken],
		Tags: copyTags(tags), Volumes: r.Volumes, Attachments: atts, UserData: r.UserData,
	}
	a := r.Attrs
	a.SubnetID, a.ReservationID, a.LaunchIndex, a.ClientToken, a.RootVolumeID = s.ID, rid, idx, r.ClientToken, rootVolumeID
	a.KeepVolumes = append([]string(nil), a.KeepVolumes...)
	return launchSpec{
		zone: z, typ: r.Type, base: r.Base, subnet: s, rootDisk: r.RootDisk, tags: tags,
		volumes: r.Volumes, attachments: atts, params: p, created: created, ec2: &a, pending: true,
	}
}

// replayLocked returns a reservation as it is now (ended instances
// terminated); c.mu is held.
func (c *Cloud) replayLocked(res *reservation) Reservation {
	out := Reservation{ID: res.ID, Replayed: true}
	c.pruneTombsLocked(c.clock.Now())
	for i := range res.Instances {
		inst := &res.Instances[i]
		if live := c.instances[inst.ID]; live != nil {
			settle(live, c.clock.Now())
			inst = live
		} else if t := c.tombs[inst.ID]; t != nil {
			inst = &t.Instance
		}
		x := cloneInstance(inst)
		if c.instances[inst.ID] == nil {
			x.State = "terminated"
		}
		out.Instances = append(out.Instances, x)
	}
	return out
}

// StateChange is an instance's state before and after a call.
type StateChange struct {
	ID                string
	Previous, Current string
}

// Terminate terminates the instances of ids, whoever they belong to; a
// terminated one stays terminated. When any id is neither running nor
// recently terminated it does nothing and returns those ids as unknown.
// It does not count a call; run it inside Do.
func (c *Cloud) Terminate(ids []string) (changes []StateChange, unknown []string) {
	c.mu.Lock()
	c.pruneTombsLocked(c.clock.Now())
	for _, id := range ids {
		if c.instances[id] == nil && c.tombs[id] == nil && !contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		c.mu.Unlock()
		return nil, unknown
	}
	var stopped []string
	done := map[string]bool{}
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		ch := StateChange{ID: id, Previous: "terminated", Current: "terminated"}
		if inst := c.instances[id]; inst != nil {
			settle(inst, c.clock.Now())
			ch.Previous, ch.Current = inst.State, "shutting-down"
			c.removeLocked(inst)
			stopped = append(stopped, id)
		}
		changes = append(changes, ch)
	}
	c.mu.Unlock()
	c.afterStop(stopped)
	return changes, nil
}

// settle ends inst's pending or stopping state when its time has come.
func settle(inst *Instance, now time.Time) {
	if inst.Until.IsZero() || now.Before(inst.Until) {
		return
	}
	switch inst.State {
	case "pending":
		inst.State = "running"
	case "stopping":
		inst.State = "stopped"
	}
	inst.Until = time.Time{}
}

// transition puts inst into state, which lasts PendingTime before it
// settles; c.mu is held.
func (c *Cloud) transition(inst *Instance, state string, now time.Time) {
	inst.State, inst.Until = state, now.Add(c.pending)
	settle(inst, now)
	c.logPut(inst)
}

// Power stops (on false) or starts (on true) the instances of ids, as
// EC2's StopInstances and StartInstances do: a running instance goes
// "stopping" then "stopped"; a stopped one "pending" then "running";
// others are left as they are (a terminated one stays terminated), but
// an instance in the opposite transition fails the call with a
// *StateError. When any id is unknown it does nothing and returns those
// ids. Config.OnStop is called for the instances it stops, OnStart for
// those it starts. It does not count a call; run it inside Do.
func (c *Cloud) Power(ids []string, on bool) (changes []StateChange, unknown []string, err error) {
	c.mu.Lock()
	now := c.clock.Now()
	c.pruneTombsLocked(now)
	for _, id := range ids {
		if c.instances[id] == nil && c.tombs[id] == nil && !contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	for _, id := range ids {
		if inst := c.instances[id]; inst != nil && len(unknown) == 0 {
			settle(inst, now)
			if on && inst.State == "stopping" || !on && inst.State == "pending" {
				err = &StateError{ID: id, State: inst.State}
			}
		}
	}
	if len(unknown) > 0 || err != nil {
		c.mu.Unlock()
		return nil, unknown, err
	}
	done := map[string]bool{}
	var booted []*Instance
	var stopped []string
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		inst := c.instances[id]
		if inst == nil {
			changes = append(changes, StateChange{ID: id, Previous: "terminated", Current: "terminated"})
			continue
		}
		ch := StateChange{ID: id, Previous: inst.State}
		switch {
		case on && inst.State == "stopped":
			c.transition(inst, "pending", now)
			booted = append(booted, inst)
		case !on && inst.State == "running":
			c.transition(inst, "stopping", now)
			stopped = append(stopped, id)
		}
		ch.Current = inst.State
		changes = append(changes, ch)
	}
	c.started(booted) // a started instance boots its agent again
	c.persist()
	if c.onStop != nil {
		for _, id := range stopped {
			c.onStop(id) // a stopped instance's agent stops
		}
	}
	return changes, nil, nil
}

// StateError is the error of an instance in a state that does not allow
// what was asked.
type StateError struct {
	ID, State string
}

func (e *StateError) Error() string {
	return "sim: instance " + e.ID + " is " + e.State
}

// UpdateTags calls edit with the tags of each instance of ids (running or
// stopped) to change them in place. When any id is unknown it changes
// nothing and returns those ids.
func (c *Cloud) UpdateTags(ids []string, edit func(tags map[string]string)) (unknown []string) {
	c.mu.Lock()
	for _, id := range ids {
		if c.instances[id] == nil && !contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		c.mu.Unlock()
		return unknown
	}
	for _, id := range ids {
		inst := c.instances[id]
		c.untoken(inst)
		if inst.Tags == nil {
			inst.Tags = map[string]string{}
		}
		edit(inst.Tags)
		if tok := inst.Tags[muster.TagLaunchToken]; tok != "" {
			c.tokens[tokenKey(inst.Controller(), inst.Model(), tok)] = inst.ID
		}
		if p := c.params[id]; p != nil {
			p.Tags = copyTags(inst.Tags)
		}
		c.logPut(inst)
	}
	c.mu.Unlock()
	c.persist()
	return nil
}
