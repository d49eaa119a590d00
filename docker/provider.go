package docker

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

// Label keys used besides the muster.Tag* keys.
const (
	// LabelZone is the zone of a container, volume or network.
	LabelZone = "muster-zone"
	// LabelVolume is the muster volume name of a Docker volume.
	LabelVolume = "muster-volume"
	// LabelImage marks images built by this package; its value is "agent".
	LabelImage = "muster-image"
	// LabelAgentSHA256 is the SHA-256 of the agent binary in an image.
	LabelAgentSHA256 = "muster-agent-sha256"
)

// Network modes.
const (
	NetworkBridge = "bridge"
	NetworkHost   = "host"
)

// Paths inside the container.
const (
	AgentPath       = "/muster"
	AgentConfigPath = "/etc/muster/agent.yaml"
	StorageDir      = "/var/lib/muster/storage"
)

// DefaultZones are the zones of a Config that names none.
var DefaultZones = []string{"a", "b", "c"}

// Config configures a Provider for one model of one controller.
type Config struct {
	ControllerUUID string // required
	ModelUUID      string // required
	ModelName      string // for logs; optional
	// Zones are the zone names; default DefaultZones. Each is a Docker
	// network of its own in bridge mode.
	Zones []string
	// Subnets optionally fixes the IPv4 CIDR of zones' networks (zone →
	// CIDR, e.g. "10.77.1.0/24"); by default the engine picks a free one.
	// A subnet that overlaps another network makes the zone unavailable.
	Subnets map[string]string
	// NetworkMode is NetworkBridge (default) or NetworkHost.
	NetworkMode string
	// AgentBinary is the path of the linux agent binary put into the image
	// (with its loader and libraries when it is dynamically linked);
	// default os.Executable().
	AgentBinary string
	// Host is the engine address, e.g. "unix:///var/run/docker.sock";
	// default from DOCKER_HOST or the platform default.
	Host string
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Provider is a muster.Provider on a Docker Engine for one model. It is safe
// for concurrent use.
//
// Instance ids are full 64-hex container ids.
type Provider struct {
	cfg    Config
	cli    *client.Client
	log    *slog.Logger
	prefix string // "muster-<controller8>-<model8>" for networks
	model8 string

	mu       sync.Mutex
	engine   *engineInfo
	networks map[string]zoneNet // zone → network, once known to exist
	subnets  map[string]netip.Prefix
	images   map[string]*agentImage // by binary path or "sha256:<hash>"

	tokenMu sync.Mutex
	tokens  map[string]*tokenLock

	builds int // images built by this provider, for tests
}

var (
	_ muster.Provider     = (*Provider)(nil)
	_ muster.BatchStarter = (*Provider)(nil)
)

var nameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// New checks cfg, connects to the engine and pings it. An engine that does
// not answer gives an error of kind muster.ErrUnavailable.
func New(ctx context.Context, cfg Config) (*Provider, error) {
	if cfg.ControllerUUID == "" || cfg.ModelUUID == "" {
		return nil, muster.Errorf(muster.EInvalid, "docker provider: controller and model uuid are required")
	}
	subnets, err := cfg.check()
	if err != nil {
		return nil, err
	}
	if cfg.AgentBinary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("docker provider: find agent binary: %w", err)
		}
		cfg.AgentBinary = exe
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	opts := []client.Opt{client.FromEnv, client.WithAPIVersionNegotiation()}
	if cfg.Host != "" {
		opts = append(opts, client.WithHost(cfg.Host))
	}
	cli, err := client.New(opts...)
	if err != nil {
		return nil, zoneIndependent("engine client: %v", err)
	}
	p := &Provider{
		cfg:      cfg,
		cli:      cli,
		log:      cfg.Logger.With("provider", "docker", "model", cfg.ModelName),
		prefix:   "muster-" + short(cfg.ControllerUUID, 8) + "-" + short(cfg.ModelUUID, 8),
		model8:   short(cfg.ModelUUID, 8),
		networks: map[string]zoneNet{},
		subnets:  subnets,
		images:   map[string]*agentImage{},
		tokens:   map[string]*tokenLock{},
	}
	if _, err := cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		cli.Close()
		return nil, classify(err, "ping engine")
	}
	return p, nil
}

// check fills in the defaults of the zones and network mode and checks
// them; it returns the parsed subnets.
func (c *Config) check() (map[string]netip.Prefix, error) {
	if len(c.Zones) == 0 {
		c.Zones = slices.Clone(DefaultZones)
	}
	seen := map[string]bool{}
	for _, z := range c.Zones {
		if !nameRE.MatchString(z) || len(z) > 64 {
			return nil, muster.Errorf(muster.EInvalid, "docker provider: bad zone name %q: want letters, digits, '_', '.', '-'", z)
		}
		if seen[z] {
			return nil, muster.Errorf(muster.EInvalid, "docker provider: zone %q given more than once", z)
		}
		seen[z] = true
	}
	subnets := map[string]netip.Prefix{}
	for z, cidr := range c.Subnets {
		if !seen[z] {
			return nil, muster.Errorf(muster.EInvalid, "docker provider: subnet for unknown zone %q", z)
		}
		pfx, err := netip.ParsePrefix(cidr)
		if err != nil || !pfx.Addr().Is4() || pfx.Bits() > 30 {
			return nil, muster.Errorf(muster.EInvalid, "docker provider: bad subnet %q for zone %s: want an IPv4 CIDR of at most /30", cidr, z)
		}
		subnets[z] = pfx.Masked()
	}
	switch c.NetworkMode {
	case "":
		c.NetworkMode = NetworkBridge
	case NetworkBridge, NetworkHost:
	default:
		return nil, muster.Errorf(muster.EInvalid, "docker provider: bad network-mode %q: want bridge or host", c.NetworkMode)
	}
	return subnets, nil
}

