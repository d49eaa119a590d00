package controller

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
)

// testProviders are the provider kinds of the tests' controllers.
var testProviders = map[string]ProviderKind{"sim": Sim, "ec2": EC2, "docker": Docker}

// agentsDeadline bounds the waits of the agent tests; it is a deadline for
// waiting, not a timing assertion.
const agentsDeadline = 60 * time.Second

// agentsController is a controller on 127.0.0.1:0 in a temp dir, with an
// admin client.
type agentsController struct {
	ctrl   *Controller
	client *api.Client
	dir    string
	log    *bytes.Buffer
}

type lockedBuffer struct {
	mu sync.Mutex
	b  *bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// openAgentsController starts a controller (cfg's DataDir, Listen and
// Logger are filled in) and closes it at the end of the test.
func openAgentsController(tb testing.TB, cfg Config) *agentsController {
	tb.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	cfg.Listen = "127.0.0.1:0"
	cfg.Providers = testProviders
	// Simulated instances boot at once.
	cfg.SimAgentBootDelay = 10 * time.Millisecond
	logBuf := &bytes.Buffer{}
	lb := &lockedBuffer{b: logBuf}
	cfg.Logger = slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithTimeout(context.Background(), agentsDeadline)
	defer cancel()
	c, err := Open(ctx, cfg)
	if err != nil {
		tb.Fatalf("open controller: %v", err)
	}
	ac := &agentsController{ctrl: c, dir: cfg.DataDir, log: logBuf}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if ac.ctrl != nil { // a test may have closed it
			if err := ac.ctrl.Close(ctx); err != nil {
				tb.Errorf("close controller: %v", err)
			}
		}
		if tb.Failed() {
			lb.mu.Lock()
			lines := strings.Split(logBuf.String(), "\n")
			lb.mu.Unlock()
			tb.Logf("controller log (tail):\n%s", strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
	})
	cc, err := LoadClientConfig(c.clientPath)
	if err != nil {
		tb.Fatal(err)
	}
	ac.client, err = api.NewClient(api.ClientConfig{URL: c.url, CACert: []byte(cc.CACert), Token: cc.Token})
	if err != nil {
		tb.Fatal(err)
	}
	return ac
}

func (ac *agentsController) status(tb testing.TB, model string) api.Status {
	tb.Helper()
	st, err := ac.client.Status(context.Background(), model)
	if err != nil {
		tb.Fatalf("status: %v", err)
	}
	return st
}

func (ac *agentsController) addMachines(tb testing.TB, model string, req api.AddMachinesRequest) []string {
	tb.Helper()
	ids, err := ac.client.AddMachines(context.Background(), model, req)
	if err != nil {
		tb.Fatalf("add machines: %v", err)
	}
	return ids
}

func (ac *agentsController) setConfig(tb testing.TB, model string, kv map[string]string) {
	tb.Helper()
	if _, err := ac.client.SetModelConfig(context.Background(), model, kv); err != nil {
		tb.Fatalf("set model config: %v", err)
	}
}

func (ac *agentsController) modelUUID(tb testing.TB, name string) string {
	tb.Helper()
	m, err := ac.ctrl.store.Model(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return m.UUID
}

// waitMachines waits until the model's status has cond hold for every one
// of ids, and returns that status.
func (ac *agentsController) waitMachines(tb testing.TB, model, what string, ids []string, cond func(api.MachineStatus) bool) api.Status {
	tb.Helper()
	var st api.Status
	testutil.EventuallyWithin(tb, agentsDeadline, fmt.Sprintf("machines %v %s", ids, what), func() bool {
		st = ac.status(tb, model)
		for _, id := range ids {
			if m, found := st.Machines[id]; !found || !cond(m) {
				return false
			}
		}
		return true
	})
	return st
}

func TestAgentCatalogue(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	dir := t.TempDir()
	cat := NewAgentCatalogue(dir)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := cat.registerSelf(self, now); err != nil {
		t.Fatal(err)
	}
	osName, arch := hostPlatform()
	bins, err := cat.FindAgentBinaries(ctx, muster.Version, osName, arch)
	if err != nil || len(bins) != 1 || bins[0].Path != self || len(bins[0].SHA256) != 64 {
		t.Fatalf("own binary: got %+v, %v; want one entry for %s", bins, err, self)
	}
	// Registering again with the file unchanged keeps the entry.
	if err := cat.registerSelf(self, now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if es, _ := cat.List(); len(es) != 1 || !es[0].Added.Equal(now) {
		t.Fatalf("got %+v, want the first registration kept", es)
	}

	_, err = cat.FindAgentBinaries(ctx, muster.Version, "linux", "arm64")
	if muster.ErrorCode(err) != muster.ENotFound || !strings.Contains(err.Error(), "no matching agent binaries available") {
		t.Fatalf("arm64 before add: got %v, want not-found", err)
	}
	arm := testutil.WriteELF(t, 183)
	e, err := cat.Add(arm, muster.Version, "linux", "arm64", now)
	if err != nil {
		t.Fatal(err)
	}
	bins, err = cat.FindAgentBinaries(ctx, muster.Version, "linux", "arm64")
	if err != nil || len(bins) != 1 || bins[0].SHA256 != e.SHA256 || filepath.Dir(bins[0].Path) != cat.dir {
		t.Fatalf("arm64 after add: got %+v, %v", bins, err)
	}
	got, _ := os.ReadFile(bins[0].Path)
	want, _ := os.ReadFile(arm)
	if !bytes.Equal(got, want) {
		t.Fatal("catalogue copy differs from the added file")
	}
	if _, err := cat.FindAgentBinaries(ctx, "9.9.9", "linux", "arm64"); muster.ErrorCode(err) != muster.ENotFound {
		t.Fatalf("other version: got %v, want not-found", err)
	}
	// By digest, for GET /v1/agent-binaries/{sha256}; with download URLs
	// for a model's instances.
	if p, err := cat.pathOf(e.SHA256); err != nil || p != bins[0].Path {
		t.Fatalf("pathOf(%s) = %q, %v; want %s", e.SHA256, p, err, bins[0].Path)
	}
	if _, err := cat.pathOf(strings.Repeat("0", 64)); muster.ErrorCode(err) != muster.ENotFound {
		t.Fatalf("pathOf(unknown) = %v, want not-found", err)
	}
	withURLs, err := downloadURLs{cat, "https://10.0.0.1:17070"}.FindAgentBinaries(ctx, muster.Version, "linux", "arm64")
	if err != nil || len(withURLs) != 1 || withURLs[0].URL != "https://10.0.0.1:17070/v1/agent-binaries/"+e.SHA256 {
		t.Fatalf("download URLs: got %+v, %v", withURLs, err)
	}

	notELF := filepath.Join(t.TempDir(), "script")
	os.WriteFile(notELF, []byte("#!/bin/sh\n"), 0o755)
	for _, tc := range []struct {
		name, file, version, os, arch, want string
	}{
		{"wrong arch", testutil.WriteELF(t, 62), muster.Version, "linux", "arm64", "is for amd64, not arm64"},
		{"not elf", notELF, muster.Version, "linux", "amd64", "not a linux executable"},
		{"unknown arch", arm, muster.Version, "linux", "sparc", `bad arch "sparc"`},
		{"other os", arm, muster.Version, "windows", "arm64", `bad os "windows"`},
		{"missing file", filepath.Join(dir, "nope"), muster.Version, "linux", "arm64", "no such file"},
		{"directory", dir, muster.Version, "linux", "arm64", "not a non-empty regular file"},
		{"bad version", arm, "../x", "linux", "arm64", "bad version"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := cat.List()
			_, err := cat.Add(tc.file, tc.version, tc.os, tc.arch, now)
			if muster.ErrorCode(err) != muster.EInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want invalid containing %q", err, tc.want)
			}
			if after, _ := cat.List(); len(after) != len(before) {
				t.Fatalf("got %d entries, want %d: a refused add changes nothing", len(after), len(before))
			}
		})
	}
}

// P8 and scenario 20: a machine of an arch without agent binaries fails
// to provision; after an agent binary is added a retry succeeds without
// restarting the controller.
func TestAgentBinariesAddTakesEffectWithoutRestart(t *testing.T) {
	ac := openAgentsController(t, Config{})
	ac.setConfig(t, "default", map[string]string{"sim-agents": "false"})
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Constraints: "arch=arm64"})
	st := ac.waitMachines(t, "default", "provisioning error", ids, func(m api.MachineStatus) bool {
		return m.InstanceStatus == string(muster.InstanceProvisioningError)
	})
	if msg := st.Machines[ids[0]].InstanceMessage; !strings.Contains(msg, "no matching agent binaries available for arch arm64") {
		t.Fatalf("got message %q, want the no-agent-binaries error", msg)
	}
	if _, err := NewAgentCatalogue(ac.dir).Add(testutil.WriteELF(t, 183), muster.Version, "linux", "arm64", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatalf("add: %v", err)
	}
	if _, err := ac.client.RetryProvisioning(context.Background(), "default", api.RetryProvisioningRequest{IDs: ids}); err != nil {
		t.Fatal(err)
	}
	ac.waitMachines(t, "default", "running", ids, func(m api.MachineStatus) bool {
		return m.InstanceStatus == string(muster.InstanceRunning)
	})
}

