package lxd

import (
	"context"
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

// TestStartRecordsConstraintsAndVolumes checks the instance's limits,
// keys and root disk, and that a volume is made, attached, recorded, and
// deleted with the instance.
func TestStartRecordsConstraintsAndVolumes(t *testing.T) {
	needLXD(t)
	p := openTest(t, Config{Zones: []string{"a", "b"}})
	ctx := testCtx(t)
	sp := startParams(p, "3", "b")
	sp.Constraints = muster.Constraints{Cores: 1, Mem: 512, RootDisk: 2048}
	sp.Volumes = []muster.Volume{{Name: "data", Size: 1024}}
	sp.Attachments = []muster.VolumeAttachment{{Volume: "data", MachineID: "3"}}
	res, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatalf("StartInstance: %v", err)
	}
	in, err := p.c.Instance(ctx, res.Instance.ID)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"limits.cpu": "1", "limits.memory": "512MiB", KeyZone: "b",
		"user.muster-controller": p.cfg.ControllerUUID, "user.muster-model": p.cfg.ModelUUID,
		"user.muster-machine": "3", "user.muster-launch-token": sp.LaunchToken,
	} {
		if got := in.Config[k]; got != want {
			t.Errorf("config %s = %q, want %q", k, got, want)
		}
	}
	if got := in.Devices["root"]["size"]; got != "2048MiB" {
		t.Errorf("root disk size %q, want 2048MiB", got)
	}
	if got := in.Devices["eth0"]["network"]; got != p.NetworkName("b") {
		t.Errorf("nic on network %q, want zone b's %q", got, p.NetworkName("b"))
	}
	hw := res.Hardware
	if hw.Cores != 1 || hw.Mem != 512 || hw.RootDisk != 2048 || hw.Arch != "amd64" || hw.AvailabilityZone != "b" {
		t.Errorf("hardware: got %+v", hw)
	}
	if len(res.Volumes) != 1 || res.Volumes[0].Name != "data" || res.Volumes[0].VolumeID != res.Instance.ID+"-data" || res.Volumes[0].Size != 1024 {
		t.Fatalf("volumes: got %+v", res.Volumes)
	}
	if len(res.Attachments) != 1 || res.Attachments[0].InstanceID != res.Instance.ID || res.Attachments[0].DeviceName != StorageDir+"/data" {
		t.Errorf("attachments: got %+v", res.Attachments)
	}
	left, err := p.Leftovers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(left, "\n"), "volume "+res.Instance.ID+"-data") {
		t.Errorf("no volume among %v", left)
	}
	if err := p.StopInstances(ctx, res.Instance.ID); err != nil {
		t.Fatal(err)
	}
	left, _ = p.Leftovers(ctx)
	for _, l := range left {
		if !strings.HasPrefix(l, "network ") {
			t.Errorf("left after stop: %s", l)
		}
	}
}

