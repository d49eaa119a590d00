package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// TestLoggerSummarisesRepeats: the controller's and agent's logger lets a
// burst of one repeated error through and holds back the rest.
func TestLoggerSummarisesRepeats(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		var buf bytes.Buffer
		log, err := newLogger(&buf, format, slog.LevelInfo)
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 1000; i++ {
			log.Error("list instances", "err", "throttled")
		}
		if n := strings.Count(buf.String(), "list instances"); n == 0 || n > 10 {
			t.Fatalf("%s: 1000 repeats of one error gave %d lines, want a few", format, n)
		}
	}
	if _, err := newLogger(&bytes.Buffer{}, "xml", slog.LevelInfo); err == nil {
		t.Fatal("log format xml: got no error")
	}
}
