package api_test

import (
	"context"
	"slices"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

func TestRemoveAllMachines(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	h.addMachines(t, api.AddMachinesRequest{Count: 3})
	for _, bad := range []api.RemoveMachinesRequest{{}, {IDs: []string{"0"}, All: true}} {
		if _, err := h.admin.RemoveMachinesIDs(ctx, "default", bad); muster.ErrorCode(err) != muster.EInvalid {
			t.Errorf("RemoveMachines(%+v) = %v, want invalid", bad, err)
		}
	}
	ids, err := h.admin.RemoveMachinesIDs(ctx, "default", api.RemoveMachinesRequest{All: true, KeepInstance: true})
	if err != nil || !slices.Equal(ids, []string{"0", "1", "2"}) {
		t.Fatalf("RemoveMachines(all) = %v, %v; want 0 1 2", ids, err)
	}
	for _, m := range h.machines(t) {
		if m.Life != muster.LifeDying || !m.KeepInstance {
			t.Errorf("machine %s: life %s keep-instance %v after remove all, want dying and kept", m.ID, m.Life, m.KeepInstance)
		}
	}
}
