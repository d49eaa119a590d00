package provisioner

import (
	"fmt"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

// BenchmarkZonePlanner10k places 10,000 machines of one group over three
// zones (one op = the whole group).
func BenchmarkZonePlanner10k(b *testing.B) {
	const n = 10000
	group := make([]string, n)
	for i := range group {
		group[i] = fmt.Sprint(i)
	}
	now := time.Unix(1000, 0)
	b.ReportAllocs()
	for b.Loop() {
		zt := newZoneTable(first)
		zt.refresh(zonesOf("a", "b", "c"))
		for _, id := range group[:n] {
			if _, err := zt.choose(zoneRequest{MachineID: id, Shape: "s"}, now); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkZonePlannerGroup10k places 10,000 machines of one group.
func BenchmarkZonePlannerGroup10k(b *testing.B) {
	const n = 10000
	group := make([]string, n)
	for i := range group {
		group[i] = fmt.Sprint(i)
	}
	now := time.Unix(1000, 0)
	for b.Loop() {
		zt := newZoneTable(first)
		zt.refresh(zonesOf("a", "b", "c"))
		for _, id := range group {
			if _, err := zt.choose(zoneRequest{MachineID: id, Group: "g", Shape: "s"}, now); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkClassify10k classifies 10,000 machines in mixed states.
func BenchmarkClassify10k(b *testing.B) {
	ms := make([]muster.Machine, 10000)
	lives := []muster.Life{muster.LifeAlive, muster.LifeAlive, muster.LifeAlive, muster.LifeDying, muster.LifeDead}
	for i := range ms {
		ms[i] = muster.Machine{ID: fmt.Sprint(i), Life: lives[i%len(lives)], Status: muster.StatusPending}
		if i%3 == 0 {
			ms[i].Instance = &muster.InstanceInfo{InstanceID: fmt.Sprint("i-", i)}
		}
	}
	starting := map[string]bool{"7": true, "70": true}
	b.ReportAllocs()
	for b.Loop() {
		p := classifyAll(ms, func(id string) flags { return flags{starting: starting[id]} })
		if len(p.Pending) == 0 {
			b.Fatal("nothing pending")
		}
	}
}
