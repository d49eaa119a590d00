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
	"github.com/musterhq/muster/sim"
)

// providerEnv is what a provider factory may use.
type providerEnv struct {
	controllerUUID string
	model          muster.Model
	dataDir        string
	logger         *slog.Logger
	clock          muster.Clock
}

// modelProvider is a model's provider as the controller runs it.
type modelProvider struct {
	muster.Provider
	// simHandler serves the model's sim admin API (`muster sim …`), for
	// sim models; nil otherwise.
	simHandler http.Handler
	close      func() error
}

// providerKind builds and checks one kind of provider.
type providerKind struct {
	configKeys []string // accepted provider config keys
	open       func(ctx context.Context, env providerEnv) (*modelProvider, error)
}

// providers is the map of provider kinds (DESIGN §1: chosen here, not
// registered in init).
var providers = map[string]providerKind{
	"sim": {configKeys: []string{"endpoint", "zones"}, open: openSimProvider},
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
		if !known {
			return muster.Errorf(muster.EInvalid, "unknown %s provider config key %q (known: %s)", m.Provider, k, strings.Join(kind.configKeys, ", "))
		}
		if k == "zones" {
			if _, err := parseZoneList(v); err != nil {
				return err
			}
		}
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
// its instances survive a controller restart.
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
	for _, z := range zones {
		cfg.Zones = append(cfg.Zones, sim.ZoneConfig{Name: z, Available: true, Capacity: sim.Unlimited})
	}
	cloud, err := sim.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("open embedded sim of model %s: %w", env.model.Name, err)
	}
	return &modelProvider{
		Provider:   cloud.Provider(env.controllerUUID, env.model.UUID),
		simHandler: sim.NewServer(cloud),
		close:      cloud.Close,
	}, nil
}
