package controller

import (
	"context"
	"fmt"

	"github.com/musterhq/muster/lxd"
)

// LXD is the provider kind of LXD system containers booted by cloud-init
// (SPEC §3.4): `muster add-model NAME --provider lxd --config zones=a,b,c`.
var LXD = ProviderKind{ConfigKeys: lxd.ConfigKeys, Open: openLXDProvider, Validate: func(config map[string]string) error {
	_, err := lxd.ParseConfig(config)
	return err
}}

// openLXDProvider opens a model's lxd provider and makes the controller
// reachable from its zone bridges: the API is also served on each bridge's
// gateway address (the host's address there), and those addresses go into
// the agents' cloud-init user data, which downloads the agent binary from
// the first of them. Every zone's containers reach every gateway, since
// all are this host's.
func openLXDProvider(ctx context.Context, env ProviderEnv) (*ModelProvider, error) {
	cfg, err := lxd.ParseConfig(env.Model.Config)
	if err != nil {
		return nil, err
	}
	cfg.ControllerUUID, cfg.ModelUUID, cfg.ModelName, cfg.Logger = env.ControllerUUID, env.Model.UUID, env.Model.Name, env.Logger
	p, err := lxd.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open lxd provider of model %s: %w", env.Model.Name, err)
	}
	return servedOnGateways(ctx, env, "lxd", p)
}
