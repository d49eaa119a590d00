// Package testutil holds the few helpers every package's tests share:
// waiting for an observable condition instead of sleeping.
package testutil

import (
	"testing"
	"time"
)

// Timeout bounds every Eventually. It only guards against a hang: a test
// that passes never waits for it.
const Timeout = 30 * time.Second

// Eventually polls cond until it holds, and fails tb if it has not held
// within Timeout. what names the condition in the failure message.
func Eventually(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	EventuallyWithin(tb, Timeout, what, cond)
}

// EventuallyWithin is Eventually with its own bound, for conditions
// (whole fleets converging, processes restarting) that take longer.
func EventuallyWithin(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(d)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(wait)
		if wait < 50*time.Millisecond {
			wait *= 2
		}
	}
}
