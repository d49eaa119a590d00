package provisioner

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
)

func TestLimiterAdapts(t *testing.T) {
	clk := fakeclock.New(time.Unix(1000, 0))
	l := newLimiter(clk, 100, 10)
	steps := []struct {
		name string
		do   func()
		want float64
	}{
		{"configured", func() {}, 100},
		{"throttle with no accepted rate to go by halves", l.throttled, 50},
		{"second throttle in the window is ignored", l.throttled, 50},
		{"throttle after the window halves again", func() { clk.Advance(cutWindow); l.throttled() }, 25},
		{"success raises by a 500th of the configured rate", l.succeeded, 25.2},
		{"reconfigure keeps a reduced rate", func() { l.configure(200, 10) }, 25.2},
		{"reconfigure below the current rate", func() { l.configure(20, 10) }, 20},
	}
	for _, st := range steps {
		st.do()
		if got := l.rateNow(); got < st.want-1e-9 || got > st.want+1e-9 {
			t.Errorf("%s: got rate %v, want %v", st.name, got, st.want)
		}
	}
	for i := 0; i < 100; i++ {
		clk.Advance(cutWindow)
		l.throttled()
	}
	if got := l.rateNow(); got != 20.0/64 {
		t.Errorf("got rate %v after many throttles, want the floor %v", got, 20.0/64)
	}
}

// TestLimiterLearnsAcceptedRate: a cloud that accepts 50 calls a second
// and throttles the rest brings a limiter configured for 100 down to just
// above 50, and keeps it there however often it throttles: never below
// what the cloud accepts (no idle gaps), never back at 100.
func TestLimiterLearnsAcceptedRate(t *testing.T) {
	clk := fakeclock.New(time.Unix(1000, 0))
	l := newLimiter(clk, 100, 20)
	accept := func(d time.Duration) { // successes at 50 a second for d
		for i := time.Duration(0); i < d; i += 20 * time.Millisecond {
			clk.Advance(20 * time.Millisecond)
			l.succeeded()
		}
	}
	accept(time.Second)
	l.throttled()
	if got := l.rateNow(); got < 50 || got > 60 {
		t.Fatalf("got rate %v after the first throttle, want between the accepted 50 and 60", got)
	}
	for i := 0; i < 40; i++ {
		accept(cutWindow)
		l.throttled()
		if got := l.rateNow(); got < 50 || got > 60 {
			t.Fatalf("window %d: got rate %v, want between the accepted 50 and 60", i, got)
		}
	}
}

func TestThrottleDelay(t *testing.T) {
	tests := []struct {
		name string
		n    int
		rate float64
		want time.Duration
	}{
		{"first retry waits one call's turn", 0, 50, 20 * time.Millisecond},
		{"quick retries at most 100ms", 1, 2, 100 * time.Millisecond},
		{"no rate", 0, 0, 100 * time.Millisecond},
		{"backs off after the quick retries", quickThrottleRetries, 50, 100 * time.Millisecond},
		{"doubling", quickThrottleRetries + 2, 50, 400 * time.Millisecond},
		{"capped", 40, 50, 5 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := throttleDelay(tt.n, tt.rate); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestLimiterWaitsOnTheClock(t *testing.T) {
	clk := fakeclock.New(time.Unix(1000, 0))
	l := newLimiter(clk, 1, 1)
	ctx := t.Context()
	if err := l.wait(ctx); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- l.wait(ctx) }()
	<-clk.WaitForTimers(1)
	select {
	case <-done:
		t.Fatal("second call went through at once, want it to wait for a token")
	default:
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	go func() { done <- l.wait(cctx) }()
	<-clk.WaitForTimers(1)
	cancel()
	if err := <-done; err == nil {
		t.Errorf("got nil from a cancelled wait, want the context error")
	}
}

func TestZoneSpecific(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"capacity", muster.NewProviderError(muster.ErrCapacity, "a", "full"), true},
		{"unavailable in a zone", muster.NewProviderError(muster.ErrUnavailable, "a", "zone down"), true},
		{"unavailable, no zone", muster.NewProviderError(muster.ErrUnavailable, "", "try later"), false},
		{"zone-independent", muster.NewProviderError(muster.ErrZoneIndependent, "", "no image"), false},
		{"throttled", muster.NewProviderError(muster.ErrThrottled, "", "slow down"), false},
		{"unclassified", errors.New("boom"), true},
		{"wrapped capacity", fmt.Errorf("start: %w", muster.NewProviderError(muster.ErrCapacity, "b", "full")), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := zoneSpecific(tt.err); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
