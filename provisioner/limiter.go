package provisioner

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/musterhq/muster"
)

// limiter is the model's client-side token bucket for provider calls (E2).
// It is adaptive: a throttled call halves the rate (down to a floor of
// 1/64 of the configured rate), at most once per cutWindow so that the
// many calls in flight when the cloud starts throttling cut it once, not
// once each; every success raises it by a tenth, back up to the
// configured rate. Time comes from the clock.
type limiter struct {
	clock muster.Clock
	mu    sync.Mutex
	lim   *rate.Limiter
	want  rate.Limit // configured rate
	cur   rate.Limit
	cut   time.Time // last cut
}

// cutWindow is the least time between two cuts of the rate.
const cutWindow = time.Second

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

// throttled slows the bucket down after the cloud throttled a call.
func (l *limiter) throttled() {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.clock.Now()
	if !l.cut.IsZero() && now.Sub(l.cut) < cutWindow {
		return
	}
	l.cut = now
	l.cur = max(l.cur/2, l.want/64)
	l.lim.SetLimitAt(now, l.cur)
}

// succeeded speeds the bucket up again after a throttle.
func (l *limiter) succeeded() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cur >= l.want {
		return
	}
	l.cur = min(l.want, l.cur*1.1)
	l.lim.SetLimitAt(l.clock.Now(), l.cur)
}

// rateNow returns the current rate.
func (l *limiter) rateNow() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return float64(l.cur)
}

// throttleDelay is the wait before a throttled call is made again: 100ms
// doubling per throttle of the same call, up to 5s, before jitter.
func throttleDelay(n int) time.Duration {
	d := 100 * time.Millisecond
	for i := 0; i < n && d < 5*time.Second; i++ {
		d *= 2
	}
	return min(d, 5*time.Second)
}
