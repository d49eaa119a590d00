package lxd

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/cloudinit"
)

// Config keys (all under LXD's user.* namespace) besides the muster.Tag* keys.
const (
	keyPrefix   = "user."
	KeyZone     = "user.muster-zone"
	KeyInstance = "user.muster-instance" // on volumes: the instance they belong to
	KeyVolume   = "user.muster-volume"   // on volumes: the muster volume name
	// StorageDir is where volumes are mounted in an instance.
	StorageDir = "/var/lib/muster/storage"
)

// Provider is a muster.Provider on an LXD daemon for one model. It is safe
// for concurrent use. Instance ids are instance names (see InstanceName).
type Provider struct {
	cfg  Config
	c    *Client
	log  *slog.Logger
	arch string // the host's arch in muster's terms, e.g. amd64

	cores  uint64 // host CPUs
	memMiB uint64 // host memory

	mu       sync.Mutex
	networks map[string]string // zone → network name, once known to exist

	tokenMu sync.Mutex
	tokens  map[string]chan struct{}
}

var _ muster.Provider = (*Provider)(nil)

// Open checks cfg, connects to the daemon and reads its architecture and
// resources. A daemon that does not answer gives an error of kind
// muster.ErrUnavailable; the image is checked at each start (a missing one
// is a zone-independent start error).
func Open(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.ControllerUUID == "" || cfg.ModelUUID == "" {
		return nil, muster.Errorf(muster.EInvalid, "lxd provider: controller and model uuid are required")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	p := &Provider{
		cfg:      cfg,
		c:        NewClient(cfg.Socket),
		log:      cfg.Logger.With("provider", "lxd", "model", cfg.ModelName),
		networks: map[string]string{},
		tokens:   map[string]chan struct{}{},
	}
	// Not GET /1.0: LXD 5.0 was seen to hold that for minutes while it
	// answered everything else at once.
	res, err := p.c.Resources(ctx)
	if err != nil {
		p.c.Close()
		return nil, classify(err, "", "connect to "+cfg.Socket)
	}
	p.arch = musterArch(res.CPU.Architecture)
	p.cores, p.memMiB = res.CPU.Total, res.Memory.Total>>20
	return p, nil
}

// Close drops the connection to the daemon. Instances, volumes and
// networks stay.
func (p *Provider) Close() error { p.c.Close(); return nil }

// Client returns the REST client, for tests and diagnostics.
func (p *Provider) Client() *Client { return p.c }

// musterArch maps LXD's architecture names to muster's.
func musterArch(a string) string {
	switch a {
	case "x86_64":
		return "amd64"
	case "aarch64":
		return "arm64"
	case "ppc64le":
		return "ppc64el"
	}
	return a
}

// isOwn reports whether an object's config marks it as this model's (H7).
func (p *Provider) isOwn(config map[string]string) bool {
	return config[keyPrefix+muster.TagController] == p.cfg.ControllerUUID &&
		config[keyPrefix+muster.TagModel] == p.cfg.ModelUUID
}

func (p *Provider) ownConfig() map[string]string {
	return map[string]string{
		keyPrefix + muster.TagController: p.cfg.ControllerUUID,
		keyPrefix + muster.TagModel:      p.cfg.ModelUUID,
	}
}

func (p *Provider) hasZone(z string) bool { return slices.Contains(p.cfg.Zones, z) }

// InstanceName is the deterministic name of the instance of a machine's
// launch: "mu-<model8>-m<machine>-<12 hex of SHA-256(token)>". A start
// repeated with the same token finds the name taken and adopts the
// instance (C1).
func InstanceName(modelUUID, machineID, token string) string {
	sum := sha256.Sum256([]byte(token))
	machine := clean(machineID)
	if len(machine) > 24 {
		ms := sha256.Sum256([]byte(machineID))
		machine = hex.EncodeToString(ms[:6])
	}
	return "mu-" + clean(short(modelUUID, 8)) + "-m" + machine + "-" + hex.EncodeToString(sum[:6])
}

func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// clean maps s to lower-case letters, digits and '-'.
func clean(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	return b.String()
}

// Zones lists the configured zones; a zone is available when its network
// exists or could be created now.
func (p *Provider) Zones(ctx context.Context) ([]muster.Zone, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list zones: %w", err)
	}
	zones := make([]muster.Zone, 0, len(p.cfg.Zones))
	for _, z := range p.cfg.Zones {
		avail := true
		if _, err := p.zoneNetwork(ctx, z); err != nil {
			if ctx.Err() != nil || muster.ProviderErrorKindOf(err) != muster.ErrCapacity {
				return nil, err
			}
			p.log.Warn("zone unavailable", "zone", z, "err", err)
			avail = false
		}
		zones = append(zones, muster.Zone{Name: z, Available: avail})
	}
	return zones, nil
}

