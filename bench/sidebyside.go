package main

import (
	"context"
	"fmt"
	"io"
	"time"
)

// SideBySide is the outcome of --policy juju: the same fleet on the same
// sim run by muster's engine (one instance a call, and batched) and by
// Juju's policy.
type SideBySide struct {
	Machines      int       `json:"machines"`
	Adds          int       `json:"adds"`           // single adds after convergence
	Muster        PolicyRun `json:"muster"`         // batch-starts=false
	MusterBatched PolicyRun `json:"muster_batched"` // batch-starts=true
	Juju          PolicyRun `json:"juju"`
	// Ratio is Juju's figure over muster's (one instance a call);
	// RatioBatched over muster's batched run.
	Ratio        Ratios  `json:"ratio"`
	RatioBatched Ratios  `json:"ratio_batched"`
	PeakRSSMB    float64 `json:"peak_rss_mb"`
	CPUSeconds   float64 `json:"cpu_seconds"`
}

// Ratios compares Juju's policy with muster's engine.
type Ratios struct {
	Seconds    float64 `json:"seconds"`
	StartCalls float64 `json:"start_calls"`
	Listings   float64 `json:"listings"`
}

func ratios(juju, muster PolicyRun) Ratios {
	div := func(a, b float64) float64 {
		if b == 0 {
			return 0
		}
		return round3(a / b)
	}
	return Ratios{
		Seconds:    div(juju.Seconds, muster.Seconds),
		StartCalls: div(float64(juju.StartCalls), float64(muster.StartCalls)),
		Listings:   div(float64(juju.Listings), float64(muster.Listings)),
	}
}

// runSideBySide runs n machines with muster's engine (single, then
// batched) and with Juju's policy, each on a fresh store and cloud, and
// then adds adds machines one at a time to each.
func runSideBySide(ctx context.Context, n, adds int, timeout, jujuTimeout time.Duration) (SideBySide, error) {
	out := SideBySide{Machines: n, Adds: adds}
	var err error
	if out.Muster, err = runPolicy(ctx, n, adds, envConfig{}, timeout); err != nil {
		return out, fmt.Errorf("muster: %w", err)
	}
	if out.MusterBatched, err = runPolicy(ctx, n, adds, envConfig{batched: true}, timeout); err != nil {
		return out, fmt.Errorf("muster batched: %w", err)
	}
	if out.Juju, err = runPolicy(ctx, n, adds, envConfig{juju: true}, jujuTimeout); err != nil {
		return out, fmt.Errorf("juju: %w", err)
	}
	out.Ratio = ratios(out.Juju, out.Muster)
	out.RatioBatched = ratios(out.Juju, out.MusterBatched)
	out.PeakRSSMB, out.CPUSeconds = footprint()
	for _, r := range []*PolicyRun{&out.Muster, &out.MusterBatched, &out.Juju} {
		r.Seconds = round3(r.Seconds)
		r.StartCallsPerMachine = round3(r.StartCallsPerMachine)
	}
	return out, nil
}

func printSideBySide(out io.Writer, s SideBySide) {
	fmt.Fprintf(out, "%d machines, muster's engine and Juju's provisioner policy (3 zones, start latency %s, request bucket %d burst / %g per s)\n\n",
		s.Machines, startLatency, requestBurst, requestRate)
	fmt.Fprintf(out, "%-14s %9s %11s %11s %9s %9s %7s %9s %8s %5s %14s\n", "policy", "seconds", "start calls", "calls/mach.", "throttled", "listings", "events", "converged", "in error", "skew", "adds' listings")
	for _, r := range []struct {
		name string
		p    PolicyRun
	}{{"muster", s.Muster}, {"muster batched", s.MusterBatched}, {"juju", s.Juju}} {
		events := "-"
		if r.name == "juju" {
			events = fmt.Sprint(r.p.Events)
		}
		fmt.Fprintf(out, "%-14s %9.3f %11d %11.3f %9d %9d %7s %9d %8d %5d %14d\n", r.name, r.p.Seconds, r.p.StartCalls,
			r.p.StartCallsPerMachine, r.p.ThrottledCalls, r.p.Listings, events, r.p.Converged, r.p.InError, r.p.MaxZoneSkew, r.p.AddListings)
	}
	fmt.Fprintf(out, "\n(seconds to start calls: the bulk add; adds' listings: during %d single adds afterwards)\n", s.Adds)
	fmt.Fprintf(out, "juju / muster:         seconds %.3fx, start calls %.3fx, listings %.3fx\n", s.Ratio.Seconds, s.Ratio.StartCalls, s.Ratio.Listings)
	fmt.Fprintf(out, "juju / muster batched: seconds %.3fx, start calls %.3fx, listings %.3fx\n", s.RatioBatched.Seconds, s.RatioBatched.StartCalls, s.RatioBatched.Listings)
	fmt.Fprintf(out, "peak RSS %.1f MB, CPU %.2f s\n", s.PeakRSSMB, s.CPUSeconds)
}