// TestAdoptionAcrossProviders: a second provider (a restarted controller)
// starting the same launch gets the same instance, started again if it
// was stopped (C1).
func TestAdoptionAcrossProviders(t *testing.T) {
	needLXD(t)
	p := openTest(t, Config{Zones: []string{"a"}})
	ctx := testCtx(t)
	sp := startParams(p, "0", "a")
	first, err := p.StartInstance(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.c.SetState(ctx, first.Instance.ID, "stop", true); err != nil {
		t.Fatal(err)
	}
	q, err := Open(ctx, p.cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	again, err := q.StartInstance(ctx, sp)
	if err != nil {
		t.Fatalf("second start: %v", err)
	}
	if again.Instance.ID != first.Instance.ID || again.Instance.State != "running" {
		t.Errorf("second start: got %s (%s), want %s running", again.Instance.ID, again.Instance.State, first.Instance.ID)
	}
	other := sp
	other.LaunchToken = "another-token"
	other.Tags = map[string]string{}
	third, err := q.StartInstance(ctx, other)
	if err != nil {
		t.Fatal(err)
	}
	if third.Instance.ID == first.Instance.ID {
		t.Errorf("a start with another launch token adopted %s", first.Instance.ID)
	}
}

// TestMissingImageIsZoneIndependent: a model whose image alias is missing
// fails its starts zone-independently and leaves nothing behind.
func TestMissingImageIsZoneIndependent(t *testing.T) {
	needLXD(t)
	p := openTest(t, Config{Zones: []string{"a"}, Image: "muster/no-such-image"})
	_, err := p.StartInstance(testCtx(t), startParams(p, "0", "a"))
	if !muster.IsZoneIndependent(err) || !strings.Contains(err.Error(), `image "muster/no-such-image" not found`) {
		t.Fatalf("got %v, want a zone-independent error naming the image", err)
	}
}

// TestForeignInstanceUntouched: an instance named like ours but carrying
// another controller's keys is neither listed, adopted nor stopped (H7).
func TestForeignInstanceUntouched(t *testing.T) {
	needLXD(t)
	p := openTest(t, Config{Zones: []string{"a"}})
	ctx := testCtx(t)
	sp := startParams(p, "0", "a")
	name := InstanceName(p.cfg.ModelUUID, "0", sp.LaunchToken)
	err := p.c.CreateInstance(ctx, InstancesPost{Name: name, Type: "container",
		Source: InstanceSource{Type: "image", Alias: p.cfg.Image}, Profiles: []string{"default"},
		Config: map[string]string{"user.muster-controller": "someone-else", "user.muster-model": p.cfg.ModelUUID}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		p.c.SetState(context.Background(), name, "stop", true) // running only if a start adopted it
		if err := p.c.DeleteInstance(context.Background(), name); err != nil {
			t.Errorf("delete foreign instance: %v", err)
		}
	}()
	if got, err := p.Instances(ctx); err != nil || len(got) != 0 {
		t.Errorf("Instances: got %v, %v; want none", got, err)
	}
	if _, err := p.StartInstance(ctx, sp); !muster.IsZoneIndependent(err) {
		t.Errorf("start onto a foreign instance's name: got %v, want a zone-independent error", err)
	}
	if err := p.StopInstances(ctx, name); err != nil {
		t.Fatal(err)
	}
	if _, err := p.c.Instance(ctx, name); err != nil {
		t.Errorf("foreign instance gone after StopInstances: %v", err)
	}
}

// TestInterruptedLaunchResumed: an instance of this model created by a
// start that ended before starting it (its controller killed) is started
// by the next listing, since the provisioner adopts it from there (C2);
// one that ran and was stopped is left stopped.
func TestInterruptedLaunchResumed(t *testing.T) {
	needLXD(t)
	p := openTest(t, Config{Zones: []string{"a"}})
	ctx := testCtx(t)
	sp := startParams(p, "0", "a")
	name := InstanceName(p.cfg.ModelUUID, "0", sp.LaunchToken)
	cfg := p.ownConfig()
	cfg[keyPrefix+muster.TagMachine], cfg[keyPrefix+muster.TagLaunchToken], cfg[KeyZone] = "0", sp.LaunchToken, "a"
	err := p.c.CreateInstance(ctx, InstancesPost{Name: name, Type: "container",
		Source: InstanceSource{Type: "image", Alias: p.cfg.Image}, Profiles: []string{"default"}, Config: cfg})
	if err != nil {
		t.Fatal(err)
	}
	defer p.StopInstances(context.Background(), name)
	got, err := p.Instances(ctx)
	if err != nil || len(got) != 1 || got[0].ID != name || got[0].State != "running" {
		t.Fatalf("Instances: got %+v, %v; want %s running", got, err, name)
	}
	if in, err := p.c.Instance(ctx, name); err != nil || in.Status != "Running" {
		t.Fatalf("instance %s: got %+v, %v; want it running", name, in.Status, err)
	}
	if err := p.c.SetState(ctx, name, "stop", true); err != nil {
		t.Fatal(err)
	}
	if got, err := p.Instances(ctx); err != nil || len(got) != 1 || got[0].State != "stopped" {
		t.Fatalf("Instances after a stop: got %+v, %v; want it stopped", got, err)
	}
}
