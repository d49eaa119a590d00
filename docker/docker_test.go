package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

func TestZonesHaveTheirOwnNetworks(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)

	zones, err := p.Zones(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []muster.Zone{{Name: "a", Available: true}, {Name: "b", Available: true}, {Name: "c", Available: true}}
	if !slices.Equal(zones, want) {
		t.Fatalf("zones: got %v, want %v", zones, want)
	}

	subnets := map[string]netip.Prefix{}
	for _, z := range []string{"a", "b", "c"} {
		res, err := p.cli.NetworkInspect(ctx, p.NetworkName(z), client.NetworkInspectOptions{})
		if err != nil {
			t.Fatalf("network of zone %s: %v", z, err)
		}
		n := res.Network
		if n.Labels[muster.TagController] != testController || n.Labels[muster.TagModel] != p.cfg.ModelUUID || n.Labels[LabelZone] != z {
			t.Errorf("network %s labels: got %v", n.Name, n.Labels)
		}
		if len(n.IPAM.Config) == 0 {
			t.Fatalf("network %s has no IPAM config", n.Name)
		}
		subnets[z] = n.IPAM.Config[0].Subnet
	}

	seen := map[string]string{}
	for i, z := range []string{"a", "b", "c"} {
		machine := string(rune('0' + i))
		res := mustStart(t, p, params(p, machine, z))
		if res.Instance.Zone != z || res.Hardware.AvailabilityZone != z {
			t.Errorf("machine %s: got zone %q hardware zone %q, want %q", machine, res.Instance.Zone, res.Hardware.AvailabilityZone, z)
		}
		if len(res.Addresses) != 1 {
			t.Fatalf("machine %s addresses: got %v, want one", machine, res.Addresses)
		}
		addr := netip.MustParseAddr(res.Addresses[0])
		if !subnets[z].Contains(addr) {
			t.Errorf("machine %s address %s not in zone %s subnet %s", machine, addr, z, subnets[z])
		}
		seen[subnets[z].String()] = z
		if res.Instance.MachineID != machine || res.Instance.State != "running" {
			t.Errorf("machine %s: got instance %+v", machine, res.Instance)
		}
		wantName := "muster-" + p.cfg.ModelUUID[:8] + "-m" + machine + "-" + sanitize(res.Instance.LaunchToken)[:12]
		if res.DisplayName != wantName {
			t.Errorf("display name: got %q, want %q", res.DisplayName, wantName)
		}
	}
	if len(seen) != 3 {
		t.Errorf("subnets: got %v, want three different", seen)
	}

	gws, err := p.GatewayAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gws) != 3 {
		t.Fatalf("gateways: got %v, want 3", gws)
	}
	for i, z := range []string{"a", "b", "c"} {
		if !subnets[z].Contains(netip.MustParseAddr(gws[i])) {
			t.Errorf("gateway %s not in zone %s subnet %s", gws[i], z, subnets[z])
		}
	}
}

