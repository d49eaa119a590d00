package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sim"
)

// convergeDeadline bounds every wait for convergence in these tests; it is
// a deadline for waiting, not a timing assertion.
const convergeDeadline = 30 * time.Second

// testController is a real controller on 127.0.0.1:0 in a temp dir.
type testController struct {
	tb     testing.TB
	dir    string
	config string // <dir>/client.yaml
	ctrl   *controller.Controller
}

// openController opens a controller with the provider kinds of the
// controller command.
func openController(ctx context.Context, cfg controller.Config) (*controller.Controller, error) {
	cfg.Providers = providers
	return controller.Open(ctx, cfg)
}

// startController opens a controller on dir (a new temp dir when empty)
// and stops it at the end of the test.
func startController(tb testing.TB, dir string) *testController {
	tb.Helper()
	return startControllerWith(tb, controller.Config{DataDir: dir})
}

// startControllerWith is startController with more of the controller's
// config: its DataDir (a new temp dir when empty) and anything the test
// sets; it listens on 127.0.0.1:0 and logs to <dir>/controller.log.
func startControllerWith(tb testing.TB, cfg controller.Config) *testController {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	dir := cfg.DataDir
	logf, err := os.OpenFile(filepath.Join(dir, "controller.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), convergeDeadline)
	defer cancel()
	cfg.Listen, cfg.Logger = "127.0.0.1:0", logger
	c, err := openController(ctx, cfg)
	if err != nil {
		logf.Close()
		tb.Fatalf("open controller: %v", err)
	}
	tc := &testController{tb: tb, dir: dir, config: c.ClientConfigPath(), ctrl: c}
	tb.Cleanup(func() {
		tc.stop()
		logf.Close()
		if tb.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				lines := strings.Split(string(b), "\n")
				tb.Logf("controller log (tail):\n%s", strings.Join(lines[max(0, len(lines)-40):], "\n"))
			}
		}
	})
	// The default model's provisioner (and its embedded sim) starts just
	// after the API: wait for it, as a user a second later would not notice.
	testutil.Eventually(tb, "default model running", func() bool {
		code, _, _ := tc.cli("sim", "zones")
		return code == 0
	})
	return tc
}

func (tc *testController) stop() {
	if tc.ctrl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := tc.ctrl.Close(ctx); err != nil {
		tc.tb.Errorf("close controller: %v", err)
	}
	tc.ctrl = nil
}

// cli runs a muster command against the controller.
func (tc *testController) cli(args ...string) (code int, stdout, stderr string) {
	tc.tb.Helper()
	return runCLI(tc.tb, append([]string{"--config", tc.config}, args...)...)
}

// ok runs a command that must succeed and returns its stdout.
func (tc *testController) ok(args ...string) string {
	tc.tb.Helper()
	code, out, errOut := tc.cli(args...)
	if code != 0 {
		tc.tb.Fatalf("muster %s: exit %d, stderr %q", strings.Join(args, " "), code, errOut)
	}
	return out
}

// client is an API client of the controller, for the tests' own checks.
func (tc *testController) client() *api.Client {
	tc.tb.Helper()
	cc, err := controller.LoadClientConfig(tc.config)
	if err != nil {
		tc.tb.Fatal(err)
	}
	c, err := dialControllers(context.Background(), cc)
	if err != nil {
		tc.tb.Fatal(err)
	}
	return c
}

// simClient is the admin client of a model's embedded sim.
func (tc *testController) simClient(model string) *sim.Client {
	c := tc.client()
	return sim.NewClient(c.SimURL(model), c.HTTPClient())
}

// status returns `muster status --format json` decoded.
func (tc *testController) status(args ...string) api.StatusScript {
	tc.tb.Helper()
	out := tc.ok(append([]string{"status", "--format", "json"}, args...)...)
	var st api.StatusScript
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		tc.tb.Fatalf("decode status: %v\n%s", err, out)
	}
	return st
}

// simInstances returns `muster sim instances --format json` decoded.
func (tc *testController) simInstances(args ...string) []simInstanceJSON {
	tc.tb.Helper()
	out := tc.ok(append([]string{"sim", "instances", "--format", "json"}, args...)...)
	var is []simInstanceJSON
	if err := json.Unmarshal([]byte(out), &is); err != nil {
		tc.tb.Fatalf("decode sim instances: %v\n%s", err, out)
	}
	return is
}

func lines(s string) []string {
	return strings.Fields(s)
}

func TestE2ESpread(t *testing.T) {
	tc := startController(t, "")
	out := tc.ok("add-machine", "-n", "6", "--group", "web", "--constraints", "cores=2", "--wait")
	if got := lines(out); !reflect.DeepEqual(got, []string{"0", "1", "2", "3", "4", "5"}) {
		t.Fatalf("got ids %v, want 0..5", got)
	}
	st := tc.status()
	perZone := map[string]int{}
	for id, m := range st.Machines {
		if m.InstanceStatus != "running" || m.InstanceID == "" {
			t.Errorf("machine %s: instance %q status %q, want a running instance", id, m.InstanceID, m.InstanceStatus)
		}
		perZone[m.Zone]++
	}
	if want := map[string]int{"a": 2, "b": 2, "c": 2}; !reflect.DeepEqual(perZone, want) {
		t.Errorf("got machines per zone %v, want %v", perZone, want)
	}
	// The zones command agrees.
	zs := tc.ok("zones")
	for _, z := range []string{"a", "b", "c"} {
		if !strings.Contains(zs, z+"     yes        2") {
			t.Errorf("zones output lacks zone %s with 2 machines:\n%s", z, zs)
		}
	}
}

