package controller

import (
	"os"
	"path/filepath"
	"testing"
)

// A first start whose user config dir cannot be written still starts:
// the data dir's client config is enough. (Tests may run as root, whom
// permissions do not stop: the muster dir is a link to where nothing can
// be made.)
func TestFirstStartWithUnwritableUserConfigDir(t *testing.T) {
	home := t.TempDir()
	if err := os.Symlink("/proc/self/no-such-dir/muster", filepath.Join(home, "muster")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("XDG_CONFIG_HOME", home)
	c := openTest(t, t.TempDir(), Config{WriteUserConfig: true})
	cc, err := LoadClientConfig(c.ClientConfigPath())
	if err != nil || len(cc.Controllers) == 0 || cc.Token == "" {
		t.Fatalf("data dir client config %s: %+v, %v", c.ClientConfigPath(), cc, err)
	}
	if _, err := adminClient(t, c).Models(t.Context()); err != nil {
		t.Errorf("the data dir's client config does not reach the controller: %v", err)
	}
}
