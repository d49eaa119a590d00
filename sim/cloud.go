package sim

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// Config configures a Cloud. The zero value is a usable cloud with zones
// a, b and c, no faults and no state file.
type Config struct {
	// Clock drives latency, rate limits, listing lag and created times.
	// Default muster.SystemClock.
	Clock muster.Clock
	// Zones are the zones of a new cloud, in order (the i-th zone's subnets
	// are 10.<i+1>.x.x). Default a, b, c, available, Unlimited capacity.
	// When a state file is loaded, its zones are used instead.
	Zones []ZoneConfig
	// Spaces are the network spaces; default DefaultSpaces. At most 16.
	Spaces []SpaceConfig
	// Faults are the initial faults of a new cloud; a state file's win.
	Faults Faults
	// StateFile, when set, is where the cloud keeps its state and finds it
	// again at Open: a snapshot (JSON, written to a temporary file and
	// renamed) followed by one JSON line per change, appended as changes
	// happen, and replaced by a new snapshot when it has grown. It holds
	// each instance's start parameters, agent password included, as a real
	// cloud keeps an instance's user data.
	StateFile string
	// SaveDelay, when positive, batches state file writes: a change is
	// written at most SaveDelay (on Clock) after it happened, and Close
	// writes what is left. Zero writes every change before the call that
	// made it returns (concurrent calls share writes), so a crash of the
	// process loses nothing.
	SaveDelay time.Duration
	// PendingTime is how long an instance launched by Launch (the EC2
	// API) stays "pending" before it is "running", and one stopped or
	// started by Power stays "stopping" or "pending". Default 0: at once.
	PendingTime time.Duration
	// MaxBatch is the largest number of instances one StartInstances call
	// may start. Default DefaultMaxBatch.
	MaxBatch int
	// Seed seeds the random jitter, error injection and ids; 0 picks one
	// at random.
	Seed uint64
	// OnStart, when set, is called (outside any lock) after each instance
	// is started (or started again after a stop) with the parameters it
	// was started with, and at Open for each instance loaded from the
	// state file that is not stopped, so simulated agents can
	// run. Instances added by AddInstance have no parameters and are not
	// reported.
	OnStart func(inst Instance, p muster.StartParams)
	// OnStop, when set, is called after an instance is stopped or
	// terminated.
	OnStop func(id string)
	// OnAgentStop, when set, is called by StopAgent: the instance's
	// simulated agent stops heartbeating, the instance runs on.
	OnAgentStop func(id string)
	// Logger receives warnings (e.g. a state file that cannot be written).
	// Default slog.Default().
	Logger *slog.Logger
}

// Cloud is a simulated cloud. It is safe for concurrent use.
type Cloud struct {
	clock       muster.Clock
	file        string
	maxBatch    int
	pending     time.Duration // Config.PendingTime
	onStart     func(Instance, muster.StartParams)
	onStop      func(string)
	onAgentStop func(string)
	logger      *slog.Logger
	spaces      []SpaceConfig

	mu           sync.Mutex
	rnd          *rand.Rand
	zones        []*zone
	faults       Faults
	subnets      []*subnet
	instances    map[string]*Instance
	params       map[string]*muster.StartParams // start params by instance id
	tokens       map[string]string              // controller/model/token → instance id
	addrUsed     map[string]bool
	limits       limits
	stats        Stats
	reservations map[string]*reservation // EC2 reservations by client token
	tombs        map[string]*tombstone   // terminated instances, for the EC2 API
	tombOrder    []string                // tombs' ids, oldest first
	journal      [][]byte                // state file records not yet written
	needSnapshot bool                    // a record could not be encoded

	w writer // the state file's

	id    *identity                    // signs instance identity documents
	files map[string]map[string][]byte // instance id → path → data: the instances' disks
	// signed holds identity documents signed ahead by PrepareIdentity,
	// until their instance's first IdentityDocument.
	signed map[string]signedIdentity

	saveDelay time.Duration
	kick      chan struct{}
	quit      chan struct{}
	saver     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

type zone struct {
	ZoneConfig
	used      int
	instances int
}

type subnet struct {
	muster.Subnet
	net  netip.Prefix
	last int // the last host instances get: the last but one address
	next int
	used int // addresses taken
}

// firstHost is the first host of a subnet that instances get (.4, as EC2
// keeps the first four).
const firstHost = 4

// newSubnet is the slot-th of slots equal parts of zone n's 10.n.0.0/16
// (slots a power of two).
func newSubnet(sn muster.Subnet, n, slot, slots int) *subnet {
	bits := 16
	for 1<<(bits-16) < slots {
		bits++
	}
	p := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(n), byte(slot * 256 / slots), 0}), bits)
	sn.CIDR = p.String()
	return &subnet{Subnet: sn, net: p, last: 1<<(32-bits) - 2, next: firstHost}
}

// free is how many addresses s has left.
func (s *subnet) free() int { return s.last - firstHost + 1 - s.used }

