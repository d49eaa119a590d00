package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// TestE2EExplainQuarantineBreaker runs R6–R8 and Z7 through the CLI on a
// real controller: a machine that failed over from a full zone is
// explained, the zone shows the blocked shape, an unknown instance is
// quarantined, listed, restored; then too many unknown instances at once
// trip the breaker, which status shows.
func TestE2EExplainQuarantineBreaker(t *testing.T) {
	tc := startController(t, "")
	tc.ok("sim", "set-zone", "b", "--capacity", "0")
	tc.ok("model-config", "retry-delay=50ms")
	tc.ok("add-machine", "-n", "3", "--constraints", "cores=2", "--wait")
	failedOver := ""
	for id := range tc.status().Machines {
		var e api.Explanation
		if err := json.Unmarshal([]byte(tc.ok("explain", id, "--format", "json")), &e); err != nil {
			t.Fatal(err)
		}
		if n := len(e.Attempts); n >= 2 && e.Attempts[0].Zone == "b" && e.Attempts[0].ErrorKind == "capacity" && e.Attempts[n-1].Instance != "" {
			failedOver = id
		}
	}
	if failedOver == "" {
		t.Fatal("no machine's explanation shows a capacity failure in b and a start elsewhere")
	}
	text := tc.ok("explain", failedOver)
	for _, want := range []string{"chose zone b", "error (capacity)", "retrying in another zone", "started instance"} {
		if !strings.Contains(text, want) {
			t.Errorf("explain %s lacks %q:\n%s", failedOver, want, text)
		}
	}
	if out := tc.ok("zones"); !strings.Contains(out, "arch=amd64 cores=2 until") {
		t.Errorf("zones does not show b blocked for cores=2:\n%s", out)
	}

	unknown := strings.TrimSpace(tc.ok("sim", "add-instance", "--zone", "a"))
	tc.ok("model-config", "harvest-mode=unknown", "harvest-min-age=0s", "harvest-quarantine=1h", "resync-interval=1s")
	state := func(id string) string {
		for _, i := range tc.simInstances() {
			if i.ID == id {
				return i.State
			}
		}
		return "gone"
	}
	testutil.Eventually(t, "unknown instance quarantined", func() bool { return state(unknown) == "stopped" })
	if out := tc.ok("harvest", "--plan"); !strings.Contains(out, unknown) || !strings.Contains(out, "quarantined since") {
		t.Errorf("harvest --plan does not list %s as quarantined:\n%s", unknown, out)
	}
	if out := tc.ok("harvest", "--restore", unknown); !strings.Contains(out, "restored") {
		t.Errorf("harvest --restore printed %q", out)
	}
	testutil.Eventually(t, "restored instance running", func() bool { return state(unknown) == "running" })
	if code, _, errOut := tc.cli("harvest", "--restore", unknown); code != 1 || !strings.Contains(errOut, "not quarantined") {
		t.Errorf("second restore: exit %d, stderr %q; want 1, not quarantined", code, errOut)
	}
	if code, _, _ := tc.cli("harvest"); code != 2 {
		t.Errorf("harvest without --plan or --restore: exit %d, want 2", code)
	}

	// Five unknown at once beside three machines and the restored one.
	tc.ok("model-config", "harvest-mode=none")
	var more []string
	for range 5 {
		more = append(more, strings.TrimSpace(tc.ok("sim", "add-instance")))
	}
	tc.ok("model-config", "harvest-mode=unknown")
	testutil.Eventually(t, "status shows the breaker", func() bool {
		return strings.Contains(tc.ok("status"), "harvest: harvest breaker: 5 of 9 live instances are unknown")
	})
	for _, id := range append(more, unknown) {
		if s := state(id); s != "running" {
			t.Errorf("instance %s is %s, want running: the breaker holds every unknown instance", id, s)
		}
	}
}
