package sqlstore

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/musterhq/muster"
)

// TestDecodeInstanceCopies: a cached instance decodes as json.Unmarshal
// would, every time, and what one caller changes in its copy (slices
// included) never shows in the next caller's.
func TestDecodeInstanceCopies(t *testing.T) {
	want := muster.InstanceInfo{InstanceID: "i-1", Zone: "a", Hardware: muster.Hardware{Arch: "amd64", Cores: 2},
		Addresses: []string{"10.1.0.4"}, Volumes: []muster.Volume{{Name: "data", Size: 1}},
		Attachments: []muster.VolumeAttachment{{Volume: "data", MachineID: "0"}}}
	b, _ := json.Marshal(want)
	for i := range 3 {
		got, err := decodeInstance(string(b))
		if err != nil || !reflect.DeepEqual(*got, want) {
			t.Fatalf("read %d: got %+v, %v; want %+v", i, got, err, want)
		}
		got.InstanceID, got.Addresses[0], got.Volumes[0].Name, got.Attachments[0].Volume = "changed", "changed", "changed", "changed"
	}
	if _, err := decodeInstance(`{"instance-id": 7}`); err == nil {
		t.Error("a bad instance column decoded without error")
	}
	if _, err := decodeInstance(`{"instance-id": 7}`); err == nil {
		t.Error("a bad instance column decoded without error the second time")
	}
}
