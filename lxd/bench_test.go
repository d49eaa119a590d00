package lxd

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"sync"
	"testing"
	"time"
)

// benchLaunches is how many containers one round launches in parallel.
const benchLaunches = 8

// BenchmarkLaunchParallel measures, side by side in one run, the launch
// rate of the provider (StartInstance of benchLaunches machines over two
// zones at once) and of raw `lxc launch` of the same image in parallel
// (SPEC §7: the provider should reach 80% of the raw rate). Each round
// deletes what it launched, outside the timing. Run with
// MUSTER_TEST_LXD=1 go test -run '^$' -bench LaunchParallel -benchtime 1x -count 3 ./lxd
func BenchmarkLaunchParallel(b *testing.B) {
	needLXD(b)
	b.Run("provider", func(b *testing.B) {
		p := openTest(b, Config{Zones: []string{"a", "b"}})
		ctx := context.Background()
		if _, err := p.Zones(ctx); err != nil { // networks made outside the timing
			b.Fatal(err)
		}
		for i := 0; i < b.N; i++ {
			var wg sync.WaitGroup
			errs := make(chan error, benchLaunches)
			ids := make([]string, benchLaunches)
			b.StartTimer()
			began := time.Now()
			for j := range benchLaunches {
				wg.Add(1)
				go func() {
					defer wg.Done()
					sp := startParams(p, strconv.Itoa(i*benchLaunches+j), []string{"a", "b"}[j%2])
					res, err := p.StartInstance(ctx, sp)
					if err != nil {
						errs <- err
						return
					}
					ids[j] = res.Instance.ID
				}()
			}
			wg.Wait()
			elapsed := time.Since(began)
			b.StopTimer()
			b.ReportMetric(float64(benchLaunches)/elapsed.Seconds(), "launches/s")
			close(errs)
			for err := range errs {
				b.Error(err)
			}
			if err := p.StopInstances(ctx, ids...); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("lxc-launch", func(b *testing.B) {
		if _, err := exec.LookPath("lxc"); err != nil {
			b.Skip("lxc is not on PATH")
		}
		for i := 0; i < b.N; i++ {
			var wg sync.WaitGroup
			errs := make(chan error, benchLaunches)
			names := make([]string, benchLaunches)
			prefix := "mu-bench-" + randomHex(b, 3)
			b.StartTimer()
			began := time.Now()
			for j := range benchLaunches {
				names[j] = fmt.Sprintf("%s-%d", prefix, j)
				wg.Add(1)
				go func() {
					defer wg.Done()
					if out, err := exec.Command("lxc", "launch", "-q", testImage(), names[j]).CombinedOutput(); err != nil {
						errs <- fmt.Errorf("lxc launch %s: %v: %s", names[j], err, out)
					}
				}()
			}
			wg.Wait()
			elapsed := time.Since(began)
			b.StopTimer()
			b.ReportMetric(float64(benchLaunches)/elapsed.Seconds(), "launches/s")
			close(errs)
			for err := range errs {
				b.Error(err)
			}
			if out, err := exec.Command("lxc", append([]string{"delete", "-f"}, names...)...).CombinedOutput(); err != nil {
				b.Errorf("lxc delete: %v: %s", err, out)
			}
		}
	})
}
