package sim_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

// benchStart measures one StartInstance on a cloud already running n
// instances, with or without a state file.
func benchStart(b *testing.B, n int, file bool) {
	cfg := sim.Config{}
	if file {
		cfg.StateFile = filepath.Join(b.TempDir(), "state.json")
	}
	c := openCloud(b, cfg)
	p := c.Provider(testController, testModel)
	ps := make([]muster.StartParams, 100)
	for i := 0; i < n; i += len(ps) {
		for j := range ps {
			ps[j] = muster.StartParams{MachineID: fmt.Sprint(i + j), LaunchToken: fmt.Sprint("t", i+j), UserData: make([]byte, 512)}
		}
		for _, o := range p.StartInstances(context.Background(), ps) {
			if o.Err != nil {
				b.Fatal(o.Err)
			}
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := p.StartInstance(context.Background(), muster.StartParams{MachineID: "x", UserData: make([]byte, 512)}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkStart10kMemory(b *testing.B)    { benchStart(b, 10000, false) }
func BenchmarkStart10kStateFile(b *testing.B) { benchStart(b, 10000, true) }

// BenchmarkIdentityDocument is one instance's signed identity document, as
// its agent fetches it before enrolling.
func BenchmarkIdentityDocument(b *testing.B) {
	c := openCloud(b, sim.Config{Clock: newClock()})
	inst, err := c.AddInstance("a", testController, testModel)
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, _, err := c.IdentityDocument(inst.ID); err != nil {
			b.Fatal(err)
		}
	}
}
