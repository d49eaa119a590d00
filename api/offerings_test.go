package api_test

import (
	"context"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// A machine the provider can never start is refused before the store is
// touched, by add-machine and by apply, naming the value and the choices.
func TestAddMachinesCheckedAgainstOfferings(t *testing.T) {
	h := newHarness(t, withRuntime(&testRuntime{offerings: func(string) muster.Offerings {
		return muster.Offerings{
			InstanceTypes: []muster.InstanceTypeOffer{{Name: "t.small", Arch: "amd64", Cores: 1, Mem: 2048}},
			Bases:         []string{"ubuntu@24.04"},
			Zones:         []string{"a", "b"},
		}
	}}))
	ctx := context.Background()
	for _, tt := range []struct {
		req  api.AddMachinesRequest
		want string
	}{
		{api.AddMachinesRequest{Constraints: "cores=1000"}, "cores=1000"},
		{api.AddMachinesRequest{Constraints: "instance-type=nope"}, `"nope" is not offered (choices: t.small)`},
		{api.AddMachinesRequest{Constraints: "zones=nonexistent"}, `zone "nonexistent" does not exist (zones: a, b)`},
		{api.AddMachinesRequest{Placement: "zone=q"}, `placement zone "q" does not exist`},
		{api.AddMachinesRequest{Base: "ubuntu@99.99", Count: 3}, `base "ubuntu@99.99" is not offered`},
	} {
		_, err := h.admin.AddMachines(ctx, "default", tt.req)
		if muster.ErrorCode(err) != muster.EInvalid || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("AddMachines(%+v) = %v, want invalid naming %q", tt.req, err, tt.want)
		}
	}
	_, err := h.admin.Apply(ctx, "default", api.ApplyRequest{Groups: []api.FleetGroup{{Name: "web", Count: 2, Constraints: "mem=4GB"}}})
	if muster.ErrorCode(err) != muster.EInvalid || !strings.Contains(err.Error(), `group "web": no instance type offers mem=4G`) {
		t.Errorf("Apply of a group too big: %v, want invalid naming the group", err)
	}
	if ms := h.machines(t); len(ms) != 0 {
		t.Fatalf("refused requests added %d machines", len(ms))
	}
	if es, err := h.admin.Events(ctx, "default", api.EventQuery{}); err != nil || len(es) != 0 {
		t.Fatalf("refused requests left events %v, %v", es, err)
	}
	if ids := h.addMachines(t, api.AddMachinesRequest{Constraints: "cores=1 zones=b", Base: "ubuntu@24.04"}); len(ids) != 1 {
		t.Fatalf("an offered machine: got ids %v", ids)
	}
}