func TestStartLabelsConfigAndListing(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	sp := params(p, "7", "b")
	sp.Tags["owner"] = "ops"
	res := mustStart(t, p, sp)

	ins, err := p.cli.ContainerInspect(ctx, res.Instance.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	labels := ins.Container.Config.Labels
	wantLabels := map[string]string{
		muster.TagController:  testController,
		muster.TagModel:       p.cfg.ModelUUID,
		muster.TagMachine:     "7",
		muster.TagLaunchToken: sp.LaunchToken,
		LabelZone:             "b",
		"owner":               "ops",
		"muster-test":         "docker",
	}
	for k, v := range wantLabels {
		if labels[k] != v {
			t.Errorf("label %s: got %q, want %q", k, labels[k], v)
		}
	}
	wantEntry := []string{AgentPath, "agent", "--config", AgentConfigPath}
	if got := ins.Container.Config.Entrypoint; !slices.Equal(got, wantEntry) {
		t.Errorf("entrypoint: got %v, want %v", got, wantEntry)
	}

	cp, err := p.cli.CopyFromContainer(ctx, res.Instance.ID, client.CopyFromContainerOptions{SourcePath: AgentConfigPath})
	if err != nil {
		t.Fatalf("copy agent config out: %v", err)
	}
	defer cp.Content.Close()
	tr := tar.NewReader(cp.Content)
	hdr, err := tr.Next()
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(tr)
	if string(data) != string(sp.UserData) {
		t.Errorf("agent config: got %q, want %q", data, sp.UserData)
	}
	if hdr.Mode&0o077 != 0 {
		t.Errorf("agent config mode: got %o, want no group/other bits", hdr.Mode)
	}

	insts, err := p.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 {
		t.Fatalf("instances: got %d, want 1", len(insts))
	}
	got := insts[0]
	if got.ID != res.Instance.ID || got.Zone != "b" || got.MachineID != "7" || got.LaunchToken != sp.LaunchToken || got.State != "running" {
		t.Errorf("instance: got %+v, want id %s zone b machine 7 token %s running", got, res.Instance.ID, sp.LaunchToken)
	}
	if d := time.Since(got.Created); d < -time.Minute || d > 10*time.Minute {
		t.Errorf("created: got %v, want about now", got.Created)
	}
	if res.Hardware.Arch == "" || res.Hardware.Cores == 0 || res.Hardware.Mem == 0 {
		t.Errorf("hardware: got %v, want arch, cores and mem of the host", res.Hardware)
	}
}

func TestStartIsIdempotentByLaunchToken(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	sp := params(p, "1", "a")
	first := mustStart(t, p, sp)

	// A repeat, and a repeat with another zone (the first wins), give the
	// same instance.
	again := mustStart(t, p, sp)
	sp2 := sp
	sp2.Zone = "c"
	third := mustStart(t, p, sp2)
	for _, r := range []muster.StartResult{again, third} {
		if r.Instance.ID != first.Instance.ID {
			t.Errorf("repeat start: got instance %s, want %s", r.Instance.ID, first.Instance.ID)
		}
		if r.Instance.Zone != "a" {
			t.Errorf("repeat start zone: got %s, want a", r.Instance.Zone)
		}
	}
	insts, err := p.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 {
		t.Errorf("instances: got %d, want 1", len(insts))
	}

	// Concurrent starts of one token make one container.
	sp3 := params(p, "2", "b")
	outs := p.StartInstances(ctx, []muster.StartParams{sp3, sp3, sp3})
	for i, o := range outs {
		if o.Err != nil {
			t.Fatalf("batch start %d: %v", i, o.Err)
		}
		if o.Result.Instance.ID != outs[0].Result.Instance.ID {
			t.Errorf("batch start %d: got %s, want %s", i, o.Result.Instance.ID, outs[0].Result.Instance.ID)
		}
	}
	if insts, _ = p.Instances(ctx); len(insts) != 2 {
		t.Errorf("instances: got %d, want 2", len(insts))
	}
}

func TestStartResumesContainerCreatedButNotStarted(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	sp := params(p, "3", "a")
	img, err := p.ensureImage(ctx, p.cfg.AgentBinary, "")
	if err != nil {
		t.Fatal(err)
	}
	zn, err := p.zoneNetwork(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	// As if a controller crashed between creating and starting.
	id, err := p.create(ctx, sp, "a", img, zn)
	if err != nil {
		t.Fatal(err)
	}
	res := mustStart(t, p, sp)
	if res.Instance.ID != id || res.Instance.State != "running" {
		t.Errorf("resumed: got %s %s, want %s running", res.Instance.ID, res.Instance.State, id)
	}
}

func TestForeignContainersAreNeverTouched(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	own := mustStart(t, p, params(p, "0", "a"))
	img, err := p.EnsureImage(ctx)
	if err != nil {
		t.Fatal(err)
	}

	foreignLabels := map[string]map[string]string{
		"other model":      {muster.TagController: testController, muster.TagModel: newUUID(), muster.TagMachine: "0"},
		"other controller": {muster.TagController: newUUID(), muster.TagModel: p.cfg.ModelUUID, muster.TagMachine: "0"},
		"untagged":         {},
	}
	var foreign []string
	for name, labels := range foreignLabels {
		labels["muster-test"] = "foreign"
		c, err := p.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name:   "muster-test-foreign-" + randomHex(6),
			Config: &container.Config{Image: img, Labels: labels},
		})
		if err != nil {
			t.Fatalf("%s: create: %v", name, err)
		}
		t.Cleanup(func() {
			p.cli.ContainerRemove(context.Background(), c.ID, client.ContainerRemoveOptions{Force: true})
		})
		if _, err := p.cli.ContainerStart(ctx, c.ID, client.ContainerStartOptions{}); err != nil {
			t.Fatalf("%s: start: %v", name, err)
		}
		foreign = append(foreign, c.ID)
	}

	insts, err := p.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || insts[0].ID != own.Instance.ID {
		t.Errorf("instances: got %v, want only %s", insts, own.Instance.ID)
	}

	if err := p.StopInstances(ctx, append([]string{own.Instance.ID}, foreign...)...); err != nil {
		t.Fatal(err)
	}
	for _, id := range foreign {
		ins, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
		if err != nil {
			t.Errorf("foreign container %s: %v", id, err)
			continue
		}
		if !ins.Container.State.Running {
			t.Errorf("foreign container %s: got state %s, want running", id, ins.Container.State.Status)
		}
	}
	if _, err := p.cli.ContainerInspect(ctx, own.Instance.ID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("own container after stop: got err %v, want not found", err)
	}
	// A prefix of an own id is not taken for the id.
	other := mustStart(t, p, params(p, "1", "a"))
	if err := p.StopInstances(ctx, other.Instance.ID[:12], "no-such-container"); err != nil {
		t.Fatal(err)
	}
	if insts, _ := p.Instances(ctx); len(insts) != 1 {
		t.Errorf("instances after stopping a prefix: got %d, want 1", len(insts))
	}
	// Stopping again is fine.
	for range 2 {
		if err := p.StopInstances(ctx, own.Instance.ID, other.Instance.ID); err != nil {
			t.Fatal(err)
		}
	}
	if insts, _ := p.Instances(ctx); len(insts) != 0 {
		t.Errorf("instances after stop: got %d, want 0", len(insts))
	}
}

