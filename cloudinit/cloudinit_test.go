package cloudinit

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
)

func testCA(tb testing.TB) string {
	tb.Helper()
	ca, err := auth.NewCA("muster test CA", time.Now())
	if err != nil {
		tb.Fatal(err)
	}
	return string(ca.CertPEM)
}

// params returns start params of machine with an agent config as the
// provisioner makes it and one matching binary.
func params(tb testing.TB, ca, machine, binURL, binSHA string) muster.StartParams {
	tb.Helper()
	cfg := muster.AgentConfig{
		Controller: "c", Model: "m", Machine: machine, Nonce: "machine-0:" + muster.NewUUID(),
		Password: muster.NewSecret(), APIAddresses: []string{"https://10.0.0.1:17070"}, CACert: ca,
	}
	ud, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return muster.StartParams{MachineID: machine, LaunchToken: muster.NewSecret(), Nonce: cfg.Nonce, UserData: ud,
		AgentBinaries: []muster.AgentBinary{
			{OS: "linux", Arch: "arm64", SHA256: strings.Repeat("0", 64), URL: "https://x/arm64"},
			{OS: "linux", Arch: "amd64", SHA256: binSHA, URL: binURL},
		}}
}

// batchParams returns start params of machine in a batch, as the
// provisioner makes them (SPEC §4): an enrolment config with the batch's
// token, no nonce or password.
func batchParams(tb testing.TB, ca, machine, token, binURL, binSHA string) muster.StartParams {
	tb.Helper()
	sp := params(tb, ca, machine, binURL, binSHA)
	ud, err := json.Marshal(muster.AgentConfig{Controller: "c", Model: "m", Machine: machine, EnrolToken: token,
		APIAddresses: []string{"https://10.0.0.1:17070"}, CACert: ca})
	if err != nil {
		tb.Fatal(err)
	}
	sp.UserData = ud
	return sp
}

// noSecrets fails when a batch's shared user data carries a machine's
// password or nonce.
func noSecrets(tb testing.TB, ud []byte) {
	tb.Helper()
	for _, k := range []string{`"password"`, `"nonce"`, "password", "machine-0:"} {
		if strings.Contains(string(ud), k) {
			tb.Fatalf("batch user data holds %s:\n%s", k, ud)
		}
	}
}

const zeroSHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func agent(tb testing.TB, sp muster.StartParams) *Agent {
	tb.Helper()
	a, err := AgentFor(sp, "amd64")
	if err != nil || a == nil {
		tb.Fatalf("AgentFor: %v, %v", a, err)
	}
	return a
}

func TestSingle(t *testing.T) {
	sp := params(t, testCA(t), "7", "https://h:17070/v1/agent-binaries/"+zeroSHA, zeroSHA)
	ud, err := Single(agent(t, sp))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := Parse(ud)
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := cc.File(AgentConfigPath); !ok || f.Permissions != "0600" {
		t.Errorf("agent config: %+v", f)
	} else if got, err := muster.ParseAgentConfig([]byte(f.Content)); err != nil || got.Password == "" || got.Machine != "7" {
		t.Errorf("agent config %+v: %v", got, err)
	}
	script, ok := cc.File(BootstrapPath)
	if !ok {
		t.Fatal("no bootstrap script")
	}
	for _, want := range []string{"--cacert " + CAPath, "'https://h:17070/v1/agent-binaries/" + zeroSHA + "'", zeroSHA + "  " + AgentPath + ".download' | sha256sum -c -", "systemctl enable --now muster-agent"} {
		if !strings.Contains(script.Content, want) {
			t.Errorf("script lacks %q:\n%s", want, script.Content)
		}
	}
	if len(cc.RunCmd) != 1 || strings.Join(cc.RunCmd[0], " ") != "sh "+BootstrapPath {
		t.Errorf("runcmd %v", cc.RunCmd)
	}
	if ud, err := Single(nil); ud != nil || err != nil {
		t.Errorf("Single(nil) = %q, %v", ud, err)
	}
	if a, err := AgentFor(muster.StartParams{MachineID: "1"}, "amd64"); a != nil || err != nil {
		t.Errorf("AgentFor without user data = %v, %v", a, err)
	}
}

func TestAgentForErrors(t *testing.T) {
	ca := testCA(t)
	for _, tt := range []struct {
		name string
		edit func(sp *muster.StartParams)
		want string
	}{
		{"no binary", func(sp *muster.StartParams) { sp.AgentBinaries = sp.AgentBinaries[:1] }, "no agent binary download URL for linux/amd64"},
		{"file URL", func(sp *muster.StartParams) { sp.AgentBinaries[1].URL = "file:///etc/passwd" }, "bad agent binary download URL"},
		{"newline in URL", func(sp *muster.StartParams) { sp.AgentBinaries[1].URL = "https://h/a\nreboot" }, "bad agent binary download URL"},
		{"bad SHA", func(sp *muster.StartParams) { sp.AgentBinaries[1].SHA256 = "x; reboot" }, "has no SHA-256"},
		{"bad config", func(sp *muster.StartParams) { sp.UserData = []byte(`{"machine":"3"}`) }, "agent config of machine 3"},
		{"other machine", func(sp *muster.StartParams) { sp.MachineID = "4" }, "agent config is for machine 3, not 4"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sp := params(t, ca, "3", "https://h/a", zeroSHA)
			tt.edit(&sp)
			_, err := AgentFor(sp, "amd64")
			if !muster.IsZoneIndependent(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a zone-independent error containing %q", err, tt.want)
			}
		})
	}
}

