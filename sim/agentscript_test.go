package sim

import (
	"testing"

	"github.com/musterhq/muster"
)

func TestAgentScripting(t *testing.T) {
	var stopped []string
	c, err := Open(Config{Seed: 1, Zones: []ZoneConfig{{Name: "a", Available: true, Capacity: Unlimited}},
		OnAgentStop: func(id string) { stopped = append(stopped, id) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := (FaultEdit{AgentBootFailureRate: muster.Ptr(1.5)}).Check(); err == nil || !muster.IsCode(err, muster.EInvalid) {
		t.Fatalf("rate 1.5: got %v, want invalid", err)
	}
	for _, tc := range []struct {
		rate float64
		want int // boots out of 100
	}{{0, 100}, {1, 0}} {
		c.SetFaults(FaultEdit{AgentBootFailureRate: &tc.rate}.Apply(c.Faults()))
		n := 0
		for i := 0; i < 100; i++ {
			if c.AgentBoots() {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("rate %g: %d of 100 agents boot, want %d", tc.rate, n, tc.want)
		}
	}
	inst, err := c.AddInstance("a", "ctrl", "model")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.StopAgent("i-nope"); !muster.IsCode(err, muster.ENotFound) {
		t.Fatalf("unknown instance: got %v, want not-found", err)
	}
	if err := c.StopAgent(inst.ID); err != nil || len(stopped) != 1 || stopped[0] != inst.ID {
		t.Fatalf("StopAgent: err %v, hook saw %v, want %s", err, stopped, inst.ID)
	}
}
