package api_test

import (
	"context"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// TestAgentHardwareMerged: the hardware an agent reports overlays what the
// provider recorded; fields it leaves zero keep the recorded values, so an
// agent reports started in one request without reading first.
func TestAgentHardwareMerged(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{})
	agent := h.loginAgents(t, []string{"0"})["0"]
	am, err := agent.SetAgentMachine(ctx, "default", "0", api.AgentUpdate{Status: muster.Ptr("started"), Hardware: &muster.Hardware{Cores: 8, Mem: 2048}})
	if err != nil {
		t.Fatal(err)
	}
	want := muster.Hardware{Arch: "amd64", Cores: 8, Mem: 2048, AvailabilityZone: "a"}
	if got := h.machine(t, "0").Instance.Hardware; got != want || am.Hardware != want {
		t.Fatalf("hardware: store %+v, answer %+v; want %+v", got, am.Hardware, want)
	}
}
