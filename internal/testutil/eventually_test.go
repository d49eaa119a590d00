package testutil

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestEventuallyWaitsForTheCondition(t *testing.T) {
	var n atomic.Int32
	go func() {
		for i := 0; i < 5; i++ {
			n.Add(1)
		}
	}()
	Eventually(t, "five increments", func() bool { return n.Load() == 5 })
}

// fakeTB records a Fatalf instead of ending the test.
type fakeTB struct {
	testing.TB
	failed string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed = format
	panic(f)
}

func TestEventuallyFailsWhenTheConditionNeverHolds(t *testing.T) {
	f := &fakeTB{TB: t}
	func() {
		defer func() {
			if r := recover(); r != f {
				t.Fatalf("got panic %v, want the fake's Fatalf", r)
			}
		}()
		EventuallyWithin(f, 20*time.Millisecond, "never", func() bool { return false })
	}()
	if f.failed == "" {
		t.Fatal("Eventually returned without failing for a condition that never held")
	}
}