func TestE2EBadInput(t *testing.T) {
	tc := startController(t, "")
	// Zones are checked once the provisioner has read them.
	testutil.Eventually(t, "the model's zones known", func() bool { return strings.Contains(tc.ok("zones"), "c ") })
	tests := []struct {
		name string
		args []string
		code int
		want string // in the error line
	}{
		{"bad constraints", []string{"add-machine", "--constraints", "cores=lots"}, 2, "cores"},
		{"unknown constraint", []string{"add-machine", "--constraints", "colour=red"}, 2, "colour"},
		{"constraint without value", []string{"add-machine", "--constraints", "cores"}, 2, "cores"},
		{"too many cores", []string{"add-machine", "--constraints", "cores=1000"}, 2, "cores=1000"},
		{"unknown instance type", []string{"add-machine", "--constraints", "instance-type=nope"}, 2, `instance type "nope" is not offered (choices: s1.small, s1.medium, s1.large, s1.xlarge)`},
		{"unknown zone", []string{"add-machine", "--constraints", "zones=nonexistent"}, 2, `zone "nonexistent" does not exist (zones: a, b, c)`},
		{"unknown placement zone", []string{"add-machine", "--to", "zone=q"}, 2, `placement zone "q" does not exist`},
		{"unknown base", []string{"add-machine", "--base", "ubuntu@99.99"}, 2, `base "ubuntu@99.99" is not offered (choices: ubuntu@22.04, ubuntu@24.04)`},
		{"bad base", []string{"add-machine", "--base", "foo"}, 2, "foo"},
		{"bad --wait", []string{"add-machine", "--wait=forever"}, 2, "forever"},
		{"ids and --all", []string{"remove-machine", "--all", "1"}, 2, "--all"},
		{"unknown machine status", []string{"status", "0", "99"}, 1, "no machine 0, 99"},
		{"unknown machine events", []string{"events", "--machine", "99"}, 1, "99"},
		{"bad -o", []string{"models", "-o", "xml"}, 2, "xml"},
		{"reset unknown", []string{"model-config", "--reset", "colour"}, 2, "colour"},
		{"reset and set", []string{"model-config", "--reset", "retry-count", "retry-count=3"}, 2, "--reset"},
		{"bad setting value", []string{"model-config", "retry-count=abc"}, 2, "abc"},
		{"switch to an unknown model", []string{"switch", "nope"}, 1, "nope"},
		{"sim set-zone typo", []string{"sim", "set-zone", "aa", "--available=false"}, 1, `sim has no zone "aa" (zones: a, b, c); --add adds it`},
		{"add-model --config typo", []string{"add-model", "x", "--provider", "sim", "--config", "zones"}, 2, `bad --config "zones"`},
		{"typo", []string{"add-machin"}, 2, `did you mean "add-machine"?`},
		{"bad storage", []string{"add-machine", "--storage", "data=big"}, 2, "data"},
		{"storage without size", []string{"add-machine", "--storage", "data"}, 2, "data"},
		{"bad placement", []string{"add-machine", "--to", "rack=1"}, 2, "--to"},
		{"zero count", []string{"add-machine", "-n", "0"}, 2, "-n"},
		{"unknown flag", []string{"add-machine", "--colour", "red"}, 2, "colour"},
		{"bad machine id", []string{"remove-machine", "x"}, 2, "x"},
		{"unknown machine", []string{"remove-machine", "7"}, 1, "7"},
		{"retry without ids", []string{"retry-provisioning"}, 2, "--all"},
		{"bad format", []string{"status", "--format", "xml"}, 2, "xml"},
		{"unknown setting", []string{"model-config", "colour=red"}, 2, "colour"},
		{"unknown model", []string{"status", "-m", "nope"}, 1, "nope"},
		{"unknown provider", []string{"add-model", "x", "--provider", "cardboard"}, 2, "cardboard"},
		{"missing fleet file", []string{"apply", "-f", filepath.Join(t.TempDir(), "none.yaml")}, 1, "none.yaml"},
		{"no fleet file", []string{"apply"}, 2, "-f"},
		{"bad set-zone capacity", []string{"sim", "set-zone", "a", "--capacity", "-3"}, 2, "capacity"},
		{"fail-next without zone", []string{"sim", "faults", "--fail-next", "2"}, 2, "--zone"},
		{"fail-next unknown zone", []string{"sim", "faults", "--fail-next", "2", "--zone", "q"}, 1, "q"},
		{"bad rate limit", []string{"sim", "faults", "--rate-limit", "fast"}, 2, "rate-limit"},
		{"negative listing lag", []string{"sim", "faults", "--listing-lag", "-1s"}, 2, "listing-lag"},
		{"negative lost replies", []string{"sim", "faults", "--lose-replies", "-1"}, 2, "lose-replies"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errOut := tc.cli(tt.args...)
			if code != tt.code {
				t.Errorf("got exit %d, want %d (stderr %q)", code, tt.code, errOut)
			}
			if !strings.HasPrefix(errOut, "error: ") || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, tt.want) {
				t.Errorf("got stderr %q, want one line \"error: ...%s...\"", errOut, tt.want)
			}
			if out != "" {
				t.Errorf("got stdout %q, want none", out)
			}
		})
	}
	// Nothing was changed by any of them.
	st := tc.status()
	if len(st.Machines) != 0 {
		t.Errorf("got %d machines after refused commands, want 0", len(st.Machines))
	}
	if sz := tc.ok("sim", "zones"); strings.Contains(sz, "aa") {
		t.Errorf("a refused set-zone added a zone:\n%s", sz)
	}
	if models := tc.ok("models"); strings.Contains(models, "cardboard") || strings.Contains(models, "x ") {
		t.Errorf("a refused add-model added a model:\n%s", models)
	}
	f, err := tc.simClient("default").Faults(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(f.FailNext, map[string]int(nil)) && len(f.FailNext) != 0 {
		t.Errorf("got fail-next %v after refused commands, want none", f.FailNext)
	}
	// A setting change is all or none.
	before := tc.ok("model-config", "retry-count")
	if code, _, _ := tc.cli("model-config", "retry-count=3", "harvest-mode=sometimes"); code != 2 {
		t.Errorf("model-config with one bad value: exit %d, want 2 (usage)", code)
	}
	if after := tc.ok("model-config", "retry-count"); after != before {
		t.Errorf("got retry-count %q after a refused change, want %q", after, before)
	}
}

