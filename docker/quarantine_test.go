package docker

import (
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func TestTagsOfQuarantinedName(t *testing.T) {
	labels := map[string]string{muster.TagModel: "m"}
	since := time.Date(2026, 3, 4, 5, 6, 7, 0, time.UTC)
	tags := tagsOf(labels, []string{"/muster-m-m1-tok" + quarantineSuffix + since.Format(quarantineLayout)})
	if got, ok := muster.QuarantinedSince(muster.Instance{Tags: tags}); !ok || !got.Equal(since) || tags[muster.TagModel] != "m" {
		t.Errorf("tags %v: quarantined since %v (%v), want %v with the labels kept", tags, got, ok, since)
	}
	if _, marked := labels[muster.TagQuarantined]; marked {
		t.Error("tagsOf changed the container's labels")
	}
	for _, name := range []string{"/muster-m-m1-tok", "/x" + quarantineSuffix + "soon"} {
		if tags := tagsOf(labels, []string{name}); tags[muster.TagQuarantined] != "" {
			t.Errorf("name %q: got quarantine tag %q, want none", name, tags[muster.TagQuarantined])
		}
	}
}

func FuzzTagsOf(f *testing.F) {
	f.Add("/muster-m-m1-tok.quarantined-20260304T050607Z")
	f.Add(".quarantined-")
	f.Fuzz(func(t *testing.T, name string) {
		tags := tagsOf(map[string]string{"k": "v"}, []string{name})
		if v := tags[muster.TagQuarantined]; v != "" {
			if _, ok := muster.QuarantinedSince(muster.Instance{Tags: tags}); !ok {
				t.Errorf("name %q gave an unparsable tag %q", name, v)
			}
		}
	})
}
