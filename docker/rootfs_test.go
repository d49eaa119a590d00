package docker

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// patchLibc returns a copy of the dynamic binary at path whose DT_NEEDED
// libc.so.6 is renamed libQ.so.6, a library no host has.
func patchLibc(tb testing.TB, path string) string {
	tb.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		tb.Fatal(err)
	}
	old, repl := []byte("libc.so.6\x00"), []byte("libQ.so.6\x00")
	if n := bytes.Count(data, old); n == 0 {
		tb.Skipf("%s names no libc.so.6", path)
	}
	out := filepath.Join(tb.TempDir(), "patched")
	if err := os.WriteFile(out, bytes.ReplaceAll(data, old, repl), 0o755); err != nil {
		tb.Fatal(err)
	}
	return out
}

func TestAgentRootOfDynamicBinary(t *testing.T) {
	const bin = "/bin/sh"
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Skipf("no %s: %v", bin, err)
	}
	root, err := agentRootOf(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	if !root.Dynamic() || root.Interp == "" {
		t.Fatalf("got interp %q, want %s dynamic", root.Interp, bin)
	}
	var paths []string
	for _, f := range root.Files {
		paths = append(paths, f.Path)
		if len(f.Data) == 0 {
			t.Errorf("file %s is empty", f.Path)
		}
	}
	if !slices.Contains(paths, root.Interp) {
		t.Errorf("files %v: want the interpreter %s", paths, root.Interp)
	}
	if !slices.ContainsFunc(paths, func(p string) bool { return strings.HasSuffix(p, "/libc.so.6") }) {
		t.Errorf("files %v: want libc.so.6", paths)
	}
	if !slices.IsSorted(paths) {
		t.Errorf("files %v: want sorted", paths)
	}
	if len(root.LibDirs) == 0 {
		t.Errorf("no library directories")
	}
	if got := dockerfileFor(root); !strings.Contains(got, "ENV LD_LIBRARY_PATH="+strings.Join(root.LibDirs, ":")+"\n") || !strings.HasPrefix(got, "FROM scratch\n") {
		t.Errorf("dockerfile: got %q", got)
	}

	// The tag follows the libraries.
	sum := root.TagSum()
	if sum == root.SHA256 {
		t.Errorf("tag sum of a dynamic binary: got the binary's own sum")
	}
	last := &root.Files[len(root.Files)-1]
	last.Data = append(slices.Clone(last.Data), 0)
	if got := root.TagSum(); got == sum {
		t.Errorf("tag sum after %s changed: got %s, want another", last.Path, got)
	}
}

func TestAgentRootOfRefuses(t *testing.T) {
	if _, err := os.Stat("/bin/sh"); err != nil {
		t.Skip("no /bin/sh")
	}
	tests := []struct {
		name, binary, want string
	}{
		{"missing library", patchLibc(t, "/bin/sh"), "libQ.so.6"},
		{"not elf", "testdata/sleeper/main.go", "not a linux executable"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			data, err := os.ReadFile(tt.binary)
			if err != nil {
				t.Fatal(err)
			}
			_, err = agentRootOf(tt.binary, data)
			if !muster.IsZoneIndependent(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want a zone-independent error naming %q", err, tt.want)
			}
		})
	}
}

var (
	cgoSleeperOnce sync.Once
	cgoSleeperPath string
	cgoSleeperErr  error
)

// cgoSleeper builds the test agent with cgo: a dynamically linked binary.
// It skips tb when there is no C compiler. It lives next to the static
// test agent, in TestMain's directory.
func cgoSleeper(tb testing.TB) string {
	tb.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		tb.Skip("no gcc: cannot build a dynamically linked test agent")
	}
	cgoSleeperOnce.Do(func() {
		cgoSleeperPath = filepath.Join(filepath.Dir(sleeperPath), "cgo-sleeper")
		cmd := exec.Command("go", "build", "-o", cgoSleeperPath, "./testdata/sleeper")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			cgoSleeperErr = err
			tb.Logf("%s", out)
		}
	})
	if cgoSleeperErr != nil {
		tb.Fatalf("build cgo test agent: %v", cgoSleeperErr)
	}
	return cgoSleeperPath
}

// A dynamically linked agent (what `go run` builds when cgo is on) runs
// FROM scratch with its loader and libraries copied from the host: the
// container says hello on the zone gateway.
func TestDynamicAgentRuns(t *testing.T) {
	parallelDocker(t)
	bin := cgoSleeper(t)
	data, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	root, err := agentRootOf(bin, data)
	if err != nil {
		t.Fatal(err)
	}
	if !root.Dynamic() {
		t.Fatalf("cgo test agent is static; want dynamic")
	}
	ref := ImageRepository + ":" + root.TagSum()[:12]
	imagesMu.Lock()
	testImages[ref] = true
	imagesMu.Unlock()

	p := newProvider(t, func(c *Config) { c.AgentBinary = bin; c.Zones = []string{"a"} })
	ctx := testContext(t)
	got, err := p.EnsureImage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got != ref {
		t.Errorf("image: got %s, want %s", got, ref)
	}
	ins, err := p.cli.ImageInspect(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if l := ins.Config.Labels; l[LabelAgentSHA256] != root.SHA256 || l[LabelAgentRootSHA256] != root.TagSum() {
		t.Errorf("image labels: got %v", l)
	}

	gws, err := p.GatewayAddresses(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(gws[0], "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sp := params(p, "0", "a")
	sp.UserData = []byte("dial: " + ln.Addr().String() + "\n")
	mustStart(t, p, sp)
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(30 * time.Second))
	conn, err := ln.Accept()
	if err != nil {
		t.Fatalf("no connection from the dynamic agent's container: %v", err)
	}
	conn.SetDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(conn).ReadString('\n')
	conn.Close()
	if want := "hello from m-0\n"; line != want || err != nil {
		t.Errorf("got %q (%v), want %q", line, err, want)
	}
}

// A dynamic agent whose library this host lacks is refused before any
// container is made.
func TestDynamicAgentMissingLibrary(t *testing.T) {
	parallelDocker(t)
	bin := patchLibc(t, cgoSleeper(t))
	p := newProvider(t, func(c *Config) { c.AgentBinary = bin; c.Zones = []string{"a"} })
	_, err := p.StartInstance(testContext(t), params(p, "0", "a"))
	if !muster.IsZoneIndependent(err) || !strings.Contains(err.Error(), "libQ.so.6") {
		t.Errorf("got %v, want a zone-independent error naming libQ.so.6", err)
	}
	insts, err := p.Instances(testContext(t))
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 0 {
		t.Errorf("instances: got %v, want none", insts)
	}
}