func TestConstraintsBecomeLimits(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	sp := params(p, "4", "c")
	sp.Constraints = muster.MustParseConstraints("cores=1 mem=64M")
	res := mustStart(t, p, sp)
	ins, err := p.cli.ContainerInspect(ctx, res.Instance.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := ins.Container.HostConfig.NanoCPUs, int64(1e9); got != want {
		t.Errorf("NanoCPUs: got %d, want %d", got, want)
	}
	if got, want := ins.Container.HostConfig.Memory, int64(64<<20); got != want {
		t.Errorf("Memory: got %d, want %d", got, want)
	}
	if res.Hardware.Cores != 1 || res.Hardware.Mem != 64 {
		t.Errorf("hardware: got %v, want cores=1 mem=64M", res.Hardware)
	}
}

func TestBadStartsAreZoneIndependentAndLeaveNothing(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	ei, err := p.engineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	other := "arm64"
	if ei.Arch == "arm64" {
		other = "amd64"
	}
	tests := []struct {
		name   string
		mutate func(*muster.StartParams)
	}{
		{"too many cores", func(sp *muster.StartParams) { sp.Constraints.Cores = uint64(ei.NCPU) + 1 }},
		{"too much memory", func(sp *muster.StartParams) { sp.Constraints.Mem = uint64(ei.MemTotal>>20) + 1 }},
		{"too little memory", func(sp *muster.StartParams) { sp.Constraints.Mem = 1 }},
		{"instance type", func(sp *muster.StartParams) { sp.Constraints.InstanceType = "m5.large" }},
		{"other arch", func(sp *muster.StartParams) { sp.Arch = other }},
		{"unknown zone", func(sp *muster.StartParams) { sp.Zone = "z" }},
		{"unknown placement", func(sp *muster.StartParams) { sp.Zone = ""; sp.Placement = "zone=z" }},
		{"unknown pool", func(sp *muster.StartParams) { sp.Volumes = []muster.Volume{{Name: "d", Size: 1, Pool: "ebs"}} }},
		{"other model", func(sp *muster.StartParams) { sp.ModelUUID = newUUID() }},
		{"no machine", func(sp *muster.StartParams) { sp.MachineID = "" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := params(p, "5", "a")
			tt.mutate(&sp)
			_, err := p.StartInstance(ctx, sp)
			if !muster.IsZoneIndependent(err) {
				t.Errorf("got %v (kind %v), want a zone-independent error", err, muster.ProviderErrorKindOf(err))
			}
		})
	}
	insts, err := p.Instances(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 0 {
		t.Errorf("instances: got %d, want 0", len(insts))
	}
}

func TestVolumesLiveAndDieWithTheContainer(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	ctx := testContext(t)
	sp := params(p, "6", "a")
	sp.Volumes = []muster.Volume{{Name: "logs", Size: 512}, {Name: "data", Size: 1024}}
	res := mustStart(t, p, sp)
	wantVols := []muster.Volume{
		{Name: "data", VolumeID: res.DisplayName + "-data", Size: 1024},
		{Name: "logs", VolumeID: res.DisplayName + "-logs", Size: 512},
	}
	if !slices.Equal(res.Volumes, wantVols) {
		t.Errorf("volumes: got %v, want %v", res.Volumes, wantVols)
	}
	wantAtt := []muster.VolumeAttachment{
		{Volume: "data", MachineID: "6", InstanceID: res.Instance.ID, DeviceName: StorageDir + "/data"},
		{Volume: "logs", MachineID: "6", InstanceID: res.Instance.ID, DeviceName: StorageDir + "/logs"},
	}
	if !slices.Equal(res.Attachments, wantAtt) {
		t.Errorf("attachments: got %v, want %v", res.Attachments, wantAtt)
	}
	for _, v := range wantVols {
		vi, err := p.cli.VolumeInspect(ctx, v.VolumeID, client.VolumeInspectOptions{})
		if err != nil {
			t.Fatalf("volume %s: %v", v.VolumeID, err)
		}
		l := vi.Volume.Labels
		if l[muster.TagModel] != p.cfg.ModelUUID || l[muster.TagMachine] != "6" || l[muster.TagLaunchToken] != sp.LaunchToken || l[LabelVolume] != v.Name {
			t.Errorf("volume %s labels: got %v", v.VolumeID, l)
		}
	}
	if err := p.StopInstances(ctx, res.Instance.ID); err != nil {
		t.Fatal(err)
	}
	for _, v := range wantVols {
		if _, err := p.cli.VolumeInspect(ctx, v.VolumeID, client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
			t.Errorf("volume %s after stop: got err %v, want not found", v.VolumeID, err)
		}
	}

	// Cleanup removes volumes a failed stop left, and only this model's.
	left := p.ownLabels()
	left[muster.TagLaunchToken] = newUUID()
	foreign := map[string]string{muster.TagController: testController, muster.TagModel: newUUID(), "muster-test": "foreign"}
	var names []string
	for _, labels := range []map[string]string{left, foreign} {
		v, err := p.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, v.Volume.Name)
		t.Cleanup(func() { p.cli.VolumeRemove(context.Background(), v.Volume.Name, client.VolumeRemoveOptions{}) })
	}
	if err := p.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.cli.VolumeInspect(ctx, names[0], client.VolumeInspectOptions{}); !cerrdefs.IsNotFound(err) {
		t.Errorf("left-over volume after cleanup: got err %v, want not found", err)
	}
	if _, err := p.cli.VolumeInspect(ctx, names[1], client.VolumeInspectOptions{}); err != nil {
		t.Errorf("foreign volume after cleanup: %v", err)
	}
}

func TestImageIsBuiltOncePerBinary(t *testing.T) {
	parallelDocker(t)
	bin := uniqueBinary(t)
	p1 := newProvider(t, func(c *Config) { c.AgentBinary = bin })
	ctx := testContext(t)
	ref, err := p1.EnsureImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if p1.builds != 1 {
		t.Errorf("first provider builds: got %d, want 1", p1.builds)
	}
	before, err := p1.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if before.Config.Labels[LabelImage] != "agent" {
		t.Errorf("image labels: got %v", before.Config.Labels)
	}

	p2 := newProvider(t, func(c *Config) { c.AgentBinary = bin })
	mustStart(t, p2, params(p2, "0", "a"))
	if p2.builds != 0 {
		t.Errorf("second provider builds: got %d, want 0", p2.builds)
	}
	after, err := p2.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if after.ID != before.ID || after.Created != before.Created {
		t.Errorf("image: got %s created %s, want %s created %s", after.ID, after.Created, before.ID, before.Created)
	}
}

func TestAgentBinaryMustRun(t *testing.T) {
	parallelDocker(t)
	tests := []struct{ name, binary string }{
		{"not elf", "testdata/sleeper/main.go"},
		{"missing", "/no/such/binary"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := newProvider(t, func(c *Config) { c.AgentBinary = tt.binary })
			_, err := p.StartInstance(testContext(t), params(p, "0", "a"))
			if !muster.IsZoneIndependent(err) {
				t.Errorf("got %v, want a zone-independent error", err)
			}
		})
	}
}

