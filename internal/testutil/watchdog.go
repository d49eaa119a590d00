package testutil

import (
	"context"
	"fmt"
	"os"
	"time"
)

// Watchdog pings an outside service the tests depend on every interval
// (each ping given timeout) and, when two pings in a row fail, prints why
// and exits the test binary with status 1: a wedged daemon then ends the
// run in about a minute instead of leaving every test to its own
// timeouts. It returns a function that stops the watch.
//
// When MUSTER_TEST_WATCHDOG_FILE names a file, the reason is also written
// there: CI tells a run the watchdog ended (the daemon's fault) from one
// whose tests failed.
func Watchdog(what string, interval, timeout time.Duration, ping func(ctx context.Context) error) (stop func()) {
	return watch(what, interval, timeout, ping, func(msg string) {
		fmt.Fprintln(os.Stderr, msg)
		if err := recordWatchdog(msg); err != nil {
			fmt.Fprintln(os.Stderr, "watchdog:", err)
		}
		os.Exit(1)
	})
}

// recordWatchdog writes msg to MUSTER_TEST_WATCHDOG_FILE, when set.
func recordWatchdog(msg string) error {
	f := os.Getenv("MUSTER_TEST_WATCHDOG_FILE")
	if f == "" {
		return nil
	}
	return os.WriteFile(f, []byte(msg+"\n"), 0o644)
}

func watch(what string, interval, timeout time.Duration, ping func(ctx context.Context) error, fail func(msg string)) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(interval)
		defer t.Stop()
		misses := 0
		for {
			select {
			case <-done:
				return
			case <-t.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), timeout)
			err := ping(ctx)
			cancel()
			if err == nil {
				misses = 0
				continue
			}
			if misses++; misses == 2 {
				fail(fmt.Sprintf("watchdog: %s did not answer twice in a row (%v); stopping the tests", what, err))
				return
			}
		}
	}()
	return func() { close(done) }
}
