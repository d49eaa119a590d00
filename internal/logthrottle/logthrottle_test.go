package logthrottle

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/internal/fakeclock"
)

func newLogger(buf *bytes.Buffer) (*slog.Logger, *Handler, *fakeclock.Clock) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	h := New(slog.NewTextHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}), Options{Window: 10 * time.Second, Burst: 3, Clock: clock})
	return slog.New(h), h, clock
}

func count(buf *bytes.Buffer, s string) int { return strings.Count(buf.String(), s) }

func TestRepeatedErrorsAreSummarised(t *testing.T) {
	var buf bytes.Buffer
	log, _, clock := newLogger(&buf)
	for i := 0; i < 1000; i++ {
		log.Error("start instance", "machine", i)
	}
	if got := count(&buf, `msg="start instance"`); got != 3 {
		t.Fatalf("records in the first window: got %d, want the burst of 3\n%s", got, buf.String())
	}
	clock.Advance(10 * time.Second)
	log.Error("start instance", "machine", 1000)
	if !strings.Contains(buf.String(), "… 997 more like this in the last 10s") || !strings.Contains(buf.String(), "suppressed=997") {
		t.Fatalf("no summary of the 997 suppressed records:\n%s", buf.String())
	}
	if got := count(&buf, `msg="start instance" machine=1000`); got != 1 {
		t.Fatalf("first record of the next window: got %d, want it let through", got)
	}
}

func TestKindsAreSeparate(t *testing.T) {
	var buf bytes.Buffer
	log, h, _ := newLogger(&buf)
	a, b := log.With("model", "a"), log.With("model", "b")
	for i := 0; i < 10; i++ {
		a.Warn("list instances")
		b.Warn("list instances")
		log.Error("list instances")  // another level is another kind
		log.Info("instance started") // info is never throttled
	}
	if got := count(&buf, "model=a"); got != 3 {
		t.Errorf("model a: got %d records, want 3", got)
	}
	if got := count(&buf, "model=b"); got != 3 {
		t.Errorf("model b: got %d records, want 3", got)
	}
	if got := count(&buf, "level=ERROR"); got != 3 {
		t.Errorf("errors: got %d, want 3", got)
	}
	if got := count(&buf, `msg="instance started"`); got != 10 {
		t.Errorf("info records: got %d, want all 10", got)
	}
	h.Flush(context.Background())
	if got := count(&buf, "… 7 more like this"); got != 3 {
		t.Fatalf("flushed summaries: got %d, want one per kind (3)\n%s", got, buf.String())
	}
	// A summary keeps the logger's attributes.
	if !strings.Contains(buf.String(), `model=a msg="list instances (… 7 more`) && !strings.Contains(buf.String(), `msg="list instances (… 7 more like this in the last 0s)" model=a`) {
		t.Fatalf("summary lost the model attribute:\n%s", buf.String())
	}
}

func TestQuietKindsAreNotSummarised(t *testing.T) {
	var buf bytes.Buffer
	log, h, clock := newLogger(&buf)
	log.Error("once")
	clock.Advance(time.Minute)
	log.Error("twice")
	h.Flush(context.Background())
	if strings.Contains(buf.String(), "more like this") {
		t.Fatalf("a summary with nothing suppressed:\n%s", buf.String())
	}
}