func TestHostNetworkMode(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, func(c *Config) { c.NetworkMode = NetworkHost; c.Zones = []string{"x", "y"} })
	ctx := testContext(t)
	res := mustStart(t, p, params(p, "0", "y"))
	if !slices.Equal(res.Addresses, []string{"127.0.0.1"}) || res.Instance.Zone != "y" {
		t.Errorf("got addresses %v zone %s, want [127.0.0.1] y", res.Addresses, res.Instance.Zone)
	}
	ns, err := p.cli.NetworkList(ctx, client.NetworkListOptions{Filters: p.ownFilters()})
	if err != nil {
		t.Fatal(err)
	}
	if len(ns.Items) != 0 {
		t.Errorf("networks in host mode: got %d, want 0", len(ns.Items))
	}
	if gws, _ := p.GatewayAddresses(ctx); !slices.Equal(gws, []string{"127.0.0.1"}) {
		t.Errorf("gateways: got %v, want [127.0.0.1]", gws)
	}
}

func TestCancelledStartLeavesNothing(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, nil)
	if _, err := p.EnsureImage(testContext(t)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := p.StartInstance(ctx, params(p, "0", "a")); !errors.Is(err, context.Canceled) {
		t.Errorf("pre-cancelled start: got %v, want context.Canceled", err)
	}
	// Cancel at various points of a start: either it succeeds, or no
	// container or volume of its token is left behind.
	for i, d := range []time.Duration{time.Millisecond, 5 * time.Millisecond, 20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond} {
		sp := params(p, "1", "a")
		sp.Volumes = []muster.Volume{{Name: "data", Size: 1}}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		_, err := p.StartInstance(ctx, sp)
		cancel()
		if err == nil {
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("start %d: got %v, want a deadline error", i, err)
		}
		tctx := testContext(t)
		if _, found, err := p.findByToken(tctx, sp.LaunchToken); err != nil || found {
			t.Errorf("start %d cancelled after %v: container left behind (found %v, err %v)", i, d, found, err)
		}
		f := p.ownFilters().Add("label", muster.TagLaunchToken+"="+sp.LaunchToken)
		vs, err := p.cli.VolumeList(tctx, client.VolumeListOptions{Filters: f})
		if err != nil || len(vs.Items) != 0 {
			t.Errorf("start %d cancelled after %v: volumes left behind: %v %v", i, d, vs.Items, err)
		}
	}
}

