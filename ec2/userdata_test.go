package ec2

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/auth"
	"gopkg.in/yaml.v3"
)

var (
	testCAOnce sync.Once
	testCAPEM  string
)

// testCA returns the PEM of a CA made as a controller makes its own.
func testCA(tb testing.TB) string {
	tb.Helper()
	testCAOnce.Do(func() {
		ca, err := auth.NewCA("muster test CA", time.Now())
		if err != nil {
			panic(err)
		}
		testCAPEM = string(ca.CertPEM)
	})
	return testCAPEM
}

// agentParams returns start params for machine with an agent config and
// binary as the provisioner makes them (64-hex password and token, nonce
// "machine-0:UUID").
func agentParams(tb testing.TB, machine, binURL, binSHA string) muster.StartParams {
	tb.Helper()
	token := muster.NewSecret()
	cfg := muster.AgentConfig{
		Controller:   "5b9e5c6a-0f39-4a43-9a1e-3d8e1f0c7a11",
		Model:        "0c5d3f4e-7a2b-4c1d-8e9f-a1b2c3d4e5f6",
		Machine:      machine,
		Nonce:        "machine-0:" + muster.NewUUID(),
		Password:     muster.NewSecret(),
		APIAddresses: []string{"https://10.0.0.10:17070", "https://10.0.1.10:17070", "https://controller.example.com:17070"},
		CACert:       testCA(tb),
	}
	ud, err := json.Marshal(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return muster.StartParams{
		MachineID:   machine,
		LaunchToken: token,
		Nonce:       cfg.Nonce,
		Password:    cfg.Password,
		UserData:    ud,
		AgentBinaries: []muster.AgentBinary{
			{Version: "1.0.0", OS: "linux", Arch: "arm64", SHA256: strings.Repeat("0", 64), URL: "https://example.com/arm64"},
			{Version: "1.0.0", OS: "linux", Arch: "amd64", SHA256: binSHA, URL: binURL},
		},
	}
}

const fakeSHA = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

func mustAgent(tb testing.TB, sp muster.StartParams) *agentSetup {
	tb.Helper()
	a, err := agentFor(sp, "amd64")
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func parseCloudConfig(tb testing.TB, ud []byte) cloudConfig {
	tb.Helper()
	if !strings.HasPrefix(string(ud), "#cloud-config\n") {
		tb.Fatalf("user data does not start with #cloud-config: %q", ud[:min(len(ud), 40)])
	}
	var cc cloudConfig
	if err := yaml.Unmarshal(ud, &cc); err != nil {
		tb.Fatalf("user data is not YAML: %v", err)
	}
	return cc
}

func fileOf(cc cloudConfig, path string) (writeFile, bool) {
	for _, f := range cc.WriteFiles {
		if f.Path == path {
			return f, true
		}
	}
	return writeFile{}, false
}

func TestSingleUserData(t *testing.T) {
	sp := agentParams(t, "7", "https://10.0.0.10:17070/agent-binaries/1.0.0/linux/amd64", fakeSHA)
	ud, err := singleUserData(mustAgent(t, sp))
	if err != nil {
		t.Fatal(err)
	}
	cc := parseCloudConfig(t, ud)
	ca, ok := fileOf(cc, caPath)
	if !ok || ca.Content != testCA(t) || ca.Permissions != "0644" {
		t.Errorf("CA file: got %+v", ca)
	}
	cfgFile, ok := fileOf(cc, agentConfigPath)
	if !ok || cfgFile.Permissions != "0600" {
		t.Fatalf("agent config file: got %+v", cfgFile)
	}
	got, err := muster.ParseAgentConfig([]byte(cfgFile.Content))
	if err != nil {
		t.Fatalf("agent config does not parse: %v", err)
	}
	want, _ := muster.ParseAgentConfig(sp.UserData)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("agent config: got %+v, want %+v", got, want)
	}
	unit, ok := fileOf(cc, unitPath)
	if !ok || !strings.Contains(unit.Content, "ExecStart=/usr/local/bin/muster agent --config /etc/muster/agent.json") ||
		!strings.Contains(unit.Content, "Restart=on-failure") {
		t.Errorf("unit: got %+v", unit)
	}
	script, ok := fileOf(cc, bootstrapPath)
	if !ok {
		t.Fatal("no bootstrap script")
	}
	for _, want := range []string{
		"curl -fsSL --retry 5 --retry-connrefused --cacert /etc/muster/ca.pem",
		"'https://10.0.0.10:17070/agent-binaries/1.0.0/linux/amd64'",
		fakeSHA + "  /usr/local/bin/muster.download' | sha256sum -c -",
		"install -m 0755 /usr/local/bin/muster.download /usr/local/bin/muster",
		"systemctl daemon-reload", "systemctl enable --now muster-agent",
	} {
		if !strings.Contains(script.Content, want) {
			t.Errorf("bootstrap script lacks %q:\n%s", want, script.Content)
		}
	}
	if strings.Contains(script.Content, "169.254.169.254") {
		t.Errorf("a single start's script asks the metadata service")
	}
	if len(cc.RunCmd) != 1 || strings.Join(cc.RunCmd[0], " ") != "sh "+bootstrapPath {
		t.Errorf("runcmd: got %v", cc.RunCmd)
	}
}

func TestNoAgentNoUserData(t *testing.T) {
	a, err := agentFor(muster.StartParams{MachineID: "0"}, "amd64")
	if err != nil || a != nil {
		t.Fatalf("agentFor without user data: got %v, %v; want nil, nil", a, err)
	}
	ud, err := singleUserData(nil)
	if err != nil || ud != nil {
		t.Errorf("singleUserData(nil): got %q, %v; want no user data", ud, err)
	}
}

func TestAgentErrors(t *testing.T) {
	good := agentParams(t, "3", "https://h/agent", fakeSHA)
	tests := []struct {
		name string
		edit func(sp *muster.StartParams)
		arch string
		want string
	}{
		{"no binary for arch", func(sp *muster.StartParams) {}, "s390x", "no agent binary download URL for linux/s390x"},
		{"binary without URL", func(sp *muster.StartParams) { sp.AgentBinaries[1].URL = "" }, "amd64", "no agent binary download URL for linux/amd64"},
		{"binary for another OS", func(sp *muster.StartParams) { sp.AgentBinaries[1].OS = "darwin" }, "amd64", "no agent binary download URL for linux/amd64"},
		{"no binaries", func(sp *muster.StartParams) { sp.AgentBinaries = nil }, "amd64", "no agent binary download URL for linux/amd64"},
		{"bad URL", func(sp *muster.StartParams) { sp.AgentBinaries[1].URL = "file:///etc/passwd" }, "amd64", "bad agent binary download URL"},
		{"URL with newline", func(sp *muster.StartParams) { sp.AgentBinaries[1].URL = "https://h/a\nrm -rf /" }, "amd64", "bad agent binary download URL"},
		{"no SHA-256", func(sp *muster.StartParams) { sp.AgentBinaries[1].SHA256 = "" }, "amd64", "has no SHA-256"},
		{"bad SHA-256", func(sp *muster.StartParams) { sp.AgentBinaries[1].SHA256 = "abc; reboot" }, "amd64", "has no SHA-256"},
		{"bad agent config", func(sp *muster.StartParams) { sp.UserData = []byte(`{"machine":"3"}`) }, "amd64", "agent config of machine 3"},
		{"not JSON", func(sp *muster.StartParams) { sp.UserData = []byte(`machine: 3`) }, "amd64", "agent config of machine 3"},
		{"other machine's config", func(sp *muster.StartParams) { sp.MachineID = "4" }, "amd64", "agent config is for machine 3, not 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := good
			sp.AgentBinaries = append([]muster.AgentBinary(nil), good.AgentBinaries...)
			tt.edit(&sp)
			_, err := agentFor(sp, tt.arch)
			if muster.ProviderErrorKindOf(err) != muster.ErrZoneIndependent || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a zone-independent error containing %q", err, tt.want)
			}
		})
	}
}