// SPEC §3.1: simulated agents make machines started, with the sim's
// hardware and addresses; a stopped instance stops its agent.
func TestSimAgentsStartMachines(t *testing.T) {
	ac := openAgentsController(t, Config{})
	// Agents learn that their machine is dying from a heartbeat answer.
	ac.setConfig(t, "default", map[string]string{"agent-heartbeat": "200ms"})
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Count: 3, Group: "web", Constraints: "cores=2"})
	st := ac.waitMachines(t, "default", "started", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	zones := map[string]bool{}
	for _, id := range ids {
		m := st.Machines[id]
		zones[m.Zone] = true
		if !strings.Contains(m.Hardware, "cores=2") || !strings.Contains(m.Hardware, "availability-zone="+m.Zone) || len(m.Addresses) == 0 {
			t.Errorf("machine %s: got hardware %q addresses %v, want the sim instance's", id, m.Hardware, m.Addresses)
		}
	}
	if len(zones) != 3 {
		t.Errorf("got zones %v, want 3", zones)
	}
	agents := ac.ctrl.runner(ac.modelUUID(t, "default")).provider.simAgents
	if got := agents.count(); got != 3 {
		t.Fatalf("got %d simulated agents, want 3", got)
	}
	// Not forced: the agent makes its dying machine dead, then the
	// provisioner stops the instance, which stops the agent.
	if err := ac.client.RemoveMachines(context.Background(), "default", api.RemoveMachinesRequest{IDs: ids[:1]}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, agentsDeadline, "the removed machine's agent to stop", func() bool { return agents.count() == 2 })
	testutil.EventuallyWithin(t, agentsDeadline, "the removed machine gone", func() bool {
		_, ok := ac.status(t, "default").Machines[ids[0]]
		return !ok
	})
	if got := agents.started.Load(); got < 3 {
		t.Errorf("got %d started reports, want at least 3", got)
	}
}

