package controller

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster/auth"
)

// Simulated agents' routine lines stay out of the controller's log; their
// warnings and errors, with the agent's attributes, do not.
func TestSimAgentLogKeepsWarnings(t *testing.T) {
	var buf bytes.Buffer
	ca, err := auth.NewCA("test", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	s, err := newSimAgents(ProviderEnv{Logger: slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), CACert: ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close()
	log := s.agentLog.With("instance", "i-1").WithGroup("g")
	log.Info("agent logged in")
	log.Debug("detail")
	log.Warn("agent heartbeat failed", "err", "refused")
	log.Error("agent giving up")
	out := buf.String()
	if strings.Contains(out, "logged in") || strings.Contains(out, "detail") {
		t.Errorf("routine lines logged:\n%s", out)
	}
	if !strings.Contains(out, `msg="agent heartbeat failed" component=sim-agents instance=i-1 g.err=refused`) || !strings.Contains(out, "agent giving up") {
		t.Errorf("warning or error missing:\n%s", out)
	}
}
