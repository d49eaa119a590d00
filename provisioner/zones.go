package provisioner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// ZoneInfo is one row of the zone table (Z1), as Zones reports it.
type ZoneInfo struct {
	Name      string
	Available bool // false for a zone kept only because machines are in it (Z2)
	Machines  int
	// Blocked lists the launch shapes the capacity memory keeps out of
	// the zone (Z7), by shape, with when each block ends; ended blocks
	// may still be listed until the zone is next tried.
	Blocked []BlockedShape
}

// BlockedShape is a launch shape a zone is remembered full for (Z7).
type BlockedShape struct {
	Shape string
	Until time.Time
}

// zoneRequest is what the planner needs to know about one machine.
type zoneRequest struct {
	MachineID string
	Allowed   []string // the zones constraint; empty = any
	Derived   []string // zones the placement and volumes allow (P9); empty = any
	Placement string   // zone of a zone=X placement (Z6); "" = none
	Group     string   // the machine's spread group; "" = none
	Shape     string   // launch shape, for the capacity memory (Z7)
}

// shapeOf is the launch shape of a machine for the capacity memory: what
// decides the instance type it gets, in the constraints' own words (so
// `muster zones` can show it, and models on one cloud share it).
func shapeOf(c muster.Constraints, arch string) string {
	s := "arch=" + arch
	for _, f := range []struct {
		key string
		v   uint64
	}{{"cores", c.Cores}, {"mem", c.Mem}, {"root-disk", c.RootDisk}} {
		if f.v != 0 {
			s += " " + f.key + "=" + strconv.FormatUint(f.v, 10)
			if f.key != "cores" {
				s += "M"
			}
		}
	}
	if c.InstanceType != "" {
		s += " instance-type=" + c.InstanceType
	}
	return s
}

// zoneLoad is a candidate zone with the number of machines that count.
type zoneLoad struct {
	Name  string
	Count int
}

// pickZone implements the choice of Z3 among candidates: the fewest
// machines, ties broken by rnd (which returns a number in [0,n)). It is
// pure; "" when there is no candidate.
func pickZone(cands []zoneLoad, rnd func(n int) int) string {
	if len(cands) == 0 {
		return ""
	}
	best := cands[0].Count
	for _, c := range cands[1:] {
		best = min(best, c.Count)
	}
	var ties []string
	for _, c := range cands {
		if c.Count == best {
			ties = append(ties, c.Name)
		}
	}
	if len(ties) == 1 {
		return ties[0]
	}
	return ties[rnd(len(ties))]
}

// errNoZone is the P10.1 error.
func errNoZone(id string) error {
	return muster.Errorf(muster.EInvalid, "suitable availability zone for machine %s not found", id)
}

// zoneTable is the zone table of Z1 plus the capacity memory of Z7. Only
// the loop goroutine touches it, so it needs no lock: workers report what
// happened (an instance started, an attempt failed in a zone) and the loop
// updates the table and plans the next zone. Its methods do no I/O and
// read no clock: the time is passed in.
type zoneTable struct {
	avail    map[string]bool // every zone in the table; false = kept only for its machines
	count    map[string]int
	machine  map[string]string          // machine id → zone
	group    map[string]string          // machine id → spread group
	gcount   map[string]map[string]int  // group → zone → machines
	failed   map[string]map[string]bool // machine id → zones it failed in
	excluded map[string]map[string]bool // machine id → zones it may not use (P9)
	blocked  map[string]time.Time       // zone + "|" + shape → until (Z7)
	rnd      func(n int) int
	gen      int // goes up whenever what snapshot returns may have changed
}

func newZoneTable(rnd func(n int) int) *zoneTable {
	return &zoneTable{
		avail:    map[string]bool{},
		count:    map[string]int{},
		machine:  map[string]string{},
		group:    map[string]string{},
		gcount:   map[string]map[string]int{},
		failed:   map[string]map[string]bool{},
		excluded: map[string]map[string]bool{},
		blocked:  map[string]time.Time{},
		rnd:      rnd,
	}
}

// refresh applies Z2 to the provider's zones and returns the zones that
// became unavailable but are kept for their machines, for a warning.
func (t *zoneTable) refresh(zs []muster.Zone) (kept []string) {
	t.gen++
	listed := map[string]bool{}
	for _, z := range zs {
		if z.Available {
			listed[z.Name] = true
			t.avail[z.Name] = true
		}
	}
	for name := range t.avail {
		if listed[name] {
			continue
		}
		if t.count[name] > 0 {
			if t.avail[name] {
				kept = append(kept, name)
			}
			t.avail[name] = false
			continue
		}
		delete(t.avail, name)
	}
	// Zones with machines that the table did not hold (an instance in a
	// zone that is no longer available) are kept too.
	for name, n := range t.count {
		if _, ok := t.avail[name]; !ok && n > 0 {
			t.avail[name] = false
			kept = append(kept, name)
		}
	}
	sort.Strings(kept)
	return kept
}

// empty reports whether the table has no zones (Z5 once refreshed).
func (t *zoneTable) empty() bool {
	return len(t.avail) == 0
}