// An agent made during its instance's boot delay is made again at boot
// when an earlier boot's agent enrolled meanwhile: it logs in with the
// kept credentials instead of enrolling a second time (refused).
func TestSimAgentMadeAgainWhenEnrolledDuringBoot(t *testing.T) {
	ac := openAgentsController(t, Config{})
	ac.setConfig(t, "default", map[string]string{"sim-agents": "false"})
	// A batch (one zone): its instances enrol with the batch's token.
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Count: 2, Placement: "zone=a"})
	st := ac.waitMachines(t, "default", "running", ids, func(m api.MachineStatus) bool { return m.InstanceStatus == "running" })
	agents := ac.ctrl.runner(ac.modelUUID(t, "default")).provider.simAgents
	inst := st.Machines[ids[0]].InstanceID
	cfg, err := muster.ParseAgentConfig(agents.cloud.UserData(inst))
	if err != nil {
		t.Fatal(err)
	}
	cfg.APIAddresses, cfg.CACert = []string{agents.apiURL}, agents.caCert
	// The agent made as the boot delay began: nothing kept yet, it enrols.
	pre, err := agents.newAgent(inst, cfg, muster.Hardware{}, nil)
	if err != nil || !pre.Enrolling() {
		t.Fatalf("agent made before any enrolment: enrolling %v, err %v", err == nil && pre.Enrolling(), err)
	}
	// An earlier boot's agent enrols meanwhile and keeps its config.
	ctx, cancel := context.WithCancel(context.Background())
	earlier, err := agents.newAgent(inst, cfg, muster.Hardware{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- earlier.Run(ctx) }()
	testutil.EventuallyWithin(t, agentsDeadline, "the earlier agent's config kept", func() bool { return agents.kept(inst) })
	cancel()
	<-done
	ac.setConfig(t, "default", map[string]string{"sim-agents": "true"})
	testutil.EventuallyWithin(t, agentsDeadline, "sim-agents on", func() bool { return agents.isEnabled(context.Background()) })

	bctx, bcancel := context.WithCancel(context.Background())
	booted := make(chan struct{})
	go func() {
		defer close(booted)
		agents.boot(bctx, inst, cfg, muster.Hardware{}, nil, false, pre)
	}()
	defer func() { bcancel(); <-booted }()
	testutil.EventuallyWithin(t, agentsDeadline, "the booted agent logged in or was refused", func() bool {
		return countEvents(t, ac, "default", "login") >= 2 || countEvents(t, ac, "default", "enrol-refused") > 0
	})
	if n := countEvents(t, ac, "default", "enrol-refused"); n != 0 {
		t.Fatalf("%d enrolments refused: the agent made before the enrolment enrolled again", n)
	}
}

