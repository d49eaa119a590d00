package provisioner

import (
	"reflect"
	"testing"

	"github.com/musterhq/muster"
)

func TestPlanAdoption(t *testing.T) {
	inst := func(id, machine, token string) muster.Instance {
		return muster.Instance{ID: id, MachineID: machine, LaunchToken: token, Zone: "z-" + id}
	}
	rec := func(machine, nonce, id string) muster.InstanceRecord {
		return muster.InstanceRecord{MachineID: machine, Nonce: nonce, Info: muster.InstanceInfo{
			InstanceID: id, Zone: "z-" + id, Hardware: muster.Hardware{AvailabilityZone: "z-" + id}}}
	}
	alive := func(id, token string) muster.Machine {
		return muster.Machine{ID: id, Life: muster.LifeAlive, LaunchToken: token, Nonce: "n-" + id}
	}
	withInst := func(m muster.Machine, id string) muster.Machine {
		m.Instance = &muster.InstanceInfo{InstanceID: id}
		return m
	}
	withLife := func(m muster.Machine, l muster.Life) muster.Machine {
		m.Life = l
		return m
	}
	tests := []struct {
		name      string
		m         muster.Machine
		f         flags
		tagged    []muster.Instance
		recorded  []string
		wantAdopt []muster.InstanceRecord
		wantStop  map[string]string
	}{
		{name: "nothing tagged", m: alive("0", "t1")},
		{name: "adopts the instance of its launch token (C2)", m: alive("0", "t1"),
			tagged:    []muster.Instance{inst("i-1", "0", "t1")},
			wantAdopt: []muster.InstanceRecord{rec("0", "n-0", "i-1")}},
		{name: "adopts one and stops the other launch (C3)", m: alive("0", "t2"),
			tagged:    []muster.Instance{inst("i-1", "0", "t1"), inst("i-2", "0", "t2")},
			wantAdopt: []muster.InstanceRecord{rec("0", "n-0", "i-2")},
			wantStop:  map[string]string{"i-1": "duplicate"}},
		{name: "no instance of its token: earlier launches are stopped", m: alive("0", "t3"),
			tagged:   []muster.Instance{inst("i-1", "0", "t1")},
			wantStop: map[string]string{"i-1": "duplicate"}},
		{name: "no launch token: nothing adopted", m: alive("0", ""),
			tagged:   []muster.Instance{inst("i-1", "0", "")},
			wantStop: map[string]string{"i-1": "duplicate"}},
		{name: "recorded instance kept, duplicate stopped (C3)", m: withInst(alive("0", "t1"), "i-1"),
			tagged:   []muster.Instance{inst("i-1", "0", "t1"), inst("i-2", "0", "t1")},
			recorded: []string{"i-1"},
			wantStop: map[string]string{"i-2": "duplicate"}},
		{name: "an instance another machine recorded is not stopped", m: withInst(alive("0", "t1"), "i-1"),
			tagged:   []muster.Instance{inst("i-1", "0", "t1"), inst("i-9", "0", "t1")},
			recorded: []string{"i-1", "i-9"}},
		{name: "dying machine adopts nothing", m: withLife(alive("0", "t1"), muster.LifeDying),
			tagged:   []muster.Instance{inst("i-1", "0", "t1")},
			wantStop: map[string]string{"i-1": "duplicate"}},
		{name: "dead machine left to harvest", m: withLife(alive("0", "t1"), muster.LifeDead),
			tagged: []muster.Instance{inst("i-1", "0", "t1")}},
		{name: "starting machine left to its start", m: alive("0", "t1"), f: flags{starting: true},
			tagged: []muster.Instance{inst("i-1", "0", "t1")}},
		{name: "stopping machine left alone", m: alive("0", "t1"), f: flags{stopping: true},
			tagged: []muster.Instance{inst("i-1", "0", "t1")}},
		{name: "deferred machine left alone", m: alive("0", "t1"), f: flags{deferred: true},
			tagged: []muster.Instance{inst("i-1", "0", "t1")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recorded := map[string]bool{}
			for _, id := range tt.recorded {
				recorded[id] = true
			}
			tagged := func(id string) []muster.Instance {
				if id != tt.m.ID {
					t.Fatalf("tagged(%q) asked, want only machine %s", id, tt.m.ID)
				}
				return tt.tagged
			}
			got := planAdoption([]muster.Machine{tt.m}, func(string) flags { return tt.f }, tagged, recorded)
			if !reflect.DeepEqual(got.Adopt, tt.wantAdopt) {
				t.Errorf("adopt: got %v, want %v", got.Adopt, tt.wantAdopt)
			}
			want := tt.wantStop
			if want == nil {
				want = map[string]string{}
			}
			if !reflect.DeepEqual(got.Stop, want) {
				t.Errorf("stop: got %v, want %v", got.Stop, want)
			}
		})
	}
}
