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
	bootDelay time.Duration // before an instance's agent starts (SPEC §3.1)
	log       *slog.Logger
	hc        *http.Client // shared by every agent of the model

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	running map[string]*simAgent // by instance id

	enabledMu sync.Mutex
	enabled   bool
	checkedAt time.Time

	skipped atomic.Int64 // starts skipped because sim-agents was false
	started atomic.Int64 // agents that reported their machine started
}

type simAgent struct{ cancel context.CancelFunc }

func newSimAgents(env ProviderEnv) (*simAgents, error) {
	hc, err := agent.SharedHTTPClient(env.CACert)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &simAgents{
		store: env.Store, modelUUID: env.Model.UUID, apiURL: env.APIURL, caCert: string(env.CACert),
		clock: env.Clock, bootDelay: env.SimAgentBootDelay, log: env.Logger.With("component", "sim-agents"),
		hc:  hc,
		ctx: ctx, cancel: cancel, running: map[string]*simAgent{},
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

	ctx, cancel := context.WithCancel(s.ctx)
	a := &simAgent{cancel: cancel}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return
	}
	if old := s.running[inst.ID]; old != nil {
		old.cancel() // started again (e.g. a repeated launch): the newer credentials win
	}
	s.running[inst.ID] = a
	s.wg.Add(1)
	s.mu.Unlock()

	go func() {
		defer s.wg.Done()
		defer func() {
			cancel()
			s.mu.Lock()
			if s.running[inst.ID] == a {
				delete(s.running, inst.ID)
			}
			s.mu.Unlock()
		}()
		t := s.clock.NewTimer(s.bootDelay)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if !s.isEnabled(ctx) {
			s.skipped.Add(1)
			return
		}
		err := agent.Run(ctx, cfg, agent.Options{
			Logger:     s.log.With("instance", inst.ID),
			Clock:      s.clock,
			Hardware:   func() muster.Hardware { return hw },
			Addresses:  func() []string { return addrs },
			HTTPClient: s.hc,
			OnStarted:  func() { s.started.Add(1) },
		})
		if err != nil {
			s.log.Info("simulated agent stopped", "instance", inst.ID, "machine", cfg.Machine, "err", err)
		}
	}()
}

// onStop is the sim's OnStop hook: the instance's agent stops, so its
// machine goes down.
func (s *simAgents) onStop(id string) {
	s.mu.Lock()
	a := s.running[id]
	delete(s.running, id)
	s.mu.Unlock()
	if a != nil {
		a.cancel()
	}
}

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

// count returns how many agents run.
func (s *simAgents) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

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
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
	s.hc.CloseIdleConnections()
}
