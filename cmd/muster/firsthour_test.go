package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/internal/testutil"
)

// cancelOnWrite cancels a context at the first write: the CLI printed the
// new machines' ids and is waiting, as when Ctrl-C comes then.
type cancelOnWrite struct {
	bytes.Buffer
	cancel context.CancelFunc
}

func (w *cancelOnWrite) Write(p []byte) (int, error) {
	w.cancel()
	return w.Buffer.Write(p)
}

// The waits of add-machine: both phases labelled, back only once the
// agents have started (or the instances run, with --wait=instances),
// failing fast on a provisioning error, and saying on Ctrl-C that the
// machines keep provisioning.
func TestE2EAddMachineWait(t *testing.T) {
	tc := startController(t, "")
	code, out, errOut := tc.cli("add-machine", "-n", "3", "--constraints", "mem=4GB", "--wait")
	if code != 0 || len(lines(out)) != 3 {
		t.Fatalf("add-machine --wait: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if !strings.Contains(errOut, "provisioning 3/3: instances 3/3 running · agents 3/3 started") {
		t.Errorf("add-machine --wait progress lacks both phases done:\n%s", errOut)
	}
	for id, m := range tc.status().Machines {
		if m.Status != string(muster.StatusStarted) || m.Constraints != "mem=4G" {
			t.Errorf("machine %s after --wait: status %s constraints %q, want started and mem=4G", id, m.Status, m.Constraints)
		}
	}
	tc.ok("model-config", "sim-agents=false")
	code, out, errOut = tc.cli("add-machine", "--wait=instances")
	if code != 0 || strings.TrimSpace(out) != "3" || !strings.Contains(errOut, "provisioning 1/1: instances 1/1 running · agents 0/1 started") {
		t.Errorf("add-machine --wait=instances with no agents: exit %d, %q, %q", code, out, errOut)
	}
	// Ctrl-C once the machines are added.
	ctx, cancel := context.WithCancel(context.Background())
	stdout := &cancelOnWrite{cancel: cancel}
	var stderr bytes.Buffer
	code = run(ctx, []string{"--config", tc.config, "add-machine", "--wait"}, strings.NewReader(""), stdout, &stderr)
	if code != 1 || strings.TrimSpace(stdout.String()) != "4" || !strings.Contains(stderr.String(), "the controller carries on with the machines") {
		t.Errorf("add-machine --wait interrupted: exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	// A machine in provisioning error ends the wait at once, named.
	tc.ok("model-config", "sim-agents=true", "retry-count=0")
	tc.ok("sim", "faults", "--quota-vcpus", "1")
	code, out, errOut = tc.cli("add-machine", "--constraints", "cores=2", "-n", "2", "--wait")
	if code != 1 || !strings.Contains(errOut, "provisioning error") || !strings.Contains(errOut, "5: ") && !strings.Contains(errOut, "6: ") {
		t.Errorf("add-machine --wait of machines over quota: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

// The commands a newcomer reaches for in the first hour.
func TestE2EFirstHour(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "-n", "3", "--wait")

	// status of some machines, in every format.
	var st api.StatusScript
	if err := json.Unmarshal([]byte(tc.ok("status", "-o", "json", "0", "2")), &st); err != nil || len(st.Machines) != 2 || st.Machines["2"].InstanceID == "" {
		t.Errorf("status -o json 0 2: %v, %+v", err, st.Machines)
	}
	if out := tc.ok("status", "1", "-o", "yaml"); !strings.Contains(out, "machines:\n  \"1\":") || strings.Contains(out, "\"0\":") {
		t.Errorf("status 1 -o yaml:\n%s", out)
	}
	if narrow, wide := tc.ok("status"), tc.ok("status", "-o", "wide"); wide != tc.ok("status", "--wide") || !strings.HasPrefix(narrow, "Model ") || !strings.HasPrefix(wide, "Model ") {
		t.Errorf("status -o wide differs from --wide:\n%s", wide)
	}
	// show-machine gives hardware, volumes and attachments once.
	if out := tc.ok("show-machine", "0"); strings.Count(out, "hardware:") != 1 || strings.Count(out, "volumes:") != 1 || !strings.Contains(out, "instance-id: i-") {
		t.Errorf("show-machine 0:\n%s", out)
	}
	// Listings: tables with headers, and -o json.
	for _, c := range []struct {
		args []string
		head string
	}{
		{[]string{"models"}, "Model "}, {[]string{"zones"}, "Zone "}, {[]string{"events"}, "Time "},
		{[]string{"model-config"}, "Key "}, {[]string{"sim", "instances"}, "Instance "},
	} {
		if out := tc.ok(c.args...); !strings.HasPrefix(out, c.head) || strings.Contains(out, ".000") {
			t.Errorf("%v: want a table under a header %q:\n%s", c.args, c.head, out)
		}
		var v any
		if out := tc.ok(append(c.args, "-o", "json")...); json.Unmarshal([]byte(out), &v) != nil {
			t.Errorf("%v -o json: not JSON:\n%s", c.args, out)
		}
	}
	if out := tc.ok("events", "--machine", "1"); !strings.Contains(out, "machine-1") || strings.Contains(out, "machine-0") {
		t.Errorf("events --machine 1:\n%s", out)
	}
	// model-config --reset.
	tc.ok("model-config", "retry-count=7", "harvest-mode=all")
	tc.ok("model-config", "--reset", "retry-count,harvest-mode")
	var cfg map[string]string
	json.Unmarshal([]byte(tc.ok("model-config", "-o", "json")), &cfg)
	if cfg["retry-count"] != "10" || cfg["harvest-mode"] != "destroyed" {
		t.Errorf("after --reset: retry-count %q harvest-mode %q, want the defaults", cfg["retry-count"], cfg["harvest-mode"])
	}
	// switch.
	tc.ok("add-model", "m2", "--provider", "sim")
	if out := tc.ok("switch", "m2"); out != "default -> m2\n" {
		t.Errorf("switch m2 printed %q", out)
	}
	if out := tc.ok("switch"); out != "m2\n" {
		t.Errorf("switch printed %q after switching to m2", out)
	}
	if out := tc.ok("models"); !strings.Contains(out, "m2*") {
		t.Errorf("models does not mark m2 current:\n%s", out)
	}
	testutil.Eventually(t, "model m2 running", func() bool { code, _, _ := tc.cli("sim", "zones"); return code == 0 })
	tc.ok("add-machine", "--wait")
	if n := len(tc.status("-m", "default").Machines); n != 3 {
		t.Errorf("default has %d machines after adding to m2, want 3", n)
	}
	// remove-model --force asks; no answer keeps everything.
	code, _, errOut := tc.cli("remove-model", "m2", "--force")
	if code != 1 || !strings.Contains(errOut, "not confirmed") || len(tc.status().Machines) != 1 {
		t.Errorf("remove-model --force unconfirmed: exit %d, %q", code, errOut)
	}
	if code, _, errOut := tc.cli("remove-model", "m2", "--force", "--yes"); code != 0 || !strings.Contains(errOut, "removed model m2 and its 1 machines") {
		t.Errorf("remove-model --force --yes: exit %d, %q", code, errOut)
	}
	if out := tc.ok("models"); strings.Contains(out, "m2") {
		t.Errorf("m2 still listed:\n%s", out)
	}
	tc.ok("switch", "default")
	// A released instance is nobody's machine in sim instances.
	inst := tc.status().Machines["2"].InstanceID
	tc.ok("remove-machine", "2", "--force", "--keep-instance", "--wait")
	for _, i := range tc.simInstances() {
		if i.ID == inst && i.Machine != "" {
			t.Errorf("released instance %s listed as machine %q", i.ID, i.Machine)
		}
	}
	// remove-machine --all.
	tc.ok("remove-machine", "--all", "--wait")
	if n := len(tc.status().Machines); n != 0 {
		t.Errorf("%d machines after remove-machine --all --wait", n)
	}
	// version names the controller's build.
	if out := tc.ok("version"); !strings.Contains(out, "controller: muster "+muster.Version+" (") {
		t.Errorf("version:\n%s", out)
	}
	// Dynamic completion.
	tc.ok("add-machine", "-n", "2")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"__complete", "show-machine", ""}, "3\n4\n"},
		{[]string{"__complete", "-m", ""}, "default\n"},
		{[]string{"__complete", "status", "-o", ""}, "table\njson\nyaml\n"},
		{[]string{"__complete", "remove-model", ""}, "default\n"},
	} {
		if out := tc.ok(c.args...); !strings.HasPrefix(out, c.want) {
			t.Errorf("%v: got %q, want it to start with %q", c.args, out, c.want)
		}
	}
	// One "provisioner started" per model start in the controller's log.
	logb, _ := os.ReadFile(tc.dir + "/controller.log")
	if n := strings.Count(string(logb), `msg="provisioner started" model=default`); n != 1 {
		t.Errorf(`"provisioner started" logged %d times for the default model, want 1`, n)
	}
}

// muster switch records the model in the client config; MUSTER_MODEL
// still wins, and says so.
func TestE2ESwitchAndModelEnv(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-model", "m2", "--provider", "sim")
	t.Setenv("MUSTER_MODEL", "default")
	code, _, errOut := tc.cli("switch", "m2")
	if code != 0 || !strings.Contains(errOut, "MUSTER_MODEL=default still overrides it") {
		t.Errorf("switch with MUSTER_MODEL set: exit %d, %q", code, errOut)
	}
	cc, err := controller.LoadClientConfig(tc.config)
	if err != nil || cc.Model != "m2" {
		t.Errorf("client config model %q, %v; want m2", cc.Model, err)
	}
}
