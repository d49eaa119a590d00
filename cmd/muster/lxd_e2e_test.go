package main

import (
	"context"
	"encoding/json"
	"github.com/musterhq/muster/api"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/lxd"
)

// lxdBootDeadline bounds the waits for LXD containers to boot through
// cloud-init and their agents to log in (10–30 s each on two shared cores).
const lxdBootDeadline = 6 * time.Minute

// lxdUserKey prefixes the config keys of muster's tags on LXD objects.
const lxdUserKey = "user."

// lxdE2E is the LXD daemon as the end-to-end test sees it.
type lxdE2E struct {
	t *testing.T
	c *lxd.Client
}

// requireLXDE2E skips unless MUSTER_TEST_LXD=1 and makes sure the daemon
// has the image (the alias, else the tarball cached in
// $MUSTER_TEST_LXD_CACHE, default /var/cache/muster-lxd, else built).
func requireLXDE2E(t *testing.T) *lxdE2E {
	t.Helper()
	if os.Getenv("MUSTER_TEST_LXD") != "1" {
		t.Skip("set MUSTER_TEST_LXD=1 to run the end-to-end tests against the local LXD daemon")
	}
	cache := os.Getenv("MUSTER_TEST_LXD_CACHE")
	if cache == "" {
		cache = "/var/cache/muster-lxd"
	}
	c := lxd.NewClient(lxd.DefaultSocket)
	t.Cleanup(c.Close)
	ping, cancelPing := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelPing()
	if err := c.Ping(ping); err != nil {
		t.Fatalf("the LXD daemon did not answer GET /1.0 and GET /1.0/instances within 30s: %v", err)
	}
	t.Cleanup(testutil.Watchdog("the LXD daemon (GET /1.0, GET /1.0/instances)", 15*time.Second, 20*time.Second, c.Ping))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	if _, err := lxd.BuildImage(ctx, lxd.ImageOptions{CacheDir: cache}); err != nil {
		t.Fatal(err)
	}
	return &lxdE2E{t: t, c: c}
}

// instances returns the instances whose config has key=value, by name.
func (x *lxdE2E) instances(key, value string) map[string]lxd.Instance {
	x.t.Helper()
	all, err := x.c.Instances(context.Background())
	if err != nil {
		x.t.Fatal(err)
	}
	out := map[string]lxd.Instance{}
	for _, in := range all {
		if in.Config[key] == value {
			out[in.Name] = in
		}
	}
	return out
}

// exists reports whether the named instance exists.
func (x *lxdE2E) exists(name string) bool {
	x.t.Helper()
	_, err := x.c.Instance(context.Background(), name)
	if err != nil && !lxd.IsNotFound(err) {
		x.t.Fatal(err)
	}
	return err == nil
}

// create makes a stopped instance of the image with config, deleted at the
// end of the test.
func (x *lxdE2E) create(name string, config map[string]string) {
	x.t.Helper()
	x.t.Cleanup(func() { x.remove(name) })
	err := x.c.CreateInstance(context.Background(), lxd.InstancesPost{Name: name, Type: "container",
		Source: lxd.InstanceSource{Type: "image", Alias: lxd.DefaultImage}, Config: config, Profiles: []string{"default"}})
	if err != nil {
		x.t.Fatalf("create instance %s: %v", name, err)
	}
}

// remove deletes an instance, stopping it first; gone already is fine.
func (x *lxdE2E) remove(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := x.c.SetState(ctx, name, "stop", true); err != nil && !lxd.IsNotFound(err) && !strings.Contains(err.Error(), "already stopped") {
		x.t.Logf("cleanup: stop %s: %v", name, err)
	}
	if err := x.c.DeleteInstance(ctx, name); err != nil && !lxd.IsNotFound(err) {
		x.t.Errorf("cleanup: delete instance %s: %v", name, err)
	}
}