func TestDeriveZones(t *testing.T) {
	p := &Provider{cfg: Config{Zones: []string{"a", "b"}}}
	tests := []struct {
		placement string
		want      []string
		wantErr   bool
	}{
		{"", nil, false},
		{"zone=b", []string{"b"}, false},
		{"zone=c", nil, true},
		{"rack=1", nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.placement, func(t *testing.T) {
			got, err := p.DeriveZones(context.Background(), muster.StartParams{Placement: tt.placement})
			if (err != nil) != tt.wantErr || !slices.Equal(got, tt.want) {
				t.Errorf("got %v, %v; want %v, error %v", got, err, tt.want, tt.wantErr)
			}
			if err != nil && !muster.IsZoneIndependent(err) {
				t.Errorf("got kind %v, want zone-independent", muster.ProviderErrorKindOf(err))
			}
		})
	}
}

func TestNewRejectsBadConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no model", Config{ControllerUUID: "c"}},
		{"no controller", Config{ModelUUID: "m"}},
		{"bad zone", Config{ControllerUUID: "c", ModelUUID: "m", Zones: []string{"a b"}}},
		{"repeated zone", Config{ControllerUUID: "c", ModelUUID: "m", Zones: []string{"a", "a"}}},
		{"bad network mode", Config{ControllerUUID: "c", ModelUUID: "m", NetworkMode: "overlay"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(context.Background(), tt.cfg)
			if !muster.IsCode(err, muster.EInvalid) {
				t.Errorf("got %v, want an invalid error", err)
			}
		})
	}
}