// SPEC §3.1: sim-agents=false runs no agents: machines stay pending while
// their instances run.
func TestSimAgentsOff(t *testing.T) {
	ac := openAgentsController(t, Config{})
	ac.setConfig(t, "default", map[string]string{"sim-agents": "false"})
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Count: 2})
	ac.waitMachines(t, "default", "running", ids, func(m api.MachineStatus) bool {
		return m.InstanceStatus == string(muster.InstanceRunning)
	})
	agents := ac.ctrl.runner(ac.modelUUID(t, "default")).provider.simAgents
	// Once both instances have booted and skipped their agents, nothing
	// else would report the machines started.
	testutil.EventuallyWithin(t, agentsDeadline, "both simulated instances to skip their agents", func() bool { return agents.skipped.Load() == 2 })
	st := ac.status(t, "default")
	for _, id := range ids {
		if got := st.Machines[id].Status; got != string(muster.StatusPending) {
			t.Errorf("machine %s: got status %s, want pending", id, got)
		}
	}
	if got := agents.count(); got != 0 {
		t.Errorf("got %d agents running, want 0", got)
	}
}

// The agent listener serves the API on another host address, with a
// certificate for it, on the main listener's port when free.
func TestListenAgents(t *testing.T) {
	ac := openAgentsController(t, Config{})
	ctx := context.Background()
	urls, closeFn, err := ac.ctrl.listenAgents(ctx, []string{"127.0.0.2", "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ac.ctrl.listener.Addr().String())
	if want := []string{"https://127.0.0.2:" + port, ac.ctrl.url}; !slices.Equal(urls, want) {
		t.Fatalf("got %v, want %v", urls, want)
	}
	c, err := api.NewClient(api.ClientConfig{URL: urls[0], CACert: ac.ctrl.ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	// The API answers there, over TLS verified against the CA.
	_, err = c.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: "x", Nonce: "y"})
	if got := muster.ErrorCode(err); got != muster.EUnauthorized {
		t.Fatalf("login through the agent listener: got %v (code %q), want %q", err, got, muster.EUnauthorized)
	}
	closeFn()
	// A new connection is refused (an open one lives on until it idles).
	c, err = api.NewClient(api.ClientConfig{URL: urls[0], CACert: ac.ctrl.ca.CertPEM})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Login(ctx, api.LoginRequest{Model: "default", Machine: "0", Password: "x", Nonce: "y"})
	if got := muster.ErrorCode(err); got != muster.EUnavailable {
		t.Fatalf("after close: got %v (code %q), want %q", err, got, muster.EUnavailable)
	}
	if _, _, err := ac.ctrl.listenAgents(ctx, []string{"not-an-ip"}); err == nil {
		t.Fatal("bad address: got no error")
	}
}

func TestValidateDockerModel(t *testing.T) {
	for _, tc := range []struct {
		name   string
		config map[string]string
		want   string // "" = valid
	}{
		{"defaults", nil, ""},
		{"zones and host mode", map[string]string{"zones": "x,y", "network-mode": "host"}, ""},
		{"subnets", map[string]string{"zones": "a,b", "subnets": "a=10.77.1.0/24"}, ""},
		{"bad network mode", map[string]string{"network-mode": "weird"}, "network-mode"},
		{"unknown key", map[string]string{"endpoint": "http://x"}, `"endpoint"`},
		{"bad zone", map[string]string{"zones": "a,,b"}, "zones"},
		{"subnet of unknown zone", map[string]string{"zones": "a", "subnets": "q=10.1.0.0/24"}, "unknown zone"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateModel(testProviders, muster.Model{Name: "dk", Provider: "docker", Config: tc.config})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if muster.ErrorCode(err) != muster.EInvalid || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want invalid naming %q", err, tc.want)
			}
		})
	}
}

