// Package cloudinit builds the cloud-init user data that every muster
// instance booted by cloud-init gets (the ec2 and lxd providers): a
// #cloud-config that writes the controller's CA, the agent's config and a
// systemd unit, and runs a bootstrap script that downloads the agent binary
// from the controller, checks its SHA-256, installs it and starts the agent
// under systemd.
//
// A single start carries its machine's agent config. A batch start (one
// cloud call for many instances sharing one user data) carries one config
// file per launch index and a common part; a provider-specific shell snippet
// finds the instance's launch index, and the script keeps that config only.
// The provisioner gives a batch enrolment configs (SPEC §4): the common
// part holds the batch's one-time token, each index only its machine id and
// launch token, so no machine's password or nonce is in the shared data.
//
// Every error returned is a zone-independent *muster.ProviderError: the
// inputs are start parameters, and no zone would change them.
package cloudinit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"

	"github.com/musterhq/muster"
	"gopkg.in/yaml.v3"
)

// Paths on the instance.
const (
	CAPath          = "/etc/muster/ca.pem"
	AgentConfigPath = "/etc/muster/agent.json"
	AgentsDir       = "/etc/muster/agents" // a batch's configs, by launch index
	CommonPath      = AgentsDir + "/common.json"
	BootstrapPath   = "/etc/muster/bootstrap.sh"
	UnitPath        = "/etc/systemd/system/muster-agent.service"
	AgentPath       = "/usr/local/bin/muster"
)

