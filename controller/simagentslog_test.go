package controller

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
)

// Simulated agents' routine lines stay out of the controller's log; their
// warnings and errors, with the agent's attributes, do not.
func TestSimAgentLogKeepsWarnings(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(warnings{slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})}).With("instance", "i-1").WithGroup("g")
	log.Info("agent logged in")
	log.Debug("detail")
	log.Warn("agent heartbeat failed", "err", "refused")
	log.Error("agent giving up")
	out := buf.String()
	if strings.Contains(out, "logged in") || strings.Contains(out, "detail") {
		t.Errorf("routine lines logged:\n%s", out)
	}
	if !strings.Contains(out, `msg="agent heartbeat failed" instance=i-1 g.err=refused`) || !strings.Contains(out, "agent giving up") {
		t.Errorf("warning or error missing:\n%s", out)
	}
}
