package main

import (
	"bytes"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"testing"
)

func keys(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// runJSON runs the bench with args and decodes its one JSON line.
func runJSON(tb testing.TB, args ...string) map[string]any {
	tb.Helper()
	var out bytes.Buffer
	if err := run(args, &out, io.Discard); err != nil {
		tb.Fatalf("bench %s: %v", strings.Join(args, " "), err)
	}
	if n := strings.Count(out.String(), "\n"); n != 1 {
		tb.Fatalf("got %d lines %q, want one JSON line", n, out.String())
	}
	var m map[string]any
	if err := json.Unmarshal(out.Bytes(), &m); err != nil {
		tb.Fatalf("decode %q: %v", out.String(), err)
	}
	return m
}

// TestConvergenceJSON runs both convergence scenarios on a few machines
// (the harness fails unless every machine is recorded running) and checks
// the JSON line's keys and the counts that do not depend on timing.
func TestConvergenceJSON(t *testing.T) {
	n := "60"
	if testing.Short() {
		n = "30"
	}
	m := runJSON(t, "--machines", n, "--json")
	if got, want := keys(m), []string{"batched", "cpu_seconds", "machines", "max_zone_skew", "peak_rss_mb", "single"}; !slices.Equal(got, want) {
		t.Fatalf("got keys %v, want %v", got, want)
	}
	if got, want := m["machines"], map[string]float64{"60": 60, "30": 30}[n]; got != want {
		t.Errorf("got machines %v, want %v", got, want)
	}
	for _, name := range []string{"single", "batched"} {
		s, ok := m[name].(map[string]any)
		if !ok {
			t.Fatalf("%s: got %T, want an object", name, m[name])
		}
		if got, want := keys(s), []string{"lower_bound_seconds", "ratio", "seconds", "start_calls_per_machine"}; !slices.Equal(got, want) {
			t.Errorf("%s: got keys %v, want %v", name, got, want)
		}
		for k, v := range s {
			if f, ok := v.(float64); !ok || f <= 0 {
				t.Errorf("%s.%s: got %v, want a positive number", name, k, v)
			}
		}
	}
	if got := m["batched"].(map[string]any)["start_calls_per_machine"].(float64); got > 0.2 {
		t.Errorf("got %v batched start calls per machine, want at most 0.2 (E3)", got)
	}
	if got := m["single"].(map[string]any)["start_calls_per_machine"].(float64); got < 1 {
		t.Errorf("got %v single start calls per machine, want at least 1", got)
	}
	if got := m["max_zone_skew"].(float64); got > 1 {
		t.Errorf("got max zone skew %v, want at most 1 (Z8)", got)
	}
}

// TestEventLatencyJSON runs the event-latency scenario on a small fleet:
// no full listing during the single adds (E1).
func TestEventLatencyJSON(t *testing.T) {
	m := runJSON(t, "--scenario", "event-latency", "--machines", "50", "--adds", "3", "--json")
	want := []string{"adds", "cpu_seconds", "full_listings", "machines", "max_ms", "median_ms", "p90_ms", "peak_rss_mb", "provision_seconds", "scenario"}
	if got := keys(m); !slices.Equal(got, want) {
		t.Fatalf("got keys %v, want %v", got, want)
	}
	if got := m["full_listings"]; got != 0.0 {
		t.Errorf("got %v full listings during the adds, want 0 (E1)", got)
	}
	if got := m["adds"]; got != 3.0 {
		t.Errorf("got %v adds, want 3", got)
	}
}

func TestBadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
	}{
		{"unknown scenario", []string{"--scenario", "nope"}},
		{"no machines", []string{"--machines", "-3"}},
		{"stray argument", []string{"extra"}},
		{"unknown flag", []string{"--nope"}},
		{"repeat of another scenario", []string{"--scenario", "convergence", "--repeat", "2"}},
		{"repeat of the side by side", []string{"--policy", "juju", "--repeat", "2"}},
		{"no pairs", []string{"--scenario", "agents", "--repeat", "-1"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			if err := run(tt.args, &out, io.Discard); err == nil {
				t.Errorf("got nil error and output %q, want an error", out.String())
			}
		})
	}
}