// Open returns a cloud configured by cfg, loading cfg.StateFile when it
// exists.
func Open(cfg Config) (*Cloud, error) {
	c := &Cloud{
		clock:        cfg.Clock,
		file:         cfg.StateFile,
		maxBatch:     cfg.MaxBatch,
		pending:      cfg.PendingTime,
		onStart:      cfg.OnStart,
		onStop:       cfg.OnStop,
		onAgentStop:  cfg.OnAgentStop,
		logger:       cfg.Logger,
		spaces:       cfg.Spaces,
		instances:    map[string]*Instance{},
		params:       map[string]*muster.StartParams{},
		files:        map[string]map[string][]byte{},
		signed:       map[string]signedIdentity{},
		tokens:       map[string]string{},
		addrUsed:     map[string]bool{},
		limits:       limits{calls: map[string]*bucket{}},
		stats:        newStats(),
		reservations: map[string]*reservation{},
		tombs:        map[string]*tombstone{},
		saveDelay:    cfg.SaveDelay,
		kick:         make(chan struct{}, 1),
		quit:         make(chan struct{}),
	}
	if c.clock == nil {
		c.clock = muster.SystemClock
	}
	if c.pending < 0 {
		return nil, muster.Errorf(muster.EInvalid, "sim: negative pending time %s", c.pending)
	}
	if c.maxBatch <= 0 {
		c.maxBatch = DefaultMaxBatch
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.spaces == nil {
		c.spaces = DefaultSpaces
	}
	if len(c.spaces) > 16 {
		return nil, muster.Errorf(muster.EInvalid, "sim: %d spaces configured, at most 16", len(c.spaces))
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = rand.Uint64()
	}
	c.rnd = rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	if err := checkFaults(cfg.Faults); err != nil {
		return nil, err
	}
	c.faults = cloneFaults(cfg.Faults)

	zones := cfg.Zones
	if zones == nil {
		zones = []ZoneConfig{
			{Name: "a", Available: true, Capacity: Unlimited},
			{Name: "b", Available: true, Capacity: Unlimited},
			{Name: "c", Available: true, Capacity: Unlimited},
		}
	}
	var loaded *state
	if c.file != "" {
		st, err := readState(c.file)
		if err != nil {
			return nil, err
		}
		loaded = st
	}
	if loaded != nil {
		if err := checkFaults(loaded.Faults); err != nil {
			return nil, fmt.Errorf("sim: state file %s: %w", c.file, err)
		}
		c.faults = cloneFaults(loaded.Faults)
		for _, z := range loaded.Zones {
			if err := c.addZone(z); err != nil {
				return nil, fmt.Errorf("sim: state file %s: %w", c.file, err)
			}
		}
	}
	if loaded == nil {
		for _, z := range zones {
			if err := c.addZone(z); err != nil {
				return nil, err
			}
		}
	}
	var restored []*Instance
	if loaded != nil {
		for _, pi := range loaded.Instances {
			inst := pi.Instance
			z := c.zone(inst.Zone)
			if z == nil || inst.ID == "" || c.instances[inst.ID] != nil {
				return nil, muster.Errorf(muster.EInvalid, "sim: state file %s: bad instance %q in zone %q", c.file, inst.ID, inst.Zone)
			}
			if inst.EC2 != nil && c.subnetByID(inst.EC2.SubnetID) == nil && len(inst.Addresses) > 0 {
				// Saved before subnet ids took EC2's shape.
				if s := c.subnetOfAddr(inst.Addresses[0]); s != nil {
					inst.EC2.SubnetID = s.ID
				}
			}
			c.instances[inst.ID] = &inst
			if pi.Params != nil {
				c.params[inst.ID] = pi.Params
			}
			if pi.Files != nil {
				c.files[inst.ID] = pi.Files
			}
			if tok := inst.Tags[muster.TagLaunchToken]; tok != "" {
				c.tokens[tokenKey(inst.Controller(), inst.Model(), tok)] = inst.ID
			}
			for _, a := range inst.Addresses {
				if !c.addrUsed[a] {
					c.useAddr(a)
				}
			}
			z.used += inst.Cores
			z.instances++
			restored = append(restored, &inst)
		}
		for i := range loaded.Reservations {
			r := loaded.Reservations[i]
			if r.ClientToken != "" {
				c.reservations[r.ClientToken] = &r
			}
		}
		now := c.clock.Now()
		sort.SliceStable(loaded.Ended, func(i, j int) bool { return loaded.Ended[i].Ended.Before(loaded.Ended[j].Ended) })
		for i := range loaded.Ended {
			t := loaded.Ended[i]
			if c.instances[t.Instance.ID] == nil && now.Sub(t.Ended) < TombstoneTTL {
				c.tombs[t.Instance.ID] = &t
				c.tombOrder = append(c.tombOrder, t.Instance.ID)
			}
		}
	}
	var idKey string
	if loaded != nil {
		idKey = loaded.IdentityKey
	}
	id, err := loadIdentity(idKey, c.clock.Now())
	if err != nil {
		return nil, err
	}
	c.id = id
	if err := c.save(true); err != nil {
		return nil, err
	}
	if c.file != "" && c.saveDelay > 0 {
		c.saver.Add(1)
		go c.saveLoop()
	}
	if c.onStart != nil {
		sort.Slice(restored, func(i, j int) bool { return restored[i].ID < restored[j].ID })
		for _, inst := range restored {
			if p := c.params[inst.ID]; p != nil && inst.State != "stopped" && inst.State != "stopping" {
				c.onStart(cloneInstance(inst), *p)
			}
		}
	}
	return c, nil
}

// Close writes the state file a last time. The cloud stays usable in
// memory, but no longer saves. Closing twice is harmless.
func (c *Cloud) Close() error {
	c.closeOnce.Do(func() {
		close(c.quit)
		c.saver.Wait()
		c.closeErr = c.save(false)
		c.w.mu.Lock()
		c.w.closed = true
		if c.w.out != nil {
			if err := c.w.out.Close(); err != nil && c.closeErr == nil {
				c.closeErr = fmt.Errorf("sim: close state file: %w", err)
			}
			c.w.out = nil
		}
		c.w.mu.Unlock()
	})
	return c.closeErr
}

// saveLoop writes the state file at most every SaveDelay.
func (c *Cloud) saveLoop() {
	defer c.saver.Done()
	for {
		select {
		case <-c.quit:
			return
		case <-c.kick:
		}
		t := c.clock.NewTimer(c.saveDelay)
		select {
		case <-c.quit:
			t.Stop()
			return
		case <-t.C():
		}
		if err := c.save(false); err != nil {
			c.logger.Warn("sim state not saved", "file", c.file, "err", err)
		}
	}
}

// MaxBatch is the largest number of instances one start call may start.
func (c *Cloud) MaxBatch() int { return c.maxBatch }

// Clock returns the cloud's clock.
func (c *Cloud) Clock() muster.Clock { return c.clock }

func (c *Cloud) zone(name string) *zone {
	for _, z := range c.zones {
		if z.Name == name {
			return z
		}
	}
	return nil
}

// addZone adds a zone and its subnets; c.mu is held or c is not shared.
func (c *Cloud) addZone(zc ZoneConfig) error {
	if err := muster.CheckName(zc.Name); err != nil {
		return fmt.Errorf("sim: zone name: %w", err)
	}
	if c.zone(zc.Name) != nil {
		return muster.Errorf(muster.EInvalid, "sim: zone %q listed twice", zc.Name)
	}
	if zc.Capacity < Unlimited {
		return muster.Errorf(muster.EInvalid, "sim: zone %q: capacity %d (want -1 for unlimited, or 0 or more cores)", zc.Name, zc.Capacity)
	}
	if len(c.zones) >= 250 {
		return muster.Errorf(muster.EInvalid, "sim: too many zones (at most 250)")
	}
	c.zones = append(c.zones, &zone{ZoneConfig: zc})
	n := len(c.zones)
	// The zone's 10.n.0.0/16 is split in as many equal parts as there are
	// spaces, rounded up to a power of two (a /17 each for the default
	// two): a part per space, the same layout in every zone.
	slots := 1
	for slots < len(c.spaces) {
		slots *= 2
	}
	inSpace := false
	for j, sp := range c.spaces {
		if len(sp.Zones) > 0 && !contains(sp.Zones, zc.Name) {
			continue
		}
		inSpace = true
		c.subnets = append(c.subnets, newSubnet(muster.Subnet{ID: SubnetID(zc.Name, sp.Name), Zone: zc.Name, Space: sp.Name}, n, j, slots))
	}
	if !inSpace {
		c.subnets = append(c.subnets, newSubnet(muster.Subnet{ID: SubnetID(zc.Name, ""), Zone: zc.Name}, n, 0, 1))
	}
	return nil
}

// SubnetID is the id of the subnet of a zone in a space ("" for the
// subnet of a zone in no space): "subnet-" and 17 hex digits, as EC2's,
// the same in every cloud and across restarts.
func SubnetID(zone, space string) string {
	sum := sha256.Sum256([]byte("muster-sim-subnet/" + zone + "/" + space))
	return "subnet-" + hex.EncodeToString(sum[:])[:17]
}

// alloc returns a free address of s, or "" when s is full; c.mu is held.
func (c *Cloud) alloc(s *subnet) string {
	if s.free() <= 0 {
		return ""
	}
	base := s.net.Addr().As4()
	for i := 0; i <= s.last-firstHost; i++ {
		h := s.next
		s.next++
		if s.next > s.last {
			s.next = firstHost
		}
		addr := fmt.Sprintf("%d.%d.%d.%d", base[0], base[1], int(base[2])+h/256, h%256)
		if !c.addrUsed[addr] {
			c.addrUsed[addr] = true
			s.used++
			return addr
		}
	}
	return ""
}

// useAddr and freeAddr mark an address taken and free again, counting it
// in its subnet; c.mu is held.
func (c *Cloud) useAddr(addr string) {
	c.addrUsed[addr] = true
	if s := c.subnetOfAddr(addr); s != nil {
		s.used++
	}
}

func (c *Cloud) freeAddr(addr string) {
	if !c.addrUsed[addr] {
		return
	}
	delete(c.addrUsed, addr)
	if s := c.subnetOfAddr(addr); s != nil {
		s.used--
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func tokenKey(controller, model, token string) string {
	return controller + "\x00" + model + "\x00" + token
}

// limits are the token buckets of the rate limits; c.mu guards them.
type limits struct {
	calls     map[string]*bucket // by call kind
	instances bucket             // started instances
}

// writer writes the state file. Its mu orders writes and is taken before
// c.mu, never while c.mu is held.
type writer struct {
	mu     sync.Mutex
	out    *os.File // the state file, open for appending
	logged int      // records appended since the last snapshot
	broken bool     // an append failed: write a snapshot next
	closed bool
}

// bucket is a token bucket; c.mu guards it.
type bucket struct {
	cfg    Bucket
	tokens float64
	last   time.Time
}

// take takes n tokens if the bucket holds them.
func (b *bucket) take(cfg Bucket, now time.Time, n int) bool {
	if cfg.Burst <= 0 {
		return true
	}
	if b.cfg != cfg || b.last.IsZero() {
		b.cfg, b.tokens, b.last = cfg, float64(cfg.Burst), now
	}
	if el := now.Sub(b.last); el > 0 {
		b.tokens += el.Seconds() * cfg.PerSecond
		if b.tokens > float64(cfg.Burst) {
			b.tokens = float64(cfg.Burst)
		}
	}
	b.last = now
	if b.tokens+1e-9 < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// enter counts a call of kind and applies its rate limit: instances is the
// number of instances a start call wants (0 for other calls). c.mu is not
// held.
func (c *Cloud) enter(ctx context.Context, kind string, instances int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	c.stats.Calls[kind]++
	now := c.clock.Now()
	b := c.limits.calls[kind]
	if b == nil {
		b = &bucket{}
		c.limits.calls[kind] = b
	}
	ok := b.take(c.faults.RateLimits[kind], now, 1)
	if ok && instances > 0 {
		ok = c.limits.instances.take(c.faults.InstanceRate, now, instances)
	}
	if !ok {
		c.stats.Throttled[kind]++
		c.stats.Errors[kind]++
		c.mu.Unlock()
		return muster.NewProviderError(muster.ErrThrottled, "", "sim: request limit exceeded (%s)", kind)
	}
	lat := c.faults.Latency[kind]
	d := lat.Fixed
	if lat.Jitter > 0 {
		d += time.Duration(c.rnd.Int64N(int64(lat.Jitter) + 1))
	}
	c.mu.Unlock()
	if d > 0 {
		if err := muster.Sleep(ctx, c.clock, d); err != nil {
			return err
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if rate := c.faults.ErrorRate[kind]; rate > 0 && c.rnd.Float64() < rate {
		c.stats.Errors[kind]++
		return muster.NewProviderError(muster.ErrUnavailable, "", "sim: injected %s failure", kind)
	}
	return nil
}

// leave ends a call of kind that has done its work: it holds the reply for
// Faults.ReplyDelay, then loses it when Faults.LoseReplies says so (an
// ErrUnavailable error wrapping ErrReplyLost). c.mu is not held.
func (c *Cloud) leave(ctx context.Context, kind string) error {
	c.mu.Lock()
	lat := c.faults.ReplyDelay[kind]
	d := lat.Fixed
	if lat.Jitter > 0 {
		d += time.Duration(c.rnd.Int64N(int64(lat.Jitter) + 1))
	}
	lose := c.faults.LoseReplies[kind] > 0
	if lose {
		if c.faults.LoseReplies[kind]--; c.faults.LoseReplies[kind] == 0 {
			delete(c.faults.LoseReplies, kind)
		}
		c.logConfig()
	}
	c.mu.Unlock()
	if lose {
		c.persist()
	}
	if d > 0 {
		if err := muster.Sleep(ctx, c.clock, d); err != nil {
			return err
		}
	}
	if lose {
		return &muster.ProviderError{Kind: muster.ErrUnavailable, Message: "sim: the reply of a " + kind + " call was lost", Err: ErrReplyLost}
	}
	return nil
}

// ErrReplyLost marks a call whose reply Faults.LoseReplies dropped: the
// HTTP server closes the connection instead of answering.
var ErrReplyLost = errors.New("reply lost")

// start starts ps for a controller and model: the call-level error is for
// the whole call (throttled, cancelled, injected failure, lost reply).
func (c *Cloud) start(ctx context.Context, controller, model string, ps []muster.StartParams) ([]muster.StartOutcome, error) {
	if len(ps) > c.maxBatch {
		return nil, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: %d instances in one start call, at most %d", len(ps), c.maxBatch)
	}
	if err := c.enter(ctx, CallStart, len(ps)); err != nil {
		return nil, err
	}
	out := make([]muster.StartOutcome, len(ps))
	var news []*Instance
	c.mu.Lock()
	for i, p := range ps {
		inst, isNew, err := c.startOne(controller, model, p)
		if err != nil {
			c.stats.Errors[CallStart]++
			out[i].Err = err
			continue
		}
		out[i].Result = inst.Result()
		if isNew {
			news = append(news, inst)
		}
	}
	c.started(news)
	if err := c.leave(ctx, CallStart); err != nil {
		return nil, err
	}
	return out, nil
}

// started unlocks c.mu, saves the state and reports news to OnStart.
func (c *Cloud) started(news []*Instance) {
	type hook struct {
		inst Instance
		p    muster.StartParams
	}
	var hooks []hook
	if c.onStart != nil {
		for _, inst := range news {
			if p := c.params[inst.ID]; p != nil {
				hooks = append(hooks, hook{cloneInstance(inst), *p})
			}
		}
	}
	c.mu.Unlock()
	if len(news) > 0 {
		c.persist()
	}
	for _, h := range hooks {
		c.onStart(h.inst, h.p)
	}
}

// startOne starts one instance of the sim's own start call: the launch
// token, base, arch, constraints, zone and spaces of p decide; c.mu is
// held.
func (c *Cloud) startOne(controller, model string, p muster.StartParams) (*Instance, bool, error) {
	if p.LaunchToken != "" {
		if id, ok := c.tokens[tokenKey(controller, model, p.LaunchToken)]; ok {
			if inst := c.instances[id]; inst != nil {
				return inst, false, nil
			}
		}
	}
	base := p.Base
	if base == "" {
		base = "ubuntu@24.04"
	}
	arch := p.Constraints.Arch
	if arch == "" {
		arch = p.Arch
	}
	if arch == "" {
		arch = "amd64"
	}
	if !contains(Bases, base) {
		return nil, false, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: no image for base %q", base)
	}
	it, err := MatchType(p.Constraints, arch)
	if err != nil {
		return nil, false, err
	}
	z, err := c.chooseZone(p, it.Cores)
	if err != nil {
		return nil, false, err
	}
	tags := copyTags(p.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[muster.TagController] = controller
	tags[muster.TagModel] = model
	if p.MachineID != "" {
		tags[muster.TagMachine] = p.MachineID
	}
	if p.LaunchToken != "" {
		tags[muster.TagLaunchToken] = p.LaunchToken
	}
	// The sim names the devices of attachments itself.
	atts := make([]muster.VolumeAttachment, len(p.Attachments))
	for i, a := range p.Attachments {
		a.DeviceName = ""
		atts[i] = a
	}
	pc := p
	pc.ControllerUUID, pc.ModelUUID = controller, model
	inst, err := c.launch(launchSpec{
		zone: z, typ: it, base: base, spaces: p.SubnetsToZones,
		rootDisk: max(p.Constraints.RootDisk, DefaultRootDisk), tags: tags,
		volumes: p.Volumes, attachments: atts, params: pc, created: c.clock.Now(),
	})
	if err != nil {
		return nil, false, err
	}
	return inst, true, nil
}

// launchSpec is one instance to launch in a chosen zone.
type launchSpec struct {
	zone *zone
	typ  InstanceType
	base string
	// subnet, when set, is the one subnet the instance gets an address
	// in; else spaces (one subnet id → zones map per space) give one
	// address per space, else the zone's first subnet gives one.
	subnet      *subnet
	spaces      []map[string][]string
	rootDisk    uint64            // MiB
	tags        map[string]string // the instance's, complete
	volumes     []muster.Volume   // VolumeID is set here; Size 0 means 1 GiB
	attachments []muster.VolumeAttachment
	params      muster.StartParams // kept for OnStart and the state file
	ec2         *EC2Attrs
	created     time.Time
	pending     bool // starts "pending" for Config.PendingTime
}

// ErrNoAddress marks a capacity error of a full subnet.
var ErrNoAddress = errors.New("no free address")

// launch starts one instance as l says, subject to the zone's FailNext,
// error rate and capacity; c.mu is held.
func (c *Cloud) launch(l launchSpec) (*Instance, error) {
	z, it := l.zone, l.typ
	if n := c.faults.FailNext[z.Name]; n > 0 {
		if n == 1 {
			delete(c.faults.FailNext, z.Name)
		} else {
			c.faults.FailNext[z.Name] = n - 1
		}
		c.logConfig()
		return nil, muster.NewProviderError(muster.ErrCapacity, z.Name, "sim: insufficient capacity for %s in zone %q", it.Name, z.Name)
	}
	if q := c.faults.QuotaVCPUs; q > 0 {
		used := 0
		for _, oz := range c.zones {
			used += oz.used
		}
		if used+it.Cores > q {
			return nil, muster.NewProviderError(muster.ErrQuota, "", "sim: vCPU quota of %d exceeded (%d in use, %s needs %d)", q, used, it.Name, it.Cores)
		}
	}
	if rate := c.faults.ZoneErrorRate[z.Name]; rate > 0 && c.rnd.Float64() < rate {
		return nil, muster.NewProviderError(muster.ErrUnavailable, z.Name, "sim: injected start failure in zone %q", z.Name)
	}
	if z.Capacity != Unlimited && z.used+it.Cores > z.Capacity {
		return nil, muster.NewProviderError(muster.ErrCapacity, z.Name, "sim: insufficient capacity for %s in zone %q", it.Name, z.Name)
	}
	// Addresses: in the given subnet, or one per requested space, or one
	// in the zone's first subnet.
	var nets []*subnet
	switch {
	case l.subnet != nil:
		nets = []*subnet{l.subnet}
	case len(l.spaces) > 0:
		for i, m := range l.spaces {
			s := c.subnetFor(m, z.Name)
			if s == nil {
				return nil, muster.NewProviderError(muster.ErrUnavailable, z.Name, "sim: no subnet of requested space %d in zone %q", i+1, z.Name)
			}
			nets = append(nets, s)
		}
	default:
		if s := c.defaultSubnet(z.Name); s != nil {
			nets = []*subnet{s}
		}
	}
	var addrs []string
	for _, s := range nets {
		a := c.alloc(s)
		if a == "" {
			for _, x := range addrs {
				c.freeAddr(x)
			}
			return nil, &muster.ProviderError{Kind: muster.ErrCapacity, Zone: z.Name, Message: fmt.Sprintf("sim: no free address in subnet %s", s.ID), Err: ErrNoAddress}
		}
		addrs = append(addrs, a)
	}
	id := c.newID("i-")
	inst := &Instance{
		ID:           id,
		Zone:         z.Name,
		InstanceType: it.Name,
		Arch:         it.Arch,
		Cores:        it.Cores,
		Mem:          it.Mem,
		RootDisk:     l.rootDisk,
		Base:         l.base,
		Tags:         l.tags,
		Addresses:    addrs,
		Created:      l.created,
		State:        "running",
		EC2:          l.ec2,
	}
	if l.pending && c.pending > 0 {
		inst.State, inst.Until = "pending", l.created.Add(c.pending)
	}
	for _, v := range l.volumes {
		v.VolumeID = c.newID("vol-")
		if v.Size == 0 {
			v.Size = 1 << 10
		}
		inst.Volumes = append(inst.Volumes, v)
	}
	for i, a := range l.attachments {
		a.InstanceID = id
		if a.DeviceName == "" {
			a.DeviceName = fmt.Sprintf("/dev/sd%c", 'b'+rune(i%25))
		}
		inst.Attachments = append(inst.Attachments, a)
	}
	if tok := inst.Tags[muster.TagLaunchToken]; tok != "" {
		c.tokens[tokenKey(inst.Controller(), inst.Model(), tok)] = id
	}
	p := l.params
	c.instances[id] = inst
	c.params[id] = &p
	z.used += it.Cores
	z.instances++
	c.stats.InstancesStarted++
	c.logPut(inst)
	return inst, nil
}

// firstSubnet returns the first subnet of zone, nil if it has none.
func (c *Cloud) firstSubnet(zone string) *subnet {
	for _, s := range c.subnets {
		if s.Zone == zone {
			return s
		}
	}
	return nil
}

// defaultSubnet is where an instance without a subnet or space gets its
// address: the zone's first subnet, or when that is full the next one
// with a free address (a provisioner picks another subnet of the zone);
// the first when all are full, nil if the zone has none.
func (c *Cloud) defaultSubnet(zone string) *subnet {
	first := c.firstSubnet(zone)
	for _, s := range c.subnets {
		if first != nil && s.Zone == zone && s.free() > 0 {
			return s
		}
	}
	return first
}

func (c *Cloud) subnetByID(id string) *subnet {
	for _, s := range c.subnets {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// subnetOfAddr returns the subnet an address was allocated from.
func (c *Cloud) subnetOfAddr(addr string) *subnet {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return nil
	}
	for _, s := range c.subnets {
		if s.net.Contains(a) {
			return s
		}
	}
	return nil
}

// subnetFor returns the subnet of m (subnet id → zones) in zone.
func (c *Cloud) subnetFor(m map[string][]string, zone string) *subnet {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for _, s := range c.subnets {
			if s.ID == id && s.Zone == zone {
				return s
			}
		}
	}
	return nil
}

// chooseZone returns the zone a start goes to; c.mu is held.
func (c *Cloud) chooseZone(p muster.StartParams, cores int) (*zone, error) {
	if p.Zone != "" {
		z := c.zone(p.Zone)
		if z == nil {
			return nil, muster.NewProviderError(muster.ErrUnavailable, p.Zone, "sim: zone %q does not exist", p.Zone)
		}
		if !z.Available {
			return nil, muster.NewProviderError(muster.ErrCapacity, z.Name, "sim: zone %q is unavailable", z.Name)
		}
		return z, nil
	}
	var best *zone
	for _, z := range c.zones {
		if !z.Available || !p.Constraints.AllowsZone(z.Name) {
			continue
		}
		if z.Capacity != Unlimited && z.used+cores > z.Capacity {
			continue
		}
		if best == nil || z.instances < best.instances {
			best = z
		}
	}
	if best == nil {
		return nil, muster.NewProviderError(muster.ErrCapacity, "", "sim: no available zone has capacity for %d cores", cores)
	}
	return best, nil
}

func (c *Cloud) newID(prefix string) string {
	for {
		id := fmt.Sprintf("%s%017x", prefix, c.rnd.Uint64())
		if c.instances[id] == nil {
			return id
		}
	}
}

// MatchType returns the smallest instance type of arch that fits c, or a
// zone-independent error when none does.
func MatchType(c muster.Constraints, arch string) (InstanceType, error) {
	if c.Arch != "" && c.Arch != arch {
		arch = c.Arch
	}
	for _, it := range InstanceTypes {
		if it.Arch != arch {
			continue
		}
		if c.InstanceType != "" && c.InstanceType != it.Name {
			continue
		}
		if uint64(it.Cores) < c.Cores || it.Mem < c.Mem {
			continue
		}
		return it, nil
	}
	if c.InstanceType != "" {
		return InstanceType{}, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: no instance type %q for arch %s matching %q", c.InstanceType, arch, c.String())
	}
	return InstanceType{}, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: no instance type for arch %s matching %q", arch, c.String())
}

// stop stops the instances among ids that belong to controller and model.
func (c *Cloud) stop(ctx context.Context, controller, model string, ids []string) error {
	if err := c.enter(ctx, CallStop, 0); err != nil {
		return err
	}
	c.mu.Lock()
	var stopped []string
	for _, id := range ids {
		inst := c.instances[id]
		if inst == nil || inst.Controller() != controller || inst.Model() != model {
			continue
		}
		c.removeLocked(inst)
		stopped = append(stopped, id)
	}
	c.mu.Unlock()
	c.afterStop(stopped)
	return c.leave(ctx, CallStop)
}

func (c *Cloud) afterStop(stopped []string) {
	if len(stopped) == 0 {
		return
	}
	c.persist()
	if c.onStop != nil {
		for _, id := range stopped {
			c.onStop(id)
		}
	}
}

// removeLocked removes inst, keeping a tombstone of it for the EC2 API;
// c.mu is held.
func (c *Cloud) removeLocked(inst *Instance) {
	c.forgetLocked(inst)
	now := c.clock.Now()
	c.pruneTombsLocked(now)
	t := &tombstone{Instance: cloneInstance(inst), Ended: now}
	t.Instance.State = "terminated"
	c.tombs[inst.ID] = t
	c.tombOrder = append(c.tombOrder, inst.ID)
	c.stats.InstancesStopped++
	if c.file != "" {
		c.logRecord(record{Del: inst.ID, Ended: &now})
	}
}

// unlaunchLocked removes inst without a trace (a launch rolled back); c.mu
// is held.
func (c *Cloud) unlaunchLocked(inst *Instance) {
	c.forgetLocked(inst)
	c.stats.InstancesStarted--
	c.logDel(inst.ID)
}

// forgetLocked undoes what launch recorded of inst; c.mu is held.
func (c *Cloud) forgetLocked(inst *Instance) {
	delete(c.instances, inst.ID)
	delete(c.params, inst.ID)
	delete(c.files, inst.ID)
	delete(c.signed, inst.ID)
	c.untoken(inst)
	for _, a := range inst.Addresses {
		c.freeAddr(a)
	}
	if z := c.zone(inst.Zone); z != nil {
		z.used -= inst.Cores
		z.instances--
	}
}

// untoken forgets inst's launch token; c.mu is held.
func (c *Cloud) untoken(inst *Instance) {
	if tok := inst.Tags[muster.TagLaunchToken]; tok != "" {
		k := tokenKey(inst.Controller(), inst.Model(), tok)
		if c.tokens[k] == inst.ID {
			delete(c.tokens, k)
		}
	}
}

// TombstoneTTL is how long the EC2 API lists a terminated instance (on
// the cloud's clock).
const TombstoneTTL = time.Hour

// tombstone is a terminated instance the EC2 API still lists.
type tombstone struct {
	Instance Instance  `json:"instance"`
	Ended    time.Time `json:"ended"`
}

// pruneTombsLocked drops the tombstones older than TombstoneTTL; c.mu is
// held.
func (c *Cloud) pruneTombsLocked(now time.Time) {
	n := 0
	for n < len(c.tombOrder) {
		t := c.tombs[c.tombOrder[n]]
		if t != nil && now.Sub(t.Ended) < TombstoneTTL {
			break
		}
		delete(c.tombs, c.tombOrder[n])
		n++
	}
	c.tombOrder = c.tombOrder[n:]
}

// list returns the listed instances of controller and model.
func (c *Cloud) list(ctx context.Context, controller, model string) ([]muster.Instance, error) {
	if err := c.enter(ctx, CallList, 0); err != nil {
		return nil, err
	}
	c.mu.Lock()
	now := c.clock.Now()
	lag := c.faults.ListingLag
	out := []muster.Instance{}
	for _, inst := range c.sortedLocked() {
		settle(inst, now)
		if inst.Controller() != controller || inst.Model() != model {
			continue
		}
		if lag > 0 && now.Sub(inst.Created) < lag {
			continue
		}
		out = append(out, inst.Provider())
	}
	c.mu.Unlock()
	if err := c.leave(ctx, CallList); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Cloud) sortedLocked() []*Instance {
	out := make([]*Instance, 0, len(c.instances))
	for _, inst := range c.instances {
		out = append(out, inst)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].Created.Equal(out[j].Created) {
			return out[i].Created.Before(out[j].Created)
		}
		return out[i].ID < out[j].ID
	})
	return out
}

func (c *Cloud) listZones(ctx context.Context) ([]muster.Zone, error) {
	if err := c.enter(ctx, CallZones, 0); err != nil {
		return nil, err
	}
	c.mu.Lock()
	out := make([]muster.Zone, 0, len(c.zones))
	for _, z := range c.zones {
		out = append(out, muster.Zone{Name: z.Name, Available: z.Available})
	}
	c.mu.Unlock()
	if err := c.leave(ctx, CallZones); err != nil {
		return nil, err
	}
	return out, nil
}

func (c *Cloud) listSubnets(ctx context.Context) ([]muster.Subnet, error) {
	if err := c.enter(ctx, CallSubnets, 0); err != nil {
		return nil, err
	}
	c.mu.Lock()
	out := make([]muster.Subnet, 0, len(c.subnets))
	for _, s := range c.subnets {
		out = append(out, s.Subnet)
	}
	c.mu.Unlock()
	if err := c.leave(ctx, CallSubnets); err != nil {
		return nil, err
	}
	return out, nil
}

// deriveZones returns the zones p's placement and subnets allow (nil = any).
// Volumes are created with the instance, so they never restrict zones.
func (c *Cloud) deriveZones(ctx context.Context, p muster.StartParams) ([]string, error) {
	if err := c.enter(ctx, CallDeriveZones, 0); err != nil {
		return nil, err
	}
	zs, err := c.allowedZones(p)
	if lerr := c.leave(ctx, CallDeriveZones); lerr != nil {
		return nil, lerr
	}
	return zs, err
}

// allowedZones is deriveZones' work.
func (c *Cloud) allowedZones(p muster.StartParams) ([]string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var allowed []string // nil = any
	if p.Placement != "" {
		key, val, ok := strings.Cut(p.Placement, "=")
		if !ok || key != "zone" || val == "" {
			return nil, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: unsupported placement %q (want zone=NAME)", p.Placement)
		}
		z := c.zone(val)
		if z == nil {
			return nil, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: placement zone %q does not exist", val)
		}
		allowed = []string{val}
	}
	for _, m := range p.SubnetsToZones {
		var zs []string
		for id, zones := range m {
			for _, s := range c.subnets {
				if s.ID == id && contains(zones, s.Zone) && !contains(zs, s.Zone) {
					zs = append(zs, s.Zone)
				}
			}
		}
		if allowed == nil {
			allowed = zs
		} else {
			var both []string
			for _, z := range allowed {
				if contains(zs, z) {
					both = append(both, z)
				}
			}
			allowed = both
		}
		if len(allowed) == 0 {
			return nil, muster.NewProviderError(muster.ErrZoneIndependent, "", "sim: no zone satisfies the placement and requested spaces")
		}
	}
	// Keep zone order.
	if allowed == nil {
		return nil, nil
	}
	out := []string{}
	for _, z := range c.zones {
		if contains(allowed, z.Name) {
			out = append(out, z.Name)
		}
	}
	return out, nil
}

// Zones returns the zones with their capacity and use (admin; not counted).
func (c *Cloud) Zones() []ZoneState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ZoneState, 0, len(c.zones))
	for i, z := range c.zones {
		out = append(out, ZoneState{
			Name: z.Name, Available: z.Available, Capacity: z.Capacity,
			Used: z.used, Instances: z.instances, Index: i,
			FailNext: c.faults.FailNext[z.Name], ErrorRate: c.faults.ZoneErrorRate[z.Name],
		})
	}
	return out
}

// SetZone changes a zone's availability or capacity, adding the zone when
// it does not exist (available and Unlimited unless u says otherwise).
// Lowering capacity below what is in use stops nothing; new starts fail.
func (c *Cloud) SetZone(name string, u ZoneUpdate) (ZoneState, error) {
	if u.Capacity != nil && *u.Capacity < Unlimited {
		return ZoneState{}, muster.Errorf(muster.EInvalid, "sim: capacity %d (want -1 for unlimited, or 0 or more cores)", *u.Capacity)
	}
	c.mu.Lock()
	z := c.zone(name)
	if z == nil {
		if err := c.addZone(ZoneConfig{Name: name, Available: true, Capacity: Unlimited}); err != nil {
			c.mu.Unlock()
			return ZoneState{}, err
		}
		z = c.zone(name)
	}
	if u.Available != nil {
		z.Available = *u.Available
	}
	if u.Capacity != nil {
		z.Capacity = *u.Capacity
	}
	c.logConfig()
	c.mu.Unlock()
	c.persist()
	for _, zs := range c.Zones() {
		if zs.Name == name {
			return zs, nil
		}
	}
	return ZoneState{}, muster.Errorf(muster.EInternal, "sim: zone %q vanished", name)
}

// Faults returns the current faults.
func (c *Cloud) Faults() Faults {
	c.mu.Lock()
	defer c.mu.Unlock()
	return cloneFaults(c.faults)
}

// SetFaults replaces the faults. Token buckets start full again when their
// configuration changes.
func (c *Cloud) SetFaults(f Faults) error {
	if err := checkFaults(f); err != nil {
		return err
	}
	c.mu.Lock()
	c.faults = cloneFaults(f)
	c.logConfig()
	c.mu.Unlock()
	c.persist()
	return nil
}

// FailNext makes the next n starts in zone fail with ErrCapacity.
func (c *Cloud) FailNext(zone string, n int) error {
	if n < 0 {
		return muster.Errorf(muster.EInvalid, "sim: fail-next count %d is negative", n)
	}
	c.mu.Lock()
	if c.zone(zone) == nil {
		c.mu.Unlock()
		return muster.Errorf(muster.ENotFound, "sim: zone %q not found", zone)
	}
	if c.faults.FailNext == nil {
		c.faults.FailNext = map[string]int{}
	}
	if n == 0 {
		delete(c.faults.FailNext, zone)
	} else {
		c.faults.FailNext[zone] = n
	}
	c.logConfig()
	c.mu.Unlock()
	c.persist()
	return nil
}

func checkFaults(f Faults) error {
	for k, r := range f.ErrorRate {
		if !contains(CallKinds, k) {
			return muster.Errorf(muster.EInvalid, "sim: unknown call kind %q (want one of %s)", k, strings.Join(CallKinds, ", "))
		}
		if !(r >= 0 && r <= 1) {
			return muster.Errorf(muster.EInvalid, "sim: error rate %v for %s (want 0 to 1)", r, k)
		}
	}
	for z, r := range f.ZoneErrorRate {
		if !(r >= 0 && r <= 1) {
			return muster.Errorf(muster.EInvalid, "sim: error rate %v for zone %s (want 0 to 1)", r, z)
		}
	}
	for k, l := range f.Latency {
		if !contains(CallKinds, k) {
			return muster.Errorf(muster.EInvalid, "sim: unknown call kind %q (want one of %s)", k, strings.Join(CallKinds, ", "))
		}
		if l.Fixed < 0 || l.Jitter < 0 {
			return muster.Errorf(muster.EInvalid, "sim: negative latency for %s", k)
		}
	}
	check := func(what string, b Bucket) error {
		if b.Burst < 0 || !(b.PerSecond >= 0) {
			return muster.Errorf(muster.EInvalid, "sim: bad %s bucket (burst %d, per second %v): want non-negative numbers", what, b.Burst, b.PerSecond)
		}
		return nil
	}
	for k, b := range f.RateLimits {
		if !contains(CallKinds, k) {
			return muster.Errorf(muster.EInvalid, "sim: unknown call kind %q (want one of %s)", k, strings.Join(CallKinds, ", "))
		}
		if err := check(k, b); err != nil {
			return err
		}
	}
	if err := check("instance", f.InstanceRate); err != nil {
		return err
	}
	for z, n := range f.FailNext {
		if n < 0 {
			return muster.Errorf(muster.EInvalid, "sim: fail-next count %d for zone %s is negative", n, z)
		}
	}
	if f.ListingLag < 0 {
		return muster.Errorf(muster.EInvalid, "sim: negative listing lag")
	}
	for k, l := range f.ReplyDelay {
		if !contains(CallKinds, k) {
			return muster.Errorf(muster.EInvalid, "sim: unknown call kind %q (want one of %s)", k, strings.Join(CallKinds, ", "))
		}
		if l.Fixed < 0 || l.Jitter < 0 {
			return muster.Errorf(muster.EInvalid, "sim: negative reply delay for %s", k)
		}
	}
	for k, n := range f.LoseReplies {
		if !contains(CallKinds, k) {
			return muster.Errorf(muster.EInvalid, "sim: unknown call kind %q (want one of %s)", k, strings.Join(CallKinds, ", "))
		}
		if n < 0 {
			return muster.Errorf(muster.EInvalid, "sim: lose-replies count %d for %s is negative", n, k)
		}
	}
	return nil
}

func cloneFaults(f Faults) Faults {
	out := f
	out.Latency = cloneMap(f.Latency)
	out.RateLimits = cloneMap(f.RateLimits)
	out.ErrorRate = cloneMap(f.ErrorRate)
	out.ZoneErrorRate = cloneMap(f.ZoneErrorRate)
	out.FailNext = cloneMap(f.FailNext)
	out.ReplyDelay = cloneMap(f.ReplyDelay)
	out.LoseReplies = cloneMap(f.LoseReplies)
	return out
}

func cloneMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func cloneInstance(i *Instance) Instance {
	out := *i
	out.Tags = copyTags(i.Tags)
	out.Addresses = append([]string(nil), i.Addresses...)
	out.Volumes = append([]muster.Volume(nil), i.Volumes...)
	out.Attachments = append([]muster.VolumeAttachment(nil), i.Attachments...)
	if i.EC2 != nil {
		e := *i.EC2
		e.KeepVolumes = append([]string(nil), e.KeepVolumes...)
		out.EC2 = &e
	}
	return out
}

// AllInstances returns every instance of every controller and model,
// ignoring listing lag, oldest first (admin; not counted).
func (c *Cloud) AllInstances() []Instance {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := []Instance{}
	now := c.clock.Now()
	for _, inst := range c.sortedLocked() {
		settle(inst, now)
		out = append(out, cloneInstance(inst))
	}
	return out
}

// AddInstance adds a running s1.small instance in zone, tagged with
// controller and model but with no machine: an instance no machine owns
// (harvest tests) or, with other ids, another controller's or model's.
func (c *Cloud) AddInstance(zone, controller, model string) (Instance, error) {
	return c.CreateInstance(NewInstance{Zone: zone, Controller: controller, Model: model})
}

// CreateInstance adds an instance as n describes, bypassing rate limits,
// faults and capacity (its cores still count as used). Empty controller
// or model tags are left off (an untagged instance).
func (c *Cloud) CreateInstance(n NewInstance) (Instance, error) {
	typ := n.InstanceType
	if typ == "" {
		typ = "s1.small"
	}
	it, err := MatchType(muster.Constraints{InstanceType: typ}, "amd64")
	if err != nil {
		return Instance{}, muster.Errorf(muster.EInvalid, "sim: unknown instance type %q", typ)
	}
	c.mu.Lock()
	z := c.zone(n.Zone)
	if z == nil {
		c.mu.Unlock()
		return Instance{}, muster.Errorf(muster.ENotFound, "sim: zone %q not found", n.Zone)
	}
	tags := copyTags(n.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	set := func(k, v string) {
		if v != "" {
			tags[k] = v
		}
	}
	set(muster.TagController, n.Controller)
	set(muster.TagModel, n.Model)
	set(muster.TagMachine, n.MachineID)
	set(muster.TagLaunchToken, n.LaunchToken)
	var addrs []string
	for _, s := range c.subnets {
		if s.Zone == z.Name {
			if a := c.alloc(s); a != "" {
				addrs = append(addrs, a)
			}
			break
		}
	}
	inst := &Instance{
		ID: c.newID("i-"), Zone: z.Name, InstanceType: it.Name, Arch: it.Arch, Cores: it.Cores,
		Mem: it.Mem, RootDisk: DefaultRootDisk, Base: "ubuntu@24.04", Tags: tags, Addresses: addrs,
		Created: c.clock.Now(), State: "running",
	}
	c.instances[inst.ID] = inst
	if n.LaunchToken != "" && n.Controller != "" && n.Model != "" {
		c.tokens[tokenKey(n.Controller, n.Model, n.LaunchToken)] = inst.ID
	}
	z.used += it.Cores
	z.instances++
	c.logPut(inst)
	out := cloneInstance(inst)
	c.mu.Unlock()
	c.persist()
	return out, nil
}

// RemoveInstances removes instances whoever they belong to, as if the
// cloud had lost them (admin; not counted as calls). It returns how many
// it removed; unknown ids are ignored.
func (c *Cloud) RemoveInstances(ids ...string) int {
	c.mu.Lock()
	var stopped []string
	for _, id := range ids {
		if inst := c.instances[id]; inst != nil {
			c.removeLocked(inst)
			stopped = append(stopped, id)
		}
	}
	c.mu.Unlock()
	c.afterStop(stopped)
	return len(stopped)
}

// Stats returns a snapshot of the counters.
func (c *Cloud) Stats() Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Stats{
		Calls:            cloneMap(c.stats.Calls),
		Throttled:        cloneMap(c.stats.Throttled),
		Errors:           cloneMap(c.stats.Errors),
		InstancesStarted: c.stats.InstancesStarted,
		InstancesStopped: c.stats.InstancesStopped,
		Instances:        len(c.instances),
		InstancesByZone:  map[string]int{},
	}
	for _, z := range c.zones {
		s.InstancesByZone[z.Name] = z.instances
	}
	return s
}

// ResetStats zeroes the call counters (not the instances).
func (c *Cloud) ResetStats() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stats = newStats()
}

func newStats() Stats {
	s := Stats{}
	fillStats(&s)
	return s
}

func fillStats(s *Stats) {
	if s.Calls == nil {
		s.Calls = map[string]int64{}
	}
	if s.Throttled == nil {
		s.Throttled = map[string]int64{}
	}
	if s.Errors == nil {
		s.Errors = map[string]int64{}
	}
}