func TestBatchParsesBack(t *testing.T) {
	ca := testCA(t)
	var ls []Launch
	var as []*Agent
	for i := range 4 {
		sp := batchParams(t, ca, strconv.Itoa(i), "tok", "https://h/a", zeroSHA)
		ls = append(ls, Launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
		as = append(as, agent(t, sp))
	}
	ud, err := Batch(ls, as, "i=1")
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, ud)
	got, err := ParseLaunches(ud)
	if err != nil || len(got) != 4 || got[3] != ls[3] {
		t.Errorf("ParseLaunches: got %v, %v", got, err)
	}
	if _, err := Batch(ls, as[:2], "i=1"); !muster.IsZoneIndependent(err) {
		t.Errorf("batch with fewer agents than launches: got %v", err)
	}
	for _, bad := range []string{"", "#cloud-config\nwrite_files: 3\n", "#cloud-config\nwrite_files:\n- path: /etc/muster/agents/0.json\n  content: 'nope'\n"} {
		if _, err := ParseLaunches([]byte(bad)); err == nil {
			t.Errorf("ParseLaunches(%q): no error", bad)
		}
	}
}

// TestSchema validates the user data with cloud-init's own schema check.
// MUSTER_TEST_CLOUDINIT=1 makes a missing cloud-init a failure.
func TestSchema(t *testing.T) {
	bin, err := exec.LookPath("cloud-init")
	if err != nil {
		if os.Getenv("MUSTER_TEST_CLOUDINIT") == "1" {
			t.Fatalf("MUSTER_TEST_CLOUDINIT=1 but cloud-init is not on PATH: %v", err)
		}
		t.Skip("cloud-init is not on PATH (set MUSTER_TEST_CLOUDINIT=1 to require it)")
	}
	ca := testCA(t)
	single, err := Single(agent(t, params(t, ca, "0", "https://h:17070/a", zeroSHA)))
	if err != nil {
		t.Fatal(err)
	}
	sp := params(t, ca, "1", "https://h:17070/a", zeroSHA)
	batch, err := Batch([]Launch{{Machine: "1", LaunchToken: "t"}}, []*Agent{agent(t, sp)}, "i=0")
	if err != nil {
		t.Fatal(err)
	}
	for name, ud := range map[string][]byte{"single": single, "batch": batch} {
		f := filepath.Join(t.TempDir(), "user-data")
		if err := os.WriteFile(f, ud, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "schema", "--config-file", f).CombinedOutput()
		if err != nil || !strings.Contains(string(out), "Valid cloud-config") {
			t.Errorf("%s: cloud-init schema: %v\n%s\n--- user data:\n%s", name, err, out, ud)
		}
	}
}

// boot runs a user data's bootstrap script as cloud-init would, below a
// fake root, with a systemctl that only records its arguments; it returns
// the root, the script's error and output.
func boot(t *testing.T, ud []byte) (root string, err error, out string) {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not on PATH")
	}
	root = t.TempDir()
	cc, perr := Parse(ud)
	if perr != nil {
		t.Fatal(perr)
	}
	rebase := func(s string) string {
		s = strings.ReplaceAll(s, "/etc/muster", filepath.Join(root, "etc/muster"))
		return strings.ReplaceAll(s, "/usr/local/bin/muster", filepath.Join(root, "usr/local/bin/muster"))
	}
	for _, f := range cc.WriteFiles {
		mode, _ := strconv.ParseUint(f.Permissions, 8, 32)
		p := filepath.Join(root, f.Path)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(rebase(f.Content)), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
	os.MkdirAll(filepath.Join(root, "usr/local/bin"), 0o755)
	fakeBin := filepath.Join(root, "fakebin")
	os.MkdirAll(fakeBin, 0o755)
	os.WriteFile(filepath.Join(fakeBin, "systemctl"), []byte("#!/bin/sh\necho \"$*\" >> "+root+"/systemctl.log\n"), 0o755)
	cmd := exec.Command("sh", filepath.Join(root, BootstrapPath))
	cmd.Env = append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"))
	b, err := cmd.CombinedOutput()
	return root, err, string(b)
}

func binServer(t *testing.T, body []byte) (url, sha string) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	t.Cleanup(srv.Close)
	sum := sha256.Sum256(body)
	return srv.URL + "/v1/agent-binaries/x", hex.EncodeToString(sum[:])
}

