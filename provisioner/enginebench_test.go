package provisioner_test

import (
	"testing"

	"github.com/musterhq/muster"
)

// BenchmarkEngineConverge1000 adds 1,000 machines at once and waits until
// every one runs, on the real store and sim with no latency: the engine's
// own cost per machine (one op = 1,000 machines).
func BenchmarkEngineConverge1000(b *testing.B) {
	for _, batch := range []bool{false, true} {
		name := "single"
		if batch {
			name = "batch"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				h := newHarness(b, withSettings(func(s *muster.Settings) { s.BatchStarts = batch }))
				if batch {
					h.start2(&batchProvider{recProvider: h.prov})
				} else {
					h.start()
				}
				h.listed(1)
				b.StartTimer()
				h.add(1000, muster.MachineTemplate{})
				h.waitFor("1000 running", allRunning(h, 1000))
				b.StopTimer()
				h.stop()
				b.StartTimer()
			}
		})
	}
}
