package main

import (
	"context"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/musterhq/muster/internal/testutil"
)

// TestDashboardShowsRemediationPaused: with 3 of a group's 4 agents
// stopped, the dashboard shows the group's breaker open (R3) without a
// reload (MUSTER_TEST_BROWSER=1).
func TestDashboardShowsRemediationPaused(t *testing.T) {
	tc, ctx := openDashboard(t)
	tc.ok("model-config", "unhealthy-after=1s", "agent-heartbeat=200ms")
	tc.ok("add-machine", "-n", "4", "--group", "g", "--wait")
	testutil.Eventually(t, "4 machines started", func() bool { return startedOn(tc.status(), tc.simInstances()) })
	for _, id := range []string{"0", "1", "2"} {
		tc.ok("sim", "faults", "--stop-agent", tc.status().Machines[id].InstanceID)
	}
	want := "group g: remediation paused: 3 of 4 unhealthy"
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`!document.getElementById('remediation').hidden &&
		document.getElementById('remediation').textContent === '`+want+`'`)); err != nil {
		text, _ := chromedp.Run(context.Background(), chromedp.Text(chromedp.CSS(`main`)))
		t.Fatalf("waiting for %q: %v; page:\n%s", want, err, text)
	}
	if out := tc.ok("status"); !strings.Contains(out, want) {
		t.Fatalf("status lacks %q:\n%s", want, out)
	}
}

// TestDashboardShowsReplacement: while a machine is replaced (R1, starts
// slowed to 2s), its tile names the reason (MUSTER_TEST_BROWSER=1).
func TestDashboardShowsReplacement(t *testing.T) {
	tc, ctx := openDashboard(t)
	tc.ok("model-config", "registration-timeout=2s")
	tc.ok("sim", "faults", "--agent-boot-failure-rate", "1")
	tc.ok("add-machine", "--wait")
	tc.ok("sim", "faults", "--latency", "2s")
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`[...document.querySelectorAll('#zones .tile .trepl')].some(e => e.textContent === '⟳ registration-timeout')`)); err != nil {
		text, _ := chromedp.Run(context.Background(), chromedp.Text(chromedp.CSS(`main`)))
		t.Fatalf("waiting for a tile marked as replaced: %v; page:\n%s", err, text)
	}
}