// The embedded sim reports the instances it reloads at a controller
// restart, so their agents run again.
func TestSimAgentsAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ac := openAgentsController(t, Config{DataDir: dir})
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Count: 3})
	ac.waitMachines(t, "default", "started", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	// The third is removed and its instance kept (released): after the
	// restart its agent is not started, so it logs no refused login.
	if err := ac.client.RemoveMachines(context.Background(), "default", api.RemoveMachinesRequest{IDs: ids[2:], Force: true, KeepInstance: true}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, agentsDeadline, "the released machine gone", func() bool {
		_, ok := ac.status(t, "default").Machines[ids[2]]
		return !ok
	})
	ids = ids[:2]
	agents := ac.ctrl.runner(ac.modelUUID(t, "default")).provider.simAgents
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ac.ctrl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if got := agents.count(); got != 0 {
		t.Fatalf("got %d agents after the controller closed, want 0", got)
	}
	ac.ctrl = nil

	ac2 := openAgentsController(t, Config{DataDir: dir})
	uuid := ac2.modelUUID(t, "default")
	testutil.EventuallyWithin(t, agentsDeadline, "the model to run again", func() bool { return ac2.ctrl.runner(uuid) != nil })
	agents2 := ac2.ctrl.runner(uuid).provider.simAgents
	testutil.EventuallyWithin(t, agentsDeadline, "both agents to report started again", func() bool { return agents2.started.Load() == 2 })
	testutil.EventuallyWithin(t, agentsDeadline, "the released instance's agent skipped", func() bool { return agents2.skipped.Load() == 1 })
	if got := agents2.count(); got != 2 {
		t.Errorf("got %d agents after the restart, want 2 (none for the released instance)", got)
	}
	st := ac2.status(t, "default")
	for _, id := range ids {
		if got := st.Machines[id].Status; got != string(muster.StatusStarted) {
			t.Errorf("machine %s: got status %s, want started", id, got)
		}
	}
}

// A restarted controller sets down the machines whose agents do not come
// back (SPEC §4: down after three missed heartbeats): it watches every
// started machine of a model from when the model runs on it again.
func TestMachinesDownWhenAgentsDoNotReturnAfterRestart(t *testing.T) {
	dir := t.TempDir()
	ac := openAgentsController(t, Config{DataDir: dir})
	ids := ac.addMachines(t, "default", api.AddMachinesRequest{Count: 2})
	ac.waitMachines(t, "default", "started", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	// After the restart no agent boots again, and heartbeats are due
	// every 100ms.
	if _, err := ac.client.SetModelConfig(context.Background(), "default", map[string]string{"sim-agents": "false", "agent-heartbeat": "100ms"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ac.ctrl.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ac.ctrl = nil
	ac2 := openAgentsController(t, Config{DataDir: dir})
	ac2.waitMachines(t, "default", "down", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusDown) })
}
