package docker

import (
	"context"
	"strings"
	"testing"

	"github.com/musterhq/muster"
)

func TestOfferingsAreTheHost(t *testing.T) {
	p := newProvider(t, nil)
	if o := p.Offerings(); o.InstanceTypes != nil {
		t.Fatalf("offerings before the engine was asked: %+v", o)
	}
	cores, mem, err := p.Resources(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	o := p.Offerings()
	if len(o.InstanceTypes) != 1 || o.InstanceTypes[0].Cores != uint64(cores) || o.InstanceTypes[0].Mem != mem {
		t.Fatalf("offerings %+v, want the host's %d cores and %dM", o, cores, mem)
	}
	big := muster.MachineTemplate{Constraints: muster.Constraints{Cores: uint64(cores) + 1}, Base: muster.DefaultBase}
	if err := o.Check(big); err == nil || !strings.Contains(err.Error(), "the largest is the host") {
		t.Errorf("a machine larger than the host: %v", err)
	}
}
