package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"path/filepath"
	"sort"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/docker"
	"github.com/musterhq/muster/ec2"
	"github.com/musterhq/muster/sim"
)

// providerEnv is what a provider factory may use.
type providerEnv struct {
	controllerUUID string
	model          muster.Model
	dataDir        string
	logger         *slog.Logger
	clock          muster.Clock

	// For instances' agents.
	store       muster.Store // for simulated agents' settings
	apiURL      string       // the controller's own URL
	caCert      []byte       // PEM of the controller's CA
	agentBinary string       // the controller's own agent binary
	// listenAgents serves the API on host addresses that instances reach
	// the controller through (a docker zone network's gateway) and returns
	// their https URLs and a function that closes those listeners.
	listenAgents func(ctx context.Context, hosts []string) ([]string, func(), error)
}

// modelProvider is a model's provider as the controller runs it.
type modelProvider struct {
	muster.Provider
	// simHandler serves the model's sim admin API (`muster sim …`), for
	// sim models; nil otherwise.
	simHandler http.Handler
	// apiAddresses are the controller URLs the model's instances' agents
	// dial; nil means the controller's own URL.
	apiAddresses []string
	// cleanup, when set, removes what the provider made for a model that
	// has been removed (networks, left-over volumes).
	cleanup func(ctx context.Context) error
	// simAgents runs the simulated agents of an embedded sim; nil
	// otherwise.
	simAgents *simAgents
	close     func() error
}

// providerKind builds and checks one kind of provider.
type providerKind struct {
	configKeys []string // accepted provider config keys
	// validate checks the config's values; nil = no check beyond keys.
	validate func(config map[string]string) error
	open     func(ctx context.Context, env providerEnv) (*modelProvider, error)
}

// providers is the map of provider kinds (DESIGN §1: chosen here, not
// registered in init).
var providers = map[string]providerKind{
	"sim": {configKeys: []string{"endpoint", "zones"}, open: openSimProvider},
	"ec2": {configKeys: ec2.ConfigKeys, open: openEC2Provider, validate: validateEC2Config},
	"docker": {configKeys: docker.ConfigKeys, open: openDockerProvider, validate: func(config map[string]string) error {
		var cfg docker.Config
		return docker.ApplyModelConfig(&cfg, config)
	}},
}

// validateModel checks a model's provider name and config keys.
func validateModel(m muster.Model) error {
	kind, ok := providers[m.Provider]
	if !ok {
		names := make([]string, 0, len(providers))
		for n := range providers {
			names = append(names, n)
		}
		sort.Strings(names)
		return muster.Errorf(muster.EInvalid, "unknown provider %q (known: %s)", m.Provider, strings.Join(names, ", "))
	}
	for k, v := range m.Config {
		known := false
		for _, ck := range kind.configKeys {
			known = known || ck == k
		}
		if !known && kind.validate != nil {
			// The provider's own check may say better what is wrong
			// (the ec2 provider tells a credential from a misspelling).
			if err := kind.validate(m.Config); err != nil {
				return err
			}
		}
		if !known {
			return muster.Errorf(muster.EInvalid, "unknown %s provider config key %q (known: %s)", m.Provider, k, strings.Join(kind.configKeys, ", "))
		}
		if k == "zones" {
			if _, err := parseZoneList(v); err != nil {
				return err
			}
		}
	}
	if kind.validate != nil {
		return kind.validate(m.Config)
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
// simulated agents (SPEC §3.1); a remote sim has no hook for them, so its
// machines stay pending.
func openSimProvider(ctx context.Context, env providerEnv) (*modelProvider, error) {
	if ep := env.model.Config["endpoint"]; ep != "" {
		c := sim.NewClient(ep, nil)
		return &modelProvider{Provider: c.Provider(env.controllerUUID, env.model.UUID), close: func() error { return nil }}, nil
	}
	zones := []string{"a", "b", "c"}
	if z := env.model.Config["zones"]; z != "" {
		var err error
		if zones, err = parseZoneList(z); err != nil {
			return nil, err
		}
	}
	cfg := sim.Config{
		Clock:     env.clock,
		StateFile: filepath.Join(env.dataDir, "sim-"+env.model.UUID+".json"),
		Logger:    env.logger,
	}
	var agents *simAgents
	if env.store != nil && env.apiURL != "" {
		var err error
		if agents, err = newSimAgents(env); err != nil {
			return nil, fmt.Errorf("simulated agents of model %s: %w", env.model.Name, err)
		}
		cfg.OnStart, cfg.OnStop = agents.onStart, agents.onStop
	}
	for _, z := range zones {
		cfg.Zones = append(cfg.Zones, sim.ZoneConfig{Name: z, Available: true, Capacity: sim.Unlimited})
	}
	cloud, err := sim.Open(cfg)
	if err != nil {
		if agents != nil {
			agents.close()
		}
		return nil, fmt.Errorf("open embedded sim of model %s: %w", env.model.Name, err)
	}
	return &modelProvider{
		Provider:   cloud.Provider(env.controllerUUID, env.model.UUID),
		simHandler: sim.NewServer(cloud),
		simAgents:  agents,
		close: func() error {
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
func openDockerProvider(ctx context.Context, env providerEnv) (*modelProvider, error) {
	cfg := docker.Config{
		ControllerUUID: env.controllerUUID,
		ModelUUID:      env.model.UUID,
		ModelName:      env.model.Name,
		AgentBinary:    env.agentBinary,
		Logger:         env.logger,
	}
	if err := docker.ApplyModelConfig(&cfg, env.model.Config); err != nil {
		return nil, err
	}
	p, err := docker.New(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open docker provider of model %s: %w", env.model.Name, err)
	}
	mp := &modelProvider{Provider: p, cleanup: p.Cleanup}
	closeListeners := func() {}
	if env.listenAgents != nil {
		gws, err := p.GatewayAddresses(ctx)
		if err != nil {
			p.Close()
			return nil, fmt.Errorf("docker networks of model %s: %w", env.model.Name, err)
		}
		if mp.apiAddresses, closeListeners, err = env.listenAgents(ctx, gws); err != nil {
			p.Close()
			return nil, fmt.Errorf("serve agents of model %s: %w", env.model.Name, err)
		}
	}
	mp.close = func() error {
		closeListeners()
		return p.Close()
	}
	return mp, nil
}
