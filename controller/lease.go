package controller

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

// Why a lease runner stops its work.
const (
	whyTaken = "model lease taken by another controller"
	whyLate  = "model lease not renewed in time"
	whyEnded = "lease runner stopping" // its context ended
)

// leaseRunner runs one piece of work (a model's provisioner) only while
// its holder holds a lease. The lease is renewed every third of its TTL;
// the work is stopped (and waited for) as soon as a renewal is refused,
// or when no renewal succeeded by a fifth of the TTL before the lease
// could expire, counted on this host's clock from just before the last
// successful claim was sent: the store's expiry always comes later,
// whatever the clocks' skew, so no other holder starts the work while
// this one runs it.
type leaseRunner struct {
	leases muster.LeaseStore
	name   string // the lease
	holder string // this controller's id
	ttl    time.Duration
	poll   time.Duration // how often a claim is tried while not holding the lease
	clock  muster.Clock
	log    *slog.Logger

	// start starts the work. It returns false without an error when there
	// is nothing to run (the model is gone); the lease is released then,
	// and after an error.
	start func(ctx context.Context) (bool, error)
	// stop stops the work and returns once it has stopped; why is one of
	// the why* constants.
	stop func(why string)
	// release reports whether to release the lease once the work stopped
	// at the end of run (not after a simulated crash).
	release func() bool
}

// run claims the lease and runs the work while it is held, until ctx
// ends; the work is stopped before run returns.
func (l *leaseRunner) run(ctx context.Context) {
	renew, margin := l.ttl/3, l.ttl/5
	running := false
	var deadline time.Time // the work must have stopped by then
	stop := func(why string) {
		l.stop(why)
		running = false
		l.log.Info("model stopped on this controller", "why", why)
		if late := l.clock.Now().Sub(deadline.Add(margin)); late > 0 {
			// The lease may have expired while the work still ran.
			l.log.Error("provisioner stopped after its lease could have expired", "late", late)
		}
	}
	for ctx.Err() == nil {
		start := l.clock.Now()
		timeout := renew
		if running {
			timeout = min(timeout, deadline.Sub(start))
		}
		if timeout > 0 {
			cctx, cancel := withClockTimeout(ctx, l.clock, timeout)
			held, _, err := l.leases.ClaimLease(cctx, l.name, l.holder, l.ttl)
			cancel()
			if ctx.Err() != nil {
				break
			}
			switch {
			case err != nil:
				lvl := slog.LevelDebug
				if running {
					lvl = slog.LevelWarn
				}
				l.log.Log(ctx, lvl, "claim model lease", "err", err)
			case !held:
				if running {
					stop(whyTaken)
				}
			default:
				deadline = start.Add(l.ttl - margin)
				if !running {
					ok, err := l.start(ctx)
					switch {
					case err != nil:
						if ctx.Err() == nil {
							l.log.Error("start model", "err", err)
						}
						l.releaseLease() // another controller may do better
					case !ok: // removed meanwhile
						l.releaseLease()
					default:
						running = true
					}
				}
			}
		}
		if running && !l.clock.Now().Before(deadline) {
			stop(whyLate)
		}
		wait := l.poll
		if running {
			now := l.clock.Now()
			wait = min(start.Add(renew).Sub(now), deadline.Sub(now))
		}
		if muster.Sleep(ctx, l.clock, wait) != nil {
			break
		}
	}
	if !running {
		return
	}
	stop(whyEnded)
	if l.release() {
		l.releaseLease() // the next controller takes over at once
	}
}

func (l *leaseRunner) releaseLease() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := l.leases.ReleaseLease(ctx, l.name, l.holder); err != nil {
		l.log.Warn("release lease", "lease", l.name, "err", err)
	}
}

// withClockTimeout is context.WithTimeout on clock: ctx ends once clock
// has moved d on. Its cancel func also stops the clock's timer before it
// returns, so that a fake clock in tests sees only the timers still
// waiting.
func withClockTimeout(ctx context.Context, clock muster.Clock, d time.Duration) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	t := clock.NewTimer(d)
	stopped := make(chan struct{})
	go func() {
		select {
		case <-t.C():
			cancel()
		case <-stopped:
		}
	}()
	var once sync.Once
	return ctx, func() {
		once.Do(func() {
			t.Stop()
			close(stopped)
			cancel()
		})
	}
}
