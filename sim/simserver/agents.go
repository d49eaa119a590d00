package simserver

import (
	"bytes"
	"context"
	"log/slog"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cloudinit"
	"github.com/musterhq/muster/sim"
)

// agents runs the simulated agents of `muster sim serve`: for each
// instance whose user data carries a muster agent config (an EC2 launch's
// cloud-init, read as the instance's boot script would for its launch
// index, or the JSON config a sim model's start sends), the real agent code
// runs in this process once the instance has booted, against the
// controller addresses in the config and trusting only the CA in it. A
// stopped or terminated instance stops its agent.
type agents struct {
	log    *slog.Logger
	clock  muster.Clock
	runner *agent.Runner
	cloud  *sim.Cloud    // set by setCloud once the sim is open
	ready  chan struct{} // closed by setCloud
}

func newAgents(log *slog.Logger, clock muster.Clock, bootDelay time.Duration) *agents {
	if clock == nil {
		clock = muster.SystemClock
	}
	return &agents{log: log.With("component", "sim-agents"), clock: clock, runner: agent.NewRunner(clock, bootDelay), ready: make(chan struct{})}
}

// onStart is the cloud's OnStart hook.
func (s *agents) onStart(inst sim.Instance, p muster.StartParams) {
	index := 0
	if inst.EC2 != nil {
		index = inst.EC2.LaunchIndex
	}
	cfg, ok, err := agentConfigOf(p.UserData, index)
	if err != nil {
		s.log.Warn("no simulated agent: bad agent config in user data", "instance", inst.ID, "err", err)
		return
	}
	if !ok {
		return
	}
	hw := muster.Hardware{Arch: inst.Arch, Cores: uint64(inst.Cores), Mem: inst.Mem, RootDisk: inst.RootDisk, AvailabilityZone: inst.Zone}
	addrs := append([]string(nil), inst.Addresses...)
	log := s.log.With("instance", inst.ID)
	s.runner.Start(inst.ID, func(ctx context.Context) {
		select {
		case <-s.ready: // instances restored while the sim opens boot once it is
		case <-ctx.Done():
			return
		}
		if !s.cloud.AgentBoots() { // scripted boot failure (R1)
			log.Info("simulated agent never boots (agent-boot-failure-rate)", "machine", cfg.Machine)
			return
		}
		log.Info("simulated agent starting", "machine", cfg.Machine, "controller", cfg.APIAddresses)
		cfg, opts := agent.Simulated(s.cloud, inst.ID, cfg, agent.Options{
			Logger:    log,
			Clock:     s.clock,
			Hardware:  func() muster.Hardware { return hw },
			Addresses: func() []string { return addrs },
		})
		err := agent.Run(ctx, cfg, opts)
		if err != nil {
			log.Info("simulated agent stopped", "machine", cfg.Machine, "err", err)
		}
	})
}

// agentConfigOf returns the agent config user data carries: a JSON
// object is the config itself (a sim model's start: muster's provisioner
// gives the sim provider the agent config as the user data), anything else
// is read as an EC2 launch's cloud-init for the instance's launch index.
// ok is false when the user data carries no agent config.
func agentConfigOf(data []byte, launchIndex int) (cfg muster.AgentConfig, ok bool, err error) {
	if t := bytes.TrimSpace(data); len(t) > 0 && t[0] == '{' {
		cfg, err := muster.ParseAgentConfig(t)
		return cfg, err == nil, err
	}
	return cloudinit.AgentConfigOf(data, launchIndex)
}

// setCloud gives the agents the open sim, whose instances they boot on.
func (s *agents) setCloud(c *sim.Cloud) {
	s.cloud = c
	close(s.ready)
}

// onStop is the cloud's OnStop hook.
func (s *agents) onStop(id string) { s.runner.Stop(id) }

// count returns how many agents run (or wait for their instance to boot).
func (s *agents) count() int { return s.runner.Count() }

// close stops every agent and waits for them.
func (s *agents) close() { s.runner.Close() }
