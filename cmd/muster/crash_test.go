package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/internal/testutil"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/musterhq/muster/sim"
)

// envInt reads a positive number from the environment, else def.
func envInt(tb testing.TB, name string, def int) int {
	tb.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		tb.Fatalf("bad %s=%q: want a positive number", name, v)
	}
	return n
}

// buildMuster builds the muster binary into a temp dir.
func buildMuster(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "muster")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		tb.Fatalf("go build: %v", err)
	}
	return bin
}

// proc is a muster process started by a test.
type proc struct {
	tb   testing.TB
	cmd  *exec.Cmd
	done chan struct{}
}

// startProc starts bin with args, its stderr appended to logPath, and
// waits for a stdout line starting with prefix; it returns the rest of
// that line.
func startProc(tb testing.TB, env []string, logPath, prefix, bin string, args ...string) (*proc, string) {
	tb.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		tb.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stderr = logf
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start %s: %v", strings.Join(args, " "), err)
	}
	p := &proc{tb: tb, cmd: cmd, done: make(chan struct{})}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		found := false
		for sc.Scan() {
			if l := sc.Text(); !found && strings.HasPrefix(l, prefix) {
				found = true
				lines <- strings.TrimPrefix(l, prefix)
			}
		}
		io.Copy(io.Discard, stdout)
		cmd.Wait()
		logf.Close()
		close(p.done)
	}()
	select {
	case l := <-lines:
		return p, strings.TrimSpace(l)
	case <-p.done:
		tb.Fatalf("%s ended before printing %q; see %s", strings.Join(args, " "), prefix, logPath)
	case <-time.After(convergeDeadline):
		p.kill()
		tb.Fatalf("%s did not print %q within %s", strings.Join(args, " "), prefix, convergeDeadline)
	}
	return nil, ""
}

// kill ends the process with SIGKILL and waits for it.
func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

// stop ends the process with SIGINT and waits for it (SIGKILL after 10s).
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.tb.Errorf("process %v did not stop on SIGINT within 10s", p.cmd.Args)
		p.kill()
	}
}

// procTest is what the tests of real muster processes share: the built
// binary, a temp dir, an environment with a HOME of its own and no client
// config, and one controller's data dir and log (whose tail is printed when
// the test fails).
type procTest struct {
	t       *testing.T
	bin     string
	tmp     string
	env     []string
	dataDir string
	logPath string
}

func newProcTest(t *testing.T, extraEnv ...string) *procTest {
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	pt := &procTest{
		t: t, bin: buildMuster(t), tmp: tmp,
		env:     append(append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"), "MUSTER_CONFIG=", "MUSTER_MODEL="), extraEnv...),
		dataDir: filepath.Join(tmp, "data"),
		logPath: filepath.Join(tmp, "controller.log"),
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(pt.logPath); err == nil {
				ls := strings.Split(string(b), "\n")
				t.Logf("controller log (tail):\n%s", strings.Join(ls[max(0, len(ls)-60):], "\n"))
			}
		}
	})
	return pt
}

// startSim starts `muster sim serve` with args and returns it and its URL.
func (pt *procTest) startSim(args ...string) (*proc, string) {
	return startProc(pt.t, pt.env, filepath.Join(pt.tmp, "sim.log"), "sim listening on ", pt.bin,
		append([]string{"sim", "serve", "--listen", "127.0.0.1:0"}, args...)...)
}

// startController starts the controller on the data dir.
func (pt *procTest) startController() *proc {
	p, _ := startProc(pt.t, pt.env, pt.logPath, "controller listening on ", pt.bin,
		"controller", "--data-dir", pt.dataDir, "--listen", "127.0.0.1:0", "--log-format", "json")
	return p
}

// cli runs the CLI against the controller and fails the test unless it
// exits 0.
func (pt *procTest) cli(args ...string) string {
	pt.t.Helper()
	return cliOK(pt.t, pt.config(), args...)
}

// cliOK runs the CLI with a client config and fails the test unless it
// exits 0; it returns the standard output.
func cliOK(tb testing.TB, config string, args ...string) string {
	tb.Helper()
	code, out, errOut := runCLI(tb, append([]string{"--config", config}, args...)...)
	if code != 0 {
		tb.Fatalf("muster %s: exit %d, %s", strings.Join(args, " "), code, errOut)
	}
	return out
}

// config is the client config the controller wrote.
func (pt *procTest) config() string { return filepath.Join(pt.dataDir, "client.yaml") }

// TestCrashKilledControllerC4 kills a real controller with SIGKILL at
// random moments while machines provision against a separate sim server,
// restarts it each time, and checks C4 at convergence: every alive machine
// has exactly one instance, no instance lacks a machine.
//
// It runs with one instance per start call and with batch starts (E3).
// Size: MUSTER_CRASH_MACHINES (default 100) and MUSTER_CRASH_KILLS (default
// 3); SPEC §7's full run is MUSTER_CRASH_MACHINES=500 MUSTER_CRASH_KILLS=20.
func TestCrashKilledControllerC4(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs real processes; skipped with -short")
	}
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch-starts=%v", batch), func(t *testing.T) { testCrashKilledController(t, batch, false) })
	}
	// Replacements in flight (R1): no agent ever registers (the served
	// sim runs none) and registration-timeout is 3s, so machines
	// are replaced again and again while the controller is killed; the
	// timeout is then switched off and C4 checked as above.
	t.Run("replacements", func(t *testing.T) { testCrashKilledController(t, true, true) })
}

