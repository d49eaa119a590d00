package ec2

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
	caPath          = "/etc/muster/ca.pem"
	agentConfigPath = "/etc/muster/agent.json"
	agentsDir       = "/etc/muster/agents" // a batch's configs, by launch index
	commonPath      = agentsDir + "/common.json"
	bootstrapPath   = "/etc/muster/bootstrap.sh"
	unitPath        = "/etc/systemd/system/muster-agent.service"
	agentPath       = "/usr/local/bin/muster"
)

// maxUserData is EC2's limit on user data, in bytes before base64.
const maxUserData = 16384

// agentUnit runs the agent; cloud-init writes it and the bootstrap script
// enables it.
const agentUnit = `[Unit]
Description=muster machine agent
Wants=network-online.target
After=network-online.target

[Service]
ExecStart=` + agentPath + ` agent --config ` + agentConfigPath + `
Restart=on-failure
RestartSec=10

[Install]
WantedBy=multi-user.target
`

// pickConfig is the part of a batch's bootstrap script that finds the
// instance's launch index through IMDSv2 and makes its agent config from
// the common part and its own, deleting the others'.
const pickConfig = `md=http://169.254.169.254/latest
tok=$(curl -fsS --retry 5 -X PUT -H 'X-aws-ec2-metadata-token-ttl-seconds: 300' $md/api/token)
i=$(curl -fsS --retry 5 -H "X-aws-ec2-metadata-token: $tok" $md/meta-data/ami-launch-index)
case $i in ''|*[!0-9]*) echo "muster: bad launch index '$i'" >&2; exit 1;; esac
own=` + agentsDir + `/$i.json
[ -f "$own" ] || { echo "muster: no agent config for launch index $i" >&2; exit 1; }
c=$(cat ` + commonPath + `); c=${c#\{}; c=${c%\}}; [ -z "$c" ] || c="$c,"
m=$(cat "$own"); m=${m#\{}; m=${m%\}}
(umask 077; printf '{%s%s}\n' "$c" "$m" > ` + agentConfigPath + `)
rm -rf ` + agentsDir + `
`

// launch is one machine of a batch, as its user data records it.
type launch struct {
	Machine     string `json:"machine"`
	LaunchToken string `json:"launch-token"`
}

// agentSetup is what a start needs to install its agent.
type agentSetup struct {
	config  muster.AgentConfig
	members map[string]json.RawMessage // the config as given, unknown keys kept
	bin     muster.AgentBinary
}

// key identifies what a batch's agents must share: the binary and the CA.
func (a *agentSetup) key() string {
	if a == nil {
		return "-"
	}
	sum := sha256.Sum256([]byte(a.config.CACert))
	return a.bin.URL + " " + a.bin.SHA256 + " " + hex.EncodeToString(sum[:8])
}

// agentFor checks sp's agent config (the JSON of muster.AgentConfig in
// sp.UserData) and finds its agent binary. Empty user data means no agent:
// nil, nil.
func agentFor(sp muster.StartParams, arch string) (*agentSetup, error) {
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
	bin, err := agentBinaryFor(sp.AgentBinaries, arch)
	if err != nil {
		return nil, err
	}
	return &agentSetup{config: cfg, members: members, bin: bin}, nil
}

var sha256RE = regexp.MustCompile(`^[0-9a-fA-F]{64}$`)