func TestE2ERemoval(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "-n", "2", "--wait")
	st := tc.status()
	gone, kept := st.Machines["0"].InstanceID, st.Machines["1"].InstanceID
	if gone == "" || kept == "" {
		t.Fatalf("machines not provisioned: %+v", st.Machines)
	}
	// Without --force a machine with an instance stays dying until its
	// agent makes it dead; --force makes it dead at once.
	tc.ok("remove-machine", "0", "--force", "--wait")
	tc.ok("remove-machine", "1", "--keep-instance", "--force", "--wait")
	st = tc.status()
	if len(st.Machines) != 0 {
		t.Fatalf("got machines %v after removal, want none", sortedIDs(st.Machines))
	}
	ids := map[string]bool{}
	for _, i := range tc.simInstances() {
		ids[i.ID] = true
	}
	if ids[gone] {
		t.Errorf("instance %s of removed machine 0 still listed, want it stopped", gone)
	}
	if !ids[kept] {
		t.Errorf("instance %s of machine 1 removed with --keep-instance is gone, want it kept", kept)
	}
}

func TestE2ERemoveWithoutForce(t *testing.T) {
	tc := startController(t, "")
	tc.ok("model-config", "retry-count=0")
	tc.ok("add-machine", "--wait")
	tc.ok("sim", "faults", "--quota-vcpus", "1")
	if code, _, _ := tc.cli("add-machine", "--constraints", "cores=2", "--wait"); code != 1 {
		t.Fatalf("add-machine of an impossible machine --wait: exit %d, want 1", code)
	}
	inst := tc.status().Machines["0"].InstanceID
	// Machine 1 has no instance: dying, then dead and removed at once.
	tc.ok("remove-machine", "1", "--wait")
	// Machine 0 has one: dying, its instance untouched until it is dead.
	tc.ok("remove-machine", "0")
	st := tc.status()
	if _, ok := st.Machines["1"]; ok {
		t.Errorf("machine 1 without an instance still there after remove-machine --wait")
	}
	if m := st.Machines["0"]; m.Life != "dying" || m.InstanceID != inst {
		t.Errorf("machine 0: got life %q instance %q, want dying with %s", m.Life, m.InstanceID, inst)
	}
	found := false
	for _, i := range tc.simInstances() {
		found = found || i.ID == inst
	}
	if !found {
		t.Errorf("instance %s of dying machine 0 stopped, want it kept until the machine is dead", inst)
	}
}

func TestE2EHarvestUnknownNotForeign(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "--wait")
	owned := tc.status().Machines["0"].InstanceID
	unknown := strings.TrimSpace(tc.ok("sim", "add-instance", "--zone", "b"))
	foreign := strings.TrimSpace(tc.ok("sim", "add-instance", "--foreign"))
	if unknown == "" || foreign == "" || unknown == foreign {
		t.Fatalf("add-instance printed %q and %q, want two instance ids", unknown, foreign)
	}
	for _, i := range tc.simInstances() {
		if i.ID == unknown && (i.Machine != "" || i.LaunchToken != "" || i.Controller == "" || i.Model == "") {
			t.Errorf("unknown instance %+v: want this controller's and model's tags, no machine or token", i)
		}
	}
	tc.ok("model-config", "harvest-mode=unknown", "harvest-min-age=0s", "resync-interval=1s")
	testutil.Eventually(t, "unknown instance harvested", func() bool {
		for _, i := range tc.simInstances() {
			if i.ID == unknown {
				return false
			}
		}
		return true
	})
	have := map[string]bool{}
	for _, i := range tc.simInstances() {
		have[i.ID] = true
	}
	if !have[foreign] {
		t.Errorf("foreign instance %s was harvested, want it left alone", foreign)
	}
	if !have[owned] {
		t.Errorf("machine 0's instance %s was harvested, want it kept", owned)
	}
}

