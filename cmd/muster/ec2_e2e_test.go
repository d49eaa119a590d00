package main

import (
	"context"
	"encoding/json"
	"github.com/musterhq/muster/api"
	"sort"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sim"
)

// startControllerOn starts the controller listening on listen and returns
// it and its URL.
func (pt *procTest) startControllerOn(listen string) (*proc, string) {
	return startProc(pt.t, pt.env, pt.logPath, "controller listening on ", pt.bin,
		"controller", "--data-dir", pt.dataDir, "--listen", listen, "--log-format", "json")
}

// TestE2EEC2Model runs a real controller process with an ec2 model whose
// endpoint is the EC2 API of a separate `muster sim serve` and no AWS
// credentials anywhere (for a loopback endpoint the controller signs with
// the sim's default key pair), as README shows: machines spread over
// the zones, a capacity error in one zone fails over, removal terminates,
// and a kill -9 between RunInstances and the record launches no second
// instance — the restarted controller repeats the launch with the same
// ClientToken (the listing lag keeps the instance out of its listings, so
// nothing else could have found it).
func TestE2EEC2Model(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real processes; skipped with -short")
	}
	pt := newProcTest(t, "AWS_ACCESS_KEY_ID=", "AWS_SECRET_ACCESS_KEY=", "AWS_SESSION_TOKEN=", "AWS_PROFILE=", "AWS_CONFIG_FILE=/nonexistent/aws-config",
		"AWS_SHARED_CREDENTIALS_FILE=/nonexistent/aws-credentials", "AWS_CA_BUNDLE=", "AWS_EC2_METADATA_DISABLED=true")
	simProc, simURL := pt.startSim("--zones", "a,b,c")
	defer simProc.stop()
	cloud := sim.NewClient(simURL, nil)
	ctx := context.Background()
	ctrl, ctrlURL := pt.startControllerOn("127.0.0.1:0")
	defer func() { ctrl.stop() }()
	config, cli := pt.config(), pt.cli
	status := func() api.StatusScript {
		t.Helper()
		var st api.StatusScript
		if err := json.Unmarshal([]byte(cli("-m", "aws", "status", "--format", "json")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	running := func(n int) func() bool {
		return func() bool {
			st := status()
			ok := 0
			for _, m := range st.Machines {
				if m.InstanceStatus == "running" {
					ok++
				}
			}
			return len(st.Machines) == n && ok == n
		}
	}
	// started: the sim server's simulated agents booted the instances'
	// user data and logged in.
	started := func(n int) func() bool {
		return func() bool {
			st := status()
			ok := 0
			for _, m := range st.Machines {
				if m.Status == string(muster.StatusStarted) {
					ok++
				}
			}
			return len(st.Machines) == n && ok == n
		}
	}
	modelUUID := func() string {
		for _, l := range strings.Split(cli("models"), "\n") {
			if f := strings.Fields(l); len(f) >= 4 && strings.TrimSuffix(f[0], "*") == "aws" {
				return f[len(f)-1]
			}
		}
		t.Fatal("model aws not listed")
		return ""
	}
	// The model's live instances in the sim, by id.
	instances := func(model string) map[string]sim.Instance {
		t.Helper()
		all, err := cloud.Instances(ctx)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]sim.Instance{}
		for _, i := range all {
			if i.Model() == model {
				out[i.ID] = i
			}
		}
		return out
	}
	// converged checks C4 through the sim: every machine's recorded
	// instance is live, and the model has no other instance.
	converged := func(st api.StatusScript) {
		t.Helper()
		insts := instances(modelUUID())
		for id, m := range st.Machines {
			if _, ok := insts[m.InstanceID]; !ok {
				t.Errorf("machine %s records %s, which the sim does not have", id, m.InstanceID)
			}
		}
		if len(insts) != len(st.Machines) {
			t.Errorf("the sim has %d instances of the model for %d machines", len(insts), len(st.Machines))
		}
	}

	// Bad config is refused before anything is made.
	if code, _, errOut := runCLI(t, "--config", config, "add-model", "bad", "--provider", "ec2", "--config", "endpoint="+simURL+"/ec2/"); code == 0 || !strings.Contains(errOut, "region") {
		t.Fatalf("ec2 model without a region: exit %d, %q; want a refusal naming region", code, errOut)
	}
	if code, _, errOut := runCLI(t, "--config", config, "add-model", "bad", "--provider", "ec2", "--config", "region=us-east-1",
		"--config", "secret-key=x"); code == 0 || !strings.Contains(errOut, "credential") {
		t.Fatalf("ec2 model with a secret key: exit %d, %q; want a refusal pointing at the credential chain", code, errOut)
	}

	cli("add-model", "aws", "--provider", "ec2", "--config", "region=us-east-1", "--config", "endpoint="+simURL)
	model := modelUUID()
	// Zone a is out of capacity for the next two launches.
	if err := cloud.FailNext(ctx, "a", 2); err != nil {
		t.Fatal(err)
	}
	cli("-m", "aws", "add-machine", "-n", "6", "--group", "web", "--constraints", "cores=2")
	testutil.Eventually(t, "six machines running", running(6))
	testutil.Eventually(t, "six machines started", started(6))
	st := status()
	perZone := map[string]int{}
	for id, m := range st.Machines {
		perZone[m.Zone]++
		if got := instances(model)[m.InstanceID]; got.InstanceType != "s1.medium" || got.Zone != m.Zone {
			t.Errorf("machine %s: instance %s is a %q in zone %q, want an s1.medium (cores=2) in %q", id, m.InstanceID, got.InstanceType, got.Zone, m.Zone)
		}
	}
	// Batch or not, each instance is tagged with its own machine.
	testutil.Eventually(t, "each instance tagged with its machine", func() bool {
		insts := instances(model)
		for id, m := range status().Machines {
			if tags := insts[m.InstanceID].Tags; tags[muster.TagMachine] != id || tags[muster.TagLaunchToken] == "" {
				return false
			}
		}
		return true
	})
	converged(st)
	// Spread 2/2/2 but for the launches zone a refused, which went to b
	// and c.
	if perZone["a"] >= 2 || perZone["a"]+perZone["b"]+perZone["c"] != 6 || perZone["b"] < 2 || perZone["c"] < 2 {
		t.Errorf("machines per zone %v, want fewer than 2 in a and the rest spread over b and c", perZone)
	}
	stats, err := cloud.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Errors[sim.CallStart] < 1 || stats.InstancesStarted != 6 {
		t.Errorf("sim stats: %d failed starts, %d instances started; want at least 1 and exactly 6", stats.Errors[sim.CallStart], stats.InstancesStarted)
	}

	// Removal terminates, without --force: each machine's agent makes it
	// dead.
	var ids []string
	for id := range st.Machines {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	gone := ids[:2]
	cli(append([]string{"-m", "aws", "remove-machine"}, gone...)...)
	testutil.Eventually(t, "removed machines' instances terminated", func() bool {
		inst := instances(model)
		_, ok0 := inst[st.Machines[gone[0]].InstanceID]
		_, ok1 := inst[st.Machines[gone[1]].InstanceID]
		return !ok0 && !ok1 && len(status().Machines) == 4
	})
	converged(status())
	known := map[string]bool{}
	for _, m := range status().Machines {
		known[m.InstanceID] = true
	}

	// kill -9 between RunInstances and the record.
	cli("sim", "faults", "--endpoint", simURL, "--reply-delay", "1m", "--listing-lag", "1h")
	cli("-m", "aws", "add-machine")
	var launched sim.Instance
	testutil.Eventually(t, "the new machine's instance launched", func() bool {
		for id, i := range instances(model) {
			if !known[id] {
				launched = i
				return true
			}
		}
		return false
	})
	ctrl.kill()
	cli("sim", "faults", "--endpoint", simURL, "--reply-delay", "0")
	// Restarted where it listened, as a real controller is: the repeated
	// launch is then the identical request (same addresses and agent
	// binary URL in the user data, same password and nonce), which EC2
	// (and the sim) require of a reused ClientToken.
	ctrl, _ = pt.startControllerOn(strings.TrimPrefix(ctrlURL, "https://"))
	testutil.Eventually(t, "five machines running after the restart", running(5))
	m := status().Machines[launched.Tags[muster.TagMachine]]
	if m.InstanceID != launched.ID {
		t.Errorf("machine %s records %s, want %s, launched before the kill", launched.Tags[muster.TagMachine], m.InstanceID, launched.ID)
	}
	if stats, err = cloud.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if stats.InstancesStarted != 7 {
		t.Errorf("%d instances started in all, want 7: the restart launched a duplicate", stats.InstancesStarted)
	}
	converged(status())
}

// TestE2ESimModelOnServedSim runs README's shared-cloud setup on one
// controller: a sim model whose endpoint is a separate `muster sim
// serve`. The sim server runs the agents of the instances the model
// starts, so every machine reaches started, and remove-machine without
// --force finishes (the agent makes its machine dead), leaving the sim
// without the machine's instance.
func TestE2ESimModelOnServedSim(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real processes; skipped with -short")
	}
	pt := newProcTest(t)
	simProc, simURL := pt.startSim("--zones", "a,b,c")
	defer simProc.stop()
	ctrl, _ := pt.startControllerOn("127.0.0.1:0")
	defer func() { ctrl.stop() }()
	cli := pt.cli
	status := func() api.StatusScript {
		t.Helper()
		var st api.StatusScript
		if err := json.Unmarshal([]byte(cli("-m", "shared", "status", "--format", "json")), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}
	cli("add-model", "shared", "--provider", "sim", "--config", "endpoint="+simURL)
	cli("-m", "shared", "add-machine", "-n", "3")
	testutil.Eventually(t, "3 machines started, their instances running", func() bool {
		st := status()
		n := 0
		for _, m := range st.Machines {
			if m.Status == string(muster.StatusStarted) && m.InstanceStatus == "running" {
				n++
			}
		}
		return len(st.Machines) == 3 && n == 3
	})
	gone := status().Machines["0"].InstanceID
	cli("-m", "shared", "remove-machine", "0")
	testutil.Eventually(t, "machine 0 removed without --force and its instance gone", func() bool {
		if _, ok := status().Machines["0"]; ok {
			return false
		}
		for _, inst := range simInstancesOf(t, simURL) {
			if inst.ID == gone {
				return false
			}
		}
		return true
	})
}