// removeModel deletes every instance and network carrying the model's key.
func (x *lxdE2E) removeModel(modelUUID string) {
	if modelUUID == "" {
		return
	}
	for name := range x.instances(lxdUserKey+muster.TagModel, modelUUID) {
		x.remove(name)
	}
	ns, err := x.c.Networks(context.Background())
	if err != nil {
		x.t.Errorf("cleanup: list networks: %v", err)
		return
	}
	for _, n := range ns {
		if n.Config[lxdUserKey+muster.TagModel] == modelUUID {
			if err := x.c.DeleteNetwork(context.Background(), n.Name); err != nil && !lxd.IsNotFound(err) {
				x.t.Errorf("cleanup: delete network %s: %v", n.Name, err)
			}
		}
	}
}

// networks counts the networks carrying the model's key.
func (x *lxdE2E) networks(modelUUID string) int {
	x.t.Helper()
	ns, err := x.c.Networks(context.Background())
	if err != nil {
		x.t.Fatal(err)
	}
	n := 0
	for _, nw := range ns {
		if nw.Config[lxdUserKey+muster.TagModel] == modelUUID {
			n++
		}
	}
	return n
}

// freeLoopbackAddr returns a loopback address with a port free now.
func freeLoopbackAddr(tb testing.TB) string {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// modelUUID returns the uuid of a model from `muster models`.
func (pt *procTest) modelUUID(name string) string {
	pt.t.Helper()
	for _, l := range strings.Split(pt.cli("models"), "\n") {
		if f := strings.Fields(l); len(f) == 4 && strings.TrimSuffix(f[0], "*") == name {
			return f[3]
		}
	}
	pt.t.Fatalf("model %s not listed", name)
	return ""
}

// status is `muster status --format json` of a model.
func (pt *procTest) status(model string) api.StatusScript {
	pt.t.Helper()
	var st api.StatusScript
	if err := json.Unmarshal([]byte(pt.cli("-m", model, "status", "--format", "json")), &st); err != nil {
		pt.t.Fatal(err)
	}
	return st
}

// SPEC §3.4, scenario 34, issue 15: a real `muster controller` with an lxd
// model over zones a, b, c. Six machines of one group boot LXD system
// containers through cloud-init, whose user data downloads the
// controller's own binary from the zone bridge's gateway, checks its
// SHA-256 and starts it under systemd; each machine becomes started
// because that agent logged in. The controller is killed (SIGKILL) during
// the launches and restarted: every machine still ends with exactly one
// container (C1, C2). Removing a machine deletes its container; an
// unknown instance with this model's keys is harvested, foreign ones are
// not; removing the model removes its bridges.
func TestLXDE2E(t *testing.T) {
	x := requireLXDE2E(t)
	const machines = 6
	pt := newProcTest(t)
	name := "lx-" + randomSuffix()
	var modelUUID string
	var ctrl *proc
	// Cleanups run last-in first-out: the controller stops before the
	// daemon is swept of what the test made.
	t.Cleanup(func() { x.removeModel(modelUUID) })
	t.Cleanup(func() {
		if ctrl != nil {
			ctrl.stop()
		}
	})
	// One address across restarts, as a real controller's --listen: the
	// agents dial the port the controller had when their container was made.
	listen := freeLoopbackAddr(t)
	start := func() *proc {
		p, _ := startProc(t, pt.env, pt.logPath, "controller listening on ", pt.bin,
			"controller", "--data-dir", pt.dataDir, "--listen", listen, "--log-format", "json")
		return p
	}
	ctrl = start()
	pt.cli("add-model", name, "--provider", "lxd", "--config", "zones=a,b,c")
	modelUUID = pt.modelUUID(name)
	pt.cli("-m", name, "model-config", "resync-interval=2s", "agent-heartbeat=2s")
	modelKey := lxdUserKey + muster.TagModel

	began := time.Now()
	pt.cli("-m", name, "add-machine", "-n", "6", "--group", "g")
	// Killed once the first container exists: the others are being made.
	testutil.EventuallyWithin(t, lxdBootDeadline, "a first container of the model", func() bool {
		return len(x.instances(modelKey, modelUUID)) > 0
	})
	ctrl.kill()
	t.Logf("killed the controller with %d of %d containers made", len(x.instances(modelKey, modelUUID)), machines)
	ctrl = start()

	var st api.StatusScript
	testutil.EventuallyWithin(t, lxdBootDeadline, "six machines started by their agents", func() bool {
		st = pt.status(name)
		started := 0
		for _, m := range st.Machines {
			if m.Status == string(muster.StatusStarted) {
				started++
			}
		}
		return len(st.Machines) == machines && started == machines
	})
	t.Logf("six machines started %s after add-machine", time.Since(began).Round(time.Second))
	perZone := map[string]int{}
	for _, m := range st.Machines {
		perZone[m.Zone]++
	}
	if perZone["a"] != 2 || perZone["b"] != 2 || perZone["c"] != 2 {
		t.Errorf("got machines per zone %v, want 2/2/2", perZone)
	}
	// Every machine has exactly one container, running, with its keys; no
	// container of the model lacks a machine.
	ins := x.instances(modelKey, modelUUID)
	byMachine := map[string][]string{}
	var controllerUUID string
	for n, in := range ins {
		byMachine[in.Config[lxdUserKey+muster.TagMachine]] = append(byMachine[in.Config[lxdUserKey+muster.TagMachine]], n)
		controllerUUID = in.Config[lxdUserKey+muster.TagController]
		if in.Status != "Running" || in.Config[lxd.KeyZone] == "" || controllerUUID == "" {
			t.Errorf("container %s: got status %s and config %v, want running with the muster keys", n, in.Status, in.Config)
		}
	}
	for id, m := range st.Machines {
		if got := byMachine[id]; len(got) != 1 || got[0] != m.InstanceID {
			t.Errorf("machine %s: got containers %v, want exactly its recorded %s", id, got, m.InstanceID)
		}
	}
	if len(ins) != machines {
		t.Fatalf("got %d containers of the model, want %d", len(ins), machines)
	}

	// Removing a machine deletes its container.
	var gone string
	for id := range st.Machines {
		gone = id
		break
	}
	goneInstance := st.Machines[gone].InstanceID
	pt.cli("-m", name, "remove-machine", gone)
	testutil.EventuallyWithin(t, lxdBootDeadline, "the removed machine's container to go", func() bool {
		_, ok := pt.status(name).Machines[gone]
		return !ok && !x.exists(goneInstance)
	})

	// Harvest: an unknown instance (this controller's and model's keys, no
	// machine) goes; one of another controller on this model and one with
	// no keys stay.
	suffix := randomSuffix()
	unknown, foreign, bare := "mu-e2e-unknown-"+suffix, "mu-e2e-foreign-"+suffix, "mu-e2e-bare-"+suffix
	x.create(unknown, map[string]string{lxdUserKey + muster.TagController: controllerUUID, modelKey: modelUUID})
	x.create(foreign, map[string]string{lxdUserKey + muster.TagController: muster.NewUUID(), modelKey: modelUUID, lxdUserKey + muster.TagMachine: "1"})
	x.create(bare, nil)
	pt.cli("-m", name, "model-config", "harvest-mode=unknown", "harvest-min-age=1s")
	testutil.EventuallyWithin(t, 2*time.Minute, "the unknown instance to be harvested", func() bool { return !x.exists(unknown) })
	if !x.exists(foreign) || !x.exists(bare) {
		t.Errorf("after the harvest: foreign instance exists %v, instance without keys exists %v; want both kept", x.exists(foreign), x.exists(bare))
	}
	if got := len(x.instances(modelKey, modelUUID)); got != machines-1+1 { // five machines and the foreign one
		t.Errorf("got %d instances with the model's key after the harvest, want %d", got, machines)
	}

	// Removing the rest and the model leaves no container or bridge of it.
	pt.cli("-m", name, "model-config", "harvest-mode=destroyed")
	var rest []string
	for id := range st.Machines {
		if id != gone {
			rest = append(rest, id)
		}
	}
	pt.cli(append([]string{"-m", name, "remove-machine", "--force"}, rest...)...)
	testutil.EventuallyWithin(t, lxdBootDeadline, "every machine removed", func() bool { return len(pt.status(name).Machines) == 0 })
	pt.cli("remove-model", name)
	testutil.EventuallyWithin(t, 2*time.Minute, "the model's bridges removed", func() bool { return x.networks(modelUUID) == 0 })
	if left := x.instances(modelKey, modelUUID); len(left) != 1 {
		t.Errorf("got instances %v with the model's key, want only the foreign one", left)
	}
	t.Logf("done %s after add-machine", time.Since(began).Round(time.Second))
}