func TestBootstrapInstallsCheckedBinary(t *testing.T) {
	bin := []byte("#!/bin/sh\necho agent\n")
	url, sha := binServer(t, bin)
	ud, err := Single(agent(t, params(t, testCA(t), "5", url, sha)))
	if err != nil {
		t.Fatal(err)
	}
	root, err, out := boot(t, ud)
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "usr/local/bin/muster")); string(got) != string(bin) {
		t.Errorf("installed binary %q, want the served one", got)
	}
	if got, _ := os.ReadFile(filepath.Join(root, "systemctl.log")); string(got) != "daemon-reload\nenable --now muster-agent\n" {
		t.Errorf("systemctl calls %q", got)
	}
}

func TestBootstrapRefusesWrongBinary(t *testing.T) {
	url, _ := binServer(t, []byte("tampered"))
	ud, err := Single(agent(t, params(t, testCA(t), "5", url, zeroSHA)))
	if err != nil {
		t.Fatal(err)
	}
	root, err, out := boot(t, ud)
	if err == nil {
		t.Fatalf("a binary with the wrong SHA-256 was accepted:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(root, "usr/local/bin/muster")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("wrong binary installed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "systemctl.log")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the agent was started")
	}
}

func TestBootstrapBatchKeepsOwnConfig(t *testing.T) {
	url, sha := binServer(t, []byte("agent"))
	ca := testCA(t)
	var ls []Launch
	var as []*Agent
	for i := range 3 {
		sp := batchParams(t, ca, strconv.Itoa(20+i), "the-token", url, sha)
		ls = append(ls, Launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
		as = append(as, agent(t, sp))
	}
	ud, err := Batch(ls, as, "i=2")
	if err != nil {
		t.Fatal(err)
	}
	noSecrets(t, ud)
	root, err, out := boot(t, ud)
	if err != nil {
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(root, AgentConfigPath))
	got, err := muster.ParseAgentConfig(b)
	if err != nil || got.Machine != "22" || got.EnrolToken != "the-token" || !got.Enrolling() {
		t.Errorf("agent config %s: %+v, %v; want machine 22's enrolment config", b, got, err)
	}
	if _, err := os.Stat(filepath.Join(root, AgentsDir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("other machines' configs left: %v", err)
	}
	// What the script made is what AgentConfigOf reads.
	if cfg, ok, err := AgentConfigOf(ud, 2); !ok || err != nil || !reflect.DeepEqual(cfg, got) {
		t.Errorf("AgentConfigOf(ud, 2) = %+v, %v, %v; the boot script made %+v", cfg, ok, err, got)
	}
	ud, _ = Batch(ls, as, "i=7")
	if _, err, out := boot(t, ud); err == nil || !strings.Contains(out, "no agent config for launch index 7") {
		t.Errorf("unknown index: got %v %q", err, out)
	}
}

// AgentConfigOf reads the config the boot script makes: a single start's,
// and a batch's common part with each launch index's own members.
func TestAgentConfigOf(t *testing.T) {
	ca := testCA(t)
	one := params(t, ca, "9", "https://h/a", zeroSHA)
	ud, err := Single(agent(t, one))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := muster.ParseAgentConfig(one.UserData)
	if got, ok, err := AgentConfigOf(ud, 0); !ok || err != nil || got.Password != want.Password || got.Nonce != want.Nonce || got.Machine != "9" {
		t.Errorf("single: got %+v, %v, %v; want machine 9's config", got, ok, err)
	}
	var ls []Launch
	var as []*Agent
	for i := range 3 {
		sp := batchParams(t, ca, strconv.Itoa(30+i), "tok", "https://h/a", zeroSHA)
		ls = append(ls, Launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
		as = append(as, agent(t, sp))
	}
	ud, err = Batch(ls, as, "i=1")
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range as {
		got, ok, err := AgentConfigOf(ud, i)
		if !ok || err != nil || !reflect.DeepEqual(got, a.Config) {
			t.Errorf("batch index %d: got %+v, %v, %v; want %+v", i, got, ok, err, a.Config)
		}
	}
	if _, ok, err := AgentConfigOf(ud, 3); ok || err == nil || !strings.Contains(err.Error(), "launch index 3") {
		t.Errorf("batch index 3 of 3: got %v, %v; want an error", ok, err)
	}
	noAgents, err := Batch(ls, nil, "i=1")
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{noAgents, nil, one.UserData, []byte("#!/bin/sh\necho hi\n")} {
		if _, ok, err := AgentConfigOf(data, 0); ok || err != nil {
			t.Errorf("AgentConfigOf(%.30q): got %v, %v; want no agent and no error", data, ok, err)
		}
	}
	if _, ok, err := AgentConfigOf([]byte("#cloud-config\nwrite_files: 3\n"), 0); ok || err == nil {
		t.Errorf("bad cloud-config: got %v, %v; want an error", ok, err)
	}
}
