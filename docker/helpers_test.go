package docker

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

// testController labels everything the tests make, so that TestMain can
// sweep what a killed run left behind.
const testController = "7e57c0de-d0c4-4e55-8000-000000000001"

var (
	sleeperPath string // static test agent, built once by TestMain
	imagesMu    sync.Mutex
	testImages  = map[string]bool{} // image refs the tests may have built
)

func dockerEnabled() bool { return os.Getenv("MUSTER_TEST_DOCKER") == "1" }

func TestMain(m *testing.M) {
	code := func() int {
		if !dockerEnabled() {
			return m.Run()
		}
		// The tests mostly wait on the engine: run more of them at once
		// than there are CPUs, unless told otherwise.
		flag.Parse()
		if f := flag.Lookup("test.parallel"); f != nil && f.Value.String() == f.DefValue {
			flag.Set("test.parallel", "6")
		}
		dir, err := os.MkdirTemp("", "muster-docker-test-")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		defer os.RemoveAll(dir)
		sleeperPath = filepath.Join(dir, "sleeper")
		cmd := exec.Command("go", "build", "-o", sleeperPath, "./testdata/sleeper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build test agent: %v\n%s", err, out)
			return 1
		}
		registerImage(sleeperPath)
		sweep()
		defer sweep()
		return m.Run()
	}()
	os.Exit(code)
}

// sweep removes every container, volume and network of the test
// controller, and the images of the test binaries.
func sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return
	}
	defer cli.Close()
	f := make(client.Filters).Add("label", muster.TagController+"="+testController)
	removeAll(ctx, cli, f)
	fo := make(client.Filters).Add("label", "muster-test=foreign")
	removeAll(ctx, cli, fo)
	imagesMu.Lock()
	defer imagesMu.Unlock()
	for ref := range testImages {
		cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true})
	}
}

// removeAll removes the containers, volumes and networks matching f.
func removeAll(ctx context.Context, cli *client.Client, f client.Filters) {
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

// registerImage records the image ref of binary for the final sweep and
// returns it.
func registerImage(binary string) string {
	data, err := os.ReadFile(binary)
	if err != nil {
		panic(err)
	}
	sum := sha256.Sum256(data)
	ref := ImageRepository + ":" + hex.EncodeToString(sum[:])[:12]
	imagesMu.Lock()
	testImages[ref] = true
	imagesMu.Unlock()
	return ref
}

func requireDocker(tb testing.TB) {
	tb.Helper()
	if !dockerEnabled() {
		tb.Skip("set MUSTER_TEST_DOCKER=1 to run the tests against the local Docker Engine")
	}
}

// parallelDocker skips tb without Docker and otherwise runs it in parallel
// with the other Docker tests: they wait on the engine, not the CPU.
func parallelDocker(tb testing.TB) {
	tb.Helper()
	requireDocker(tb)
	if t, ok := tb.(*testing.T); ok {
		t.Parallel()
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func newUUID() string {
	h := randomHex(16)
	return h[:8] + "-" + h[8:12] + "-4" + h[13:16] + "-8" + h[17:20] + "-" + h[20:32]
}

// newProvider returns a provider of a fresh model of the test controller.
// Everything of that model is removed when the test ends.
func newProvider(tb testing.TB, mutate func(*Config)) *Provider {
	tb.Helper()
	requireDocker(tb)
	cfg := Config{
		ControllerUUID: testController,
		ModelUUID:      newUUID(),
		ModelName:      tb.Name(),
		AgentBinary:    sleeperPath,
		Logger:         slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if mutate != nil {
		mutate(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := New(ctx, cfg)
	if err != nil {
		tb.Fatalf("new provider: %v", err)
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		removeAll(ctx, p.cli, p.ownFilters())
		if err := p.Cleanup(ctx); err != nil {
			tb.Errorf("cleanup: %v", err)
		}
		p.Close()
	})
	return p
}

// uniqueBinary returns a copy of the test agent with random bytes appended:
// still a valid static executable, with a hash (and image) of its own.
func uniqueBinary(tb testing.TB) string {
	tb.Helper()
	requireDocker(tb)
	data, err := os.ReadFile(sleeperPath)
	if err != nil {
		tb.Fatal(err)
	}
	data = append(data, []byte(randomHex(16))...)
	path := filepath.Join(tb.TempDir(), "agent")
	if err := os.WriteFile(path, data, 0o755); err != nil {
		tb.Fatal(err)
	}
	ref := registerImage(path)
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
		if err != nil {
			return
		}
		defer cli.Close()
		if _, err := cli.ImageRemove(ctx, ref, client.ImageRemoveOptions{PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
			tb.Errorf("remove image %s: %v", ref, err)
		}
	})
	return path
}

// params returns start params for machine id in zone with a fresh token.
func params(p *Provider, machine, zone string) muster.StartParams {
	return muster.StartParams{
		ControllerUUID: p.cfg.ControllerUUID,
		ModelUUID:      p.cfg.ModelUUID,
		MachineID:      machine,
		Zone:           zone,
		LaunchToken:    newUUID(),
		Tags:           map[string]string{"muster-test": "docker"},
		UserData:       []byte("machine: " + machine + "\n"),
	}
}

func testContext(tb testing.TB) context.Context {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	tb.Cleanup(cancel)
	return ctx
}

func mustStart(tb testing.TB, p *Provider, sp muster.StartParams) muster.StartResult {
	tb.Helper()
	res, err := p.StartInstance(testContext(tb), sp)
	if err != nil {
		tb.Fatalf("start machine %s: %v", sp.MachineID, err)
	}
	return res
}
