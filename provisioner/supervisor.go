package provisioner

import (
	"context"
	"math/rand/v2"
	"runtime/debug"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// SupervisorOptions tune the restart backoff of Supervise (P20).
type SupervisorOptions struct {
	// MinBackoff is the wait before the first restart; default 1s.
	MinBackoff time.Duration
	// MaxBackoff caps the wait, which doubles with each failure in a row;
	// default 1m.
	MaxBackoff time.Duration
	// StableAfter is how long a run must last for the backoff to start
	// again from MinBackoff; default 5m.
	StableAfter time.Duration
	// OnError, when set, is called with each error a run ends with.
	OnError func(err error)
}

// SupervisorStatus is what `muster status` shows about a provisioner.
type SupervisorStatus struct {
	Running   bool      // a run is in progress
	LastError string    // the error the last failed run ended with; "" if none
	ErrorTime time.Time // when it ended
	Restarts  int       // runs started after a failure
}

// Supervisor keeps one provisioner running, restarting it with capped,
// jittered backoff when it ends with an error (P20). It never panics the
// process: a panic in a run is turned into an error.
type Supervisor struct {
	cfg  Config
	opts SupervisorOptions
	done chan struct{}

	mu  sync.Mutex
	st  SupervisorStatus
	cur *Provisioner // the current run's provisioner
}

// Supervise starts running provisioners for cfg until ctx ends.
func Supervise(ctx context.Context, cfg Config, opts SupervisorOptions) *Supervisor {
	if opts.MinBackoff <= 0 {
		opts.MinBackoff = time.Second
	}
	if opts.MaxBackoff < opts.MinBackoff {
		opts.MaxBackoff = max(time.Minute, opts.MinBackoff)
	}
	if opts.StableAfter <= 0 {
		opts.StableAfter = 5 * time.Minute
	}
	if cfg.Clock == nil {
		cfg.Clock = muster.SystemClock
	}
	s := &Supervisor{cfg: cfg, opts: opts, done: make(chan struct{})}
	go s.run(ctx)
	return s
}

// Status returns the current status. It is safe for concurrent use.
func (s *Supervisor) Status() SupervisorStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st
}

// Zones returns the zone table of the running provisioner (Z1), or nil
// when none runs. It is safe for concurrent use.
func (s *Supervisor) Zones() []ZoneInfo {
	s.mu.Lock()
	p := s.cur
	s.mu.Unlock()
	if p == nil {
		return nil
	}
	return p.Zones()
}

// Wait blocks until the supervisor has stopped (after its context ended).
func (s *Supervisor) Wait() { <-s.done }

// Done is closed when the supervisor has stopped.
func (s *Supervisor) Done() <-chan struct{} { return s.done }

func (s *Supervisor) run(ctx context.Context) {
	defer close(s.done)
	clock := s.cfg.Clock
	backoff := s.opts.MinBackoff
	for ctx.Err() == nil {
		start := clock.Now()
		s.mu.Lock()
		s.st.Running = true
		s.mu.Unlock()
		err := s.once(ctx)
		s.mu.Lock()
		s.st.Running = false
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = muster.Errorf(muster.EInternal, "provisioner ended without error")
		}
		if s.opts.OnError != nil {
			s.opts.OnError(err)
		}
		if clock.Now().Sub(start) >= s.opts.StableAfter {
			backoff = s.opts.MinBackoff
		}
		wait := backoff/2 + rand.N(backoff/2+1)
		s.mu.Lock()
		s.st.LastError = err.Error()
		s.st.ErrorTime = clock.Now()
		s.mu.Unlock()
		if s.cfg.Logger != nil {
			s.cfg.Logger.Error("provisioner failed; restarting", "model", s.cfg.Model.Name, "err", err, "in", wait)
		}
		backoff = min(backoff*2, s.opts.MaxBackoff)
		t := clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C():
		}
		s.mu.Lock()
		s.st.Restarts++
		s.mu.Unlock()
	}
}

func (s *Supervisor) once(ctx context.Context) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = muster.Errorf(muster.EInternal, "provisioner panic: %v", r)
			if s.cfg.Logger != nil {
				s.cfg.Logger.Error("provisioner panic", "model", s.cfg.Model.Name, "panic", r, "stack", string(debug.Stack()))
			}
		}
	}()
	p, err := New(s.cfg)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.cur = p
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.cur = nil
		s.mu.Unlock()
	}()
	return p.Run(ctx)
}
