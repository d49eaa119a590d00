package controller

import (
	"context"
	"io"
	"net/http"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/internal/testutil"
)

// BenchmarkMetrics scrapes /metrics (MetricsListen) of a controller with a
// 100,000-machine model (S7 targets: under 50 ms a scrape, under 50 MB of
// RSS growth for 16 concurrent scrapes). The machines ask for a zone the
// model does not have, so they end in a provisioning error without an
// instance each: the benchmark measures the scrape, not the sim.
//
//	go test -run '^$' -bench Metrics -benchtime 20x ./controller/
func BenchmarkMetrics(b *testing.B) {
	const machines = 100_000
	c := openTest(b, b.TempDir(), Config{MetricsListen: "127.0.0.1:0"})
	ctx := context.Background()
	m, err := c.Store().CreateModel(ctx, muster.Model{Name: "big", Provider: "sim", Config: map[string]string{"zones": "a,b,c"}, Settings: muster.DefaultSettings()})
	if err != nil {
		b.Fatal(err)
	}
	nowhere, err := muster.ParseConstraints("zones=nowhere")
	if err != nil {
		b.Fatal(err)
	}
	ts := make([]muster.MachineTemplate, 10_000)
	for i := range ts {
		ts[i].Constraints = nowhere
	}
	for range machines / len(ts) {
		if _, err := c.Store().AddMachines(ctx, m.UUID, ts); err != nil {
			b.Fatal(err)
		}
	}
	url := "http://" + c.MetricsAddr() + "/metrics"
	hc := &http.Client{}
	scrape := func(tb testing.TB) string {
		resp, err := hc.Get(url)
		if err != nil {
			tb.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			tb.Fatal(err)
		}
		return string(body)
	}
	// Measured once the provisioner is done with them, so that the
	// figures are the scrape's own.
	testutil.EventuallyWithin(b, 10*testutil.Timeout, "the big model's machines counted in a provisioning error", func() bool {
		return countOf(scrape(b), `model="big"`, `instance_status="provisioning error"`) == machines
	})
	b.Run("scrape", func(b *testing.B) {
		for b.Loop() {
			scrape(b)
		}
	})
	b.Run("16-concurrent", func(b *testing.B) {
		runtime.GC()
		before := rssBytes(b)
		var ms0, ms1 runtime.MemStats
		runtime.ReadMemStats(&ms0)
		for b.Loop() {
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() { scrape(b) })
			}
			wg.Wait()
		}
		runtime.ReadMemStats(&ms1)
		b.ReportMetric(float64(rssBytes(b)-before)/(1<<20), "MB-rss-growth")
		b.ReportMetric(float64(ms1.TotalAlloc-ms0.TotalAlloc)/float64(b.N)/(1<<20), "MB-alloc/16-scrapes")
	})
}

// countOf sums the muster_machines samples of text whose labels hold
// every one of sels.
func countOf(text string, sels ...string) int {
	n := 0
lines:
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "muster_machines{") {
			continue
		}
		for _, sel := range sels {
			if !strings.Contains(line, sel) {
				continue lines
			}
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err == nil {
			n += int(v)
		}
	}
	return n
}

// rssBytes is the process's resident set size.
func rssBytes(tb testing.TB) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Skip("no /proc/self/status: RSS not measured")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	tb.Skip("no VmRSS in /proc/self/status")
	return 0
}
