package controller

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/sim"
)

// simAgentsCheckEvery bounds how often the model's sim-agents setting is
// re-read from the store.
const simAgentsCheckEvery = time.Second

// simAgents runs the simulated agents of one model's embedded sim (SPEC
// §3.1): for each started instance, after a boot delay, the real agent
// code runs in-process with the credentials and nonce the instance was
// started with, unless the model's setting sim-agents is false at that
// moment. A stopped instance stops its agent; Close stops them all.
type simAgents struct {
	store     muster.Store
	modelUUID string
	apiURL    string
	caCert    string
	clock     muster.Clock
	log       *slog.Logger
	agentLog  *slog.Logger // what the agents log: warnings and errors only
	hc        *http.Client // shared by every agent of the model
	runner    *agent.Runner
	cloud     *sim.Cloud    // set by setCloud once the sim is open
	ready     chan struct{} // closed by setCloud

	enabledMu sync.Mutex
	enabled   bool
	checkedAt time.Time

	skipped atomic.Int64 // starts skipped because sim-agents was false
	started atomic.Int64 // agents that reported their machine started
}

func newSimAgents(env ProviderEnv) (*simAgents, error) {
	hc, err := agent.SharedHTTPClient(env.CACert)
	if err != nil {
		return nil, err
	}
	log := env.Logger.With("component", "sim-agents")
	return &simAgents{
		store: env.Store, modelUUID: env.Model.UUID, apiURL: env.APIURL, caCert: string(env.CACert),
		clock: env.Clock, log: log, agentLog: slog.New(warnings{log.Handler()}),
		hc:     hc,
		runner: agent.NewRunner(env.Clock, env.SimAgentBootDelay),
		ready:  make(chan struct{}),
	}, nil
}

// onStart is the sim's OnStart hook.
func (s *simAgents) onStart(inst sim.Instance, p muster.StartParams) {
	if len(p.UserData) == 0 {
		return
	}
	var cfg muster.AgentConfig
	if err := json.Unmarshal(p.UserData, &cfg); err != nil {
		s.log.Warn("simulated agent: bad user data", "instance", inst.ID, "err", err)
		return
	}
	// The agent runs in the controller: it dials the controller's own
	// address, whatever the instance was started with.
	cfg.APIAddresses, cfg.CACert = []string{s.apiURL}, s.caCert
	hw := muster.Hardware{Arch: inst.Arch, Cores: uint64(inst.Cores), Mem: inst.Mem, RootDisk: inst.RootDisk, AvailabilityZone: inst.Zone}
	addrs := append([]string(nil), inst.Addresses...)
	// Only an instance restored from the sim's state may have been
	// released meanwhile; a new one is its machine's (a replacement's is
	// recorded just after this call, so asking the store would wrongly
	// find the old instance).
	restored := !s.isReady()
	early := !restored && s.isEnabled(context.Background())
	if early {
		// The cloud signs the instance's identity while it boots, on a
		// goroutine of its own (a start call does not wait for it): the
		// agent finds the document ready, as on EC2.
		go s.cloud.PrepareIdentity(inst.ID)
	}
	s.runner.StartPrepared(inst.ID, func() func(context.Context) {
		// A new instance's agent is made (its config read and checked,
		// its client built) while the instance boots, as a real one starts
		// during the boot: ten thousand booting at once then only enrol.
		var pre *agent.Agent
		if early {
			pre, _ = s.newAgent(inst.ID, cfg, hw, addrs) // an error is the boot's to report
		}
		return func(ctx context.Context) { s.boot(ctx, inst.ID, cfg, hw, addrs, restored, pre) }
	})
}

// boot runs the agent of instance id once its boot delay has passed: pre,
// when made during the delay and still right, else a new one.
func (s *simAgents) boot(ctx context.Context, id string, cfg muster.AgentConfig, hw muster.Hardware, addrs []string, restored bool, pre *agent.Agent) {
	select {
	case <-s.ready: // instances restored while the sim opens boot once it is
	case <-ctx.Done():
		return
	}
	if !s.isEnabled(ctx) || (restored && s.released(ctx, id, cfg.Machine)) {
		s.skipped.Add(1)
		return
	}
	if !s.cloud.AgentBoots() { // scripted boot failure (R1)
		s.log.Info("simulated agent never boots (agent-boot-failure-rate)", "instance", id)
		return
	}
	a, err := pre, error(nil)
	if a == nil || (a.Enrolling() && s.kept(id)) { // an earlier boot's agent enrolled meanwhile
		a, err = s.newAgent(id, cfg, hw, addrs)
	}
	if err == nil {
		err = a.Run(ctx)
	}
	if err != nil {
		s.log.Info("simulated agent stopped", "instance", id, "machine", cfg.Machine, "err", err)
	}
}