func TestE2EZoneAtZeroCapacity(t *testing.T) {
	tc := startController(t, "")
	tc.ok("sim", "set-zone", "b", "--capacity", "0")
	tc.ok("model-config", "retry-delay=50ms") // the retry elsewhere comes sooner
	tc.ok("add-machine", "-n", "6", "--group", "g", "--wait")
	perZone := map[string]int{}
	for id, m := range tc.status().Machines {
		if m.InstanceStatus != "running" {
			t.Errorf("machine %s: instance status %q, want running", id, m.InstanceStatus)
		}
		perZone[m.Zone]++
	}
	if want := map[string]int{"a": 3, "c": 3}; !reflect.DeepEqual(perZone, want) {
		t.Errorf("got machines per zone %v, want %v", perZone, want)
	}
}

func TestE2EAuthRefused(t *testing.T) {
	tc := startController(t, "")
	cc, err := controller.LoadClientConfig(tc.config)
	if err != nil {
		t.Fatal(err)
	}
	cc.Token = "not-the-token"
	bad := filepath.Join(t.TempDir(), "client.yaml")
	if err := cc.Save(bad); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"status"}, {"add-machine"}, {"sim", "instances"}} {
		code, out, errOut := runCLI(t, append([]string{"--config", bad}, args...)...)
		if code != 1 || out != "" {
			t.Errorf("%v with a wrong token: exit %d, stdout %q, want exit 1 and no output", args, code, out)
		}
		if !strings.HasPrefix(errOut, "error: ") || !strings.Contains(errOut, "unauthorized") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v with a wrong token: stderr %q, want one line error: ... unauthorized", args, errOut)
		}
	}
	if n := len(tc.status().Machines); n != 0 {
		t.Errorf("got %d machines after refused add-machine, want 0", n)
	}
}

// jsonKeys returns the sorted keys of a JSON object.
func jsonKeys(tb testing.TB, raw json.RawMessage) []string {
	tb.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		tb.Fatalf("decode %s: %v", raw, err)
	}
	return sortedKeys(m)
}

func sortStrings(s ...string) []string {
	sort.Strings(s)
	return s
}

func TestE2EStatusJSONKeys(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "--group", "web", "--constraints", "cores=2", "--wait")
	// Over the vCPU quota: provisioning error, keys still all there.
	tc.ok("model-config", "retry-count=0")
	tc.ok("sim", "faults", "--quota-vcpus", "2")
	tc.ok("add-machine", "--constraints", "cores=2")
	out := tc.ok("status", "--format", "json")
	var top map[string]json.RawMessage
	if err := json.Unmarshal([]byte(out), &top); err != nil {
		t.Fatal(err)
	}
	if got, want := sortedKeys(top), sortStrings("model", "provider", "harvest-mode", "machines", "zones"); !reflect.DeepEqual(got, want) {
		t.Errorf("got status keys %v, want %v", got, want)
	}
	var machines, zones map[string]json.RawMessage
	json.Unmarshal(top["machines"], &machines)
	json.Unmarshal(top["zones"], &zones)
	wantM := sortStrings("life", "status", "status-message", "instance-id", "instance-status", "instance-message",
		"zone", "group", "base", "constraints", "hardware", "addresses", "keep-instance")
	if len(machines) != 2 {
		t.Fatalf("got %d machines, want 2:\n%s", len(machines), out)
	}
	for id, raw := range machines {
		if got := jsonKeys(t, raw); !reflect.DeepEqual(got, wantM) {
			t.Errorf("machine %s: got keys %v, want %v", id, got, wantM)
		}
		var m struct {
			Addresses []string `json:"addresses"`
		}
		json.Unmarshal(raw, &m)
		if m.Addresses == nil {
			t.Errorf("machine %s: addresses is null, want a list", id)
		}
	}
	if got := sortedKeys(zones); !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("got zones %v, want a b c", got)
	}
	for name, raw := range zones {
		if got, want := jsonKeys(t, raw), sortStrings("available", "machines"); !reflect.DeepEqual(got, want) {
			t.Errorf("zone %s: got keys %v, want %v", name, got, want)
		}
	}
	var st api.StatusScript
	json.Unmarshal([]byte(out), &st)
	m0 := st.Machines["0"]
	if st.Model != "default" || st.Provider != "sim" || st.HarvestMode != "destroyed" || m0.Group != "web" ||
		m0.Constraints != "cores=2" || m0.Base != "ubuntu@24.04" || !strings.Contains(m0.Hardware, "cores=2") || len(m0.Addresses) == 0 {
		t.Errorf("got status %+v, want model default on sim, machine 0 in group web with cores=2 hardware and an address", st)
	}
	// yaml and table carry the same machines.
	y := tc.ok("status", "--format", "yaml")
	if !strings.Contains(y, "harvest-mode: destroyed") || !strings.Contains(y, "instance-id: "+m0.InstanceID) {
		t.Errorf("yaml status lacks keys:\n%s", y)
	}
	if table := tc.ok("status"); !strings.Contains(table, m0.InstanceID) {
		t.Errorf("status table lacks instance %s:\n%s", m0.InstanceID, table)
	}
}

