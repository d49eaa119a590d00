package agent

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// Runner runs in-process agents for simulated instances (SPEC §3.1), one
// per instance id: each boots after a delay, a second Start for the same
// instance replaces the first (a repeated launch or a restart boots
// again), Stop ends one, Close ends all and waits for them. What an agent
// does once booted is the caller's function, so the controller's and
// `muster sim serve`'s simulated agents share the bookkeeping.
type Runner struct {
	clock     muster.Clock
	bootDelay time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	closed  bool
	running map[string]*runEntry // by instance id
}

type runEntry struct{ cancel context.CancelFunc }

// NewRunner returns a Runner whose agents boot bootDelay after Start, on
// clock (default muster.SystemClock).
func NewRunner(clock muster.Clock, bootDelay time.Duration) *Runner {
	if clock == nil {
		clock = muster.SystemClock
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Runner{clock: clock, bootDelay: bootDelay, ctx: ctx, cancel: cancel, running: map[string]*runEntry{}}
}

// Start runs boot for instance id once the boot delay has passed, with a
// context that ends on Stop(id), on a later Start(id) or on Close. An
// instance counts as running from Start until boot returns or is
// cancelled. Start after Close does nothing.
func (r *Runner) Start(id string, boot func(ctx context.Context)) {
	r.StartPrepared(id, func() func(context.Context) { return boot })
}

// StartPrepared is Start with a boot function that prepare makes on the
// instance's goroutine as its boot delay begins: what an agent sets up
// while its machine boots is ready when the delay ends, instead of adding
// to the work of every agent booting at once. A nil boot does nothing.
func (r *Runner) StartPrepared(id string, prepare func() (boot func(ctx context.Context))) {
	ctx, cancel := context.WithCancel(r.ctx)
	e := &runEntry{cancel: cancel}
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		cancel()
		return
	}
	if old := r.running[id]; old != nil {
		old.cancel() // started again: the newer boot wins
	}
	r.running[id] = e
	r.wg.Add(1)
	r.mu.Unlock()

	go func() {
		defer r.wg.Done()
		defer func() {
			cancel()
			r.mu.Lock()
			if r.running[id] == e {
				delete(r.running, id)
			}
			r.mu.Unlock()
		}()
		t := r.clock.NewTimer(r.bootDelay)
		boot := prepare()
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		if boot != nil {
			boot(ctx)
		}
	}()
}

// Stop ends the agent of instance id, if any (its machine goes down).
func (r *Runner) Stop(id string) {
	r.mu.Lock()
	e := r.running[id]
	delete(r.running, id)
	r.mu.Unlock()
	if e != nil {
		e.cancel()
	}
}

// Count returns how many agents run or wait for their instance to boot.
func (r *Runner) Count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.running)
}

// Close stops every agent and waits for them; it may be called more than
// once.
func (r *Runner) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// SimCloud is what a simulated agent needs of its simulated cloud (the
// sim's *Cloud): the instance's signed identity and its disk, on which an
// enrolled agent keeps its config as `muster agent` keeps its file.
type SimCloud interface {
	IdentityDocument(instanceID string) (doc []byte, sig string, err error)
	WriteFile(instanceID, path string, data []byte) error
	ReadFile(instanceID, path string) ([]byte, bool)
}

// SimConfigPath is where a simulated agent keeps its enrolled config on its
// instance's disk.
const SimConfigPath = "/etc/muster/agent.json"

// Simulated returns the config the agent of simulated instance id boots
// with — the one it kept after enrolling on an earlier boot, else cfg —
// and sets opts' Identity and OnEnrolled to use cloud, as a real agent
// reads its metadata service and writes its config file.
func Simulated(cloud SimCloud, id string, cfg muster.AgentConfig, opts Options) (muster.AgentConfig, Options) {
	if b, ok := cloud.ReadFile(id, SimConfigPath); ok {
		var kept muster.AgentConfig
		// Credentials kept; the controller addresses and CA come from the
		// caller (New validates the whole).
		if json.Unmarshal(b, &kept) == nil && kept.Machine != "" && kept.Nonce != "" && kept.Password != "" {
			kept.APIAddresses, kept.CACert = cfg.APIAddresses, cfg.CACert
			cfg = kept
		}
	}
	opts.Identity = func(ctx context.Context) ([]byte, string, error) { return simIdentity(ctx, cloud, id) }
	opts.OnEnrolled = func(c muster.AgentConfig) error {
		// Kept without the addresses and CA, which every boot is given:
		// ten thousand copies of the CA are 12 MB.
		c.APIAddresses, c.CACert = nil, ""
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		return cloud.WriteFile(id, SimConfigPath, b)
	}
	return cfg, opts
}

// simIdentity asks the simulated metadata service for instance id's
// signed identity. The service answers on a goroutine of its own, as a
// real one answers from another process: signing takes more stack than an
// agent's goroutine otherwise needs, and done on it would leave ten
// thousand simulated agents with 16 KiB stacks instead of 8 (80 MB).
func simIdentity(ctx context.Context, cloud SimCloud, id string) ([]byte, string, error) {
	type answer struct {
		doc []byte
		sig string
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		doc, sig, err := cloud.IdentityDocument(id)
		ch <- answer{doc, sig, err}
	}()
	select {
	case a := <-ch:
		return a.doc, a.sig, a.err
	case <-ctx.Done():
		return nil, "", ctx.Err()
	}
}
