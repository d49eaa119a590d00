package muster

import (
	"testing"
	"time"
)

func TestQuarantinedSince(t *testing.T) {
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		tag  string
		ok   bool
		want time.Time
	}{
		{"", false, time.Time{}},
		{"yesterday", false, time.Time{}},
		{FormatQuarantineTag(at.In(time.FixedZone("x", 3600))), true, at},
	} {
		got, ok := QuarantinedSince(Instance{Tags: map[string]string{TagQuarantined: tc.tag}})
		if ok != tc.ok || !got.Equal(tc.want) {
			t.Errorf("tag %q: got %v, %v; want %v, %v", tc.tag, got, ok, tc.want, tc.ok)
		}
	}
}

func FuzzQuarantinedSince(f *testing.F) {
	f.Add("2026-01-02T03:04:05Z")
	f.Add("")
	f.Add("2026-13-45T99:99:99+99:99")
	f.Fuzz(func(t *testing.T, tag string) {
		got, ok := QuarantinedSince(Instance{Tags: map[string]string{TagQuarantined: tag}})
		if !ok {
			return
		}
		// A tag that parses formats back to the same instant.
		again, ok := QuarantinedSince(Instance{Tags: map[string]string{TagQuarantined: FormatQuarantineTag(got)}})
		if !ok || !again.Equal(got.Truncate(time.Second)) {
			t.Errorf("tag %q: %v does not round-trip (%v, %v)", tag, got, again, ok)
		}
	})
}