func TestE2ESimInstancesJSONKeys(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "--wait")
	foreign := strings.TrimSpace(tc.ok("sim", "add-instance", "--foreign", "--zone", "c"))
	out := tc.ok("sim", "instances", "--format", "json")
	var raws []json.RawMessage
	if err := json.Unmarshal([]byte(out), &raws); err != nil {
		t.Fatalf("decode: %v\n%s", err, out)
	}
	if len(raws) != 2 {
		t.Fatalf("got %d instances, want 2:\n%s", len(raws), out)
	}
	want := sortStrings("id", "zone", "state", "model", "controller", "machine", "launch-token", "created")
	for _, raw := range raws {
		if got := jsonKeys(t, raw); !reflect.DeepEqual(got, want) {
			t.Errorf("got instance keys %v, want %v", got, want)
		}
	}
	st := tc.status()
	modelUUID := tc.ok("models")
	for _, i := range tc.simInstances() {
		if _, err := time.Parse(time.RFC3339, i.Created); err != nil {
			t.Errorf("instance %s: created %q is not RFC 3339: %v", i.ID, i.Created, err)
		}
		switch i.ID {
		case foreign:
			if i.Machine != "" || i.LaunchToken != "" || i.Zone != "c" || strings.Contains(modelUUID, i.Model) {
				t.Errorf("foreign instance %+v: want zone c, no machine or token, another model", i)
			}
		case st.Machines["0"].InstanceID:
			if i.Machine != "0" || i.LaunchToken == "" || i.State != "running" || !strings.Contains(modelUUID, i.Model) {
				t.Errorf("machine 0's instance %+v: want machine 0, a launch token, running, this model", i)
			}
		default:
			t.Errorf("unexpected instance %+v", i)
		}
	}
}

func TestE2ERestartLaunchesNothing(t *testing.T) {
	dir := t.TempDir()
	tc := startController(t, dir)
	tc.ok("model-config", "resync-interval=1s")
	tc.ok("add-machine", "-n", "3", "--wait")
	before := tc.status()
	tc.stop()

	tc = startController(t, dir)
	sc := tc.simClient("default")
	// Two full passes (start and a resync) have run once the sim has been
	// listed twice.
	testutil.Eventually(t, "two full passes after restart", func() bool {
		s, err := sc.Stats(context.Background())
		return err == nil && s.Calls[sim.CallList] >= 2
	})
	s, err := sc.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Calls[sim.CallStart] != 0 || s.InstancesStarted != 0 {
		t.Errorf("got %d start calls, %d instances started after restart, want none", s.Calls[sim.CallStart], s.InstancesStarted)
	}
	after := tc.status()
	for id, m := range before.Machines {
		if got := after.Machines[id]; got.InstanceID != m.InstanceID || got.InstanceStatus != "running" {
			t.Errorf("machine %s: got instance %q (%s) after restart, want %q running", id, got.InstanceID, got.InstanceStatus, m.InstanceID)
		}
	}
	if n := len(tc.simInstances()); n != 3 {
		t.Errorf("got %d instances after restart, want 3", n)
	}
}

func TestE2EApply(t *testing.T) {
	tc := startController(t, "")
	fleet := filepath.Join("..", "..", "examples", "fleet.yaml")
	out := tc.ok("apply", "-f", fleet, "--dry-run")
	if !strings.Contains(out, "dry run") || !strings.Contains(out, "web") {
		t.Errorf("dry run printed:\n%s", out)
	}
	if n := len(tc.status().Machines); n != 0 {
		t.Fatalf("dry run added %d machines, want none", n)
	}
	tc.ok("apply", "-f", fleet, "--wait")
	st := tc.status()
	groups := map[string]int{}
	for id, m := range st.Machines {
		groups[m.Group]++
		if m.InstanceStatus != "running" {
			t.Errorf("machine %s: instance status %q, want running", id, m.InstanceStatus)
		}
	}
	if want := map[string]int{"web": 6, "db": 3, "cache": 3}; !reflect.DeepEqual(groups, want) {
		t.Errorf("got groups %v, want %v", groups, want)
	}
	// Applying again changes nothing; a smaller web group removes the
	// highest ids of the group.
	small := filepath.Join(t.TempDir(), "small.yaml")
	os.WriteFile(small, []byte("groups:\n  - name: web\n    count: 4\n    constraints: cores=2 mem=4G\n"), 0o600)
	var webIDs []string
	for id, m := range st.Machines {
		if m.Group == "web" {
			webIDs = append(webIDs, id)
		}
	}
	muster.SortMachineIDs(webIDs)
	tc.ok("apply", "-f", small)
	st = tc.status()
	for i, id := range webIDs {
		want := "alive"
		if i >= 4 {
			want = "dying" // surplus: the highest ids of the group
		}
		if got := st.Machines[id].Life; got != want {
			t.Errorf("web machine %s: got life %q after shrinking web to 4, want %s", id, got, want)
		}
	}
	// A bad fleet file is refused whole.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("groups:\n  - name: web\n    count: 9\n  - name: db\n    count: 1\n    constraints: cores=many\n"), 0o600)
	if code, _, errOut := tc.cli("apply", "-f", bad); code != 2 || !strings.Contains(errOut, "db") {
		t.Errorf("bad fleet: exit %d stderr %q, want exit 2 (usage) naming group db", code, errOut)
	}
	if n := len(tc.status().Machines); n != 12 {
		t.Errorf("got %d machines after a refused apply, want 12", n)
	}
}