// Close releases the engine connection. Containers, volumes and networks
// stay.
func (p *Provider) Close() error { return p.cli.Close() }

// Client returns the engine client, for tests and diagnostics.
func (p *Provider) Client() *client.Client { return p.cli }

// ownLabels are the labels every object of this model carries.
func (p *Provider) ownLabels() map[string]string {
	return map[string]string{
		muster.TagController: p.cfg.ControllerUUID,
		muster.TagModel:      p.cfg.ModelUUID,
	}
}

// ownFilters selects this model's objects.
func (p *Provider) ownFilters() client.Filters {
	return make(client.Filters).Add("label",
		muster.TagController+"="+p.cfg.ControllerUUID,
		muster.TagModel+"="+p.cfg.ModelUUID)
}

// isOwn reports whether labels mark an object of this model.
func (p *Provider) isOwn(labels map[string]string) bool {
	return labels[muster.TagController] == p.cfg.ControllerUUID && labels[muster.TagModel] == p.cfg.ModelUUID
}

func (p *Provider) hasZone(z string) bool { return slices.Contains(p.cfg.Zones, z) }

// Zones lists the configured zones. In bridge mode a zone is available when
// its network exists or could be created now; in host mode all are.
func (p *Provider) Zones(ctx context.Context) ([]muster.Zone, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("list zones: %w", err)
	}
	if _, err := p.engineInfo(ctx); err != nil {
		return nil, err
	}
	zones := make([]muster.Zone, 0, len(p.cfg.Zones))
	for _, z := range p.cfg.Zones {
		avail := true
		if p.cfg.NetworkMode == NetworkBridge {
			if _, err := p.zoneNetwork(ctx, z); err != nil {
				if ctx.Err() != nil {
					return nil, classify(ctx.Err(), "list zones")
				}
				if muster.ProviderErrorKindOf(err) != muster.ErrCapacity {
					return nil, err
				}
				p.log.Warn("zone unavailable", "zone", z, "err", err)
				avail = false
			}
		}
		zones = append(zones, muster.Zone{Name: z, Available: avail})
	}
	return zones, nil
}

// DeriveZones returns [X] for placement "zone=X"; nil otherwise (any zone).
// Docker volumes are local to the host, so they restrict nothing.
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

// short returns the first n name-safe characters of s.
func short(s string, n int) string {
	s = sanitize(s)
	if len(s) > n {
		s = s[:n]
	}
	return s
}

// sanitize maps s to characters valid in Docker object names.
func sanitize(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '_', r == '.', r == '-':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	return b.String()
}

// tokenLock serialises starts of one launch token within this process.
type tokenLock struct {
	sem  chan struct{}
	refs int
}

// lockToken takes the token's lock, or gives up when ctx ends; call the
// returned func to release it.
func (p *Provider) lockToken(ctx context.Context, token string) (func(), error) {
	p.tokenMu.Lock()
	l := p.tokens[token]
	if l == nil {
		l = &tokenLock{sem: make(chan struct{}, 1)}
		p.tokens[token] = l
	}
	l.refs++
	p.tokenMu.Unlock()
	drop := func() {
		p.tokenMu.Lock()
		l.refs--
		if l.refs == 0 {
			delete(p.tokens, token)
		}
		p.tokenMu.Unlock()
	}
	if err := acquire(ctx, l.sem); err != nil {
		drop()
		return nil, err
	}
	return func() { <-l.sem; drop() }, nil
}

// Resources returns the engine's CPUs and memory (MiB): the largest cores
// and mem constraints a start can satisfy.
func (p *Provider) Resources(ctx context.Context) (cores int, memMiB uint64, err error) {
	ei, err := p.engineInfo(ctx)
	if err != nil {
		return 0, 0, err
	}
	return ei.NCPU, uint64(ei.MemTotal) / mib, nil
}

// Leftovers lists what the engine still holds of this model: containers
// (in any state), networks and volumes with its controller and model
// labels, as "container NAME", "network NAME" and "volume NAME", sorted.
func (p *Provider) Leftovers(ctx context.Context) ([]string, error) {
	f := p.ownFilters()
	var out []string
	cs, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, classify(err, "list containers")
	}
	for _, c := range cs.Items {
		if p.isOwn(c.Labels) {
			name := c.ID
			if len(c.Names) > 0 {
				name = strings.TrimPrefix(c.Names[0], "/")
			}
			out = append(out, "container "+name)
		}
	}
	ns, err := p.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return nil, classify(err, "list networks")
	}
	for _, n := range ns.Items {
		if p.isOwn(n.Labels) {
			out = append(out, "network "+n.Name)
		}
	}
	vs, err := p.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, classify(err, "list volumes")
	}
	for _, v := range vs.Items {
		if p.isOwn(v.Labels) {
			out = append(out, "volume "+v.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}
