package muster_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/fakeclock"
)

func TestSleep(t *testing.T) {
	clk := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	done := make(chan error, 1)
	go func() { done <- muster.Sleep(context.Background(), clk, time.Minute) }()
	<-clk.WaitForTimers(1)
	clk.Advance(59 * time.Second)
	select {
	case err := <-done:
		t.Fatalf("woke after 59s of a 1m sleep: %v", err)
	default:
	}
	clk.Advance(time.Second)
	if err := <-done; err != nil {
		t.Fatalf("got %v, want nil", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- muster.Sleep(ctx, clk, time.Hour) }()
	<-clk.WaitForTimers(1)
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if clk.Timers() != 0 {
		t.Errorf("a cancelled sleep left %d timers", clk.Timers())
	}
	if err := muster.Sleep(ctx, clk, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("zero sleep on a done ctx: got %v", err)
	}
}
