package api

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestDecodeStatus: a status decoded machine by machine is the status that
// was written, every field; a cut-off or misshapen one is an error.
func TestDecodeStatus(t *testing.T) {
	next := "7"
	want := Status{
		Model: "m", Provider: "sim", HarvestMode: "destroyed", ProvisionerError: "oops", HarvestBreaker: "held",
		Machines: map[string]MachineStatus{
			"0": {Life: "alive", Status: "started", InstanceID: "i-0", Zone: "a", Addresses: []string{"10.0.0.1"}},
			"1": {Life: "dying", Status: "pending", Group: "g"},
		},
		Zones:       map[string]ZoneStatus{"a": {Available: true, Machines: 1}},
		Remediation: []RemediationPause{{Group: "g", Unhealthy: 2, Total: 3}},
		Replacing:   map[string]string{"1": "drift"},
		Next:        &next,
	}
	var buf bytes.Buffer
	if err := json.NewEncoder(&buf).Encode(want); err != nil {
		t.Fatal(err)
	}
	got := Status{Machines: map[string]MachineStatus{}}
	if err := decodeStatus(bytes.NewReader(buf.Bytes()), &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("decoded\n%+v\nwant\n%+v", got, want)
	}
	// Machines already in the map (earlier pages) stay.
	got = Status{Machines: map[string]MachineStatus{"9": {Life: "alive"}}}
	if err := decodeStatus(strings.NewReader(`{"machines":{"0":{"life":"dead"}},"model":"m"}`), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Machines) != 2 || got.Machines["0"].Life != "dead" || got.Model != "m" {
		t.Fatalf("second page: %+v", got)
	}
	if err := decodeStatus(strings.NewReader(`{"machines":null,"model":"m"}`), &got); err != nil {
		t.Fatalf("machines null: %v", err)
	}
	whole := buf.String()
	for _, bad := range []string{"", "[]", `{"machines":[]}`, `{"machines":{"0":[]}}`, `{"machines":{"0":{}}`, `{"model":1}`, whole[:len(whole)/2], whole[:len(whole)-3]} {
		st := Status{Machines: map[string]MachineStatus{}}
		if err := decodeStatus(strings.NewReader(bad), &st); err == nil {
			t.Errorf("decodeStatus(%.40q) = nil, want an error", bad)
		}
	}
}

func FuzzDecodeStatus(f *testing.F) {
	for _, s := range []string{`{"machines":{"0":{"life":"alive","addresses":["a"]}},"model":"m","zones":{"a":{"available":true}}}`,
		`{"machines":null}`, `{}`, `{"machines":{"0":{}},"next":"3"}`} {
		f.Add([]byte(s))
	}
	// Whatever decodeStatus accepts, a whole-value Decode (the client's
	// way before) reads as the same status.
	f.Fuzz(func(t *testing.T, b []byte) {
		st := Status{Machines: map[string]MachineStatus{}}
		if err := decodeStatus(bytes.NewReader(b), &st); err != nil {
			return
		}
		var whole Status
		if err := json.NewDecoder(bytes.NewReader(b)).Decode(&whole); err != nil {
			t.Fatalf("decodeStatus accepted %q, Decode did not: %v", b, err)
		}
		if len(whole.Machines) == 0 {
			whole.Machines = st.Machines
		}
		if !reflect.DeepEqual(st, whole) {
			t.Fatalf("%q: decodeStatus read %+v, Decode %+v", b, st, whole)
		}
	})
}
