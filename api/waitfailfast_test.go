package api_test

import (
	"context"
	"slices"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// WaitFailFast returns at the first machine in provisioning error, with
// its id and message, while the others are still pending; Started is not
// reached by a running instance whose agent has not started.
func TestWaitFailFast(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	ids := h.addMachines(t, api.AddMachinesRequest{Count: 3})
	h.provision(t, ids[2], "a")
	err := h.store.UpdateMachines(ctx, h.model.UUID, []muster.MachineUpdate{{ID: ids[0],
		InstanceStatus: muster.Ptr(muster.InstanceProvisioningError), InstanceMessage: muster.Ptr("no capacity")}})
	if err != nil {
		t.Fatal(err)
	}
	goals := map[string]api.Goal{}
	for _, id := range ids {
		goals[id] = api.Started
	}
	var waiting []string
	failures, err := h.admin.WaitFailFast(ctx, "default", goals, func(_ api.Status, _ int, w []string) { waiting = w })
	slices.Sort(waiting)
	if err != nil || !slices.Equal(failures, []string{"0: provisioning error: no capacity"}) || !slices.Equal(waiting, []string{"1", "2"}) {
		t.Fatalf("WaitFailFast = %v, %v, still waiting for %v; want machine 0's failure with 1 and 2 (running, agent not started) waiting", failures, err, waiting)
	}
}
