package provisioner

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/musterhq/muster"
)

// limiter is the model's client-side token bucket for provider calls (E2).
// It starts at the configured rate and learns the rate the cloud
// sustains, so that it keeps the cloud's bucket saturated without idle
// gaps and without a storm of throttled calls:
//
//   - a throttled call cuts the rate, at most once per cutWindow (the
//     many calls in flight when the cloud starts throttling cut it once).
//     The cut goes to the rate the cloud has been accepting calls at over
//     the last estWindow (times a little headroom), never below that
//     accepted rate, so the bucket stays saturated; without enough recent
//     successes to measure it, the rate is halved instead. The rate never
//     goes below 1/64 of the configured rate.
//   - every success raises the rate additively by a 500th of the
//     configured rate, back up to it: the limiter keeps probing for more.
//
// Time comes from the clock.
type limiter struct {
	clock muster.Clock
	mu    sync.Mutex
	lim   *rate.Limiter
	want  rate.Limit // configured rate
	cur   rate.Limit
	cut   time.Time // last cut
	// ok holds the times of the latest successes, a ring.
	ok  [estRing]time.Time
	okN int // successes recorded, in total
}

const (
	// cutWindow is the least time between two cuts of the rate.
	cutWindow = 500 * time.Millisecond
	// estWindow is how far back the accepted rate is measured.
	estWindow = time.Second
	// estMinSpan and estMinCalls are the least span and number of
	// successes that make a measure; a shorter one (the first moments of
	// a burst) says more about the cloud's burst than about its rate.
	estMinSpan  = 250 * time.Millisecond
	estMinCalls = 5
	estRing     = 128
	// headroom is how much above the accepted rate a cut leaves the
	// limiter, so that it keeps probing.
	headroom = 1.1
)

func newLimiter(clock muster.Clock, perSecond float64, burst int) *limiter {
	l := &limiter{clock: clock}
	l.lim = rate.NewLimiter(rate.Limit(perSecond), max(burst, 1))
	l.want = rate.Limit(perSecond)
	l.cur = l.want
	return l
}

// configure applies new settings, keeping a reduced rate reduced.
func (l *limiter) configure(perSecond float64, burst int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if l.cur >= l.want || rate.Limit(perSecond) < l.cur {
		l.cur = rate.Limit(perSecond)
	}
	l.want = rate.Limit(perSecond)
	l.lim.SetLimitAt(now, l.cur)
	l.lim.SetBurstAt(now, max(burst, 1))
}

// wait blocks until a call may be made or ctx ends.
func (l *limiter) wait(ctx context.Context) error {
	l.mu.Lock()
	now := l.clock.Now()
	r := l.lim.ReserveN(now, 1)
	l.mu.Unlock()
	if !r.OK() {
		return muster.Errorf(muster.EInternal, "rate limiter refuses a call")
	}
	d := r.DelayFrom(now)
	if d <= 0 {
		return nil
	}
	t := l.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C():
		return nil
	case <-ctx.Done():
		l.mu.Lock()
		r.CancelAt(l.clock.Now())
		l.mu.Unlock()
		return ctx.Err()
	}
}

// accepted returns the rate at which calls succeeded over the last
// estWindow, and false when there are too few of them to tell.
// l.mu is held.
func (l *limiter) accepted(now time.Time) (rate.Limit, bool) {
	n := 0
	var first time.Time
	for i := 0; i < min(l.okN, estRing); i++ {
		t := l.ok[(l.okN-1-i)%estRing]
		if now.Sub(t) > estWindow {
			break
		}
		n, first = n+1, t
	}
	span := now.Sub(first)
	if n < estMinCalls || span < estMinSpan {
		return 0, false
	}
	return rate.Limit(float64(n) / span.Seconds()), true
}

// throttled slows the bucket down after the cloud throttled a call.
func (l *limiter) throttled() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if !l.cut.IsZero() && now.Sub(l.cut) < cutWindow {
		return
	}
	l.cut = now
	next := l.cur / 2
	if acc, ok := l.accepted(now); ok {
		// Down towards what the cloud accepts, but never below it: the
		// calls made at that rate go through.
		next = max(min(l.cur*0.9, acc*headroom), min(acc, l.cur))
	}
	l.cur = max(next, l.want/64)
	l.lim.SetLimitAt(now, l.cur)
}

// succeeded notes a successful call and speeds the bucket up again after
// a throttle.
func (l *limiter) succeeded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	l.ok[l.okN%estRing] = now
	l.okN++
	if l.cur >= l.want {
		return
	}
	l.cur = min(l.want, l.cur+l.want/500)
	l.lim.SetLimitAt(now, l.cur)
}

// rateNow returns the current rate.
func (l *limiter) rateNow() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return float64(l.cur)
}

// throttleDelay is the wait before a call throttled n+1 times in a row is
// made again, before jitter. The first retries wait about one call's
// turn at the current rate (they then queue in the limiter again, so the
// cloud's bucket is kept busy and no gap opens); a call that keeps being
// throttled backs off from 100ms, doubling up to 5s.
func throttleDelay(n int, perSecond float64) time.Duration {
	if n < quickThrottleRetries {
		if perSecond <= 0 {
			return 100 * time.Millisecond
		}
		return min(time.Duration(float64(time.Second)/perSecond), 100*time.Millisecond)
	}
	d := 100 * time.Millisecond
	for i := quickThrottleRetries; i < n && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}

// quickThrottleRetries is how many times in a row a throttled call is
// made again without backing off.
const quickThrottleRetries = 3