func TestBatchUserDataParsesBack(t *testing.T) {
	var ls []launch
	var agents []*agentSetup
	for i := 0; i < 5; i++ {
		sp := agentParams(t, strconv.Itoa(10+i), "https://h/agent", fakeSHA)
		ls = append(ls, launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
		agents = append(agents, mustAgent(t, sp))
	}
	for _, withAgents := range []bool{true, false} {
		t.Run(fmt.Sprintf("agents=%v", withAgents), func(t *testing.T) {
			a := agents
			if !withAgents {
				a = nil
			}
			ud, err := batchUserData(ls, a)
			if err != nil {
				t.Fatal(err)
			}
			got, err := parseLaunches(ud)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(ls) {
				t.Fatalf("got %d launches, want %d", len(got), len(ls))
			}
			for i, l := range ls {
				if got[i] != l {
					t.Errorf("launch %d: got %+v, want %+v", i, got[i], l)
				}
			}
			cc := parseCloudConfig(t, ud)
			_, hasScript := fileOf(cc, bootstrapPath)
			if hasScript != withAgents || (len(cc.RunCmd) > 0) != withAgents {
				t.Errorf("bootstrap script present = %v, runcmd %v; want agents = %v", hasScript, cc.RunCmd, withAgents)
			}
			if withAgents && strings.Count(string(ud), "BEGIN CERTIFICATE") != 2 {
				t.Errorf("the CA is in the batch user data %d times, want 2 (ca.pem and the common config)", strings.Count(string(ud), "BEGIN CERTIFICATE"))
			}
		})
	}
	for _, bad := range []string{"", "#cloud-config\n", "#cloud-config\nwrite_files: 3\n", "\x00\x01", "#cloud-config\nwrite_files:\n- path: /etc/muster/agents/0.json\n  content: 'nope'\n"} {
		if _, err := parseLaunches([]byte(bad)); err == nil {
			t.Errorf("parseLaunches(%q): got no error", bad)
		}
	}
}

// TestBatchUserDataSize checks that a batch of MaxBatch starts, with agent
// configs as large as the provisioner makes them, fits EC2's 16 KiB, and
// reports the sizes.
func TestBatchUserDataSize(t *testing.T) {
	one := agentParams(t, "1234", "https://controller.example.com:17070/agent-binaries/1.0.0/linux/amd64", fakeSHA)
	single, err := singleUserData(mustAgent(t, one))
	if err != nil {
		t.Fatal(err)
	}
	size := func(n int) int {
		var ls []launch
		var agents []*agentSetup
		for i := 0; i < n; i++ {
			sp := agentParams(t, strconv.Itoa(10000+i), "https://controller.example.com:17070/agent-binaries/1.0.0/linux/amd64", fakeSHA)
			ls = append(ls, launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
			agents = append(agents, mustAgent(t, sp))
		}
		ud, err := batchUserData(ls, agents)
		if err != nil {
			t.Fatal(err)
		}
		return len(ud)
	}
	full, two := size(maxBatch), size(2)
	perMachine := (full - two) / (maxBatch - 2)
	t.Logf("user data: single start %d bytes; batch of 2 %d bytes; batch of %d %d bytes (%d a machine); limit %d",
		len(single), two, maxBatch, full, perMachine, maxUserData)
	if full > maxUserData {
		t.Errorf("a batch of MaxBatch=%d has %d bytes of user data, EC2 takes %d", maxBatch, full, maxUserData)
	}
	fits := 2 + (maxUserData-two)/perMachine
	t.Logf("at most %d such starts fit in one batch; MaxBatch is %d", fits, maxBatch)
	if fits < maxBatch+5 {
		t.Errorf("only %d starts fit, leave more room above MaxBatch=%d", fits, maxBatch)
	}
}

// TestCloudInitSchema validates the user data with cloud-init's own
// schema check. MUSTER_TEST_CLOUDINIT=1 makes a missing cloud-init a
// failure (CI installs Debian's).
func TestCloudInitSchema(t *testing.T) {
	bin, err := exec.LookPath("cloud-init")
	if err != nil {
		if os.Getenv("MUSTER_TEST_CLOUDINIT") == "1" {
			t.Fatalf("MUSTER_TEST_CLOUDINIT=1 but cloud-init is not on PATH: %v", err)
		}
		t.Skip("cloud-init is not on PATH (set MUSTER_TEST_CLOUDINIT=1 to require it)")
	}
	single, err := singleUserData(mustAgent(t, agentParams(t, "0", "https://h:17070/agent", fakeSHA)))
	if err != nil {
		t.Fatal(err)
	}
	var ls []launch
	var agents []*agentSetup
	for i := 0; i < 3; i++ {
		sp := agentParams(t, strconv.Itoa(i), "https://h:17070/agent", fakeSHA)
		ls = append(ls, launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
		agents = append(agents, mustAgent(t, sp))
	}
	batch, err := batchUserData(ls, agents)
	if err != nil {
		t.Fatal(err)
	}
	bare, err := batchUserData(ls, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, ud := range map[string][]byte{"single": single, "batch": batch, "batch without agents": bare} {
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

// bootHarness runs a user data's bootstrap script as cloud-init would,
// under a fake root: the write_files are written below root, the metadata
// service and the agent binary's URL are test servers, and systemctl only
// records its arguments.
type bootHarness struct {
	root      string
	binary    []byte
	binURL    string
	imds      string
	index     string // the launch index the metadata service reports
	imdsCalls []string
	mu        sync.Mutex
}

func newBootHarness(t *testing.T, index int) *bootHarness {
	t.Helper()
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl is not on PATH")
	}
	h := &bootHarness{root: t.TempDir(), binary: []byte("#!/bin/sh\necho fake muster agent\n"), index: strconv.Itoa(index)}
	bins := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(h.binary) }))
	t.Cleanup(bins.Close)
	h.binURL = bins.URL + "/agent-binaries/1.0.0/linux/amd64"
	imds := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.imdsCalls = append(h.imdsCalls, r.Method+" "+r.URL.Path)
		h.mu.Unlock()
		switch {
		case r.Method == http.MethodPut && r.URL.Path == "/latest/api/token" && r.Header.Get("X-aws-ec2-metadata-token-ttl-seconds") != "":
			fmt.Fprint(w, "imds-token")
		case r.Method == http.MethodGet && r.URL.Path == "/latest/meta-data/ami-launch-index" && r.Header.Get("X-aws-ec2-metadata-token") == "imds-token":
			fmt.Fprint(w, h.index)
		default:
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		}
	}))
	t.Cleanup(imds.Close)
	h.imds = imds.URL + "/latest"
	return h
}

