package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// startedOn reports whether every machine of st is started on a running
// instance and the sim has exactly one instance for each.
func startedOn(st api.StatusScript, insts []simInstanceJSON) bool {
	per := map[string]int{}
	for _, i := range insts {
		per[i.Machine]++
	}
	for id, m := range st.Machines {
		if m.Status != "started" || m.InstanceStatus != "running" || per[id] != 1 {
			return false
		}
	}
	return len(per) == len(st.Machines)
}

// TestE2ERebalance is issue 17's second Done-when: 6 machines of a group
// converged 3/3 over a, b with c unavailable; c comes back; rebalance
// --plan lists 2 moves and changes nothing; rebalance ends 2/2/2, and each
// moved machine's agent reported started on its new instance before the
// old instance was stopped.
func TestE2ERebalance(t *testing.T) {
	tc := startController(t, "")
	tc.ok("sim", "set-zone", "c", "--available=false")
	tc.ok("add-machine", "-n", "6", "--group", "g", "--wait")
	testutil.Eventually(t, "6 machines started", func() bool { return startedOn(tc.status(), tc.simInstances()) })
	before := tc.status()
	perZone := func(st api.StatusScript) map[string]int {
		out := map[string]int{}
		for _, m := range st.Machines {
			out[m.Zone]++
		}
		return out
	}
	if got := perZone(before); got["a"] != 3 || got["b"] != 3 {
		t.Fatalf("converged %v, want 3/3 over a, b", got)
	}
	tc.ok("sim", "set-zone", "c", "--available=true")
	out := tc.ok("rebalance", "--group", "g", "--plan")
	if !strings.Contains(out, "plan: 2 moves; nothing changed") || strings.Count(out, "→ c") != 2 {
		t.Fatalf("rebalance --plan printed:\n%s", out)
	}
	for id, m := range tc.status().Machines {
		if m.InstanceID != before.Machines[id].InstanceID {
			t.Fatalf("--plan changed machine %s's instance", id)
		}
	}
	if code, _, errOut := tc.cli("rebalance", "--group", "nope"); code != 1 || !strings.Contains(errOut, `group "nope" not found`) {
		t.Fatalf("unknown group: exit %d, stderr %q", code, errOut)
	}
	out = tc.ok("rebalance", "--group", "g")
	if !strings.Contains(out, "2 moves started") {
		t.Fatalf("rebalance printed:\n%s", out)
	}
	testutil.Eventually(t, "2/2/2, every machine started on one instance", func() bool {
		st := tc.status()
		z := perZone(st)
		return z["a"] == 2 && z["b"] == 2 && z["c"] == 2 && startedOn(st, tc.simInstances())
	})
	// Launch before stop, from the record: for each moved machine, its
	// agent's "started" comes after the replacement began and before the
	// old instance was stopped.
	evs, err := tc.client().Events(context.Background(), "default", api.EventQuery{})
	if err != nil {
		t.Fatal(err)
	}
	moved := 0
	for id, m := range tc.status().Machines {
		if m.InstanceID == before.Machines[id].InstanceID {
			continue
		}
		moved++
		replace, started, replaced := -1, -1, -1
		for i, e := range evs {
			switch {
			case e.Machine != id:
			case e.Kind == "replace" && strings.Contains(e.Message, "rebalance"):
				replace = i
			case e.Kind == "started" && replace >= 0 && replaced < 0:
				started = i
			case e.Kind == "replaced":
				replaced = i
			}
		}
		if !(replace >= 0 && replace < started && started < replaced) {
			t.Errorf("machine %s: events replace at %d, started at %d, replaced at %d: want in that order", id, replace, started, replaced)
		}
	}
	if moved != 2 {
		t.Fatalf("%d machines moved, want 2", moved)
	}
}

// TestE2ERegistrationTimeout is issue 17's first Done-when: with every
// simulated agent failing to boot, after registration-timeout the first
// instance is replaced, and with boot failures back to 0 the machine ends
// started on a later instance.
func TestE2ERegistrationTimeout(t *testing.T) {
	tc := startController(t, "")
	tc.ok("model-config", "registration-timeout=3s")
	if out := tc.ok("sim", "agents", "--boot-failure-rate", "1"); !strings.Contains(out, "agent-boot-fail:  1") {
		t.Fatalf("sim faults printed:\n%s", out)
	}
	tc.ok("add-machine", "--wait=instances") // its agent never starts
	first := tc.status().Machines["0"].InstanceID
	testutil.Eventually(t, "the first instance replaced", func() bool {
		return strings.Contains(tc.ok("events", "--machine", "0"), "replacing instance "+first+": registration-timeout")
	})
	tc.ok("sim", "agents", "--boot-failure-rate", "0")
	testutil.Eventually(t, "machine 0 started on a second instance", func() bool {
		st := tc.status()
		m := st.Machines["0"]
		return m.InstanceID != first && startedOn(st, tc.simInstances())
	})
	out := tc.ok("events", "--machine", "0")
	if !strings.Contains(out, "replacing instance "+first+": registration-timeout") || !strings.Contains(out, first+" stopped, replaced by") {
		t.Fatalf("events lack the replacement:\n%s", out)
	}
	// muster explain (R8) says why the first instance was replaced.
	out = tc.ok("explain", "0")
	if !strings.Contains(out, "replace at ") || !strings.Contains(out, "replacing instance "+first+": registration-timeout") ||
		!strings.Contains(out, "replaced at ") {
		t.Fatalf("explain lacks the replacement:\n%s", out)
	}
}

