package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"fmt"
	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/controller"
	"github.com/musterhq/muster/docker"
	"github.com/musterhq/muster/internal/testutil"
)

func requireDockerE2E(tb testing.TB) {
	tb.Helper()
	if os.Getenv("MUSTER_TEST_DOCKER") != "1" {
		tb.Skip("set MUSTER_TEST_DOCKER=1 to run the end-to-end tests against the local Docker Engine")
	}
}

// buildStaticMuster builds this command with CGO_ENABLED=0 into a temp
// dir: the agent binary of the docker provider's image must be static.
func buildStaticMuster(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "muster")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// dockerClient returns an engine client closed at the end of the test.
func dockerClient(tb testing.TB) *client.Client {
	tb.Helper()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// removeLabelled removes every container, volume and network carrying
// label (key=value).
func removeLabelled(cli *client.Client, label string) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	f := make(client.Filters).Add("label", label)
	if cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err == nil {
		for _, c := range cs.Items {
			cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		}
	}
	if vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f}); err == nil {
		for _, v := range vs.Items {
			cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true})
		}
	}
	if ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f}); err == nil {
		for _, n := range ns.Items {
			cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{})
		}
	}
}

func randomSuffix() string {
	b := make([]byte, 4)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// modelContainers returns the containers (all states) carrying the
// model's label, by id.
func modelContainers(tb testing.TB, cli *client.Client, modelUUID string) map[string]container.Summary {
	tb.Helper()
	f := make(client.Filters).Add("label", muster.TagModel+"="+modelUUID)
	res, err := cli.ContainerList(context.Background(), client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]container.Summary{}
	for _, c := range res.Items {
		out[c.ID] = c
	}
	return out
}

// dockerController is a controller with an admin client.
type dockerController struct {
	ctrl   *controller.Controller
	client *api.Client
}

func openDockerController(tb testing.TB, agentBinary string) *dockerController {
	tb.Helper()
	tc := startControllerWith(tb, controller.Config{AgentBinary: agentBinary})
	return &dockerController{ctrl: tc.ctrl, client: tc.client()}
}

func (dc *dockerController) setConfig(tb testing.TB, model string, kv map[string]string) {
	tb.Helper()
	if _, err := dc.client.SetModelConfig(context.Background(), model, kv); err != nil {
		tb.Fatalf("set model config: %v", err)
	}
}

func (dc *dockerController) addMachines(tb testing.TB, model string, req api.AddMachinesRequest) []string {
	tb.Helper()
	ids, err := dc.client.AddMachines(context.Background(), model, req)
	if err != nil {
		tb.Fatalf("add machines: %v", err)
	}
	return ids
}

func (dc *dockerController) status(tb testing.TB, model string) api.Status {
	tb.Helper()
	st, err := dc.client.Status(context.Background(), model)
	if err != nil {
		tb.Fatalf("status: %v", err)
	}
	return st
}

// waitMachines waits until cond holds for every one of ids and returns
// that status.
func (dc *dockerController) waitMachines(tb testing.TB, model, what string, ids []string, cond func(api.MachineStatus) bool) api.Status {
	tb.Helper()
	var st api.Status
	testutil.EventuallyWithin(tb, 2*time.Minute, fmt.Sprintf("machines %v %s", ids, what), func() bool {
		st = dc.status(tb, model)
		for _, id := range ids {
			if m, ok := st.Machines[id]; !ok || !cond(m) {
				return false
			}
		}
		return true
	})
	return st
}

// SPEC §3.2, §4 and issue 5: a docker model with zones a, b, c; three
// machines of one group land on three networks and their agents, in the
// containers, log in through the zone gateways and report started; a
// container stopped behind muster's back turns its machine down; removing
// a machine removes its container; containers muster did not launch are
// never touched, even with harvest-mode=all.
func TestDockerE2E(t *testing.T) {
	requireDockerE2E(t)
	ctx := context.Background()
	cli := dockerClient(t)
	bin := buildStaticMuster(t)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	imageRef := docker.ImageRepository + ":" + hex.EncodeToString(sum[:])[:12]
	t.Cleanup(func() {
		cli.ImageRemove(context.Background(), imageRef, client.ImageRemoveOptions{PruneChildren: true})
	})

	ac := openDockerController(t, bin)
	name := "dk-" + randomSuffix()
	mi, err := ac.client.AddModel(ctx, api.AddModelRequest{Name: name, Provider: "docker", Config: map[string]string{"zones": "a,b,c"}})
	if err != nil {
		t.Fatal(err)
	}
	// Registered before anything is made, so that it runs after the
	// controller has stopped (cleanups run last-in first-out).
	t.Cleanup(func() { removeLabelled(cli, muster.TagModel+"="+mi.UUID) })
	ac.setConfig(t, name, map[string]string{
		"agent-heartbeat": "1s", "resync-interval": "1s", "harvest-min-age": "0s",
	})

	// Three machines of one group: three zones, three networks.
	ids := ac.addMachines(t, name, api.AddMachinesRequest{Count: 3, Group: "web"})
	st := ac.waitMachines(t, name, "started", ids, func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })
	zones := map[string]bool{}
	subnets := map[netip.Prefix]bool{}
	for _, id := range ids {
		m := st.Machines[id]
		zones[m.Zone] = true
		if len(m.Addresses) == 0 {
			t.Fatalf("machine %s: no addresses", id)
		}
		a, err := netip.ParseAddr(m.Addresses[0])
		if err != nil {
			t.Fatalf("machine %s: bad address %q", id, m.Addresses[0])
		}
		p, _ := a.Prefix(24)
		subnets[p] = true
		if !strings.Contains(m.Hardware, "arch=") || !strings.Contains(m.Hardware, "cores=") {
			t.Errorf("machine %s: got hardware %q, want arch and cores", id, m.Hardware)
		}
	}
	if len(zones) != 3 || len(subnets) != 3 {
		t.Fatalf("got zones %v and subnets %v, want 3 of each", zones, subnets)
	}
	cs := modelContainers(t, cli, mi.UUID)
	for _, id := range ids {
		c, ok := cs[st.Machines[id].InstanceID]
		if !ok || c.State != container.StateRunning || c.Labels[muster.TagMachine] != id {
			t.Fatalf("machine %s: got container %+v, want a running one labelled with the machine", id, c)
		}
	}
	if len(cs) != 3 {
		t.Fatalf("got %d containers, want 3", len(cs))
	}

	// A container muster did not launch: another controller's labels on
	// this model, in one of the model's networks' image.
	foreign, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "muster-e2e-foreign-" + randomSuffix(),
		Config: &container.Config{Image: imageRef, Entrypoint: []string{"/muster", "sim", "serve", "--listen", "127.0.0.1:0"},
			Labels: map[string]string{muster.TagController: muster.NewUUID(), muster.TagModel: mi.UUID, muster.TagMachine: "0"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cli.ContainerRemove(context.Background(), foreign.ID, client.ContainerRemoveOptions{Force: true})
	})
	if _, err := cli.ContainerStart(ctx, foreign.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	// And one with this controller's and model's labels but no machine:
	// harvest-mode=all removes it, which shows the harvest ran.
	unknown, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: "muster-e2e-unknown-" + randomSuffix(),
		Config: &container.Config{Image: imageRef, Entrypoint: []string{"/muster", "sim", "serve", "--listen", "127.0.0.1:0"},
			Labels: map[string]string{muster.TagController: ac.ctrl.UUID(), muster.TagModel: mi.UUID}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.ContainerStart(ctx, unknown.ID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	ac.setConfig(t, name, map[string]string{"harvest-mode": "all"})
	testutil.Eventually(t, "the unknown container to be harvested", func() bool {
		_, err := cli.ContainerInspect(ctx, unknown.ID, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	})
	ins, err := cli.ContainerInspect(ctx, foreign.ID, client.ContainerInspectOptions{})
	if err != nil || !ins.Container.State.Running {
		t.Fatalf("foreign container after harvest-mode=all: got %v, want it running", err)
	}
	ac.setConfig(t, name, map[string]string{"harvest-mode": "destroyed"})

	// Stopped behind muster's back: the agent's heartbeats stop.
	victim := ids[0]
	if _, err := cli.ContainerStop(ctx, st.Machines[victim].InstanceID, client.ContainerStopOptions{}); err != nil {
		t.Fatal(err)
	}
	ac.waitMachines(t, name, "down", ids[:1], func(m api.MachineStatus) bool { return m.Status == string(muster.StatusDown) })
	if got := ac.status(t, name).Machines[ids[1]].Status; got != string(muster.StatusStarted) {
		t.Errorf("machine %s: got status %s, want started (its agent still heartbeats)", ids[1], got)
	}
	// Started again, the agent logs in again: started.
	if _, err := cli.ContainerStart(ctx, st.Machines[victim].InstanceID, client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}
	ac.waitMachines(t, name, "started again", ids[:1], func(m api.MachineStatus) bool { return m.Status == string(muster.StatusStarted) })

	// Removing a machine removes its container: its agent makes the dying
	// machine dead, then the provisioner stops the container.
	gone := ids[1]
	goneID := st.Machines[gone].InstanceID
	if err := ac.client.RemoveMachines(ctx, name, api.RemoveMachinesRequest{IDs: []string{gone}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the removed machine's container to go", func() bool {
		_, err := cli.ContainerInspect(ctx, goneID, client.ContainerInspectOptions{})
		return cerrdefs.IsNotFound(err)
	})
	if _, err := cli.ContainerInspect(ctx, foreign.ID, client.ContainerInspectOptions{}); err != nil {
		t.Errorf("foreign container: %v", err)
	}

	// Removing the rest and the model leaves nothing of the model behind
	// but the foreign container.
	rest := []string{ids[0], ids[2]}
	if err := ac.client.RemoveMachines(ctx, name, api.RemoveMachinesRequest{IDs: rest}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "every machine removed", func() bool { return len(ac.status(t, name).Machines) == 0 })
	if err := ac.client.RemoveModel(ctx, name); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the model's networks removed", func() bool {
		f := make(client.Filters).Add("label", muster.TagModel+"="+mi.UUID)
		ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
		return err == nil && len(ns.Items) == 0
	})
	left := modelContainers(t, cli, mi.UUID)
	if _, ok := left[foreign.ID]; len(left) != 1 || !ok {
		t.Errorf("got containers %v, want only the foreign one", left)
	}
}