func TestE2EModels(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-model", "second", "--provider", "sim", "--config", "zones=x,y", "--config", "harvest-mode=all")
	models := tc.ok("models")
	if !strings.Contains(models, "default*") || !strings.Contains(models, "second") || !strings.Contains(models, "zones=x,y") {
		t.Errorf("models:\n%s", models)
	}
	if got := strings.TrimSpace(tc.ok("-m", "second", "model-config", "harvest-mode")); got != "all" {
		t.Errorf("got harvest-mode %q for model second, want all", got)
	}
	if got := strings.TrimSpace(tc.ok("model-config", "harvest-mode")); got != "destroyed" {
		t.Errorf("got harvest-mode %q for model default, want destroyed", got)
	}
	all := tc.ok("model-config")
	for _, k := range muster.SettingKeys {
		if !strings.Contains(all, k.Name) {
			t.Errorf("model-config lacks %s:\n%s", k.Name, all)
		}
	}
	tc.ok("model-config", "retry-count=3", "num-provision-workers=4")
	if got := strings.TrimSpace(tc.ok("model-config", "retry-count")); got != "3" {
		t.Errorf("got retry-count %q, want 3", got)
	}
	// MUSTER_MODEL picks the model too; the flag wins over it.
	t.Setenv("MUSTER_MODEL", "second")
	if got := strings.TrimSpace(tc.ok("model-config", "harvest-mode")); got != "all" {
		t.Errorf("with MUSTER_MODEL=second got harvest-mode %q, want all", got)
	}
	if got := strings.TrimSpace(tc.ok("-m", "default", "model-config", "harvest-mode")); got != "destroyed" {
		t.Errorf("with -m default got harvest-mode %q, want destroyed", got)
	}
	testutil.Eventually(t, "model second's provisioner running", func() bool {
		code, out, _ := tc.cli("-m", "second", "zones")
		return code == 0 && strings.Contains(out, "x") && strings.Contains(out, "y")
	})
	tc.ok("-m", "second", "add-machine", "--wait")
	if code, _, errOut := tc.cli("remove-model", "second"); code != 1 || !strings.Contains(errOut, "machine") {
		t.Errorf("remove-model with machines: exit %d stderr %q, want exit 1", code, errOut)
	}
	tc.ok("-m", "second", "remove-machine", "0", "--force", "--wait")
	tc.ok("remove-model", "second")
	if models := tc.ok("models"); strings.Contains(models, "second") {
		t.Errorf("model second still listed:\n%s", models)
	}
}

func TestE2EShowMachineEventsAndRetry(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "--storage", "data=10G", "--wait")
	y := tc.ok("show-machine", "0")
	for _, want := range []string{"machine:", "id: \"0\"", "instance-id: i-", "events:", "data"} {
		if !strings.Contains(y, want) {
			t.Errorf("show-machine yaml lacks %q:\n%s", want, y)
		}
	}
	var d api.MachineDetail
	if err := json.Unmarshal([]byte(tc.ok("show-machine", "0", "--format", "json")), &d); err != nil {
		t.Fatal(err)
	}
	if d.Machine.ID != "0" || d.Machine.Instance == nil || len(d.Events) == 0 {
		t.Errorf("show-machine json: %+v", d)
	}
	if code, _, _ := tc.cli("show-machine", "9"); code != 1 {
		t.Errorf("show-machine of an unknown machine: exit %d, want 1", code)
	}
	ev := tc.ok("events")
	if !strings.Contains(ev, "machine-0") {
		t.Errorf("events lack machine 0:\n%s", ev)
	}
	if ev0 := tc.ok("events", "--machine", "0"); strings.Count(ev0, "\n") == 0 || strings.Contains(ev0, "  -  ") {
		t.Errorf("events --machine 0:\n%s", ev0)
	}

	// A machine no zone can take ends in provisioning error; --wait says
	// so, and retry-provisioning takes it again.
	tc.ok("model-config", "retry-count=0")
	tc.ok("sim", "faults", "--quota-vcpus", "1")
	code, out, errOut := tc.cli("add-machine", "--constraints", "cores=2", "--wait")
	if code != 1 || strings.TrimSpace(out) != "1" || !strings.Contains(errOut, "1: provisioning error") {
		t.Fatalf("add-machine of an impossible machine --wait: exit %d stdout %q stderr %q, want exit 1 naming machine 1", code, out, errOut)
	}
	if got := strings.TrimSpace(tc.ok("retry-provisioning", "--all")); got != "1" {
		t.Errorf("retry-provisioning --all printed %q, want 1", got)
	}
}

