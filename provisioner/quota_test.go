package provisioner_test

import (
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

// TestQuotaIsRegionWide: a used-up quota fails in every zone, so the
// engine neither walks the zones (each attempt is used up, no zone is
// marked failed or blocked) nor gives up for good: the machine ends in a
// provisioning error that is retried automatically once the quota allows.
func TestQuotaIsRegionWide(t *testing.T) {
	t.Parallel()
	h := newHarness(t, withSettings(func(s *muster.Settings) { s.RetryCount = 1 }))
	// A foreign instance uses the region's only vCPU.
	if _, err := h.cloud.CreateInstance(sim.NewInstance{Zone: "a"}); err != nil {
		t.Fatal(err)
	}
	h.cloud.SetFaults(sim.Faults{QuotaVCPUs: 1})
	h.start()
	h.add(1, muster.MachineTemplate{})
	h.waitFor("first start", func() bool { return len(h.prov.startCalls()) == 1 })
	h.waitFor("retry message", func() bool { return strings.Contains(h.machine("0").InstanceMessage, "retrying in") })
	if msg := h.machine("0").InstanceMessage; strings.Contains(msg, "another zone") {
		t.Fatalf("got %q, want the quota error to use up an attempt, not try another zone", msg)
	}
	h.waitTimers(2)
	h.clock.Advance(h.model.Settings.RetryDelay * 6 / 5)
	h.waitFor("provisioning error", h.instStatus("0", muster.InstanceProvisioningError))
	if got := len(h.prov.startCalls()); got != 2 {
		t.Fatalf("got %d StartInstance calls, want 2 (one per attempt, no zone walk)", got)
	}
	m := h.machine("0")
	if !strings.Contains(m.InstanceMessage, "quota") || m.NextRetry.IsZero() {
		t.Fatalf("got %q (next retry %v), want the quota cause and an automatic retry", m.InstanceMessage, m.NextRetry)
	}
	h.cloud.SetFaults(sim.Faults{})
	h.clock.Advance(m.NextRetry.Sub(h.clock.Now()))
	h.waitFor("machine 0 running once the quota allows", h.running("0"))
}
