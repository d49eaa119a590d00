package sim_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/musterhq/muster/sim"
)

// TestFullDefaultSubnetFallsThrough: an instance without a subnet or space
// gets its address in the zone's first subnet, and once that is full in
// the zone's next subnet with room, as a provisioner picks another subnet;
// the first is never given an address twice.
func TestFullDefaultSubnetFallsThrough(t *testing.T) {
	spaces := make([]sim.SpaceConfig, 16) // 16 spaces: a /20 each
	for i := range spaces {
		spaces[i].Name = fmt.Sprintf("s%d", i)
	}
	c := openCloud(t, sim.Config{Clock: newClock(), Zones: []sim.ZoneConfig{{Name: "a", Available: true, Capacity: sim.Unlimited}}, Spaces: spaces})
	p := c.Provider(testController, testModel)
	const hosts = 4096 - 5 // .0-.3 and the last kept back
	seen := map[string]bool{}
	for i := range hosts + 1 {
		res := mustStart(t, p, startParams(fmt.Sprint(i), "a"))
		a := res.Addresses[0]
		if seen[a] {
			t.Fatalf("address %s given twice", a)
		}
		seen[a] = true
		inFirst := strings.HasPrefix(a, "10.1.") && !strings.HasPrefix(a, "10.1.16.")
		if i < hosts && !inFirst || i == hosts && !strings.HasPrefix(a, "10.1.16.") {
			t.Fatalf("instance %d got %s; want the first subnet 10.1.0.0/20 until full, then 10.1.16.0/20", i, a)
		}
	}
	sn := c.Subnets()
	if sn[0].CIDR != "10.1.0.0/20" || sn[0].Free != 0 || sn[1].CIDR != "10.1.16.0/20" || sn[1].Free != hosts-1 {
		t.Errorf("subnets: got %+v and %+v; want 10.1.0.0/20 full, 10.1.16.0/20 with %d free", sn[0], sn[1], hosts-1)
	}
}

// TestDefaultSubnetsHold100k: the default cloud's zones (two spaces each)
// have room for 100,000 instances without a space.
func TestDefaultSubnetsHold100k(t *testing.T) {
	c := openCloud(t, sim.Config{Clock: newClock()})
	free := 0
	for _, s := range c.Subnets() {
		free += s.Free
	}
	if free < 100_000 {
		t.Errorf("default subnets have %d free addresses, want at least 100,000", free)
	}
}