func testCrashKilledController(t *testing.T, batch, replace bool) {
	machines := envInt(t, "MUSTER_CRASH_MACHINES", 100)
	if replace {
		machines = max(3, machines/3)
	}
	kills := envInt(t, "MUSTER_CRASH_KILLS", 3)
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("MUSTER_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("machines %d, kills %d, seed %d (MUSTER_CRASH_SEED)", machines, kills, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	pt := newProcTest(t)
	simArgs := []string{"--state", filepath.Join(pt.tmp, "sim-state.json")}
	if replace {
		simArgs = append(simArgs, "--sim-agents=false") // no agent registers
	}
	simProc, simURL := pt.startSim(simArgs...)
	defer simProc.stop()
	ctrl := pt.startController()
	defer func() { ctrl.stop() }()
	config, cli := pt.config(), pt.cli
	// Slow enough that the kills land while machines provision: every
	// call takes 100ms, four workers.
	cli("sim", "faults", "--endpoint", simURL, "--latency", "100ms")
	cli("add-model", "crash", "--provider", "sim", "--config", "endpoint="+simURL,
		"--config", fmt.Sprintf("batch-starts=%v", batch), "--config", "num-provision-workers=4")
	if replace {
		cli("-m", "crash", "model-config", "registration-timeout=3s", "max-unhealthy=100%", "max-in-flight=50%", "retry-count=100")
	}
	// Three groups of different shapes.
	per := machines / 3
	counts := []int{per, per, machines - 2*per}
	for i, cons := range []string{"cores=1", "cores=2", "mem=8G"} {
		if counts[i] > 0 {
			cli("-m", "crash", "add-machine", "-n", strconv.Itoa(counts[i]), "--group", fmt.Sprintf("g%d", i), "--constraints", cons)
		}
	}

	if replace {
		testutil.Eventually(t, "replacements under way", func() bool {
			code, out, _ := runCLI(t, "--config", config, "-m", "crash", "events")
			return code == 0 && strings.Count(out, "replacing instance") >= machines/4
		})
	}
	for k := 0; k < kills; k++ {
		time.Sleep(time.Duration(100+rng.IntN(1400)) * time.Millisecond)
		if code, out, _ := runCLI(t, "--config", config, "-m", "crash", "status", "--format", "json"); code == 0 {
			var st api.StatusScript
			json.Unmarshal([]byte(out), &st)
			running := 0
			for _, m := range st.Machines {
				if m.InstanceStatus == "running" {
					running++
				}
			}
			t.Logf("kill %d with %d of %d machines running", k+1, running, machines)
		}
		ctrl.kill()
		ctrl = pt.startController()
	}
	if replace {
		cli("-m", "crash", "model-config", "registration-timeout=0s")
	}

	// Convergence: every machine's instance running.
	var st api.StatusScript
	deadline := time.Now().Add(convergeDeadline + time.Duration(machines)*100*time.Millisecond)
	for {
		code, out, _ := runCLI(t, "--config", config, "-m", "crash", "status", "--format", "json")
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil && len(st.Machines) == machines {
			running := 0
			for _, m := range st.Machines {
				if m.InstanceStatus == "running" {
					running++
				}
			}
			// With replacements, converged also means none in flight: the
			// sim holds one instance per machine.
			if running == machines && (!replace || len(simInstancesOf(t, simURL)) == machines) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d machines running at the deadline", running, machines)
			}
		} else if time.Now().After(deadline) {
			t.Fatalf("no status at the deadline")
		}
		time.Sleep(200 * time.Millisecond)
	}

	// C4 through the sim's own listing.
	modelUUID := ""
	for _, l := range strings.Split(cli("models"), "\n") {
		if f := strings.Fields(l); len(f) == 4 && strings.TrimSuffix(f[0], "*") == "crash" {
			modelUUID = f[3]
		}
	}
	if modelUUID == "" {
		t.Fatal("model crash not listed")
	}
	var insts []simInstanceJSON
	if err := json.Unmarshal([]byte(cli("sim", "instances", "--endpoint", simURL, "--format", "json")), &insts); err != nil {
		t.Fatal(err)
	}
	byMachine := map[string][]string{}
	for _, i := range insts {
		if i.Model != modelUUID {
			continue
		}
		if i.Machine == "" {
			t.Errorf("instance %s of the model has no machine", i.ID)
			continue
		}
		byMachine[i.Machine] = append(byMachine[i.Machine], i.ID)
	}
	for id, m := range st.Machines {
		got := byMachine[id]
		if len(got) != 1 || got[0] != m.InstanceID {
			t.Errorf("machine %s: got instances %v in the sim, want exactly its recorded %s", id, got, m.InstanceID)
		}
	}
	for id, is := range byMachine {
		if _, ok := st.Machines[id]; !ok {
			t.Errorf("instances %v tagged with machine %s, which does not exist", is, id)
		}
	}
	stats, err := sim.NewClient(simURL, nil).Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("converged: %d machines, %d instances; sim started %d, stopped %d, start calls %d",
		len(st.Machines), len(insts), stats.InstancesStarted, stats.InstancesStopped, stats.Calls[sim.CallStart])
}

// simInstancesOf lists a served sim's instances.
func simInstancesOf(tb testing.TB, simURL string) []sim.Instance {
	insts, err := sim.NewClient(simURL, nil).Instances(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	return insts
}