// kept reports whether instance id's disk holds an enrolled agent's
// config.
func (s *simAgents) kept(id string) bool {
	_, ok := s.cloud.ReadFile(id, agent.SimConfigPath)
	return ok
}

// newAgent makes the agent of instance id. It is a function of its own so
// that its large values leave the agent goroutine's stack before the
// agent runs (see agent.Agent).
func (s *simAgents) newAgent(id string, cfg muster.AgentConfig, hw muster.Hardware, addrs []string) (*agent.Agent, error) {
	cfg, opts := agent.Simulated(s.cloud, id, cfg, agent.Options{
		Logger:     s.agentLog.With("instance", id),
		Clock:      s.clock,
		Hardware:   func() muster.Hardware { return hw },
		Addresses:  func() []string { return addrs },
		HTTPClient: s.hc,
		OnStarted:  func() { s.started.Add(1) },
	})
	return agent.New(cfg, opts)
}

// setCloud gives the agents the open sim, whose instances they boot on.
func (s *simAgents) setCloud(c *sim.Cloud) {
	s.cloud = c
	close(s.ready)
}

// isReady reports whether setCloud has run (the sim is open).
func (s *simAgents) isReady() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// onStop is the sim's OnStop hook: the instance's agent stops, so its
// machine goes down.
func (s *simAgents) onStop(id string) { s.runner.Stop(id) }

// isEnabled reads the model's sim-agents setting, at most once per
// simAgentsCheckEvery.
func (s *simAgents) isEnabled(ctx context.Context) bool {
	s.enabledMu.Lock()
	defer s.enabledMu.Unlock()
	now := s.clock.Now()
	if !s.checkedAt.IsZero() && now.Sub(s.checkedAt) < simAgentsCheckEvery && now.After(s.checkedAt) {
		return s.enabled
	}
	m, err := s.store.Model(ctx, s.modelUUID)
	if err != nil {
		if ctx.Err() == nil {
			s.log.Warn("simulated agent: read model settings", "err", err)
		}
		return false
	}
	s.enabled, s.checkedAt = m.Settings.SimAgents, now
	return s.enabled
}

// released reports whether the instance no longer belongs to its
// machine: the machine is gone (removed with --keep-instance, which
// leaves the instance running) or records another instance. Its agent
// would only be refused, so it is not started.
func (s *simAgents) released(ctx context.Context, instID, machineID string) bool {
	ms, err := s.store.Machines(ctx, s.modelUUID, []string{machineID})
	if err != nil {
		return false // the agent's own login says what is wrong
	}
	if len(ms) == 0 || (ms[0].Instance != nil && ms[0].Instance.InstanceID != instID) {
		s.log.Debug("simulated agent not started: instance released", "instance", instID, "machine", machineID)
		return true
	}
	return false
}

// count returns how many agents run.
func (s *simAgents) count() int { return s.runner.Count() }

// stopSimAgents stops the simulated agents of every model. The controller
// does it before shutting its server down: a connection the agents' shared
// transport dialled but never used counts as busy for five seconds in
// http.Server.Shutdown.
func (c *Controller) stopSimAgents() {
	c.mu.Lock()
	var agents []*simAgents
	for _, r := range c.models {
		if r.provider.simAgents != nil {
			agents = append(agents, r.provider.simAgents)
		}
	}
	c.mu.Unlock()
	for _, a := range agents {
		a.close()
	}
}

// close stops every agent and waits for them; it may be called more than
// once.
func (s *simAgents) close() {
	s.runner.Close()
	s.hc.CloseIdleConnections()
}

// warnings passes on warnings and errors only. The simulated agents log to
// the controller's log, where a real fleet's agents log to their own
// machines: ten thousand agents enrolling, logging in and starting would
// bury everything else under 30,000 lines, while their failures stay.
type warnings struct{ slog.Handler }

func (w warnings) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelWarn && w.Handler.Enabled(ctx, l)
}

func (w warnings) WithAttrs(as []slog.Attr) slog.Handler { return warnings{w.Handler.WithAttrs(as)} }
func (w warnings) WithGroup(name string) slog.Handler    { return warnings{w.Handler.WithGroup(name)} }
