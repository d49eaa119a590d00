package simserver

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/auth"
	"github.com/musterhq/muster/cloudinit"
	"github.com/musterhq/muster/internal/testutil"
	"github.com/musterhq/muster/sim"
)

// fakeController records agent logins and refuses them with 503, so the
// agents keep trying. It answers enrolments whose identity verifies with
// cert with credentials made from the machine id, and records them.
type fakeController struct {
	mu      sync.Mutex
	cert    []byte
	logins  map[string]api.LoginRequest // by machine
	enrols  map[string]string           // machine → instance id of the document
	enrolTk map[string]string           // machine → token
}

func (f *fakeController) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/v1/agent/login":
		var req api.LoginRequest
		if json.NewDecoder(r.Body).Decode(&req) == nil {
			f.mu.Lock()
			f.logins[req.Machine] = req
			f.mu.Unlock()
		}
	case api.EnrolPath:
		var req api.EnrolRequest
		if json.NewDecoder(r.Body).Decode(&req) == nil {
			f.mu.Lock()
			id, err := auth.VerifyIdentity(f.cert, []byte(req.Document), req.Signature)
			if err == nil {
				f.enrols[req.Machine], f.enrolTk[req.Machine] = id.InstanceID, req.Token
			}
			f.mu.Unlock()
			if err == nil {
				w.Header().Set("Content-Type", "application/json")
				json.NewEncoder(w).Encode(api.EnrolResult{Machine: req.Machine, Nonce: "n-" + req.Machine, Password: "pw-" + req.Machine})
				return
			}
		}
	}
	http.Error(w, `{"code":"unavailable","message":"not yet"}`, http.StatusServiceUnavailable)
}

// newAgentsFixture starts a fake controller over TLS (its URL and CA
// returned) and a sim whose instances run agents, both closed at the end
// of the test.
func newAgentsFixture(t *testing.T) (fc *fakeController, srvURL, ca string, ag *agents, cloud *sim.Cloud) {
	fc = &fakeController{logins: map[string]api.LoginRequest{}, enrols: map[string]string{}, enrolTk: map[string]string{}}
	srv := httptest.NewTLSServer(fc)
	t.Cleanup(srv.Close)
	ca = string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	ag = newAgents(slog.New(slog.DiscardHandler), nil, 0)
	cloud, err := sim.Open(sim.Config{OnStart: ag.onStart, OnStop: ag.onStop})
	if err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the agents stop before the cloud closes.
	t.Cleanup(func() { cloud.Close() })
	t.Cleanup(ag.close)
	ag.setCloud(cloud)
	fc.mu.Lock()
	fc.cert = cloud.IdentityCert()
	fc.mu.Unlock()
	return fc, srv.URL, ca, ag, cloud
}

func (f *fakeController) enrolled(machine string) (instance, token string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.enrols[machine], f.enrolTk[machine]
}

func (f *fakeController) login(machine string) (api.LoginRequest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	l, ok := f.logins[machine]
	return l, ok
}

