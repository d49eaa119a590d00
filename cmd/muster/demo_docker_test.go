package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/docker"
	"github.com/musterhq/muster/internal/testutil"
)

// demoDockerDeadline bounds each wait of the docker demo test: the first
// run builds the agent image.
const demoDockerDeadline = 2 * time.Minute

// `muster demo --provider docker` as a new user runs it: the example fleet,
// capped to the docker host, lands as one container per machine over the
// zone networks, and every agent reports its machine started; a container
// stopped behind muster's back is still removed with its machine; after
// Ctrl-C nothing of the demo's model is left on the engine.
func TestDemoDocker(t *testing.T) {
	requireDockerE2E(t)
	t.Setenv("TMPDIR", t.TempDir())
	cli := dockerClient(t)
	bin := buildMuster(t) // with cgo when there is a C compiler: dynamically linked
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	t.Cleanup(func() { // the agent image(s) of this binary
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		f := make(client.Filters).Add("label", docker.LabelAgentSHA256+"="+hex.EncodeToString(sum[:]))
		if res, err := cli.ImageList(ctx, client.ImageListOptions{Filters: f}); err == nil {
			for _, img := range res.Items {
				cli.ImageRemove(ctx, img.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			}
		}
	})
	old := demoAgentBinary
	demoAgentBinary = bin
	t.Cleanup(func() { demoAgentBinary = old })

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out syncBuffer
	done := make(chan error, 1)
	go func() { done <- runDemo(ctx, "docker", &out) }()
	var config string
	testutil.EventuallyWithin(t, demoDockerDeadline, "the docker demo converges", func() bool {
		select {
		case err := <-done:
			t.Fatalf("demo ended early: %v\n%s", err, out.String())
		default:
		}
		for _, l := range strings.Split(out.String(), "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "export MUSTER_CONFIG="); ok {
				config = v
				return true
			}
		}
		return false
	})
	cc, err := controller.LoadClientConfig(config)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialControllers(ctx, cc)
	if err != nil {
		t.Fatal(err)
	}
	mi, err := c.Model(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	modelLabel := muster.TagModel + "=" + mi.UUID
	t.Cleanup(func() { removeLabelled(cli, modelLabel) })

	st, err := c.Status(ctx, "demo")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Machines) != 12 {
		t.Fatalf("got %d machines, want 12\n%s", len(st.Machines), out.String())
	}
	for id, m := range st.Machines {
		if m.Status != string(muster.StatusStarted) || m.InstanceStatus != string(muster.InstanceRunning) {
			t.Errorf("machine %s: got status %s, instance %s, want started and running", id, m.Status, m.InstanceStatus)
		}
	}
	cs := modelContainers(t, cli, mi.UUID)
	networks := map[string]int{}
	for _, ct := range cs {
		if ct.State != "running" {
			t.Errorf("container %v: got state %s, want running", ct.Names, ct.State)
		}
		if ct.NetworkSettings != nil {
			for n := range ct.NetworkSettings.Networks {
				networks[n]++
			}
		}
	}
	if len(cs) != 12 {
		t.Errorf("got %d containers, want one per machine (12)", len(cs))
	}
	if len(networks) != 3 {
		t.Errorf("containers on networks %v, want 3 zone networks", networks)
	}

	// A container stopped behind muster's back is still removed when its
	// machine is.
	victim := "0"
	victimID := st.Machines[victim].InstanceID
	if _, err := cli.ContainerStop(ctx, victimID, client.ContainerStopOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.RemoveMachines(ctx, "demo", api.RemoveMachinesRequest{IDs: []string{victim}, Force: true}); err != nil {
		t.Fatal(err)
	}
	testutil.EventuallyWithin(t, 30*time.Second, "the stopped container of the removed machine goes", func() bool {
		_, err := cli.ContainerInspect(ctx, victimID, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	})

	// Ctrl-C: the demo removes its machines, their containers and its
	// model's networks before it returns.
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("demo after Ctrl-C: %v\n%s", err, out.String())
		}
	case <-time.After(demoDockerDeadline):
		t.Fatalf("demo did not stop within %s of Ctrl-C\n%s", demoDockerDeadline, out.String())
	}
	bg := context.Background()
	f := make(client.Filters).Add("label", modelLabel)
	if left := modelContainers(t, cli, mi.UUID); len(left) != 0 {
		t.Errorf("containers left after the demo: %d", len(left))
	}
	ns, err := cli.NetworkList(bg, client.NetworkListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range ns.Items {
		t.Errorf("network left after the demo: %s", n.Name)
	}
	vs, err := cli.VolumeList(bg, client.VolumeListOptions{Filters: f})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs.Items {
		t.Errorf("volume left after the demo: %s", v.Name)
	}
	if text := out.String(); !strings.Contains(text, "no container, instance, network or volume of model demo is left") {
		t.Errorf("demo output lacks its clean-up line:\n%s", text)
	}
}
