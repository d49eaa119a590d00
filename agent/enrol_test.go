package agent_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/agent"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/sim"
)

// certRuntime is an api.Runtime that knows only the identity certificate.
type certRuntime struct{ cert []byte }

func (certRuntime) Zones(context.Context, string) ([]api.ZoneInfo, error) { return nil, nil }
func (certRuntime) ProvisionerError(string) string                        { return "" }
func (certRuntime) Monitors(string) bool                                  { return false }
func (certRuntime) ValidateModel(muster.Model) error                      { return nil }
func (certRuntime) ProviderHandler(string) http.Handler                   { return nil }
func (certRuntime) AgentBinary(string) (string, error) {
	return "", muster.Errorf(muster.ENotFound, "none")
}
func (r certRuntime) IdentityCert(string) ([]byte, error) { return r.cert, nil }
func (certRuntime) Offerings(string) muster.Offerings     { return muster.Offerings{} }

// enrolSetup: a machine of a batch with token tok, whose instance is a
// sim instance; the sim's metadata service is served over HTTP.
func enrolSetup(t *testing.T) (h *harness, cfg muster.AgentConfig, imds string) {
	t.Helper()
	cloud, err := sim.Open(sim.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cloud.Close() })
	simTS := httptest.NewServer(sim.NewServer(cloud))
	t.Cleanup(simTS.Close)
	h = newHarnessRuntime(t, certRuntime{cert: cloud.IdentityCert()})
	ctx := context.Background()
	ids, err := h.admin.AddMachines(ctx, "default", api.AddMachinesRequest{Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	inst, err := cloud.AddInstance("a", "c", h.model.UUID)
	if err != nil {
		t.Fatal(err)
	}
	nonce := "machine-0:" + muster.NewUUID()
	if err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{ID: ids[0], Nonce: muster.Ptr(nonce),
		PasswordHash: muster.Ptr(muster.HashSecret(muster.NewSecret()))}}); err != nil {
		t.Fatal(err)
	}
	if errs, err := h.store.RecordInstances(ctx, h.model.UUID, []muster.InstanceRecord{{MachineID: ids[0], Nonce: nonce,
		Info: muster.InstanceInfo{InstanceID: inst.ID, Zone: "a", Hardware: muster.Hardware{Arch: "amd64", AvailabilityZone: "a"}}}}); err != nil || errs[0] != nil {
		t.Fatalf("record: %v %v", errs, err)
	}
	tok := muster.NewSecret()
	if err := h.store.SetEnrolment(ctx, h.model.UUID, ids, muster.HashSecret(tok)); err != nil {
		t.Fatal(err)
	}
	imds = simTS.URL + sim.IMDSPrefix + inst.ID + "/latest"
	cfg = muster.AgentConfig{Controller: "c", Model: h.model.UUID, Machine: ids[0], EnrolToken: tok,
		APIAddresses: []string{h.ts.URL}, CACert: string(h.caPEM), MetadataURL: imds}
	return h, cfg, imds
}

// An agent with an enrolment config reads its identity from the metadata
// service, enrols, keeps the credentials it got (OnEnrolled), logs in with
// them and reports the machine started. The same config cannot enrol a
// second time, and a wrong token is refused: both agents give up.
func TestAgentEnrolsThenLogsIn(t *testing.T) {
	h, cfg, _ := enrolSetup(t)
	started := make(chan struct{}, 4)
	opts := h.options(started)
	var mu sync.Mutex
	var kept muster.AgentConfig
	opts.OnEnrolled = func(c muster.AgentConfig) error { mu.Lock(); kept = c; mu.Unlock(); return nil }
	h.run(t, cfg, opts)
	waitFor(t, started, "the enrolled agent to report started")
	if m := h.machine(t, cfg.Machine); m.Status != muster.StatusStarted {
		t.Fatalf("machine status %s, want started", m.Status)
	}
	mu.Lock()
	if kept.Password == "" || kept.Nonce != h.machine(t, cfg.Machine).Nonce || kept.EnrolToken != "" || kept.Enrolling() {
		t.Errorf("kept config %+v: want the machine's nonce and a password, no token", kept)
	}
	mu.Unlock()
	// The enrolment's session served and it carried the started report:
	// no login request, no separate report.
	if n := h.logins.Load(); n != 0 {
		t.Errorf("%d login requests after enrolling, want 0 (the enrolment opened the session)", n)
	}
	if n := h.machineWrites.Load(); n != 0 {
		t.Errorf("%d machine writes after enrolling, want 0 (the enrolment reported the machine started)", n)
	}
	if m := h.machine(t, cfg.Machine); m.Instance == nil || m.Instance.Hardware.Cores == 0 || m.Instance.Hardware.Arch != "amd64" {
		t.Errorf("hardware after the enrolment's report: %+v, want the agent's cores over the recorded arch", m.Instance)
	}

	for name, c := range map[string]muster.AgentConfig{
		"replay":      cfg,
		"wrong token": func() muster.AgentConfig { c := cfg; c.EnrolToken = muster.NewSecret(); return c }(),
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := agent.Run(ctx, c, h.options(nil))
		cancel()
		if err == nil || !strings.Contains(err.Error(), "enrol") {
			t.Errorf("%s: Run returned %v, want an enrolment refusal", name, err)
		}
	}
}

// An enrolment the controller answers without applying the report (the
// report went missing, or its write failed) leaves the agent to report
// the machine started itself.
func TestAgentReportsWhenTheEnrolmentDidNot(t *testing.T) {
	h, cfg, _ := enrolSetup(t)
	h.stripReports.Store(true)
	started := make(chan struct{}, 1)
	h.run(t, cfg, h.options(started))
	waitFor(t, started, "the enrolled agent to report started")
	if m := h.machine(t, cfg.Machine); m.Status != muster.StatusStarted {
		t.Fatalf("machine status %s, want started", m.Status)
	}
	if n := h.machineWrites.Load(); n != 1 {
		t.Fatalf("%d machine writes, want 1 (the agent's own report)", n)
	}
}

// FetchIdentity follows IMDSv2 (token, then document and signature) and
// fails on a metadata service that does not answer.
func TestFetchIdentity(t *testing.T) {
	_, _, imds := enrolSetup(t)
	doc, sig, err := agent.FetchIdentity(context.Background(), http.DefaultClient, imds+"/")
	if err != nil || !strings.Contains(string(doc), `"instanceId"`) || sig == "" {
		t.Fatalf("FetchIdentity: %s %q %v", doc, sig, err)
	}
	if _, _, err := agent.FetchIdentity(context.Background(), http.DefaultClient, strings.Replace(imds, "/i-", "/i-nope", 1)); err == nil {
		t.Fatalf("an unknown instance's metadata: no error")
	}
}

// SaveConfig writes a config LoadConfig reads back, mode 0600.
func TestSaveConfig(t *testing.T) {
	_, cfg, _ := enrolSetup(t)
	cfg.EnrolToken, cfg.Nonce, cfg.Password = "", "machine-0:n", "pw"
	path := filepath.Join(t.TempDir(), "agent.json")
	if err := agent.SaveConfig(path, cfg); err != nil {
		t.Fatal(err)
	}
	got, err := agent.LoadConfig(path)
	if err != nil || got.Password != "pw" || got.Nonce != "machine-0:n" || got.Enrolling() {
		t.Fatalf("LoadConfig: %+v %v", got, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	if err := agent.SaveConfig(filepath.Join(path, "sub"), cfg); err == nil {
		t.Errorf("save under a file: no error")
	}
}