// The agents of a batch's instances enrol with the batch token and their
// own instance's signed identity, then log in with the credentials handed
// out, to the controller in their config, over TLS verified with the
// config's CA; the shared user data holds no password or nonce; a kept
// enrolment survives a stop and start (no second enrolment); stopping or terminating an instance stops its agent,
// starting it again boots a new one; an instance without an agent config
// gets none.
func TestAgentsFollowInstances(t *testing.T) {
	fc, srvURL, ca, ag, cloud := newAgentsFixture(t)
	const batchToken = "the-batch-token"

	var ls []cloudinit.Launch
	var as []*cloudinit.Agent
	var cfgs []muster.AgentConfig
	for i := range 3 {
		cfg := muster.AgentConfig{Controller: "c", Model: "m", Machine: strconv.Itoa(10 + i), EnrolToken: batchToken,
			APIAddresses: []string{srvURL}, CACert: ca}
		ud, _ := json.Marshal(cfg)
		a, err := cloudinit.AgentFor(muster.StartParams{MachineID: cfg.Machine, UserData: ud, AgentBinaries: []muster.AgentBinary{
			{OS: "linux", Arch: "amd64", URL: "https://h/bin", SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}}, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, cloudinit.Launch{Machine: cfg.Machine, LaunchToken: muster.NewSecret()})
		as = append(as, a)
		cfgs = append(cfgs, cfg)
	}
	ud, err := cloudinit.Batch(ls, as, "i=0")
	if err != nil {
		t.Fatal(err)
	}
	typ, err := sim.MatchType(muster.Constraints{}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	res, err := cloud.Launch(sim.LaunchRequest{Type: typ, Base: muster.DefaultBase, Min: 3, Max: 3, UserData: ud})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cloud.Launch(sim.LaunchRequest{Type: typ, Base: muster.DefaultBase, Min: 1, Max: 1, UserData: []byte("#!/bin/sh\n")}); err != nil {
		t.Fatal(err)
	}
	byMachine := map[string]string{} // machine → instance id
	for _, inst := range res.Instances {
		byMachine[ls[inst.EC2.LaunchIndex].Machine] = inst.ID
	}
	if strings.Contains(string(ud), "password") || strings.Contains(string(ud), "nonce") {
		t.Fatalf("batch user data carries a password or nonce:\n%s", ud)
	}
	testutil.Eventually(t, "each agent enrolled and logged in with its own credentials", func() bool {
		for _, cfg := range cfgs {
			l, ok := fc.login(cfg.Machine)
			if !ok {
				return false
			}
			if l.Password != "pw-"+cfg.Machine || l.Nonce != "n-"+cfg.Machine || l.Model != "m" {
				t.Fatalf("machine %s logged in with %+v, want the credentials it enrolled for", cfg.Machine, l)
			}
		}
		return true
	})
	for _, cfg := range cfgs {
		inst, tok := fc.enrolled(cfg.Machine)
		if inst != byMachine[cfg.Machine] || tok != batchToken {
			t.Errorf("machine %s enrolled with instance %s's identity and token %q, want %s's and the batch token", cfg.Machine, inst, tok, byMachine[cfg.Machine])
		}
	}
	if n := ag.count(); n != 3 {
		t.Errorf("%d agents run, want 3 (none for the instance without an agent config)", n)
	}

	stopped := byMachine["10"]
	if _, _, err := cloud.Power([]string{stopped}, false); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the stopped instance's agent gone", func() bool { return ag.count() == 2 })
	if _, _, err := cloud.Power([]string{stopped}, true); err != nil {
		t.Fatal(err)
	}
	fc.mu.Lock()
	delete(fc.logins, "10")
	delete(fc.enrols, "10")
	fc.mu.Unlock()
	testutil.Eventually(t, "the restarted instance's agent back", func() bool { return ag.count() == 3 })
	testutil.Eventually(t, "the restarted agent logged in with its kept credentials", func() bool {
		l, ok := fc.login("10")
		return ok && l.Password == "pw-10"
	})
	if inst, _ := fc.enrolled("10"); inst != "" {
		t.Errorf("the restarted agent enrolled again")
	}
	if _, unknown := cloud.Terminate([]string{byMachine["11"], byMachine["12"]}); unknown != nil {
		t.Fatal(unknown)
	}
	testutil.Eventually(t, "the terminated instances' agents gone", func() bool { return ag.count() == 1 })
	ag.close()
	if n := ag.count(); n != 0 {
		t.Errorf("%d agents run after close", n)
	}
}

// A sim reopened from its state file boots the agents of its running
// instances again, and not those of stopped ones.
func TestAgentsAfterSimRestart(t *testing.T) {
	fc := &fakeController{logins: map[string]api.LoginRequest{}}
	srv := httptest.NewTLSServer(fc)
	defer srv.Close()
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}))
	state := filepath.Join(t.TempDir(), "sim.json")
	typ, err := sim.MatchType(muster.Constraints{}, "amd64")
	if err != nil {
		t.Fatal(err)
	}
	cloud, err := sim.Open(sim.Config{StateFile: state})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for i := range 2 {
		cfg := muster.AgentConfig{Controller: "c", Model: "m", Machine: strconv.Itoa(i), Nonce: "machine-0:" + muster.NewUUID(),
			Password: muster.NewSecret(), APIAddresses: []string{srv.URL}, CACert: ca}
		b, _ := json.Marshal(cfg)
		a, err := cloudinit.AgentFor(muster.StartParams{MachineID: cfg.Machine, UserData: b, AgentBinaries: []muster.AgentBinary{
			{OS: "linux", Arch: "amd64", URL: "https://h/bin", SHA256: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"}}}, "amd64")
		if err != nil {
			t.Fatal(err)
		}
		ud, err := cloudinit.Single(a)
		if err != nil {
			t.Fatal(err)
		}
		res, err := cloud.Launch(sim.LaunchRequest{Type: typ, Base: muster.DefaultBase, Min: 1, Max: 1, UserData: ud})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.Instances[0].ID)
	}
	if _, _, err := cloud.Power(ids[1:], false); err != nil {
		t.Fatal(err)
	}
	if err := cloud.Close(); err != nil {
		t.Fatal(err)
	}

	ag := newAgents(slog.New(slog.DiscardHandler), nil, 0)
	defer ag.close()
	reopened, err := sim.Open(sim.Config{StateFile: state, OnStart: ag.onStart, OnStop: ag.onStop})
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	ag.setCloud(reopened)
	testutil.Eventually(t, "the running instance's agent logged in", func() bool { _, ok := fc.login("0"); return ok })
	if n := ag.count(); n != 1 {
		t.Errorf("%d agents after the restart, want 1 (the stopped instance has none)", n)
	}
	if _, ok := fc.login("1"); ok {
		t.Errorf("the stopped instance's agent logged in")
	}
}

// Instances a sim model starts through the sim's own API (the provider's
// start, whose user data is the JSON agent config muster's provisioner
// makes) run agents too: one with a password logs in with it, one with a
// batch token enrols with its instance's identity and then logs in; user
// data that is a bad agent config, or none, runs no agent.
func TestAgentsOfSimModelStarts(t *testing.T) {
	fc, srvURL, ca, ag, cloud := newAgentsFixture(t)

	userData := func(cfg muster.AgentConfig) []byte {
		cfg.Controller, cfg.Model, cfg.APIAddresses, cfg.CACert = "c", "m", []string{srvURL}, ca
		b, err := json.Marshal(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	ps := []muster.StartParams{
		{MachineID: "20", UserData: userData(muster.AgentConfig{Machine: "20", Nonce: "machine-20:n", Password: "pw-20"})},
		{MachineID: "21", UserData: userData(muster.AgentConfig{Machine: "21", EnrolToken: "the-batch-token"})},
		{MachineID: "22", UserData: []byte(`{"model": "m"}`)}, // no ca-cert: not a config
		{MachineID: "23"},
	}
	for i := range ps {
		ps[i].Base, ps[i].LaunchToken = muster.DefaultBase, "tok-"+ps[i].MachineID
	}
	byMachine := map[string]string{}
	for i, out := range cloud.Provider("c", "m").StartInstances(context.Background(), ps) {
		if out.Err != nil {
			t.Fatalf("start machine %s: %v", ps[i].MachineID, out.Err)
		}
		byMachine[ps[i].MachineID] = out.Result.Instance.ID
	}
	testutil.Eventually(t, "machine 20's agent logged in with its password", func() bool {
		l, ok := fc.login("20")
		return ok && l.Password == "pw-20" && l.Nonce == "machine-20:n" && l.Model == "m"
	})
	testutil.Eventually(t, "machine 21's agent enrolled and logged in", func() bool {
		l, ok := fc.login("21")
		return ok && l.Password == "pw-21"
	})
	if inst, tok := fc.enrolled("21"); inst != byMachine["21"] || tok != "the-batch-token" {
		t.Errorf("machine 21 enrolled with instance %q's identity and token %q, want %s's and the batch token", inst, tok, byMachine["21"])
	}
	if n := ag.count(); n != 2 {
		t.Errorf("%d agents run, want 2 (none for a bad config or no user data)", n)
	}
	for _, m := range []string{"22", "23"} {
		if _, ok := fc.login(m); ok {
			t.Errorf("machine %s's instance ran an agent", m)
		}
	}
}