// agentBinaryFor returns the first linux binary of arch with a download URL.
func agentBinaryFor(bins []muster.AgentBinary, arch string) (muster.AgentBinary, error) {
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

// cloudConfig is the part of cloud-init's #cloud-config this package writes.
type cloudConfig struct {
	WriteFiles []writeFile `yaml:"write_files,omitempty"`
	RunCmd     [][]string  `yaml:"runcmd,omitempty"`
}

type writeFile struct {
	Path        string `yaml:"path"`
	Permissions string `yaml:"permissions,omitempty"`
	Content     string `yaml:"content"`
}

// singleUserData is the #cloud-config of one start: the CA, the agent
// config and the unit are written, and the bootstrap script downloads,
// checks and installs the agent binary and starts the agent. nil when a
// has no agent.
func singleUserData(a *agentSetup) ([]byte, error) {
	if a == nil {
		return nil, nil
	}
	cfg, err := json.Marshal(a.members)
	if err != nil {
		return nil, zoneIndependent("agent config of machine %s: %v", a.config.Machine, err)
	}
	cc := cloudConfig{
		WriteFiles: []writeFile{
			{Path: caPath, Permissions: "0644", Content: a.config.CACert},
			{Path: agentConfigPath, Permissions: "0600", Content: string(cfg)},
		},
	}
	cc.addAgent(a.bin, "")
	return cc.encode()
}

// batchUserData is the #cloud-config of a batch (one RunInstances with
// MaxCount len(ls)): one file per launch index under agentsDir with the
// index's machine, launch token and, with agents, the members of its agent
// config that differ between machines (machine, nonce, password...); the
// members all share go into one common file. The bootstrap script keeps the
// instance's own (see pickConfig). agents is nil when the batch has no
// agents, else one per launch.
func batchUserData(ls []launch, agents []*agentSetup) ([]byte, error) {
	var cc cloudConfig
	var common map[string]json.RawMessage
	if agents != nil {
		common = commonMembers(agents)
		b, err := json.Marshal(common)
		if err != nil {
			return nil, zoneIndependent("agent config: %v", err)
		}
		cc.WriteFiles = append(cc.WriteFiles,
			writeFile{Path: caPath, Permissions: "0644", Content: agents[0].config.CACert},
			writeFile{Path: commonPath, Permissions: "0600", Content: string(b)})
	}
	for i, l := range ls {
		own := map[string]any{"machine": l.Machine, "launch-token": l.LaunchToken}
		if agents != nil {
			for k, v := range agents[i].members {
				if _, shared := common[k]; !shared && k != "launch-token" {
					own[k] = v
				}
			}
		}
		b, err := json.Marshal(own)
		if err != nil {
			return nil, zoneIndependent("agent config of machine %s: %v", l.Machine, err)
		}
		cc.WriteFiles = append(cc.WriteFiles, writeFile{Path: indexPath(i), Permissions: "0600", Content: string(b)})
	}
	if agents != nil {
		cc.addAgent(agents[0].bin, pickConfig)
	}
	return cc.encode()
}

// commonMembers returns the agent config members every agent of a batch
// has with the same value, except those that identify a machine.
func commonMembers(agents []*agentSetup) map[string]json.RawMessage {
	common := map[string]json.RawMessage{}
	for k, v := range agents[0].members {
		switch k {
		case "machine", "nonce", "password", "launch-token":
			continue
		}
		same := true
		for _, a := range agents[1:] {
			if w, ok := a.members[k]; !ok || !bytes.Equal(compact(w), compact(v)) {
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

func indexPath(i int) string { return agentsDir + "/" + strconv.Itoa(i) + ".json" }

// addAgent adds the unit and the bootstrap script (prefixed with pre) that
// installs bin and starts the agent.
func (cc *cloudConfig) addAgent(bin muster.AgentBinary, pre string) {
	tmp := agentPath + ".download"
	script := "#!/bin/sh\n# muster agent bootstrap, written by muster's ec2 provider\nset -eu\n" + pre +
		"curl -fsSL --retry 5 --retry-connrefused --cacert " + caPath + " -o " + tmp + " " + shellQuote(bin.URL) + "\n" +
		"echo '" + strings.ToLower(bin.SHA256) + "  " + tmp + "' | sha256sum -c -\n" +
		"install -m 0755 " + tmp + " " + agentPath + "\n" +
		"rm -f " + tmp + "\n" +
		"systemctl daemon-reload\n" +
		"systemctl enable --now muster-agent\n"
	cc.WriteFiles = append(cc.WriteFiles,
		writeFile{Path: unitPath, Permissions: "0644", Content: agentUnit},
		writeFile{Path: bootstrapPath, Permissions: "0700", Content: script})
	cc.RunCmd = append(cc.RunCmd, []string{"sh", bootstrapPath})
}

func (cc *cloudConfig) encode() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("#cloud-config\n")
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(cc); err != nil {
		return nil, fmt.Errorf("encode cloud-config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("encode cloud-config: %w", err)
	}
	return b.Bytes(), nil
}

// parseLaunches reads a batch's launch index → machine and launch token
// back from its user data.
func parseLaunches(data []byte) (map[int]launch, error) {
	var cc cloudConfig
	if err := yaml.Unmarshal(data, &cc); err != nil {
		// yaml's unmarshal errors span lines; keep the message one line.
		return nil, fmt.Errorf("parse user data: %s", strings.Join(strings.Fields(err.Error()), " "))
	}
	out := map[int]launch{}
	for _, f := range cc.WriteFiles {
		dir, name := path.Split(f.Path)
		idx, ok := strings.CutSuffix(name, ".json")
		if dir != agentsDir+"/" || !ok {
			continue
		}
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			continue
		}
		var l launch
		if err := json.Unmarshal([]byte(f.Content), &l); err != nil {
			return nil, fmt.Errorf("parse user data: %s: %w", f.Path, err)
		}
		out[i] = l
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("parse user data: no launch records under %s", agentsDir)
	}
	return out, nil
}

// shellQuote quotes s for sh.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
