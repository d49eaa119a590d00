package api

import (
	"bytes"
	"encoding/json"
	"testing"
)

// checkStatusJSON fails unless WriteStatusJSON writes exactly what
// WriteJSON writes of st.Script(), and the server's compact machines are
// what encoding/json writes.
func checkStatusJSON(t *testing.T, st Status) {
	t.Helper()
	for id, m := range st.Machines {
		if m.Addresses == nil {
			m.Addresses = []string{} // as machineStatus makes them
		}
		want, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendMachineJSON(nil, m, compact); !bytes.Equal(got, want) {
			t.Fatalf("machine %q in the compact layout:\n%s\nwant (encoding/json)\n%s", id, got, want)
		}
	}
	var want, got bytes.Buffer
	if err := WriteJSON(&want, st.Script()); err != nil {
		t.Fatal(err)
	}
	if err := WriteStatusJSON(&got, st); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("WriteStatusJSON wrote\n%s\nwant (WriteJSON of Script)\n%s", got.Bytes(), want.Bytes())
	}
}

func TestWriteStatusJSONIsWriteJSON(t *testing.T) {
	checkStatusJSON(t, Status{})
	checkStatusJSON(t, Status{Model: "m", Machines: map[string]MachineStatus{}, Zones: map[string]ZoneStatus{}})
	st := bigStatus(120) // ids 0..119: string order puts 10 before 2
	m := st.Machines["7"]
	m.StatusMessage, m.KeepInstance, m.Addresses = "<b>\"x\"\\ & \t\n\x01 \u2028 é \xff", true, []string{"a", "b"}
	st.Machines["7"] = m
	m.Addresses = nil
	st.Machines["8"] = m
	st.Machines["<&>\u2029"] = MachineStatus{Life: "dead"}
	st.ProvisionerError, st.Replacing = "not in the script", map[string]string{"1": "x"}
	checkStatusJSON(t, st)
}

func FuzzWriteStatusJSON(f *testing.F) {
	f.Add("0", "alive", "msg", "10.0.0.1", "a", true)
	f.Add("<>", "\u2028\xff\x00", "\\\"", "", "", false)
	f.Fuzz(func(t *testing.T, id, life, msg, addr, zone string, keep bool) {
		st := Status{Model: msg, Provider: zone, HarvestMode: life,
			Machines: map[string]MachineStatus{id: {Life: life, StatusMessage: msg, Zone: zone, Addresses: []string{addr, msg}, KeepInstance: keep},
				id + "1": {Hardware: msg + id}},
			Zones: map[string]ZoneStatus{zone: {Available: keep, Machines: len(msg)}}}
		checkStatusJSON(t, st)
	})
}