// snapshot returns the table by zone name.
func (t *zoneTable) snapshot() []ZoneInfo {
	out := make([]ZoneInfo, 0, len(t.avail))
	for name, ok := range t.avail {
		out = append(out, ZoneInfo{Name: name, Available: ok, Machines: t.count[name]})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	for i := range out {
		for key, until := range t.blocked {
			if zone, shape, _ := strings.Cut(key, "|"); zone == out[i].Name {
				out[i].Blocked = append(out[i].Blocked, BlockedShape{Shape: shape, Until: until})
			}
		}
		sort.Slice(out[i].Blocked, func(a, b int) bool { return out[i].Blocked[a].Shape < out[i].Blocked[b].Shape })
	}
	return out
}

// set records that machine id is in zone (or forgets it when zone is "").
func (t *zoneTable) set(id, zone string) {
	if old, ok := t.machine[id]; ok {
		if old == zone {
			return
		}
		t.gen++
		t.count[old]--
		if t.count[old] <= 0 {
			delete(t.count, old)
		}
		t.groupAdd(id, old, -1)
		delete(t.machine, id)
	}
	if zone != "" {
		t.gen++
		t.machine[id] = zone
		t.count[zone]++
		t.groupAdd(id, zone, 1)
	}
}

func (t *zoneTable) groupAdd(id, zone string, n int) {
	g := t.group[id]
	if g == "" {
		return
	}
	c := t.gcount[g]
	if c == nil {
		c = map[string]int{}
		t.gcount[g] = c
	}
	c[zone] += n
	if c[zone] <= 0 {
		delete(c, zone)
	}
	if len(c) == 0 {
		delete(t.gcount, g)
	}
}

// setGroup records the spread group of machine id ("" for none), so that
// group counts (Z3) cost nothing per choice.
func (t *zoneTable) setGroup(id, group string) {
	if t.group[id] == group {
		return
	}
	zone, placed := t.machine[id]
	if placed {
		t.groupAdd(id, zone, -1)
	}
	if group == "" {
		delete(t.group, id)
	} else {
		t.group[id] = group
	}
	if placed {
		t.groupAdd(id, zone, 1)
	}
}

// forget drops everything the table knows about machine id.
func (t *zoneTable) forget(id string) {
	t.set(id, "")
	delete(t.group, id)
	delete(t.failed, id)
	delete(t.excluded, id)
}

// zoneOf returns the zone machine id is counted in.
func (t *zoneTable) zoneOf(id string) string {
	return t.machine[id]
}

// block remembers that zone has no capacity for shape until until (Z7),
// unless it remembers a later end already.
func (t *zoneTable) block(zone, shape string, until time.Time) {
	if key := zone + "|" + shape; until.After(t.blocked[key]) {
		t.blocked[key] = until
		t.gen++
	}
}

// learn merges blocks read from the store (other models and controllers
// on the same cloud, or this model before a restart).
func (t *zoneTable) learn(bs []muster.CapacityBlock) {
	for _, b := range bs {
		t.block(b.Zone, b.Shape, b.Until)
	}
}

// describe is what the planner sees for r now, for the record of an
// attempt (R8): the candidates with the counts that decide between them,
// and the zones left out as failed, excluded or blocked (Z7). It does not
// change the table.
func (t *zoneTable) describe(r zoneRequest, now time.Time) muster.AttemptDecision {
	d := muster.AttemptDecision{Shape: r.Shape}
	names := make([]string, 0, len(t.avail))
	for name, ok := range t.avail {
		if ok {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	counts := t.count
	if r.Group != "" {
		counts = t.gcount[r.Group]
	}
	for _, name := range names {
		until, blocked := t.blocked[name+"|"+r.Shape]
		switch {
		case t.excluded[r.MachineID][name],
			len(r.Allowed) > 0 && !slices.Contains(r.Allowed, name),
			len(r.Derived) > 0 && !slices.Contains(r.Derived, name),
			r.Placement != "" && name != r.Placement:
			d.Excluded = append(d.Excluded, name)
		case t.failed[r.MachineID][name]:
			d.Failed = append(d.Failed, name)
		case blocked && now.Before(until):
			d.Blocked = append(d.Blocked, muster.ZoneBlock{Zone: name, Until: until})
		default:
			n := counts[name]
			if t.machine[r.MachineID] == name {
				n--
			}
			d.Candidates = append(d.Candidates, muster.ZoneCount{Zone: name, Machines: n})
		}
	}
	return d
}

// candidates returns the zones r may use now, and whether some were
// left out only because of the capacity memory.
func (t *zoneTable) candidates(r zoneRequest, now time.Time) (cands []string, capacityOnly bool) {
	excl := t.excluded[r.MachineID]
	failed := t.failed[r.MachineID]
	for name, ok := range t.avail {
		if !ok || excl[name] || failed[name] {
			continue
		}
		if len(r.Allowed) > 0 && !slices.Contains(r.Allowed, name) {
			continue
		}
		if len(r.Derived) > 0 && !slices.Contains(r.Derived, name) {
			continue
		}
		if r.Placement != "" && name != r.Placement {
			continue
		}
		if until, ok := t.blocked[name+"|"+r.Shape]; ok {
			if now.Before(until) {
				capacityOnly = true
				continue
			}
			delete(t.blocked, name+"|"+r.Shape)
		}
		cands = append(cands, name)
	}
	sort.Strings(cands)
	if len(cands) > 0 {
		capacityOnly = false
	}
	return cands, capacityOnly
}

// choose picks a zone for r (Z3, Z6) and counts the machine in it at once
// (Z4). The error is EInvalid when no zone is suitable, or a retryable
// capacity error when the only suitable zones are remembered as full (Z7).
func (t *zoneTable) choose(r zoneRequest, now time.Time) (string, error) {
	if r.Placement != "" {
		if !t.avail[r.Placement] {
			return "", muster.Errorf(muster.EInvalid, "placement zone %q of machine %s is unknown or unavailable", r.Placement, r.MachineID)
		}
	}
	if len(r.Derived) > 0 {
		ex := map[string]bool{}
		for name := range t.avail {
			if !slices.Contains(r.Derived, name) {
				ex[name] = true
			}
		}
		t.excluded[r.MachineID] = ex
	}
	cands, capacityOnly := t.candidates(r, now)
	if len(cands) == 0 {
		if capacityOnly {
			return "", &muster.ProviderError{Kind: muster.ErrCapacity,
				Message: fmt.Sprintf("suitable availability zone for machine %s not found: every suitable zone is out of capacity", r.MachineID)}
		}
		return "", errNoZone(r.MachineID)
	}
	loads := make([]zoneLoad, len(cands))
	counts := t.count
	if r.Group != "" {
		if t.group[r.MachineID] != r.Group {
			zone, placed := t.machine[r.MachineID]
			if placed {
				t.groupAdd(r.MachineID, zone, -1)
			}
			t.group[r.MachineID] = r.Group
			if placed {
				t.groupAdd(r.MachineID, zone, 1)
			}
		}
		counts = t.gcount[r.Group]
	}
	own := t.machine[r.MachineID]
	for i, name := range cands {
		n := counts[name]
		if own == name {
			n-- // do not count the machine against its own zone
		}
		loads[i] = zoneLoad{Name: name, Count: n}
	}
	zone := pickZone(loads, t.rnd)
	t.set(r.MachineID, zone)
	return zone, nil
}

// markFailed records that r's machine failed in zone and reports whether
// another eligible zone remains; when none does, it clears the machine's
// failures (P10.5).
func (t *zoneTable) markFailed(r zoneRequest, zone string, now time.Time) bool {
	f := t.failed[r.MachineID]
	if f == nil {
		f = map[string]bool{}
		t.failed[r.MachineID] = f
	}
	f[zone] = true
	cands, _ := t.candidates(r, now)
	if len(cands) > 0 {
		return true
	}
	delete(t.failed, r.MachineID)
	return false
}

// failedZones returns the zones machine id failed in, sorted.
func (t *zoneTable) failedZones(id string) []string {
	var out []string
	for z := range t.failed[id] {
		out = append(out, z)
	}
	sort.Strings(out)
	return out
}

// machines returns the ids of the machines the table counts.
func (t *zoneTable) machines() []string {
	out := make([]string, 0, len(t.machine))
	for id := range t.machine {
		out = append(out, id)
	}
	return out
}

// readBlocks reads the cloud's capacity memory from the store (Z7), where
// every model on the same cloud and every controller on the same store
// records its capacity failures. A failure leaves the planner with what
// it knows already: it only costs a try in a full zone.
func (p *Provisioner) readBlocks(ctx context.Context) []muster.CapacityBlock {
	bs, err := p.cfg.Store.CapacityBlocks(ctx, p.cloud, p.clock.Now())
	if err != nil && ctx.Err() == nil {
		p.log.Warn("capacity memory not read", "cloud", p.cloud, "err", err)
	}
	return bs
}

// rememberBlock records a capacity block in the store (Z7), on a worker.
func (p *Provisioner) rememberBlock(ctx context.Context, b muster.CapacityBlock) {
	if err := p.cfg.Store.BlockCapacity(ctx, b); err != nil && ctx.Err() == nil {
		p.log.Warn("capacity block not recorded", "zone", b.Zone, "shape", b.Shape, "err", err)
	}
}

// decisionEvent records j's current attempt (R8) with its outcome: the
// error (nil on success), what happens next and when.
func (p *Provisioner) decisionEvent(j *startJob, err error, next string, at time.Time) muster.Event {
	d := j.dec
	if err != nil {
		d.Error = err.Error()
		d.ErrorKind = muster.ProviderErrorKindOf(err).String()
		var me *muster.Error
		if d.ErrorKind == "unknown" && errors.As(err, &me) {
			d.ErrorKind = me.Code // not the provider's: no zone, no binaries, ...
		}
	}
	d.Next, d.NextRetry = next, at
	b, jerr := json.Marshal(d)
	if jerr != nil { // cannot happen for this type
		b = []byte(fmt.Sprintf(`{"error":%q}`, jerr.Error()))
	}
	return p.newEvent(j.id, muster.EventDecision, string(b))
}
