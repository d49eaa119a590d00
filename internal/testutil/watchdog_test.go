package testutil

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWatchdogFailsAfterTwoMissesInARow(t *testing.T) {
	var pings atomic.Int32
	failed := make(chan string, 1)
	// Answers, misses, answers, then misses for good: only the second
	// pair of misses in a row ends the run.
	stop := watch("the daemon", time.Millisecond, time.Second, func(ctx context.Context) error {
		switch n := pings.Add(1); {
		case n == 2 || n >= 4:
			return errors.New("no answer")
		}
		return nil
	}, func(msg string) { failed <- msg })
	defer stop()
	select {
	case msg := <-failed:
		if n := pings.Load(); n != 5 {
			t.Errorf("failed after %d pings, want 5", n)
		}
		if !strings.Contains(msg, "the daemon did not answer twice in a row (no answer)") {
			t.Errorf("message %q", msg)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the watchdog never failed")
	}
}

func TestWatchdogQuietWhileAnswered(t *testing.T) {
	var pings atomic.Int32
	stop := watch("the daemon", time.Millisecond, time.Second, func(ctx context.Context) error {
		pings.Add(1)
		return nil
	}, func(msg string) { t.Errorf("failed: %s", msg) })
	Eventually(t, "20 pings", func() bool { return pings.Load() >= 20 })
	stop()
}

func TestWatchdogRecordsWhy(t *testing.T) {
	f := filepath.Join(t.TempDir(), "watchdog")
	t.Setenv("MUSTER_TEST_WATCHDOG_FILE", "")
	if err := recordWatchdog("ignored"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(f); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("unset: file %v", err)
	}
	t.Setenv("MUSTER_TEST_WATCHDOG_FILE", f)
	if err := recordWatchdog("the daemon did not answer"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(f); err != nil || string(b) != "the daemon did not answer\n" {
		t.Fatalf("recorded %q, %v", b, err)
	}
}
