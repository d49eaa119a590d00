package controller

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
)

// The lease of the tests: renewed every 3s, the work stopped by 7.2s
// after the last successful claim was sent.
const (
	testTTL   = 9 * time.Second
	testRenew = testTTL / 3
	testStop  = testTTL - testTTL/5
)

// eventWait bounds the wait for something the runner must do without the
// clock moving: it only guards against a hang.
const eventWait = 10 * time.Second

// claim is one ClaimLease call, answered by the test.
type claim struct {
	ctx   context.Context
	reply chan claimReply
}

type claimReply struct {
	held bool
	err  error
}

// scriptedLeases is a muster.LeaseStore whose claims the test answers one
// at a time. A claim the test does not answer is a store that delays: it
// returns only when its context ends.
type scriptedLeases struct {
	claims   chan claim
	released atomic.Int32
}

var _ muster.LeaseStore = (*scriptedLeases)(nil)

func (s *scriptedLeases) ClaimLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, time.Time, error) {
	c := claim{ctx: ctx, reply: make(chan claimReply, 1)}
	select {
	case s.claims <- c:
	case <-ctx.Done():
		return false, time.Time{}, ctx.Err()
	}
	select {
	case r := <-c.reply:
		return r.held, time.Time{}, r.err
	case <-ctx.Done():
		return false, time.Time{}, ctx.Err()
	}
}

func (s *scriptedLeases) ReleaseLease(ctx context.Context, name, holder string) error {
	s.released.Add(1)
	return nil
}

func (s *scriptedLeases) LeaseHolder(ctx context.Context, name string) (string, time.Time, error) {
	return "", time.Time{}, errors.New("not used by the lease runner")
}

// leaseHarness runs a leaseRunner on a fake clock and scripted leases;
// its work reports "start" and "stop: <why>" on events.
type leaseHarness struct {
	clock  *fakeclock.Clock
	t0     time.Time
	leases *scriptedLeases
	events chan string
	cancel context.CancelFunc
	done   chan struct{}
	// startErr is what the work's start returns.
	startErr error
}

func newLeaseHarness(t *testing.T, startErr error) *leaseHarness {
	t.Helper()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &leaseHarness{clock: fakeclock.New(t0), t0: t0, leases: &scriptedLeases{claims: make(chan claim)},
		events: make(chan string, 10), done: make(chan struct{}), startErr: startErr}
	lr := &leaseRunner{
		leases: h.leases, name: "model/m", holder: "me", ttl: testTTL, poll: time.Second,
		clock: h.clock, log: slog.New(slog.NewTextHandler(io.Discard, nil)),
		start: func(context.Context) (bool, error) {
			h.events <- "start"
			return h.startErr == nil, h.startErr
		},
		stop:    func(why string) { h.events <- "stop: " + why },
		release: func() bool { return true },
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	go func() {
		defer close(h.done)
		lr.run(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-h.done
	})
	return h
}

// nextClaim returns the runner's next claim.
func (h *leaseHarness) nextClaim(t *testing.T) claim {
	t.Helper()
	select {
	case c := <-h.leases.claims:
		return c
	case <-time.After(eventWait):
		t.Fatalf("no lease claim at %s", h.clock.Now().Sub(h.t0))
	}
	panic("unreachable")
}

// event returns what the work reported next.
func (h *leaseHarness) event(t *testing.T, want string) {
	t.Helper()
	select {
	case got := <-h.events:
		if got != want {
			t.Fatalf("at %s: got %q, want %q", h.clock.Now().Sub(h.t0), got, want)
		}
	case <-time.After(eventWait):
		t.Fatalf("at %s: the runner did not report %q", h.clock.Now().Sub(h.t0), want)
	}
}

// advance moves the clock on by d once the runner waits on a timer (its
// sleep, or the timeout of a claim in flight).
func (h *leaseHarness) advance(d time.Duration) {
	<-h.clock.WaitForTimers(1)
	h.clock.Advance(d)
}

// startRunning gets the runner to hold the lease and run the work at t0.
func (h *leaseHarness) startRunning(t *testing.T) {
	t.Helper()
	h.nextClaim(t).reply <- claimReply{held: true}
	h.event(t, "start")
}

// A renewal the store refuses (another controller holds the lease) stops
// the work at once, long before the renewal deadline.
func TestLeaseTakenStopsWork(t *testing.T) {
	h := newLeaseHarness(t, nil)
	h.startRunning(t)
	h.advance(testRenew)
	h.nextClaim(t).reply <- claimReply{held: false}
	h.event(t, "stop: "+whyTaken)
	if got := h.clock.Now().Sub(h.t0); got != testRenew {
		t.Errorf("stopped at %s, want at the refused renewal (%s)", got, testRenew)
	}
	// Without the lease the runner goes on trying to take it back.
	h.advance(time.Second)
	h.nextClaim(t).reply <- claimReply{held: true}
	h.event(t, "start")
}

// Renewals the store delays past the renewal deadline stop the work at
// the deadline (a fifth of the TTL before the lease could expire), while
// the last renewal is still in flight.
func TestRenewalDeadlineStopsWork(t *testing.T) {
	h := newLeaseHarness(t, nil)
	h.startRunning(t)
	h.advance(testRenew)
	h.nextClaim(t) // never answered: the claim times out after testRenew
	h.advance(testRenew)
	h.nextClaim(t) // never answered: times out at the deadline
	h.advance(testStop - 2*testRenew)
	h.event(t, "stop: "+whyLate)
	if got := h.clock.Now().Sub(h.t0); got != testStop {
		t.Errorf("stopped at %s, want at the deadline %s", got, testStop)
	}
}

// A renewal that fails (the store is unreachable) but comes back before
// the deadline keeps the work running.
func TestFailedRenewalBeforeDeadlineKeepsWork(t *testing.T) {
	h := newLeaseHarness(t, nil)
	h.startRunning(t)
	h.advance(testRenew)
	h.nextClaim(t).reply <- claimReply{err: errors.New("connection refused")}
	h.advance(testRenew) // 6s: before the deadline of 7.2s
	h.nextClaim(t).reply <- claimReply{held: true}
	h.advance(testRenew) // 9s: past the first deadline, not the renewed one
	h.nextClaim(t).reply <- claimReply{held: true}
	select {
	case e := <-h.events:
		t.Fatalf("got %q, want the work to go on", e)
	default:
	}
}

// When the runner's context ends, the work stops and the lease is
// released for the next controller.
func TestLeaseRunnerEndReleases(t *testing.T) {
	h := newLeaseHarness(t, nil)
	h.startRunning(t)
	h.cancel()
	h.event(t, "stop: "+whyEnded)
	<-h.done
	if got := h.leases.released.Load(); got != 1 {
		t.Errorf("got %d releases, want 1", got)
	}
}

// Work that cannot start gives the lease back: another controller may do
// better.
func TestLeaseReleasedWhenStartFails(t *testing.T) {
	h := newLeaseHarness(t, errors.New("no provider"))
	h.nextClaim(t).reply <- claimReply{held: true}
	h.event(t, "start")
	h.advance(time.Second)
	h.nextClaim(t) // the runner tries again after its poll
	if got := h.leases.released.Load(); got != 1 {
		t.Errorf("got %d releases, want 1", got)
	}
}