// DeriveZones returns [X] for placement "zone=X"; nil otherwise (any zone).
// Volumes live in one storage pool of one host, so they restrict nothing.
func (p *Provider) DeriveZones(ctx context.Context, sp muster.StartParams) ([]string, error) {
	z, err := muster.ParsePlacement(sp.Placement)
	if err != nil {
		return nil, zoneIndependent("%v", err)
	}
	if z == "" {
		return nil, nil
	}
	if !p.hasZone(z) {
		return nil, zoneIndependent("placement zone %q is not one of the configured zones %s", z, strings.Join(p.cfg.Zones, ","))
	}
	return []string{z}, nil
}

// Instances lists this model's instances: those whose config carries this
// controller's and model's keys (H7), in any state.
func (p *Provider) Instances(ctx context.Context) ([]muster.Instance, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list instances: %w", err)
	}
	all, err := p.c.Instances(ctx)
	if err != nil {
		return nil, classify(err, "", "list instances")
	}
	var out []muster.Instance
	for _, in := range all {
		if p.isOwn(in.Config) {
			out = append(out, toInstance(p.resume(ctx, in)))
		}
	}
	return out, nil
}

// resume finishes the launch of an instance that was created but never
// started (no volatile.last_state.power) because the start that made it
// ended in between, e.g. its controller was killed: the provisioner adopts
// such an instance from the listing (C2) without another StartInstance, so
// it would stay stopped. An instance stopped after it ran, or whose start
// this process is running, is left alone. It returns the instance as it
// is afterwards; a failure is logged and retried at the next listing.
func (p *Provider) resume(ctx context.Context, in Instance) Instance {
	token := in.Config[keyPrefix+muster.TagLaunchToken]
	if !neverStarted(in) || token == "" {
		return in
	}
	unlock, ok := p.tryLockToken(token)
	if !ok {
		return in
	}
	defer unlock()
	// Read again under the lock: a start may have finished meanwhile.
	cur, err := p.c.Instance(ctx, in.Name)
	if err != nil || !neverStarted(cur) {
		return in
	}
	if err := p.c.SetState(ctx, in.Name, "start", false); err != nil {
		p.log.Warn("instance of an interrupted launch not started", "instance", in.Name, "err", err)
		return in
	}
	p.log.Info("instance of an interrupted launch started", "instance", in.Name, "machine", in.Config[keyPrefix+muster.TagMachine])
	cur.Status = "Running"
	return cur
}

// neverStarted reports whether an instance has never run.
func neverStarted(in Instance) bool {
	return strings.EqualFold(in.Status, "Stopped") && in.Config["volatile.last_state.power"] == ""
}

// toInstance maps an LXD instance to muster's view of it.
func toInstance(in Instance) muster.Instance {
	tags := map[string]string{}
	for k, v := range in.Config {
		if t, ok := strings.CutPrefix(k, keyPrefix); ok {
			tags[t] = v
		}
	}
	return muster.Instance{
		ID:          in.Name,
		Zone:        in.Config[KeyZone],
		Tags:        tags,
		MachineID:   tags[muster.TagMachine],
		LaunchToken: tags[muster.TagLaunchToken],
		Created:     in.CreatedAt,
		State:       strings.ToLower(in.Status),
	}
}

