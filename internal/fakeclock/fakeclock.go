// Package fakeclock is a manual muster.Clock for tests: time stands still
// until the test calls Advance, and timers fire as time passes them.
package fakeclock

import (
	"sort"
	"sync"
	"time"

	"github.com/musterhq/muster"
)

var _ muster.Clock = (*Clock)(nil)

// Clock is a fake clock. It is safe for concurrent use.
type Clock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []*timer
	waiters []waiter
}

type waiter struct {
	n  int
	ch chan struct{}
}

// New returns a clock set to start.
func New(start time.Time) *Clock { return &Clock{now: start} }

// Now returns the fake time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives once the clock has moved d on.
func (c *Clock) After(d time.Duration) <-chan time.Time { return c.NewTimer(d).C() }

// NewTimer returns a timer that fires once the clock has moved d on.
func (c *Clock) NewTimer(d time.Duration) muster.Timer {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &timer{c: c, ch: make(chan time.Time, 1)}
	c.schedule(t, d)
	return t
}

// schedule arms t; c.mu is held.
func (c *Clock) schedule(t *timer, d time.Duration) {
	t.when = c.now.Add(d)
	if d <= 0 {
		t.fire(c.now)
		return
	}
	t.active = true
	c.timers = append(c.timers, t)
	c.notifyWaiters()
}

// Advance moves the clock on by d, firing every timer due on the way in
// time order.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	end := c.now.Add(d)
	for {
		sort.Slice(c.timers, func(i, j int) bool { return c.timers[i].when.Before(c.timers[j].when) })
		if len(c.timers) == 0 || c.timers[0].when.After(end) {
			break
		}
		t := c.timers[0]
		c.timers = c.timers[1:]
		if t.when.After(c.now) {
			c.now = t.when
		}
		t.active = false
		t.fire(c.now)
	}
	c.now = end
}

// Timers returns how many timers are waiting to fire.
func (c *Clock) Timers() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.timers)
}

// WaitForTimers returns a channel closed once at least n timers are
// waiting, so a test can advance the clock only after the code under test
// has started to wait.
func (c *Clock) WaitForTimers(n int) <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan struct{})
	c.waiters = append(c.waiters, waiter{n, ch})
	c.notifyWaiters()
	return ch
}

func (c *Clock) notifyWaiters() {
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if len(c.timers) >= w.n {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	c.waiters = kept
}

func (c *Clock) remove(t *timer) bool {
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

type timer struct {
	c      *Clock
	ch     chan time.Time
	when   time.Time
	active bool
}

func (t *timer) fire(now time.Time) {
	select {
	case t.ch <- now:
	default:
	}
}

func (t *timer) C() <-chan time.Time { return t.ch }

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.active = false
	t.c.remove(t)
	return was
}

func (t *timer) Reset(d time.Duration) bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	was := t.active
	t.c.remove(t)
	t.active = false
	t.c.schedule(t, d)
	return was
}
