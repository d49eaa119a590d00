package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/musterhq/muster/api"
	"gopkg.in/yaml.v3"
)

// ClientConfig is what the CLI needs to reach a controller: written by the
// controller at first start to <data-dir>/client.yaml and, if none exists
// yet, ~/.config/muster/client.yaml (mode 0600: it holds the admin token).
type ClientConfig struct {
	// Controllers are the API URLs of every known controller; the CLI tries
	// them in order.
	Controllers []string `yaml:"controllers"`
	CACert      string   `yaml:"ca-cert"`
	Token       string   `yaml:"token"`
	Model       string   `yaml:"model,omitempty"`
}

// DefaultClientConfigPath is ~/.config/muster/client.yaml.
func DefaultClientConfigPath() (string, error) {
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("find the user config directory: %w", err)
	}
	return filepath.Join(dir, "muster", "client.yaml"), nil
}

// LearnControllers sets c's controllers to the live ones the controller
// of client knows: client's first, then the others the store has
// registered; controllers no longer registered are forgotten. It reports
// whether they changed. Any failure leaves them as they are (an older
// controller has no list).
func (c *ClientConfig) LearnControllers(ctx context.Context, client *api.Client) bool {
	live, err := client.Controllers(ctx)
	if err != nil || len(live) == 0 {
		return false
	}
	urls := []string{client.URL()}
	for _, l := range live {
		if l.URL != client.URL() {
			urls = append(urls, l.URL)
		}
	}
	if slices.Equal(urls, c.Controllers) {
		return false
	}
	c.Controllers = urls
	return true
}

// LoadClientConfig reads a client config and checks it is complete.
func LoadClientConfig(path string) (*ClientConfig, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no client config at %s: start a controller with `muster controller` or set MUSTER_CONFIG", path)
	}
	if err != nil {
		return nil, fmt.Errorf("read client config: %w", err)
	}
	var c ClientConfig
	if err := yaml.Unmarshal(data, &c); err != nil {
		return nil, fmt.Errorf("client config %s: %v", path, err)
	}
	if len(c.Controllers) == 0 || c.Token == "" || c.CACert == "" {
		return nil, fmt.Errorf("client config %s: controllers, ca-cert and token are required", path)
	}
	return &c, nil
}

// Save writes c atomically with mode 0600.
func (c *ClientConfig) Save(path string) error {
	data, err := yaml.Marshal(c)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write client config: %w", err)
	}
	return nil
}