func TestE2ESimCommands(t *testing.T) {
	tc := startController(t, "")
	out := tc.ok("sim", "set-zone", "d", "--add", "--capacity", "8")
	if !strings.Contains(out, "d") || !strings.Contains(out, "8") {
		t.Errorf("set-zone printed:\n%s", out)
	}
	tc.ok("sim", "set-zone", "a", "--available=false")
	zs := tc.ok("sim", "zones")
	if !strings.Contains(zs, "unlimited") || !strings.Contains(zs, "a     no") {
		t.Errorf("sim zones:\n%s", zs)
	}
	out = tc.ok("sim", "faults", "--start-error-rate", "0.25", "--latency", "5ms", "--rate-limit", "10/50")
	for _, want := range []string{"start=0.25", "start=5ms", "start=10/50"} {
		if !strings.Contains(out, want) {
			t.Errorf("faults lacks %q:\n%s", want, out)
		}
	}
	tc.ok("sim", "faults", "--fail-next", "2", "--zone", "b")
	out = tc.ok("sim", "faults", "--listing-lag", "3s", "--reply-delay", "2s", "--lose-replies", "4")
	for _, want := range []string{"listing-lag:      3s", "reply-delay:      start=2s", "lose-replies:     start=4"} {
		if !strings.Contains(out, want) {
			t.Errorf("faults lacks %q:\n%s", want, out)
		}
	}
	f, err := tc.simClient("default").Faults(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if f.ErrorRate[sim.CallStart] != 0.25 || f.Latency[sim.CallStart].Fixed != 5*time.Millisecond ||
		f.RateLimits[sim.CallList] != (sim.Bucket{Burst: 10, PerSecond: 50}) || f.ListingLag != 3*time.Second ||
		f.ReplyDelay[sim.CallStart].Fixed != 2*time.Second || f.LoseReplies[sim.CallStart] != 4 {
		t.Errorf("got faults %+v", f)
	}
	if zs, _ := tc.simClient("default").Zones(context.Background()); len(zs) < 2 || zs[1].FailNext != 2 {
		t.Errorf("got zones %+v, want fail-next 2 in b", zs)
	}
	out = tc.ok("sim", "faults", "--clear")
	if strings.Contains(out, "start=") {
		t.Errorf("faults after --clear:\n%s", out)
	}
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestDemo(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	done := make(chan int, 1)
	go func() { done <- run(ctx, []string{"demo"}, strings.NewReader(""), &out, &errOut) }()
	var config string
	testutil.Eventually(t, "demo prints MUSTER_CONFIG", func() bool {
		select {
		case code := <-done:
			t.Fatalf("demo ended with exit %d early; stdout:\n%s\nstderr:\n%s", code, out.String(), errOut.String())
		default:
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "export MUSTER_CONFIG="); ok {
				config = v
				return true
			}
		}
		return false
	})
	text := out.String()
	for _, want := range []string{"controller: https://127.0.0.1:", "dashboard: https://127.0.0.1:", "Machine", "web", "db", "cache"} {
		if !strings.Contains(text, want) {
			t.Errorf("demo output lacks %q:\n%s", want, text)
		}
	}
	// Another terminal sees the fleet through the printed config.
	t.Setenv("MUSTER_CONFIG", config)
	code, so, se := runCLI(t, "status", "--format", "json")
	if code != 0 {
		t.Fatalf("status with the demo's config: exit %d, %s", code, se)
	}
	var st api.StatusScript
	json.Unmarshal([]byte(so), &st)
	if len(st.Machines) != 12 {
		t.Errorf("got %d machines in the demo, want 12", len(st.Machines))
	}
	for id, m := range st.Machines {
		if m.InstanceStatus != "running" {
			t.Errorf("demo machine %s: instance status %q, want running", id, m.InstanceStatus)
		}
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("demo exit %d after Ctrl-C, want 0; stderr %q", code, errOut.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("demo did not stop within 10s of Ctrl-C")
	}
	dir := filepath.Dir(config)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("demo dir %s still there after stop (err %v)", dir, err)
	}
}

func TestDemoFleetIsTheExample(t *testing.T) {
	want, err := os.ReadFile(filepath.Join("..", "..", "examples", "fleet.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(demoFleet, want) {
		t.Fatal("cmd/muster/demo_fleet.yaml differs from examples/fleet.yaml: copy it over")
	}
	f, err := api.ParseFleet(demoFleet)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, g := range f.Groups {
		n += g.Count
	}
	if n != 12 {
		t.Errorf("got %d machines in the demo fleet, want 12", n)
	}
}

// runAsync runs a command line until cancel is called and returns its
// output buffers and a channel with its exit status.
func runAsync(args ...string) (cancel context.CancelFunc, out, errOut *syncBuffer, done <-chan int) {
	ctx, cancel := context.WithCancel(context.Background())
	out, errOut = &syncBuffer{}, &syncBuffer{}
	ch := make(chan int, 1)
	go func() { ch <- run(ctx, args, strings.NewReader(""), out, errOut) }()
	return cancel, out, errOut, ch
}

// waitExit waits for a command started by runAsync to end.
func waitExit(tb testing.TB, done <-chan int) int {
	tb.Helper()
	select {
	case code := <-done:
		return code
	case <-time.After(10 * time.Second):
		tb.Fatal("command did not end within 10s of being cancelled")
	}
	return -1
}

func TestE2EWatchAndFollow(t *testing.T) {
	tc := startController(t, "")
	stopWatch, watchOut, watchErr, watchDone := runAsync("--config", tc.config, "status", "--watch")
	defer stopWatch()
	stopFollow, followOut, followErr, followDone := runAsync("--config", tc.config, "events", "--follow")
	defer stopFollow()
	testutil.Eventually(t, "first status drawn", func() bool { return strings.Contains(watchOut.String(), "default") })
	tc.ok("add-machine", "--wait")
	inst := tc.status().Machines["0"].InstanceID
	testutil.Eventually(t, "status redrawn with the new machine", func() bool { return strings.Contains(watchOut.String(), inst) })
	testutil.Eventually(t, "followed events of machine 0", func() bool { return strings.Contains(followOut.String(), "machine-0") })
	stopWatch()
	stopFollow()
	if code := waitExit(t, watchDone); code != 0 {
		t.Errorf("status --watch: exit %d after Ctrl-C, want 0; stderr %q", code, watchErr.String())
	}
	if code := waitExit(t, followDone); code != 0 {
		t.Errorf("events --follow: exit %d after Ctrl-C, want 0; stderr %q", code, followErr.String())
	}
}

func TestE2ESeveralControllerURLs(t *testing.T) {
	tc := startController(t, "")
	cc, err := controller.LoadClientConfig(tc.config)
	if err != nil {
		t.Fatal(err)
	}
	// A controller that is gone: a port nobody listens on any more.
	dead := startController(t, "")
	deadURL := dead.ctrl.URL()
	dead.stop()
	cc.Controllers = append([]string{deadURL}, cc.Controllers...)
	path := filepath.Join(t.TempDir(), "client.yaml")
	if err := cc.Save(path); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "--config", path, "add-machine")
	if code != 0 || strings.TrimSpace(out) != "0" {
		t.Fatalf("add-machine with a dead controller listed first: exit %d stdout %q stderr %q", code, out, errOut)
	}
	// With only dead controllers the error says so.
	cc.Controllers = []string{deadURL, deadURL}
	cc.Save(path)
	code, _, errOut = runCLI(t, "--config", path, "status")
	if code != 1 || !strings.Contains(errOut, "unreachable") {
		t.Errorf("status with only dead controllers: exit %d stderr %q, want exit 1 unreachable", code, errOut)
	}
}

// TestE2EBatchesAndSpaces: the controller hands the provisioner the model's
// provider itself, so what the provider offers beyond muster.Provider is
// used: batch starts (E3) and subnets for space constraints.
func TestE2EBatchesAndSpaces(t *testing.T) {
	tc := startController(t, "")
	tc.ok("add-machine", "-n", "30", "--wait")
	stats, err := tc.simClient("default").Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if n := stats.Calls[sim.CallStart]; n > 10 || stats.InstancesStarted != 30 {
		t.Errorf("%d start calls for %d instances, want at most 10 (batched)", n, stats.InstancesStarted)
	}
	tc.ok("add-machine", "--constraints", "spaces=beta", "--wait")
	m := tc.status().Machines["30"]
	if m.InstanceStatus != "running" || len(m.Addresses) != 1 {
		t.Fatalf("machine in space beta: %+v", m)
	}
	subnets, err := tc.simClient("default").Provider("x", "y").Subnets(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	inBeta := false
	for _, s := range subnets {
		if _, cidr, err := net.ParseCIDR(s.CIDR); err == nil && s.Space == "beta" && cidr.Contains(net.ParseIP(m.Addresses[0])) {
			inBeta = true
		}
	}
	if !inBeta {
		t.Errorf("address %s is in no subnet of space beta (%+v)", m.Addresses[0], subnets)
	}
}

// TestE2EAddModelConfigPathWithEquals: add-model's --config KEY=VALUE
// shadows the global --config FILE; a client config path holding "=" is
// still taken as the file.
func TestE2EAddModelConfigPathWithEquals(t *testing.T) {
	tc := startController(t, "")
	data, err := os.ReadFile(tc.config)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "run=1", "client.yaml")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, "--config", path, "add-model", "eq", "--provider", "sim", "--config", "zones=x,y")
	if code != 0 || !strings.Contains(out, "added model eq") {
		t.Fatalf("add-model with client config %s: exit %d, %q %q", path, code, out, errOut)
	}
	if got := tc.ok("models"); !strings.Contains(got, "zones=x,y") {
		t.Errorf("models:\n%s", got)
	}
}