// StopInstances deletes instances of this model and their volumes. Ids
// that are unknown or of another model or controller are skipped (H7).
func (p *Provider) StopInstances(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop instances: %w", err)
	}
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
		sem  = make(chan struct{}, 8)
		seen = map[string]bool{}
	)
	for _, id := range ids {
		if seen[id] || id == "" {
			continue
		}
		seen[id] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if err := p.stop(ctx, id); err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// stop deletes one instance (stopping it first) and its volumes.
func (p *Provider) stop(ctx context.Context, name string) error {
	in, err := p.c.Instance(ctx, name)
	if IsNotFound(err) {
		return p.deleteVolumes(ctx, name)
	}
	if err != nil {
		return classify(err, "", "stop instance "+name)
	}
	if !p.isOwn(in.Config) {
		p.log.Warn("not stopping an instance of another model", "instance", name)
		return nil
	}
	if !strings.EqualFold(in.Status, "Stopped") {
		if err := p.c.SetState(ctx, name, "stop", true); err != nil && !IsNotFound(err) {
			return classify(err, "", "stop instance "+name)
		}
	}
	if err := p.c.DeleteInstance(ctx, name); err != nil && !IsNotFound(err) {
		return classify(err, "", "delete instance "+name)
	}
	p.log.Info("instance deleted", "instance", name)
	return p.deleteVolumes(ctx, name)
}

// deleteVolumes deletes this model's volumes of instance name.
func (p *Provider) deleteVolumes(ctx context.Context, name string) error {
	vs, err := p.c.StorageVolumes(ctx, p.cfg.StoragePool)
	if err != nil {
		return classify(err, "", "list volumes")
	}
	for _, v := range vs {
		if p.isOwn(v.Config) && v.Config[KeyInstance] == name {
			if err := p.c.DeleteStorageVolume(ctx, p.cfg.StoragePool, v.Name); err != nil && !IsNotFound(err) {
				return classify(err, "", "delete volume "+v.Name)
			}
		}
	}
	return nil
}

// lockToken serialises starts of one launch token within this process;
// call the returned func to release it.
func (p *Provider) lockToken(ctx context.Context, token string) (func(), error) {
	for {
		p.tokenMu.Lock()
		ch, busy := p.tokens[token]
		if !busy {
			ch = make(chan struct{})
			p.tokens[token] = ch
			p.tokenMu.Unlock()
			return func() {
				p.tokenMu.Lock()
				delete(p.tokens, token)
				p.tokenMu.Unlock()
				close(ch)
			}, nil
		}
		p.tokenMu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// tryLockToken is lockToken without waiting: false when the token's start
// is running in this process.
func (p *Provider) tryLockToken(token string) (func(), bool) {
	p.tokenMu.Lock()
	defer p.tokenMu.Unlock()
	if p.tokens[token] != nil {
		return nil, false
	}
	ch := make(chan struct{})
	p.tokens[token] = ch
	return func() {
		p.tokenMu.Lock()
		delete(p.tokens, token)
		p.tokenMu.Unlock()
		close(ch)
	}, true
}

// parseSize reads LXD's "512MiB" / "10GiB" / bytes into MiB; 0 when it
// cannot.
func parseSize(s string) uint64 {
	units := []struct {
		suffix string
		mib    float64
	}{{"TiB", 1 << 20}, {"GiB", 1 << 10}, {"MiB", 1}, {"KiB", 1.0 / 1024}, {"TB", 1e12 / (1 << 20)}, {"GB", 1e9 / (1 << 20)}, {"MB", 1e6 / (1 << 20)}, {"B", 1.0 / (1 << 20)}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			f, err := strconv.ParseFloat(n, 64)
			if err != nil {
				return 0
			}
			return uint64(f * u.mib)
		}
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0
	}
	return uint64(f / (1 << 20))
}

// background gives cleanup after a failed start a context of its own, so
// that a cancelled start still removes what it made.
func background(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
}

// userData is the cloud-init user data of a start: the shared builder's
// (agent config, download of the agent binary, systemd unit), or an empty
// #cloud-config when the start has no agent.
func userData(sp muster.StartParams, arch string) (string, error) {
	a, err := cloudinit.AgentFor(sp, arch)
	if err != nil {
		return "", fmt.Errorf("lxd: %w", err)
	}
	if a == nil {
		return "#cloud-config\n{}\n", nil
	}
	ud, err := cloudinit.Single(a)
	if err != nil {
		return "", fmt.Errorf("lxd: %w", err)
	}
	return string(ud), nil
}

// Resources returns the host's CPUs and memory (MiB) as read at Open: the
// largest cores and mem constraints a start can satisfy.
func (p *Provider) Resources(context.Context) (cores int, memMiB uint64, err error) {
	return int(p.cores), p.memMiB, nil
}
