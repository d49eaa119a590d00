package agent

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"github.com/musterhq/muster"
	"gopkg.in/yaml.v3"
)

// maxConfig bounds the agent config file.
const maxConfig = 1 << 20

// LoadConfig reads an agent config file (what `muster agent --config`
// runs with), JSON or YAML with the same keys; EInvalid when it is
// neither or is incomplete.
func LoadConfig(path string) (muster.AgentConfig, error) {
	f, err := os.Open(path)
	if err != nil {
		return muster.AgentConfig{}, fmt.Errorf("read agent config: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxConfig+1))
	if err != nil {
		return muster.AgentConfig{}, fmt.Errorf("read agent config: %w", err)
	}
	if len(b) > maxConfig {
		return muster.AgentConfig{}, muster.Errorf(muster.EInvalid, "agent config %s is larger than %d bytes", path, maxConfig)
	}
	if t := bytes.TrimSpace(b); len(t) > 0 && t[0] != '{' {
		var m map[string]any
		if err := yaml.Unmarshal(b, &m); err != nil {
			return muster.AgentConfig{}, muster.Errorf(muster.EInvalid, "bad agent config %s: %v", path, err)
		}
		if b, err = json.Marshal(m); err != nil {
			return muster.AgentConfig{}, muster.Errorf(muster.EInvalid, "bad agent config %s: %v", path, err)
		}
	}
	cfg, err := muster.ParseAgentConfig(b)
	if err != nil {
		return muster.AgentConfig{}, fmt.Errorf("%s: %w", path, err)
	}
	return cfg, nil
}
