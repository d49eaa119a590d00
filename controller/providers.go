package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/docker"
	"github.com/musterhq/muster/ec2"
	"github.com/musterhq/muster/sim"
)

// ProviderEnv is what a provider kind's Open may use.
type ProviderEnv struct {
	ControllerUUID string
	Model          muster.Model
	DataDir        string
	Logger         *slog.Logger
	Clock          muster.Clock

	// For instances' agents.
	Store       muster.Store // for simulated agents' settings
	APIURL      string       // the controller's own URL
	CACert      []byte       // PEM of the controller's CA
	AgentBinary string       // the controller's own agent binary
	// ListenAgents serves the API on host addresses that instances reach
	// the controller through (a docker zone network's gateway) and returns
	// their https URLs and a function that closes those listeners.
	ListenAgents func(ctx context.Context, hosts []string) ([]string, func(), error)
	// SimAgentBootDelay is how long a simulated instance boots before its
	// agent starts.
	SimAgentBootDelay time.Duration
}

// ModelProvider is a model's provider as the controller runs it.
type ModelProvider struct {
	muster.Provider
	// Handler, when set, serves the provider's own admin API (an embedded
	// sim's: `muster sim …`) at /v1/models/{model}/sim/.
	Handler http.Handler
	// APIAddresses are the controller URLs the model's instances' agents
	// dial; nil means the controller's own URL.
	APIAddresses []string
	// Cleanup, when set, removes what the provider made for a model that
	// has been removed (networks, left-over volumes).
	Cleanup func(ctx context.Context) error
	// Close releases the provider; required.
	Close func() error
	// IdentityCert, when set, is the PEM certificate that verifies the
	// instance identity documents of the provider's cloud, with which
	// batch-started agents enrol (SPEC §4).
	IdentityCert []byte

	// simAgents runs the simulated agents of an embedded sim; nil
	// otherwise.
	simAgents *simAgents
}

// ProviderKind builds and checks one kind of provider.
type ProviderKind struct {
	ConfigKeys []string // accepted provider config keys
	// Validate checks the config's values; nil = no check beyond keys.
	Validate func(config map[string]string) error
	Open     func(ctx context.Context, env ProviderEnv) (*ModelProvider, error)
}

// The provider kinds muster has; cmd/muster puts them in the map that
// Config.Providers takes (DESIGN §1: chosen there, not registered in init).
var (
	Sim    = ProviderKind{ConfigKeys: []string{"endpoint", "zones"}, Open: openSimProvider}
	EC2    = ProviderKind{ConfigKeys: ec2.ConfigKeys, Open: openEC2Provider, Validate: validateEC2Config}
	Docker = ProviderKind{ConfigKeys: docker.ConfigKeys, Open: openDockerProvider, Validate: func(config map[string]string) error {
		var cfg docker.Config
		return docker.ApplyModelConfig(&cfg, config)
	}}
)