func (h *bootHarness) sha() string {
	sum := sha256.Sum256(h.binary)
	return hex.EncodeToString(sum[:])
}

// rebase maps an instance path below the fake root.
func (h *bootHarness) rebase(s string) string {
	s = strings.ReplaceAll(s, "/etc/muster", filepath.Join(h.root, "etc/muster"))
	return strings.ReplaceAll(s, "/usr/local/bin/muster", filepath.Join(h.root, "usr/local/bin/muster"))
}

// boot writes the files and runs the script; it returns the script's
// error and output.
func (h *bootHarness) boot(t *testing.T, ud []byte) (error, string) {
	t.Helper()
	cc := parseCloudConfig(t, ud)
	var script string
	for _, f := range cc.WriteFiles {
		mode, err := strconv.ParseUint(f.Permissions, 8, 32)
		if err != nil {
			t.Fatalf("%s: bad permissions %q", f.Path, f.Permissions)
		}
		content := f.Content
		if f.Path == bootstrapPath {
			content = strings.ReplaceAll(h.rebase(content), "http://169.254.169.254/latest", h.imds)
			script = filepath.Join(h.root, f.Path)
		}
		p := filepath.Join(h.root, f.Path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), os.FileMode(mode)); err != nil {
			t.Fatal(err)
		}
	}
	if script == "" || len(cc.RunCmd) != 1 {
		t.Fatalf("no bootstrap script to run (runcmd %v)", cc.RunCmd)
	}
	os.MkdirAll(filepath.Join(h.root, "usr/local/bin"), 0o755)
	fakeBin := filepath.Join(h.root, "fakebin")
	os.MkdirAll(fakeBin, 0o755)
	log := filepath.Join(h.root, "systemctl.log")
	if err := os.WriteFile(filepath.Join(fakeBin, "systemctl"), []byte("#!/bin/sh\necho \"$*\" >> "+log+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(cc.RunCmd[0][0], script)
	cmd.Env = append(os.Environ(), "PATH="+fakeBin+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return err, string(out)
}

func (h *bootHarness) systemctl() string {
	b, _ := os.ReadFile(filepath.Join(h.root, "systemctl.log"))
	return string(b)
}

func (h *bootHarness) checkInstalled(t *testing.T) {
	t.Helper()
	got, err := os.ReadFile(filepath.Join(h.root, "usr/local/bin/muster"))
	if err != nil || string(got) != string(h.binary) {
		t.Errorf("agent binary: got %q, %v; want the served binary", got, err)
	} else if fi, _ := os.Stat(filepath.Join(h.root, "usr/local/bin/muster")); fi.Mode().Perm() != 0o755 {
		t.Errorf("agent binary mode %v, want 0755", fi.Mode().Perm())
	}
	if _, err := os.Stat(filepath.Join(h.root, "usr/local/bin/muster.download")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("download left behind: %v", err)
	}
	if got, want := h.systemctl(), "daemon-reload\nenable --now muster-agent\n"; got != want {
		t.Errorf("systemctl calls: got %q, want %q", got, want)
	}
}

func TestBootstrapSingle(t *testing.T) {
	h := newBootHarness(t, 0)
	sp := agentParams(t, "5", h.binURL, h.sha())
	ud, err := singleUserData(mustAgent(t, sp))
	if err != nil {
		t.Fatal(err)
	}
	if err, out := h.boot(t, ud); err != nil {
		t.Fatalf("bootstrap script: %v\n%s", err, out)
	}
	h.checkInstalled(t)
	b, err := os.ReadFile(filepath.Join(h.root, agentConfigPath))
	if err != nil {
		t.Fatal(err)
	}
	got, err := muster.ParseAgentConfig(b)
	if err != nil || got.Machine != "5" || got.Password != sp.Password {
		t.Errorf("agent config: got %+v, %v", got, err)
	}
	if len(h.imdsCalls) != 0 {
		t.Errorf("a single start asked the metadata service: %v", h.imdsCalls)
	}
}

func TestBootstrapBatchKeepsOwnConfig(t *testing.T) {
	for _, index := range []int{0, 2} {
		t.Run(fmt.Sprint("index ", index), func(t *testing.T) {
			h := newBootHarness(t, index)
			var ls []launch
			var agents []*agentSetup
			var ps []muster.StartParams
			for i := 0; i < 3; i++ {
				sp := agentParams(t, strconv.Itoa(20+i), h.binURL, h.sha())
				ps = append(ps, sp)
				ls = append(ls, launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
				agents = append(agents, mustAgent(t, sp))
			}
			ud, err := batchUserData(ls, agents)
			if err != nil {
				t.Fatal(err)
			}
			if err, out := h.boot(t, ud); err != nil {
				t.Fatalf("bootstrap script: %v\n%s", err, out)
			}
			h.checkInstalled(t)
			b, err := os.ReadFile(filepath.Join(h.root, agentConfigPath))
			if err != nil {
				t.Fatal(err)
			}
			got, err := muster.ParseAgentConfig(b)
			if err != nil {
				t.Fatalf("agent config %s does not parse: %v", b, err)
			}
			want, _ := muster.ParseAgentConfig(ps[index].UserData)
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("agent config: got %+v, want %+v", got, want)
			}
			if fi, err := os.Stat(filepath.Join(h.root, agentConfigPath)); err != nil || fi.Mode().Perm() != 0o600 {
				t.Errorf("agent config mode: %v %v, want 0600", fi.Mode(), err)
			}
			if _, err := os.Stat(filepath.Join(h.root, agentsDir)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the other machines' configs are left: %v", err)
			}
			if want := []string{"PUT /latest/api/token", "GET /latest/meta-data/ami-launch-index"}; fmt.Sprint(h.imdsCalls) != fmt.Sprint(want) {
				t.Errorf("metadata calls: got %v, want %v", h.imdsCalls, want)
			}
		})
	}
}

func TestBootstrapRefusesWrongBinary(t *testing.T) {
	h := newBootHarness(t, 0)
	sp := agentParams(t, "5", h.binURL, strings.Repeat("ab", 32))
	ud, err := singleUserData(mustAgent(t, sp))
	if err != nil {
		t.Fatal(err)
	}
	if err, out := h.boot(t, ud); err == nil {
		t.Fatalf("bootstrap script installed a binary with the wrong SHA-256:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(h.root, "usr/local/bin/muster")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a binary with the wrong SHA-256 was installed: %v", err)
	}
	if h.systemctl() != "" {
		t.Errorf("the agent was started: %q", h.systemctl())
	}
}

func TestBootstrapBatchUnknownIndex(t *testing.T) {
	h := newBootHarness(t, 7)
	var ls []launch
	var agents []*agentSetup
	for i := 0; i < 2; i++ {
		sp := agentParams(t, strconv.Itoa(i), h.binURL, h.sha())
		ls = append(ls, launch{Machine: sp.MachineID, LaunchToken: sp.LaunchToken})
		agents = append(agents, mustAgent(t, sp))
	}
	ud, err := batchUserData(ls, agents)
	if err != nil {
		t.Fatal(err)
	}
	err, out := h.boot(t, ud)
	if err == nil || !strings.Contains(out, "no agent config for launch index 7") {
		t.Errorf("got %v, %q; want a failure naming launch index 7", err, out)
	}
	if h.systemctl() != "" {
		t.Errorf("the agent was started: %q", h.systemctl())
	}
}