func TestLowerBounds(t *testing.T) {
	tests := []struct {
		name string
		got  float64
		want float64
	}{
		{"single within the burst", singleLowerBound(5), 0.05},
		{"single 2,000", singleLowerBound(2000), 1990.0/50 + 0.05},
		{"batched 2,000: request bucket", batchedLowerBound(2000), 10.0/50 + 0.05},
		{"batched 10,000: instance bucket", batchedLowerBound(10000), 8000.0/500 + 0.05},
		{"batched 100,000: instance bucket", batchedLowerBound(100000), 98000.0/500 + 0.05},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if d := tt.got - tt.want; d > 1e-9 || d < -1e-9 {
				t.Errorf("got %v, want %v", tt.got, tt.want)
			}
		})
	}
}

// TestAgentsJSON runs the agents scenario on a few machines, two pairs:
// every machine started by its simulated agent (one enrolment each,
// counted as an agent request), no provisioner restart, both pairs'
// figures with the reported ratio one of theirs, and --tailprofile
// writes a CPU profile of the agents run's tail.
func TestAgentsJSON(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "tail.prof")
	m := runJSON(t, "--scenario", "agents", "--machines", "40", "--repeat", "2", "--steady", "0s", "--tailprofile", prof, "--json")
	want := []string{"agents", "boot_delay_seconds", "machines", "no_agents", "pairs", "peak_rss_mb", "ratio", "scenario"}
	if got := keys(m); !slices.Equal(got, want) {
		t.Fatalf("got keys %v, want %v", got, want)
	}
	pairs := m["pairs"].([]any)
	if len(pairs) != 2 {
		t.Fatalf("got %d pairs, want 2", len(pairs))
	}
	var ratios []float64
	for _, p := range pairs {
		p := p.(map[string]any)
		if p["no_agents_seconds"].(float64) <= 0 || p["agents_seconds"].(float64) <= 0 || p["provisioner_restarts"].(float64) != 0 {
			t.Errorf("got pair %v, want positive times and no restart", p)
		}
		ratios = append(ratios, p["ratio"].(float64))
	}
	if got := m["ratio"].(float64); got != max(ratios[0], ratios[1]) {
		t.Errorf("got ratio %v of pairs %v, want the higher middle one", got, ratios)
	}
	if got, no := m["agents"].(map[string]any)["seconds"].(float64), m["no_agents"].(map[string]any)["seconds"].(float64); math.Abs((got-1)/no-m["ratio"].(float64)) > 0.001 {
		t.Errorf("got runs of %v s and %v s, not the reported pair's (ratio %v)", no, got, m["ratio"])
	}
	agents := m["agents"].(map[string]any)
	if got := agents["agent_requests"].(float64); got < 40 {
		t.Errorf("got %v agent requests, want at least one enrolment per machine (40)", got)
	}
	if got := agents["provisioner_restarts"].(float64); got != 0 {
		t.Errorf("got %v provisioner restarts, want 0", got)
	}
	if got := m["ratio"].(float64); got <= 0 {
		t.Errorf("got ratio %v, want a positive number", got)
	}
	b, err := os.ReadFile(prof)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Errorf("--tailprofile wrote %d bytes, want a gzipped profile", len(b))
	}
}

// TestTailProfileLeavesTheWholeRunsProfile: without --tailprofile, the
// tail's stop does not end a CPU profile of the whole run (--cpuprofile).
func TestTailProfileLeavesTheWholeRunsProfile(t *testing.T) {
	if err := pprof.StartCPUProfile(io.Discard); err != nil {
		t.Skipf("a CPU profile runs already: %v", err)
	}
	defer pprof.StopCPUProfile()
	old := tailProfile
	tailProfile = "" // no --tailprofile
	defer func() { tailProfile = old }()
	stop, err := startTailProfile()
	if err != nil {
		t.Fatal(err)
	}
	stop()
	if err := pprof.StartCPUProfile(io.Discard); err == nil {
		t.Fatal("the whole run's CPU profile was stopped by the tail's stop")
	}
}

func TestMedianPair(t *testing.T) {
	tests := []struct {
		ratios []float64
		want   int
	}{
		{[]float64{1.3}, 0},
		{[]float64{1.6, 1.4, 1.5}, 2},
		{[]float64{1.5, 1.4, 1.6}, 0},
		{[]float64{1.9, 1.2}, 0},
		{[]float64{1.2, 1.4, 1.3, 1.1}, 2},
	}
	for _, tt := range tests {
		var ps []AgentsPair
		for _, r := range tt.ratios {
			ps = append(ps, AgentsPair{Ratio: r})
		}
		if got := medianPair(ps); got != tt.want {
			t.Errorf("medianPair(%v) = %d, want %d", tt.ratios, got, tt.want)
		}
	}
}
