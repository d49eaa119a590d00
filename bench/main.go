// Command bench measures muster's provisioner against the in-process sim
// (SPEC §7, E1–E3): the real engine and a SQLite store in a temporary
// directory, a cloud of three zones with a 50 ms start latency and a
// request bucket of 10 burst and 50 a second.
//
//	go run ./bench [--machines N] [--json] [--scenario convergence|event-latency]
//	go run ./bench --policy juju [--machines N] [--adds 20] [--json]
//	go run ./bench --scenario agents [--machines 10000] [--steady 15s] [--json] [--memprofile FILE]
//	MUSTER_TEST_POSTGRES=postgres://… go run ./bench --scenario failover [--machines 20] [--json]
//
// The convergence scenario runs N machines of one group twice: "single"
// (batch-starts off: one instance a call) and "batched" (batch starts of
// up to 100 instances a call, with an instance bucket of 2,000 burst and
// 500 a second). Each reports the seconds from the bulk add to every
// machine recorded running, the lower bound the sim's buckets and latency
// allow (see singleLowerBound and batchedLowerBound), their ratio and the
// start calls per machine. The event-latency scenario brings up N machines
// (default 10,000), then adds one machine at a time and reports how long
// each took to reach the provider's start call, and how many full
// instance listings the sim saw meanwhile (E1 wants none). --policy juju
// runs the convergence fleet with muster's engine and with a model of
// Juju's provisioner policy (juju.go) side by side. The failover scenario
// (failover.go) kills the controller running a model on PostgreSQL five
// times and reports how long another one took to run it. The agents
// scenario (agents.go) runs N machines on a real controller's default
// model without and with simulated agents: time to every instance running
// and to every machine started, the slowest status read meanwhile, CPU,
// the agents' request rate once they all heartbeat, provisioner restarts.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"time"

	"github.com/musterhq/muster/api"
)

