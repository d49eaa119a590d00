package controller

import (
	"slices"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

// An lxd model's config is checked when the model is added, before any
// daemon is asked: unknown keys and bad values are one-line invalid errors
// naming the key.
func TestValidateLXDModel(t *testing.T) {
	kinds := map[string]ProviderKind{"lxd": LXD}
	for _, tc := range []struct {
		name   string
		config map[string]string
		want   string // "" = valid
	}{
		{"defaults", nil, ""},
		{"all keys", map[string]string{"zones": "a,b,c", "socket": "/run/lxd.sock", "image": "my/img", "storage-pool": "p1"}, ""},
		{"unknown key", map[string]string{"endpoint": "http://x"}, `"endpoint"`},
		{"bad zone", map[string]string{"zones": "a,,b"}, "zones"},
		{"zone twice", map[string]string{"zones": "a,a"}, "more than once"},
		{"relative socket", map[string]string{"socket": "lxd.sock"}, "socket"},
		{"bad image", map[string]string{"image": "my image"}, "image"},
		{"bad pool", map[string]string{"storage-pool": "a/b"}, "storage-pool"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateModel(kinds, muster.Model{Name: "box", Provider: "lxd", Config: tc.config})
			if tc.want == "" {
				if err != nil {
					t.Fatalf("got %v, want no error", err)
				}
				return
			}
			if muster.ErrorCode(err) != muster.EInvalid || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
				t.Fatalf("got %v, want one invalid line naming %q", err, tc.want)
			}
		})
	}
}

func TestFitFleet(t *testing.T) {
	in := api.ApplyRequest{Groups: []api.FleetGroup{
		{Name: "small", Count: 2, Constraints: "cores=1 mem=1G"},
		{Name: "big", Count: 1, Constraints: "cores=16 mem=64G"},
	}}
	out, notes, err := FitFleet(in, 2, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if got := []string{out.Groups[0].Constraints, out.Groups[1].Constraints}; !slices.Equal(got, []string{"cores=1 mem=1G", "cores=2 mem=4G"}) {
		t.Errorf("got constraints %q, want the big group capped to the host", got)
	}
	if len(notes) != 1 || !strings.Contains(notes[0], "group big") {
		t.Errorf("got notes %q, want one about group big", notes)
	}
	if in.Groups[1].Constraints != "cores=16 mem=64G" {
		t.Errorf("the input fleet was changed: %q", in.Groups[1].Constraints)
	}
	if _, _, err := FitFleet(api.ApplyRequest{Groups: []api.FleetGroup{{Name: "x", Constraints: "cores=lots"}}}, 2, 4096); err == nil {
		t.Error("bad constraints: got no error")
	}
}