// ProviderNames returns the names of providers, sorted.
func ProviderNames(providers map[string]ProviderKind) []string {
	names := make([]string, 0, len(providers))
	for n := range providers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ValidateModel checks a model's provider name and config keys against
// providers; EInvalid when they are wrong.
func ValidateModel(providers map[string]ProviderKind, m muster.Model) error {
	kind, ok := providers[m.Provider]
	if !ok {
		return muster.Errorf(muster.EInvalid, "unknown provider %q (known: %s)", m.Provider, strings.Join(ProviderNames(providers), ", "))
	}
	for k, v := range m.Config {
		known := slices.Contains(kind.ConfigKeys, k)
		if !known && kind.Validate != nil {
			// The provider's own check may say better what is wrong
			// (the ec2 provider tells a credential from a misspelling).
			if err := kind.Validate(m.Config); err != nil {
				return err
			}
		}
		if !known {
			return muster.Errorf(muster.EInvalid, "unknown %s provider config key %q (known: %s)", m.Provider, k, strings.Join(kind.ConfigKeys, ", "))
		}
		if k == "zones" {
			if _, err := parseZoneList(v); err != nil {
				return err
			}
		}
	}
	if kind.Validate != nil {
		return kind.Validate(m.Config)
	}
	return nil
}

func parseZoneList(s string) ([]string, error) {
	var zones []string
	for _, z := range strings.Split(s, ",") {
		if err := muster.CheckName(z); err != nil {
			return nil, muster.Errorf(muster.EInvalid, "bad zones %q: %v", s, err)
		}
		zones = append(zones, z)
	}
	return zones, nil
}

// openSimProvider opens a model's sim: a `muster sim serve` at the config's
// endpoint, or else an embedded cloud whose state lives in the data dir so
// its instances survive a controller restart. The embedded sim runs
// simulated agents (SPEC §3.1) in the controller; a remote sim runs them
// in its own process, and they enrol with identity documents that the
// sim's certificate, read here, verifies: a sim that cannot be asked for
// it fails the open (the model is started again later).
func openSimProvider(ctx context.Context, env ProviderEnv) (*ModelProvider, error) {
	if ep := env.Model.Config["endpoint"]; ep != "" {
		cert, err := simIdentityCert(ctx, ep)
		if err != nil {
			return nil, fmt.Errorf("sim at %s: instance identity certificate: %w", ep, err)
		}
		c := sim.NewClient(ep, nil)
		return &ModelProvider{Provider: c.Provider(env.ControllerUUID, env.Model.UUID), IdentityCert: cert, Close: func() error { return nil }}, nil
	}
	zones := []string{"a", "b", "c"}
	if z := env.Model.Config["zones"]; z != "" {
		var err error
		if zones, err = parseZoneList(z); err != nil {
			return nil, err
		}
	}
	cfg := sim.Config{
		Clock:     env.Clock,
		StateFile: filepath.Join(env.DataDir, "sim-"+env.Model.UUID+".json"),
		Logger:    env.Logger,
	}
	var agents *simAgents
	if env.Store != nil && env.APIURL != "" {
		var err error
		if agents, err = newSimAgents(env); err != nil {
			return nil, fmt.Errorf("simulated agents of model %s: %w", env.Model.Name, err)
		}
		cfg.OnStart, cfg.OnStop, cfg.OnAgentStop = agents.onStart, agents.onStop, agents.onStop
	}
	for _, z := range zones {
		cfg.Zones = append(cfg.Zones, sim.ZoneConfig{Name: z, Available: true, Capacity: sim.Unlimited})
	}
	cloud, err := sim.Open(cfg)
	if err != nil {
		if agents != nil {
			agents.close()
		}
		return nil, fmt.Errorf("open embedded sim of model %s: %w", env.Model.Name, err)
	}
	if agents != nil {
		agents.setCloud(cloud)
	}
	return &ModelProvider{
		Provider:     cloud.Provider(env.ControllerUUID, env.Model.UUID),
		Handler:      sim.NewServer(cloud),
		IdentityCert: cloud.IdentityCert(),
		simAgents:    agents,
		Close: func() error {
			if agents != nil {
				agents.close()
			}
			return cloud.Close()
		},
	}, nil
}

// openDockerProvider opens a model's docker provider and makes the
// controller reachable from its zone networks: the API is also served on
// each network's gateway address (the host's address on that network,
// reachable only from this host and its containers), and those addresses
// go into the agents' configuration. The agent binary put into the image
// may be dynamically linked (`go run` with cgo on): the provider copies its
// loader and libraries from this host into the image.
func openDockerProvider(ctx context.Context, env ProviderEnv) (*ModelProvider, error) {
	cfg := docker.Config{
		ControllerUUID: env.ControllerUUID,
		ModelUUID:      env.Model.UUID,
		ModelName:      env.Model.Name,
		AgentBinary:    env.AgentBinary,
		Logger:         env.Logger,
	}
	if err := docker.ApplyModelConfig(&cfg, env.Model.Config); err != nil {
		return nil, err
	}
	p, err := docker.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open docker provider of model %s: %w", env.Model.Name, err)
	}
	// The host's size, for the up-front check of new machines (Offerings).
	if _, _, err := p.Resources(ctx); err != nil {
		env.Logger.Warn("docker host resources unknown: machines are not checked against them", "err", err)
	}
	return servedOnGateways(ctx, env, "docker", p)
}

// bridgedProvider is a provider whose zones are bridges on this host
// (docker, lxd): the controller serves its agents on their gateways.
type bridgedProvider interface {
	muster.Provider
	GatewayAddresses(ctx context.Context) ([]string, error)
	Cleanup(ctx context.Context) error
	Close() error
}

// servedOnGateways wraps p for a model, with an agent listener on each of
// its bridges' gateways (when env can listen) whose addresses the agents
// are given.
func servedOnGateways(ctx context.Context, env ProviderEnv, kind string, p bridgedProvider) (*ModelProvider, error) {
	mp := &ModelProvider{Provider: p, Cleanup: p.Cleanup}
	closeListeners := func() {}
	if env.ListenAgents != nil {
		gws, err := p.GatewayAddresses(ctx)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("%s networks of model %s: %w", kind, env.Model.Name, err)
		}
		if mp.APIAddresses, closeListeners, err = env.ListenAgents(ctx, gws); err != nil {
			p.Close()
			return nil, fmt.Errorf("serve agents of model %s: %w", env.Model.Name, err)
		}
	}
	mp.Close = func() error {
		closeListeners()
		return p.Close()
	}
	return mp, nil
}
