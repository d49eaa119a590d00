package muster

import (
	"strings"
	"testing"
	"time"
)

func TestGroupSettings(t *testing.T) {
	s := DefaultSettings()
	for _, kv := range [][2]string{{"group.web.unhealthy-after", "30s"}, {"group.web.max-in-flight", "50%"}, {"group.db.v2.max-unhealthy", "10%"}} {
		if err := s.Set(kv[0], kv[1]); err != nil {
			t.Fatalf("Set %s: %v", kv[0], err)
		}
	}
	web, db, other := s.ForGroup("web"), s.ForGroup("db.v2"), s.ForGroup("cache")
	if web.UnhealthyAfter != 30*time.Second || web.MaxInFlight != 50 || web.MaxUnhealthy != 40 {
		t.Errorf("web: got %v %v %v", web.UnhealthyAfter, web.MaxInFlight, web.MaxUnhealthy)
	}
	if db.MaxUnhealthy != 10 || db.UnhealthyAfter != 0 || other != s {
		t.Errorf("db.v2 max-unhealthy %v unhealthy-after %v; cache has overrides: %v", db.MaxUnhealthy, db.UnhealthyAfter, other != s)
	}
	m := s.Map()
	if m["group.web.unhealthy-after"] != "30s" || m["group.db.v2.max-unhealthy"] != "10%" {
		t.Errorf("Map: %v", m)
	}
	// Round trip through the map, as the store keeps settings.
	back := DefaultSettings()
	for k, v := range m {
		if err := back.Set(k, v); err != nil {
			t.Fatalf("Set %s=%s: %v", k, v, err)
		}
	}
	if back != s {
		t.Errorf("round trip: got %v, want %v", back.Map(), m)
	}
	if err := s.Set("group.web.unhealthy-after", ""); err != nil || s.ForGroup("web").UnhealthyAfter != 0 {
		t.Errorf("removing an override: %v, unhealthy-after %v", err, s.ForGroup("web").UnhealthyAfter)
	}
	for _, tc := range []struct{ key, value, want string }{
		{"group.web.retry-count", "3", "unknown group setting"},
		{"group.web.max-unhealthy", "200%", "want between 0% and 100%"},
		{"group.w b.max-unhealthy", "20%", "bad group"},
		{"group..max-unhealthy", "20%", "unknown model-config key"},
	} {
		before := s
		if err := s.Set(tc.key, tc.value); err == nil || !strings.Contains(err.Error(), tc.want) || !IsCode(err, EInvalid) {
			t.Errorf("Set %s=%s: got %v, want an invalid error naming %q", tc.key, tc.value, err, tc.want)
		}
		if s != before {
			t.Errorf("Set %s=%s changed the settings", tc.key, tc.value)
		}
	}
}

// FuzzSettingsSet: any key and value either is refused or round-trips
// through Get and Map, and never panics.
func FuzzSettingsSet(f *testing.F) {
	for _, seed := range [][2]string{{"max-unhealthy", "40%"}, {"max-in-flight", "7"}, {"group.web.unhealthy-after", "30s"},
		{"group.a.b.max-in-flight", "%"}, {"registration-timeout", "1h"}, {"group..x", ""}} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, key, value string) {
		s := DefaultSettings()
		if err := s.Set(key, value); err != nil {
			return
		}
		if err := s.Validate(); err != nil {
			t.Fatalf("Set %q=%q accepted, Validate: %v", key, value, err)
		}
		got, err := s.Get(key)
		if err != nil {
			t.Fatalf("Get %q after Set: %v", key, err)
		}
		again := DefaultSettings()
		for k, v := range s.Map() {
			if err := again.Set(k, v); err != nil {
				t.Fatalf("Map entry %q=%q refused: %v", k, v, err)
			}
		}
		if again != s {
			t.Fatalf("Set %q=%q (Get %q) does not round-trip through Map", key, value, got)
		}
	})
}