func main() {
	err := run(os.Args[1:], os.Stdout, os.Stderr)
	if errors.Is(err, flag.ErrHelp) {
		return
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(args []string, out, errOut io.Writer) error {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(errOut)
	machines := fs.Int("machines", 0, "machines to provision (default 1000; 10000 for event-latency)")
	asJSON := fs.Bool("json", false, "print one JSON line instead of a table")
	scenario := fs.String("scenario", "convergence", "convergence, event-latency, agents or failover (needs MUSTER_TEST_POSTGRES)")
	adds := fs.Int("adds", 20, "single-machine adds measured by event-latency, or made after convergence by --policy juju")
	policy := fs.String("policy", "", "juju: run the convergence fleet with muster's engine and with Juju's provisioner policy, side by side")
	timeout := fs.Duration("timeout", 0, "give up on a scenario after this long (default: 3x its lower bound + 60s; failover: each wait 30s)")
	musterBin := fs.String("muster", "", "failover: the muster binary to run (default: built from this module)")
	repeat := fs.Int("repeat", 0, "agents: run the pair of runs (without agents, with them) this many times and report the median pair (default 3)")
	steady := fs.Duration("steady", 15*time.Second, "agents: how long to watch the heartbeats once every machine is started")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the run to this file")
	fs.StringVar(&heapProfile, "memprofile", "", "agents: write a heap profile to this file once every agent has started")
	fs.StringVar(&tailProfile, "tailprofile", "", "agents: write a CPU profile of the agents run from every instance running to every machine started (not with --cpuprofile)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if *repeat != 0 && *scenario != "agents" {
		return fmt.Errorf("--repeat is for --scenario agents only")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	switch {
	case *policy != "" && (*policy != "juju" || *scenario != "convergence"):
		return fmt.Errorf("bad --policy %q: want juju, with the convergence scenario", *policy)
	case *policy == "juju":
		n := machinesOr(*machines, 1000)
		if n < 1 || *adds < 0 {
			return fmt.Errorf("bad --machines %d or --adds %d: want at least 1 and 0", n, *adds)
		}
		to := timeoutOr(*timeout, time.Duration(3*singleLowerBound(n)*float64(time.Second))+time.Minute)
		// Juju's policy may also wait out its retries: 11 attempts 10 s apart.
		jto := to + time.Duration(jujuRetries)*jujuRetryDelay
		if *timeout != 0 {
			jto = to
		}
		res, err := runSideBySide(ctx, n, *adds, to, jto)
		if err != nil {
			return err
		}
		return report(out, *asJSON, res, printSideBySide)
	}
	switch *scenario {
	case "convergence":
		n := machinesOr(*machines, 1000)
		if n < 1 {
			return fmt.Errorf("bad --machines %d: want at least 1", n)
		}
		res, err := runConvergence(ctx, n, timeoutOr(*timeout, time.Duration(3*singleLowerBound(n)*float64(time.Second))+time.Minute))
		if err != nil {
			return err
		}
		// JSON rounds to the millisecond; the table from the exact figures.
		return report(out, *asJSON, roundConvergence(res), func(w io.Writer, _ Convergence) { printConvergence(w, res) })
	case "event-latency":
		n := machinesOr(*machines, 10000)
		if n < 1 || *adds < 1 {
			return fmt.Errorf("bad --machines %d or --adds %d: want at least 1", n, *adds)
		}
		res, err := runEventLatency(ctx, n, *adds, timeoutOr(*timeout, time.Duration(3*batchedLowerBound(n)*float64(time.Second))+time.Minute))
		if err != nil {
			return err
		}
		return report(out, *asJSON, res, printEventLatency)
	case "agents":
		n := machinesOr(*machines, 10000)
		if n < 1 || n > api.MaxAddMachines || *steady < 0 {
			return fmt.Errorf("bad --machines %d or --steady %s: want 1 to %d and at least 0", n, *steady, api.MaxAddMachines)
		}
		pairs := *repeat
		if pairs == 0 {
			pairs = agentsRepeat
		}
		if pairs < 1 {
			return fmt.Errorf("bad --repeat %d: want at least 1", pairs)
		}
		res, err := runAgents(ctx, n, pairs, timeoutOr(*timeout, 10*time.Minute), *steady)
		if err != nil {
			return err
		}
		err = report(out, *asJSON, res, printAgents)
		if k := res.restarts(); err == nil && k > 0 {
			err = fmt.Errorf("agents: the provisioner was restarted %d times", k)
		}
		return err
	case "failover":
		n := machinesOr(*machines, 20)
		if n < 1 {
			return fmt.Errorf("bad --machines %d: want at least 1", n)
		}
		res, err := runFailover(ctx, n, *musterBin, timeoutOr(*timeout, 30*time.Second))
		if err != nil {
			return err
		}
		err = report(out, *asJSON, res, printFailover)
		if err == nil && (res.Overlaps > 0 || res.Duplicates > 0) {
			err = fmt.Errorf("failover: %d overlapping provisioner runs, %d machines with more than one instance", res.Overlaps, res.Duplicates)
		}
		return err
	default:
		return fmt.Errorf("bad --scenario %q: want convergence, event-latency, agents or failover", *scenario)
	}
}

func printAgents(out io.Writer, a Agents) {
	fmt.Fprintf(out, "agents scenario: %d machines on a real controller's default model (boot delay %.1f s)\n\n", a.Machines, a.BootDelaySeconds)
	fmt.Fprintf(out, "%-10s %9s %11s %12s %9s %9s %12s %9s %6s\n", "run", "seconds", "instances s", "worst status", "failures", "CPU s", "agent req/s", "restarts", "down")
	for _, r := range []struct {
		name string
		r    AgentsRun
	}{{"no agents", a.NoAgents}, {"agents", a.WithAgents}} {
		fmt.Fprintf(out, "%-10s %9.3f %11.3f %12.3f %9d %9.2f %12.1f %9d %6d\n", r.name, r.r.Seconds, r.r.InstancesSeconds, r.r.WorstStatusSeconds,
			r.r.StatusFailures, r.r.CPUSeconds, r.r.AgentRequestRate, r.r.ProvisionerRestarts, r.r.Down)
	}
	fmt.Fprintf(out, "\nagents / (no agents + boot delay) = %.3f (target ≤ 1.5), peak RSS %.1f MB (target < 600)\n", a.Ratio, a.PeakRSSMB)
	if len(a.Pairs) > 1 {
		fmt.Fprintf(out, "the median of %d pairs; each pair's no agents s / agents s / ratio:", len(a.Pairs))
		for _, p := range a.Pairs {
			fmt.Fprintf(out, "  %.3f / %.3f / %.3f", p.NoAgentsSeconds, p.AgentsSeconds, p.Ratio)
		}
		fmt.Fprintln(out)
	}
}

// report prints a scenario's result as one JSON line (--json) or as its
// table.
func report[T any](out io.Writer, asJSON bool, res T, table func(io.Writer, T)) error {
	if asJSON {
		return printJSON(out, res)
	}
	table(out, res)
	return nil
}

// timeoutOr is the --timeout value t, or def when it was not given.
func timeoutOr(t, def time.Duration) time.Duration {
	if t == 0 {
		return def
	}
	return t
}

func printJSON(out io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

func roundConvergence(c Convergence) Convergence {
	for _, s := range []*Scenario{&c.Single, &c.Batched} {
		s.Seconds = round3(s.Seconds)
		s.LowerBoundSeconds = round3(s.LowerBoundSeconds)
		s.Ratio = round3(s.Ratio)
		s.StartCallsPerMachine = round3(s.StartCallsPerMachine)
	}
	return c
}

func printConvergence(out io.Writer, c Convergence) {
	fmt.Fprintf(out, "convergence of %d machines (3 zones, start latency %s, request bucket %d burst / %g per s)\n\n",
		c.Machines, startLatency, requestBurst, requestRate)
	fmt.Fprintf(out, "%-8s %9s %12s %7s %12s %11s %9s  %s\n", "scenario", "seconds", "lower bound", "ratio", "calls/mach.", "start calls", "throttled", "zones a/b/c")
	for _, r := range []struct {
		name string
		s    Scenario
	}{{"single", c.Single}, {"batched", c.Batched}} {
		fmt.Fprintf(out, "%-8s %9.3f %12.3f %7.3f %12.3f %11d %9d  %d/%d/%d\n", r.name, r.s.Seconds, r.s.LowerBoundSeconds,
			r.s.Ratio, r.s.StartCallsPerMachine, r.s.startCalls, r.s.throttled, r.s.zones["a"], r.s.zones["b"], r.s.zones["c"])
	}
	speedup := 0.0
	if c.Batched.Seconds > 0 {
		speedup = c.Single.Seconds / c.Batched.Seconds
	}
	fmt.Fprintf(out, "\nbatched speed-up %.1fx, max zone skew %d, peak RSS %.1f MB, CPU %.2f s (%.2f s per 1,000 machines provisioned)\n",
		speedup, c.MaxZoneSkew, c.PeakRSSMB, c.CPUSeconds, c.CPUSeconds/float64(2*c.Machines)*1000)
}

func printEventLatency(out io.Writer, e EventLatency) {
	fmt.Fprintf(out, "event latency with %d running machines (brought up in %.1f s), %d single adds\n\n", e.Machines, e.ProvisionSeconds, e.Adds)
	fmt.Fprintf(out, "add → StartInstance: median %.2f ms, p90 %.2f ms, max %.2f ms\n", e.MedianMS, e.P90MS, e.MaxMS)
	verdict := "ok"
	if e.FullListings != 0 {
		verdict = "E1 VIOLATED"
	}
	fmt.Fprintf(out, "full instance listings during the adds: %d (%s)\n", e.FullListings, verdict)
	fmt.Fprintf(out, "peak RSS %.1f MB, CPU %.2f s\n", e.PeakRSSMB, e.CPUSeconds)
}

// machinesOr is the --machines value n, or def when it was not given.
func machinesOr(n, def int) int {
	if n == 0 {
		return def
	}
	return n
}