// agentUnit runs the agent; cloud-init writes it and the bootstrap script
// enables it.
const agentUnit = `[Unit]
Description=muster machine agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=` + AgentPath + ` agent --config ` + AgentConfigPath + `
Restart=on-failure
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// pickConfig follows a batch's launch-index snippet (which sets $i): it
// makes the instance's agent config from the common part and its own, and
// deletes the others'.
const pickConfig = `case $i in ''|*[!0-9]*) echo "muster: bad launch index '$i'" >&2; exit 1;; esac
own=` + AgentsDir + `/$i.json
[ -f "$own" ] || { echo "muster: no agent config for launch index $i" >&2; exit 1; }
c=$(cat ` + CommonPath + `); c=${c#\{}; c=${c%\}}; [ -z "$c" ] || c="$c,"
m=$(cat "$own"); m=${m#\{}; m=${m%\}}
(umask 077; printf '{%s%s}\n' "$c" "$m" > ` + AgentConfigPath + `)
rm -rf ` + AgentsDir + `
`

// Launch is one machine of a batch, as its user data records it.
type Launch struct {
	Machine     string `json:"machine"`
	LaunchToken string `json:"launch-token"`
}

// Agent is what a start needs to install its agent.
type Agent struct {
	Config  muster.AgentConfig
	Members map[string]json.RawMessage // the config as given, unknown keys kept
	Binary  muster.AgentBinary
}

// Key identifies what a batch's agents must share: the binary and the CA.
// It is "-" for a nil Agent.
func (a *Agent) Key() string {
	if a == nil {
		return "-"
	}
	sum := sha256.Sum256([]byte(a.Config.CACert))
	return a.Binary.URL + " " + a.Binary.SHA256 + " " + hex.EncodeToString(sum[:8])
}

// AgentFor checks sp's agent config (the JSON of muster.AgentConfig in
// sp.UserData) and finds its agent binary for arch. Empty user data means
// no agent: nil, nil.
func AgentFor(sp muster.StartParams, arch string) (*Agent, error) {
	if len(bytes.TrimSpace(sp.UserData)) == 0 {
		return nil, nil
	}
	cfg, err := muster.ParseAgentConfig(sp.UserData)
	if err != nil {
		return nil, zoneIndependent("agent config of machine %s: %v", sp.MachineID, err)
	}
	if sp.MachineID != "" && cfg.Machine != sp.MachineID {
		return nil, zoneIndependent("agent config is for machine %s, not %s", cfg.Machine, sp.MachineID)
	}
	var members map[string]json.RawMessage
	if err := json.Unmarshal(sp.UserData, &members); err != nil {
		return nil, zoneIndependent("agent config of machine %s: %v", sp.MachineID, err)
	}
	bin, err := binaryFor(sp.AgentBinaries, arch)
	if err != nil {
		return nil, err
	}
	return &Agent{Config: cfg, Members: members, Binary: bin}, nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// binaryFor returns the first linux binary of arch with a download URL.
func binaryFor(bins []muster.AgentBinary, arch string) (muster.AgentBinary, error) {
	for _, b := range bins {
		if b.OS != "linux" || b.Arch != arch || b.URL == "" {
			continue
		}
		u, err := url.Parse(b.URL)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" ||
			strings.ContainsFunc(b.URL, func(r rune) bool { return r < ' ' || r == 0x7f }) {
			return muster.AgentBinary{}, zoneIndependent("bad agent binary download URL %q for linux/%s", b.URL, arch)
		}
		if !sha256RE.MatchString(b.SHA256) {
			return muster.AgentBinary{}, zoneIndependent("agent binary %s for linux/%s has no SHA-256 to verify it with", b.URL, arch)
		}
		return b, nil
	}
	return muster.AgentBinary{}, zoneIndependent("no agent binary download URL for linux/%s", arch)
}

// Config is the part of cloud-init's #cloud-config this package writes.
type Config struct {
	WriteFiles []File     `yaml:"write_files,omitempty"`
	RunCmd     [][]string `yaml:"runcmd,omitempty"`
}

// File is one entry of write_files.
type File struct {
	Path        string `yaml:"path"`
	Permissions string `yaml:"permissions,omitempty"`
	Content     string `yaml:"content"`
}

// File returns the entry that writes path.
func (c Config) File(path string) (File, bool) {
	for _, f := range c.WriteFiles {
		if f.Path == path {
			return f, true
		}
	}
	return File{}, false
}

// Single is the #cloud-config of one start: the CA, the agent config and
// the unit are written, and the bootstrap script downloads, checks and
// installs the agent binary and starts the agent. nil when a is nil (no
// agent).
func Single(a *Agent) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	cfg, err := json.Marshal(a.Members)
	if err != nil {
		return nil, zoneIndependent("agent config of machine %s: %v", a.Config.Machine, err)
	}
	cc := Config{
		WriteFiles: []File{
			{Path: CAPath, Permissions: "0644", Content: a.Config.CACert},
			{Path: AgentConfigPath, Permissions: "0600", Content: string(cfg)},
		},
	}
	cc.addAgent(a.Binary, "")
	return cc.Encode()
}

// Batch is the #cloud-config of a batch of len(ls) instances that share it:
// one file per launch index under AgentsDir with the index's machine,
// launch token and, with agents, the members of its agent config that
// differ between machines (machine, nonce, password...); the members all
// share go into one common file. indexScript is shell that sets $i to the
// instance's launch index (e.g. from the cloud's metadata service); the
// bootstrap script then keeps the instance's own config. agents is nil when
// the batch has no agents, else one per launch.
func Batch(ls []Launch, agents []*Agent, indexScript string) ([]byte, error) {
	var cc Config
	var common map[string]json.RawMessage
	if agents != nil {
		if len(agents) != len(ls) {
			return nil, zoneIndependent("batch of %d launches has %d agents", len(ls), len(agents))
		}
		common = commonMembers(agents)
		b, err := json.Marshal(common)
		if err != nil {
			return nil, zoneIndependent("agent config: %v", err)
		}
		cc.WriteFiles = append(cc.WriteFiles,
			File{Path: CAPath, Permissions: "0644", Content: agents[0].Config.CACert},
			File{Path: CommonPath, Permissions: "0600", Content: string(b)})
	}
	for i, l := range ls {
		own := map[string]any{"machine": l.Machine, "launch-token": l.LaunchToken}
		if agents != nil {
			for k, v := range agents[i].Members {
				if _, shared := common[k]; !shared && k != "launch-token" {
					own[k] = v
				}
			}
		}
		b, err := json.Marshal(own)
		if err != nil {
			return nil, zoneIndependent("agent config of machine %s: %v", l.Machine, err)
		}
		cc.WriteFiles = append(cc.WriteFiles, File{Path: indexPath(i), Permissions: "0600", Content: string(b)})
	}
	if agents != nil {
		cc.addAgent(agents[0].Binary, strings.TrimRight(indexScript, "\n")+"\n"+pickConfig)
	}
	return cc.Encode()
}

// commonMembers returns the agent config members every agent of a batch
// has with the same value, except those that identify a machine.
func commonMembers(agents []*Agent) map[string]json.RawMessage {
	common := map[string]json.RawMessage{}
	for k, v := range agents[0].Members {
		switch k {
		case "machine", "nonce", "password", "launch-token":
			continue
		}
		same := true
		for _, a := range agents[1:] {
			if w, ok := a.Members[k]; !ok || !bytes.Equal(compact(w), compact(v)) {
				same = false
				break
			}
		}
		if same {
			common[k] = compact(v)
		}
	}
	return common
}

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

func indexPath(i int) string { return AgentsDir + "/" + strconv.Itoa(i) + ".json" }

// addAgent adds the unit and the bootstrap script (prefixed with pre) that
// installs bin and starts the agent.
func (c *Config) addAgent(bin muster.AgentBinary, pre string) {
	tmp := AgentPath + ".download"
	script := "#!/bin/sh\n# muster agent bootstrap, written by muster\nset -eu\n" + pre +
		"curl -fsSL --retry 5 --retry-connrefused --cacert " + CAPath + " -o " + tmp + " " + ShellQuote(bin.URL) + "\n" +
		"echo '" + strings.ToLower(bin.SHA256) + "  " + tmp + "' | sha256sum -c -\n" +
		"install -m 0755 " + tmp + " " + AgentPath + "\n" +
		"rm -f " + tmp + "\n" +
		"systemctl daemon-reload\n" +
		"systemctl enable --now muster-agent\n"
	c.WriteFiles = append(c.WriteFiles,
		File{Path: UnitPath, Permissions: "0644", Content: agentUnit},
		File{Path: BootstrapPath, Permissions: "0700", Content: script})
	c.RunCmd = append(c.RunCmd, []string{"sh", BootstrapPath})
}

// Encode returns c as a #cloud-config document.
func (c Config) Encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("#cloud-config\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(c); err != nil {
		return nil, fmt.Errorf("encode cloud-config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode cloud-config: %w", err)
	}
	return b.Bytes(), nil
}

// Parse reads a #cloud-config written by this package.
func Parse(data []byte) (Config, error) {
	var c Config
	if !bytes.HasPrefix(data, []byte("#cloud-config\n")) {
		return Config{}, fmt.Errorf("parse user data: no #cloud-config header")
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		// yaml's unmarshal errors span lines; keep the message one line.
		return Config{}, fmt.Errorf("parse user data: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	return c, nil
}

// ParseLaunches reads a batch's launch index → machine and launch token
// back from its user data.
func ParseLaunches(data []byte) (map[int]Launch, error) {
	var cc Config
	if err := yaml.Unmarshal(data, &cc); err != nil {
		return nil, fmt.Errorf("parse user data: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	out := map[int]Launch{}
	for _, f := range cc.WriteFiles {
		dir, name := path.Split(f.Path)
		idx, ok := strings.CutSuffix(name, ".json")
		if dir != AgentsDir+"/" || !ok {
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			continue
		}
		var l Launch
		if err := json.Unmarshal([]byte(f.Content), &l); err != nil {
			return nil, fmt.Errorf("parse user data: %s: %w", f.Path, err)
		}
		out[i] = l
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse user data: no launch records under %s", AgentsDir)
	}
	return out, nil
}

// ShellQuote quotes s for sh.
func ShellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func zoneIndependent(format string, args ...any) error {
	return muster.NewProviderError(muster.ErrZoneIndependent, "", format, args...)
}

// AgentConfigOf reads the agent config that the instance with launchIndex
// ends up with when it boots data, as the bootstrap script makes it: the
// config of a single start, or the common part of a batch with the
// launch index's own members (which win). ok is false when data is no
// #cloud-config of this package or carries no agent.
func AgentConfigOf(data []byte, launchIndex int) (cfg muster.AgentConfig, ok bool, err error) {
	if !bytes.HasPrefix(data, []byte("#cloud-config\n")) {
		return muster.AgentConfig{}, false, nil
	}
	cc, err := Parse(data)
	if err != nil {
		return muster.AgentConfig{}, false, err
	}
	if f, single := cc.File(AgentConfigPath); single {
		cfg, err := muster.ParseAgentConfig([]byte(f.Content))
		return cfg, err == nil, err
	}
	common, batch := cc.File(CommonPath)
	if !batch {
		return muster.AgentConfig{}, false, nil
	}
	own, found := cc.File(indexPath(launchIndex))
	if !found {
		return muster.AgentConfig{}, false, fmt.Errorf("no agent config for launch index %d", launchIndex)
	}
	members := map[string]json.RawMessage{}
	for _, f := range []File{common, own} {
		var m map[string]json.RawMessage
		if err := json.Unmarshal([]byte(f.Content), &m); err != nil {
			return muster.AgentConfig{}, false, fmt.Errorf("parse user data: %s: %w", f.Path, err)
		}
		for k, v := range m {
			members[k] = v
		}
	}
	b, err := json.Marshal(members)
	if err != nil {
		return muster.AgentConfig{}, false, err
	}
	cfg, err = muster.ParseAgentConfig(b)
	return cfg, err == nil, err
}
