package simserver

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/cloudinit"
	"github.com/musterhq/muster/sim"
)

// agents runs the simulated agents of `muster sim serve`: for each
// instance whose user data carries a muster agent config (read as the
// instance's boot script would, for its launch index), the real agent code
// runs in this process once the instance has booted, against the
// controller addresses in the config and trusting only the CA in it. A
// stopped or terminated instance stops its agent.
type agents struct {
	log       *slog.Logger
	clock     muster.Clock
	bootDelay time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	running map[string]*simAgent // by instance id
}

type simAgent struct{ cancel context.CancelFunc }

func newAgents(log *slog.Logger, clock muster.Clock, bootDelay time.Duration) *agents {
	if clock == nil {
		clock = muster.SystemClock
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &agents{log: log.With("component", "sim-agents"), clock: clock, bootDelay: bootDelay,
		ctx: ctx, cancel: cancel, running: map[string]*simAgent{}}
}

// onStart is the cloud's OnStart hook.
func (s *agents) onStart(inst sim.Instance, p muster.StartParams) {
	index := 0
	if inst.EC2 != nil {
		index = inst.EC2.LaunchIndex
	}
	cfg, ok, err := cloudinit.AgentConfigOf(p.UserData, index)
	if err != nil {
		s.log.Warn("no simulated agent: bad agent config in user data", "instance", inst.ID, "err", err)
		return
	}
	if !ok {
		return
	}
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
		old.cancel() // started again: the newer boot wins
	}
	s.running[inst.ID] = a
	s.wg.Add(1)
	s.mu.Unlock()
	log := s.log.With("instance", inst.ID)
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
		log.Info("simulated agent starting", "machine", cfg.Machine, "controller", cfg.APIAddresses)
		err := agent.Run(ctx, cfg, agent.Options{
			Logger:    log,
			Clock:     s.clock,
			Hardware:  func() muster.Hardware { return hw },
			Addresses: func() []string { return addrs },
		})
		if err != nil {
			log.Info("simulated agent stopped", "machine", cfg.Machine, "err", err)
		}
	}()
}

// onStop is the cloud's OnStop hook.
func (s *agents) onStop(id string) {
	s.mu.Lock()
	a := s.running[id]
	delete(s.running, id)
	s.mu.Unlock()
	if a != nil {
		a.cancel()
	}
}

// count returns how many agents run (or wait for their instance to boot).
func (s *agents) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.running)
}

// close stops every agent and waits for them.
func (s *agents) close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}