func TestUnreachableEngineIsUnavailable(t *testing.T) {
	_, err := New(context.Background(), Config{ControllerUUID: "c", ModelUUID: "m", Host: "unix://" + t.TempDir() + "/none.sock"})
	if got := muster.ProviderErrorKindOf(err); got != muster.ErrUnavailable {
		t.Errorf("got %v (kind %v), want unavailable", err, got)
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want muster.ProviderErrorKind
	}{
		{"not found", cerrdefs.ErrNotFound, muster.ErrZoneIndependent},
		{"invalid", cerrdefs.ErrInvalidArgument, muster.ErrZoneIndependent},
		{"denied", cerrdefs.ErrPermissionDenied, muster.ErrZoneIndependent},
		{"unavailable", cerrdefs.ErrUnavailable, muster.ErrUnavailable},
		{"internal", cerrdefs.ErrInternal, muster.ErrUnavailable},
		{"conflict", cerrdefs.ErrConflict, muster.ErrUnavailable},
		{"other", errors.New("connection reset"), muster.ErrUnavailable},
		{"cancelled", context.Canceled, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := muster.ProviderErrorKindOf(classify(tt.err, "x")); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestNames(t *testing.T) {
	p := &Provider{model8: "0123abcd", prefix: "muster-7e57c0de-0123abcd"}
	if got, want := p.ContainerName("0/lxd/1", "5f0c2b7a-1d2e-4f00-9abc-def012345678"), "muster-0123abcd-m0-lxd-1-5f0c2b7a-1d2"; got != want {
		t.Errorf("container name: got %q, want %q", got, want)
	}
	if got, want := p.NetworkName("a"), "muster-7e57c0de-0123abcd-a"; got != want {
		t.Errorf("network name: got %q, want %q", got, want)
	}
	if !strings.HasPrefix(dockerfile, "FROM scratch\n") {
		t.Errorf("dockerfile: got %q", dockerfile)
	}
}

// TestAgentReachesHostOnGateway shows how agents reach a controller on the
// host: the test listens on a zone network's gateway address (a private
// bridge address of this host), and the container, told that address in
// its config, connects to it.
func TestAgentReachesHostOnGateway(t *testing.T) {
	parallelDocker(t)
	p := newProvider(t, func(c *Config) { c.Zones = []string{"a", "b"} })
	ctx := testContext(t)
	gws, err := p.GatewayAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(gws) != 2 {
		t.Fatalf("gateways: got %v, want 2", gws)
	}
	for i, zone := range []string{"a", "b"} {
		ln, err := net.Listen("tcp", net.JoinHostPort(gws[i], "0"))
		if err != nil {
			t.Fatalf("listen on gateway of zone %s: %v", zone, err)
		}
		defer ln.Close()
		sp := params(p, fmt.Sprint(i), zone)
		sp.UserData = []byte("dial: " + ln.Addr().String() + "\n")
		mustStart(t, p, sp)
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
		conn, err := ln.Accept()
		if err != nil {
			t.Fatalf("zone %s: no connection from the container: %v", zone, err)
		}
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		line, err := bufio.NewReader(conn).ReadString('\n')
		conn.Close()
		if want := "hello from m-" + fmt.Sprint(i) + "\n"; line != want || err != nil {
			t.Errorf("zone %s: got %q (%v), want %q", zone, line, err, want)
		}
	}
}

func TestApplyModelConfig(t *testing.T) {
	tests := []struct {
		name     string
		settings map[string]string
		want     Config
		wantErr  bool
	}{
		{"defaults", nil, Config{Zones: []string{"a", "b", "c"}, NetworkMode: NetworkBridge}, false},
		{"all keys", map[string]string{"zones": "x,y", "network-mode": "host", "docker-host": "unix:///d.sock", "subnets": "x=10.77.1.0/24"},
			Config{Zones: []string{"x", "y"}, NetworkMode: NetworkHost, Host: "unix:///d.sock", Subnets: map[string]string{"x": "10.77.1.0/24"}}, false},
		{"unknown key", map[string]string{"region": "eu"}, Config{}, true},
		{"bad zone", map[string]string{"zones": "a,,b"}, Config{}, true},
		{"bad mode", map[string]string{"network-mode": "none"}, Config{}, true},
		{"subnet of unknown zone", map[string]string{"subnets": "q=10.0.0.0/24"}, Config{}, true},
		{"bad subnet", map[string]string{"subnets": "a=10.0.0.0"}, Config{}, true},
		{"ipv6 subnet", map[string]string{"subnets": "a=fd00::/64"}, Config{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Config
			err := ApplyModelConfig(&got, tt.settings)
			if tt.wantErr {
				if !muster.IsCode(err, muster.EInvalid) {
					t.Errorf("got %v, want an invalid error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got.Zones, tt.want.Zones) || got.NetworkMode != tt.want.NetworkMode || got.Host != tt.want.Host || fmt.Sprint(got.Subnets) != fmt.Sprint(tt.want.Subnets) {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestAgentBinaryFromCatalogue(t *testing.T) {
	parallelDocker(t)
	bin := sleeperPath
	p := newProvider(t, func(c *Config) { c.AgentBinary = "/no/such/binary" })
	ctx := testContext(t)
	ei, err := p.engineInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	hexSum := hex.EncodeToString(sum[:])
	other := "arm64"
	if ei.Arch == "arm64" {
		other = "amd64"
	}
	tests := []struct {
		name     string
		binaries []muster.AgentBinary
		wantErr  bool
	}{
		{"matching", []muster.AgentBinary{
			{Version: "1.0.0", OS: "linux", Arch: other, Path: "/no/such/other"},
			{Version: "1.0.0", OS: "linux", Arch: ei.Arch, SHA256: hexSum, Path: bin},
		}, false},
		{"wrong sha256", []muster.AgentBinary{{OS: "linux", Arch: ei.Arch, SHA256: strings.Repeat("ab", 32), Path: bin}}, true},
		{"other arch only: falls back to the missing config binary", []muster.AgentBinary{{OS: "linux", Arch: other, Path: bin}}, true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp := params(p, fmt.Sprint(i), "a")
			sp.AgentBinaries = tt.binaries
			res, err := p.StartInstance(ctx, sp)
			if tt.wantErr {
				if !muster.IsZoneIndependent(err) {
					t.Errorf("got %v, want a zone-independent error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ins, err := p.cli.ContainerInspect(ctx, res.Instance.ID, client.ContainerInspectOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ins.Container.Config.Image, ImageRepository+":"+hexSum[:12]; got != want {
				t.Errorf("image: got %s, want %s", got, want)
			}
		})
	}
}