// TestE2EDrift is issue 17's third Done-when: a group's constraints change
// from cores=2 to cores=4; apply --dry-run names the drifted machines and
// changes nothing; apply records the template and leaves the machines
// running as they are; apply --replace ends with every machine of the
// group started on one instance with at least 4 cores.
func TestE2EDrift(t *testing.T) {
	tc := startController(t, "")
	dir := t.TempDir()
	write := func(name, cons string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("groups:\n  - name: g\n    count: 3\n    constraints: "+cons+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	v1, v2 := write("v1.yaml", "cores=2"), write("v2.yaml", "cores=4")
	tc.ok("apply", "-f", v1, "--wait")
	testutil.Eventually(t, "3 machines started", func() bool { return startedOn(tc.status(), tc.simInstances()) })
	before := tc.status()

	out := tc.ok("apply", "-f", v2, "--dry-run")
	if !strings.Contains(out, "group g: 3 machines drifted (cores=2 → cores=4): running machines stay as they are") || !strings.Contains(out, "dry run") {
		t.Fatalf("apply --dry-run printed:\n%s", out)
	}
	for id, m := range tc.status().Machines {
		if m.Constraints != "cores=2" || m.InstanceID != before.Machines[id].InstanceID {
			t.Fatalf("dry run changed machine %s: %+v", id, m)
		}
	}
	tc.ok("apply", "-f", v2)
	for id, m := range tc.status().Machines {
		if m.Constraints != "cores=4" || m.InstanceID != before.Machines[id].InstanceID {
			t.Fatalf("apply without --replace: machine %s constraints %q instance %s, want cores=4 on the same instance", id, m.Constraints, m.InstanceID)
		}
	}
	out = tc.ok("apply", "-f", v2, "--dry-run")
	if !strings.Contains(out, "group g: 3 machines drifted (instance ") || !strings.Contains(out, "cores=2") {
		t.Fatalf("apply --dry-run after the template was recorded printed:\n%s", out)
	}
	out = tc.ok("apply", "-f", v2, "--replace")
	if !strings.Contains(out, "replaced as a rolling update") {
		t.Fatalf("apply --replace printed:\n%s", out)
	}
	testutil.Eventually(t, "every machine started on a cores=4 instance", func() bool {
		st := tc.status()
		for _, m := range st.Machines {
			if !strings.Contains(m.Hardware, "cores=4") {
				return false
			}
		}
		return startedOn(st, tc.simInstances())
	})
	if out := tc.ok("apply", "-f", v2, "--dry-run"); strings.Contains(out, "drifted") {
		t.Fatalf("still drifted after --replace:\n%s", out)
	}
}

// TestE2EUnhealthyAfterStopAgent: a started machine whose agent the sim
// stops goes down and, after unhealthy-after, is replaced once (R2).
func TestE2EUnhealthyAfterStopAgent(t *testing.T) {
	tc := startController(t, "")
	tc.ok("model-config", "unhealthy-after=1s", "agent-heartbeat=200ms")
	tc.ok("add-machine", "-n", "2", "--wait")
	testutil.Eventually(t, "2 machines started", func() bool { return startedOn(tc.status(), tc.simInstances()) })
	first := tc.status().Machines["1"].InstanceID
	if code, _, errOut := tc.cli("sim", "agents", "--stop", "i-nope"); code != 1 || !strings.Contains(errOut, "i-nope") {
		t.Fatalf("unknown instance: exit %d, stderr %q", code, errOut)
	}
	tc.ok("sim", "faults", "--stop-agent", first)
	testutil.Eventually(t, "machine 1 started on a new instance", func() bool {
		st := tc.status()
		return st.Machines["1"].InstanceID != first && startedOn(st, tc.simInstances())
	})
	out := tc.ok("events", "--machine", "1")
	if !strings.Contains(out, "replacing instance "+first+": unhealthy") || strings.Count(out, "replacing instance") != 1 {
		t.Fatalf("events of machine 1:\n%s", out)
	}
}
