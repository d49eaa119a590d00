package fakeclock

import (
	"testing"
	"time"
)

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func fired(ch <-chan time.Time) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestTimersFireInOrderOnAdvance(t *testing.T) {
	c := New(epoch)
	a := c.NewTimer(2 * time.Second)
	b := c.After(time.Second)
	c.Advance(999 * time.Millisecond)
	if fired(a.C()) || fired(b) {
		t.Fatal("a timer fired early")
	}
	c.Advance(time.Millisecond)
	if got := <-b; !got.Equal(epoch.Add(time.Second)) {
		t.Fatalf("got %v, want %v", got, epoch.Add(time.Second))
	}
	if fired(a.C()) {
		t.Fatal("2s timer fired at 1s")
	}
	c.Advance(time.Hour)
	if !fired(a.C()) {
		t.Fatal("2s timer did not fire")
	}
	if got, want := c.Now(), epoch.Add(time.Hour+time.Second); !got.Equal(want) {
		t.Fatalf("now %v, want %v", got, want)
	}
}

func TestStopAndReset(t *testing.T) {
	c := New(epoch)
	tm := c.NewTimer(time.Second)
	if !tm.Stop() {
		t.Fatal("Stop of an active timer returned false")
	}
	c.Advance(2 * time.Second)
	if fired(tm.C()) {
		t.Fatal("stopped timer fired")
	}
	tm.Reset(time.Second)
	if c.Timers() != 1 {
		t.Fatalf("got %d timers, want 1", c.Timers())
	}
	c.Advance(time.Second)
	if !fired(tm.C()) {
		t.Fatal("reset timer did not fire")
	}
}

func TestWaitForTimers(t *testing.T) {
	c := New(epoch)
	w := c.WaitForTimers(1)
	select {
	case <-w:
		t.Fatal("wait ended with no timers")
	default:
	}
	go c.After(time.Minute)
	<-w
}
