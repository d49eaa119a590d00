package lxd

import (
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

// planProvider is a provider as Open leaves it on a 2-CPU, 4 GiB amd64
// host, without a daemon: plan does no I/O.
func planProvider() *Provider {
	cfg := Config{ControllerUUID: "ctrl", ModelUUID: "0c5d3f4e-model"}
	if err := cfg.check(); err != nil {
		panic(err)
	}
	return &Provider{cfg: cfg, arch: "amd64", cores: 2, memMiB: 4096}
}

func TestPlan(t *testing.T) {
	p := planProvider()
	sp := startParams(p, "4", "b")
	sp.Constraints = muster.Constraints{Cores: 2, Mem: 1024, RootDisk: 8192}
	sp.Volumes = []muster.Volume{{Name: "data", Size: 10240}}
	sp.Tags["team"] = "x"
	pl, err := p.plan(sp)
	if err != nil {
		t.Fatal(err)
	}
	if pl.name != InstanceName(p.cfg.ModelUUID, "4", sp.LaunchToken) || pl.zone != "b" {
		t.Errorf("name %q zone %q", pl.name, pl.zone)
	}
	for k, want := range map[string]string{
		"limits.cpu": "2", "limits.memory": "1024MiB", KeyZone: "b", "user.team": "x",
		"user.muster-machine": "4", "user.muster-launch-token": sp.LaunchToken, "cloud-init.user-data": "#cloud-config\n{}\n",
	} {
		if got := pl.config[k]; got != want {
			t.Errorf("config %s = %q, want %q", k, got, want)
		}
	}
	if got := pl.devices["root"]; got["size"] != "8192MiB" || got["pool"] != DefaultStoragePool || got["path"] != "/" {
		t.Errorf("root device %v", got)
	}
	if got := pl.devices["vol-data"]; got["source"] != pl.name+"-data" || got["path"] != StorageDir+"/data" {
		t.Errorf("volume device %v", got)
	}
	noZone := startParams(p, "5", "")
	if pl, err := p.plan(noZone); err != nil || pl.zone != "a" {
		t.Errorf("no zone: got %q, %v; want the first zone", pl.zone, err)
	}
}

func TestPlanErrors(t *testing.T) {
	p := planProvider()
	for _, tt := range []struct {
		name string
		edit func(sp *muster.StartParams)
		want string
	}{
		{"other model", func(sp *muster.StartParams) { sp.ModelUUID = "m2" }, "not this provider's"},
		{"no token", func(sp *muster.StartParams) { sp.LaunchToken = "" }, "lack a machine id or launch token"},
		{"unknown zone", func(sp *muster.StartParams) { sp.Zone = "z9" }, `zone "z9" is not one of`},
		{"unknown OS", func(sp *muster.StartParams) { sp.Base = "windows@2022" }, "no image for base windows@2022"},
		{"bad base", func(sp *muster.StartParams) { sp.Base = "nope" }, "base"},
		{"other arch", func(sp *muster.StartParams) { sp.Arch = "arm64" }, "arch arm64"},
		{"instance type", func(sp *muster.StartParams) { sp.Constraints.InstanceType = "m5.large" }, "no instance types"},
		{"too many cores", func(sp *muster.StartParams) { sp.Constraints.Cores = 3 }, "cores=3: the LXD host has 2 CPUs"},
		{"too much mem", func(sp *muster.StartParams) { sp.Constraints.Mem = 8192 }, "mem=8G"},
		{"bad tag key", func(sp *muster.StartParams) { sp.Tags["a b"] = "x" }, `bad tag key "a b"`},
		{"zone tag", func(sp *muster.StartParams) { sp.Tags["muster-zone"] = "x" }, `bad tag key "muster-zone"`},
		{"bad volume name", func(sp *muster.StartParams) { sp.Volumes = []muster.Volume{{Name: "Data/x"}} }, "bad volume name"},
		{"volume twice", func(sp *muster.StartParams) { sp.Volumes = []muster.Volume{{Name: "d"}, {Name: "d"}} }, `volume "d" given more than once`},
		{"other pool", func(sp *muster.StartParams) { sp.Volumes = []muster.Volume{{Name: "d", Pool: "ssd"}} }, `storage pool "ssd"`},
		{"unknown attachment", func(sp *muster.StartParams) { sp.Attachments = []muster.VolumeAttachment{{Volume: "x"}} }, `attachment of unknown volume "x"`},
		{"other machine's attachment", func(sp *muster.StartParams) {
			sp.Volumes = []muster.Volume{{Name: "d"}}
			sp.Attachments = []muster.VolumeAttachment{{Volume: "d", MachineID: "9"}}
		}, "is for machine 9"},
		{"bad agent config", func(sp *muster.StartParams) { sp.UserData = []byte(`{"machine":"1"}`) }, "agent config of machine 1"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sp := startParams(p, "1", "a")
			tt.edit(&sp)
			_, err := p.plan(sp)
			if !muster.IsZoneIndependent(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a zone-independent error containing %q", err, tt.want)
			}
		})
	}
}
