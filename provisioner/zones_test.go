package provisioner

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func first(int) int { return 0 }

func TestPickZone(t *testing.T) {
	tests := []struct {
		name  string
		cands []zoneLoad
		want  string
	}{
		{"none", nil, ""},
		{"one", []zoneLoad{{"a", 5}}, "a"},
		{"fewest", []zoneLoad{{"a", 2}, {"b", 1}, {"c", 3}}, "b"},
		{"tie takes rnd pick", []zoneLoad{{"a", 1}, {"b", 0}, {"c", 0}}, "b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := pickZone(tt.cands, first); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func zonesOf(names ...string) []muster.Zone {
	var zs []muster.Zone
	for _, n := range names {
		zs = append(zs, muster.Zone{Name: n, Available: true})
	}
	return zs
}

func TestZoneTableChoose(t *testing.T) {
	now := time.Unix(1000, 0)
	tests := []struct {
		name    string
		setup   func(t *zoneTable)
		req     zoneRequest
		want    string
		wantErr string
	}{
		{"fewest machines", func(t *zoneTable) { t.set("1", "a"); t.set("2", "b") }, zoneRequest{MachineID: "0"}, "c", ""},
		{"zones constraint", nil, zoneRequest{MachineID: "0", Allowed: []string{"b"}}, "b", ""},
		{"unknown zone constraint", nil, zoneRequest{MachineID: "0", Allowed: []string{"z9"}}, "", "suitable availability zone for machine 0 not found"},
		{"placement", func(t *zoneTable) {}, zoneRequest{MachineID: "0", Placement: "c"}, "c", ""},
		{"placement unknown", nil, zoneRequest{MachineID: "0", Placement: "q"}, "", `placement zone "q" of machine 0 is unknown or unavailable`},
		{"derived excludes", nil, zoneRequest{MachineID: "0", Derived: []string{"c"}}, "c", ""},
		{"group counts only members", func(t *zoneTable) {
			t.setGroup("1", "web")
			t.setGroup("2", "web")
			t.set("1", "a")
			t.set("5", "b")
			t.set("6", "b")
			t.set("7", "c")
			t.set("8", "c")
		}, zoneRequest{MachineID: "0", Group: "web"}, "b", ""},
		{"failed zone skipped", func(t *zoneTable) { t.failed["0"] = map[string]bool{"a": true, "b": true} }, zoneRequest{MachineID: "0"}, "c", ""},
		{"capacity memory", func(t *zoneTable) { t.block("a", "s", now.Add(time.Minute)); t.block("b", "s", now.Add(time.Minute)) }, zoneRequest{MachineID: "0", Shape: "s"}, "c", ""},
		{"capacity memory expired", func(t *zoneTable) {
			t.block("a", "s", now)
			t.set("1", "b")
			t.set("2", "c")
		}, zoneRequest{MachineID: "0", Shape: "s"}, "a", ""},
		{"capacity memory other shape", func(t *zoneTable) {
			t.block("a", "x", now.Add(time.Minute))
			t.set("1", "b")
			t.set("2", "c")
		}, zoneRequest{MachineID: "0", Shape: "s"}, "a", ""},
		{"all full is retryable", func(t *zoneTable) {
			for _, z := range []string{"a", "b", "c"} {
				t.block(z, "s", now.Add(time.Minute))
			}
		}, zoneRequest{MachineID: "0", Shape: "s"}, "", "suitable availability zone for machine 0 not found: every suitable zone is out of capacity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			zt := newZoneTable(first)
			zt.refresh(zonesOf("a", "b", "c"))
			if tt.setup != nil {
				tt.setup(zt)
			}
			got, err := zt.choose(tt.req, now)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr {
					t.Fatalf("got error %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
			if z := zt.zoneOf("0"); z != got {
				t.Errorf("machine counted in %q, want %q (Z4)", z, got)
			}
		})
	}
}

func TestZoneTableAllFullIsCapacityError(t *testing.T) {
	zt := newZoneTable(first)
	zt.refresh(zonesOf("a"))
	zt.block("a", "s", time.Unix(2000, 0))
	_, err := zt.choose(zoneRequest{MachineID: "0", Shape: "s"}, time.Unix(1000, 0))
	if k := muster.ProviderErrorKindOf(err); k != muster.ErrCapacity {
		t.Fatalf("got kind %v, want capacity", k)
	}
}

func TestZoneTableMarkFailed(t *testing.T) {
	zt := newZoneTable(first)
	zt.refresh(zonesOf("a", "b"))
	r := zoneRequest{MachineID: "0"}
	now := time.Unix(1000, 0)
	if !zt.markFailed(r, "a", now) {
		t.Fatalf("got no zone left after failing in a, want b left")
	}
	if got := zt.failedZones("0"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("got failed %v, want [a]", got)
	}
	if zt.markFailed(r, "b", now) {
		t.Fatalf("got a zone left after failing in a and b, want none")
	}
	if got := zt.failedZones("0"); len(got) != 0 {
		t.Errorf("got failed %v after clearing, want none", got)
	}
}

// TestScenario08_ZoneListChanges is SPEC §8 scenario 8 on the zone table.
func TestScenario08_ZoneListChanges(t *testing.T) {
	zt := newZoneTable(first)
	steps := []struct {
		zones []string
		kept  []string
		want  []ZoneInfo
	}{
		{[]string{"a"}, nil, []ZoneInfo{{Name: "a", Available: true, Machines: 0}}},
		{[]string{"a", "b", "c"}, nil, []ZoneInfo{{Name: "a", Available: true, Machines: 0}, {Name: "b", Available: true, Machines: 0}, {Name: "c", Available: true, Machines: 1}}},
		{[]string{"a"}, []string{"c"}, []ZoneInfo{{Name: "a", Available: true, Machines: 0}, {Name: "c", Available: false, Machines: 1}}},
	}
	for i, st := range steps {
		kept := zt.refresh(zonesOf(st.zones...))
		if i == 1 {
			zt.set("0", "c")
		}
		if !slices.Equal(kept, st.kept) {
			t.Errorf("step %d: got kept %v, want %v", i, kept, st.kept)
		}
		if got := zt.snapshot(); fmt.Sprint(got) != fmt.Sprint(st.want) {
			t.Errorf("step %d: got table %v, want %v", i, got, st.want)
		}
	}
	if kept := zt.refresh(zonesOf("a")); len(kept) != 0 {
		t.Errorf("got kept %v again, want the warning only once", kept)
	}
	// Once the machine is gone, the unavailable zone is dropped.
	zt.forget("0")
	zt.refresh(zonesOf("a"))
	if got := zt.snapshot(); len(got) != 1 {
		t.Errorf("got %v after the machine left c, want only a", got)
	}
}

// TestZ8SpreadProperty checks Z8 on the planner: with random group sizes,
// zone counts and zones failing for some machines, per-zone counts of the
// group differ by at most 1 among the zones usable by all.
func TestZ8SpreadProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for iter := 0; iter < 300; iter++ {
		nz := 1 + rng.IntN(6)
		n := 1 + rng.IntN(60)
		var names []string
		for i := 0; i < nz; i++ {
			names = append(names, string(rune('a'+i)))
		}
		zt := newZoneTable(rng.IntN)
		zt.refresh(zonesOf(names...))
		// Some zones are out of capacity: machines fail there and the
		// capacity memory blocks them (no failures among the usable ones).
		full := map[string]bool{}
		for _, z := range names {
			if rng.IntN(4) == 0 && len(full) < nz-1 {
				full[z] = true
			}
		}
		now := time.Unix(1000, 0)
		var group []string
		for i := 0; i < n; i++ {
			group = append(group, fmt.Sprint(i))
			// Machines of another group must not disturb the spread.
			zt.setGroup(fmt.Sprint("x", i), "other")
			zt.set(fmt.Sprint("x", i), names[rng.IntN(nz)])
		}
		for _, id := range group {
			r := zoneRequest{MachineID: id, Group: "g", Shape: "s"}
			for {
				z, err := zt.choose(r, now)
				if err != nil {
					t.Fatalf("iter %d: %v", iter, err)
				}
				if !full[z] {
					break
				}
				zt.block(z, "s", now.Add(time.Hour))
				if !zt.markFailed(r, z, now) {
					t.Fatalf("iter %d: no zone left", iter)
				}
			}
		}
		counts := map[string]int{}
		for _, id := range group {
			counts[zt.zoneOf(id)]++
		}
		lo, hi := n, 0
		for _, z := range names {
			if full[z] {
				if counts[z] != 0 {
					t.Fatalf("iter %d: %d machines in full zone %s", iter, counts[z], z)
				}
				continue
			}
			lo, hi = min(lo, counts[z]), max(hi, counts[z])
		}
		if hi-lo > 1 {
			t.Fatalf("iter %d (%d machines, zones %v, full %v): counts %v differ by %d", iter, n, names, full, counts, hi-lo)
		}
	}
}

func TestPlanDead(t *testing.T) {
	view := map[string]bool{"i-0": true, "i-1": true, "i-dup": true}
	tagged := map[string][]string{"0": {"i-0"}, "2": {"i-dup"}}
	keep := machine("1", muster.LifeDead, muster.StatusStarted, muster.InstanceRunning, "i-1")
	keep.KeepInstance = true
	dead := []muster.Machine{
		machine("0", muster.LifeDead, muster.StatusStarted, muster.InstanceRunning, "i-0"),
		keep,
		machine("2", muster.LifeDead, muster.StatusPending, muster.InstanceAllocating, ""),
		machine("3", muster.LifeDead, muster.StatusStarted, muster.InstanceRunning, "i-gone"),
	}
	tests := []struct {
		mode muster.HarvestMode
		stop []string
	}{
		{muster.HarvestNone, nil},
		{muster.HarvestUnknown, nil},
		{muster.HarvestDestroyed, []string{"i-0", "i-dup"}},
		{muster.HarvestAll, []string{"i-0", "i-dup"}},
	}
	for _, tt := range tests {
		t.Run(string(tt.mode), func(t *testing.T) {
			stop, remove := planDead(dead, tt.mode, func(id string) bool { return view[id] }, func(id string) []string { return tagged[id] })
			if !slices.Equal(stop, tt.stop) {
				t.Errorf("got stop %v, want %v", stop, tt.stop)
			}
			if want := []string{"0", "1", "2", "3"}; !slices.Equal(remove, want) {
				t.Errorf("got remove %v, want %v (H3: removed in every mode)", remove, want)
			}
		})
	}
}

func TestFindUnknown(t *testing.T) {
	now := time.Unix(10000, 0)
	inst := func(id, machine string, age time.Duration) unknownInput {
		return unknownInput{Inst: muster.Instance{ID: id, MachineID: machine, Created: now.Add(-age)}}
	}
	in := []unknownInput{
		inst("i-old", "", 2*time.Minute),
		inst("i-young", "", 10*time.Second),
		inst("i-owned", "0", time.Hour),
		inst("i-recorded", "", time.Hour),
		inst("i-released", "", time.Hour),
		inst("i-gone-machine", "9", time.Hour),
		{Inst: muster.Instance{ID: "i-nocreated"}, Seen: now.Add(-time.Hour)},
	}
	owned := func(i muster.Instance) bool { return i.MachineID == "0" || i.ID == "i-recorded" }
	skip := func(i muster.Instance) bool { return i.ID == "i-released" }
	old, young := findUnknown(in, owned, skip, now, time.Minute)
	if want := []string{"i-gone-machine", "i-nocreated", "i-old"}; !slices.Equal(old, want) {
		t.Errorf("got old %v, want %v", old, want)
	}
	if at, ok := young["i-young"]; !ok || !at.Equal(now.Add(50*time.Second)) || len(young) != 1 {
		t.Errorf("got young %v, want i-young at +50s", young)
	}
}
