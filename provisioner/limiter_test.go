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
		{"throttle halves", l.throttled, 50},
		{"second throttle in the window is ignored", l.throttled, 50},
		{"throttle after the window halves again", func() { clk.Advance(cutWindow); l.throttled() }, 25},
		{"success raises by a tenth", l.succeeded, 27.5},
		{"reconfigure keeps a reduced rate", func() { l.configure(200, 10) }, 27.5},
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
