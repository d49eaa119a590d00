package storetest

import (
	"reflect"
	"testing"
	"time"

	"github.com/musterhq/muster"
)

func testModels(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	a, err := s.CreateModel(ctx, muster.Model{Name: "alpha", Provider: "sim", Config: map[string]string{"zones": "a,b,c"}})
	if err != nil {
		t.Fatalf("create model: %v", err)
	}
	if a.UUID == "" {
		t.Fatalf("got empty UUID, want a fresh one")
	}
	if got, want := a.Settings, muster.DefaultSettings(); got != want {
		t.Fatalf("settings of a model created without settings: got %+v, want defaults %+v", got, want)
	}
	set := muster.DefaultSettings()
	if err := set.Set("num-provision-workers", "3"); err != nil {
		t.Fatal(err)
	}
	if err := set.Set("harvest-mode", "all"); err != nil {
		t.Fatal(err)
	}
	b, err := s.CreateModel(ctx, muster.Model{Name: "beta", Provider: "docker", Settings: set})
	if err != nil {
		t.Fatalf("create model: %v", err)
	}
	for _, key := range []string{"alpha", a.UUID} {
		got, err := s.Model(ctx, key)
		if err != nil {
			t.Fatalf("model %s: %v", key, err)
		}
		if got.UUID != a.UUID || got.Name != "alpha" || got.Provider != "sim" || got.Config["zones"] != "a,b,c" || got.Settings != muster.DefaultSettings() {
			t.Fatalf("model %s: got %+v, want %+v", key, got, a)
		}
		if !got.Created.Equal(a.Created) {
			t.Fatalf("model %s: got created %v, want %v", key, got.Created, a.Created)
		}
	}
	got, err := s.Model(ctx, "beta")
	if err != nil {
		t.Fatalf("model beta: %v", err)
	}
	if got.Settings != set {
		t.Fatalf("settings: got %+v, want %+v", got.Settings, set)
	}
	ms, err := s.Models(ctx)
	if err != nil {
		t.Fatalf("models: %v", err)
	}
	var names []string
	for _, m := range ms {
		names = append(names, m.Name)
	}
	if want := []string{"alpha", "beta"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("models: got %v, want %v", names, want)
	}

	set.RetryDelay = 3 * time.Second
	set.SimAgents = false
	if err := s.UpdateModelSettings(ctx, b.UUID, set); err != nil {
		t.Fatalf("update settings: %v", err)
	}
	if got, _ := s.Model(ctx, b.UUID); got.Settings != set {
		t.Fatalf("updated settings: got %+v, want %+v", got.Settings, set)
	}

	addMachines(t, s, b.UUID, 1)
	wantCode(t, "remove model with machines", s.RemoveModel(ctx, b.UUID), muster.EConflict)
	kill(t, s, b.UUID, "0")
	if err := s.RemoveMachines(ctx, b.UUID, []string{"0"}); err != nil {
		t.Fatalf("remove machines: %v", err)
	}
	if err := s.AppendEvents(ctx, []muster.Event{{ModelUUID: b.UUID, Kind: "note"}}); err != nil {
		t.Fatalf("append events: %v", err)
	}
	if err := s.RemoveModel(ctx, b.UUID); err != nil {
		t.Fatalf("remove model: %v", err)
	}
	_, err = s.Model(ctx, "beta")
	wantCode(t, "removed model", err, muster.ENotFound)
	wantCode(t, "remove removed model", s.RemoveModel(ctx, b.UUID), muster.ENotFound)
	// The name is free again.
	if _, err := s.CreateModel(ctx, muster.Model{Name: "beta", Provider: "sim"}); err != nil {
		t.Fatalf("create model with a freed name: %v", err)
	}
}

func testModelErrors(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	newModel(t, s, "taken")
	badSettings := muster.DefaultSettings()
	badSettings.NumProvisionWorkers = 0
	for _, tc := range []struct {
		name string
		m    muster.Model
		code string
	}{
		{"empty name", muster.Model{Provider: "sim"}, muster.EInvalid},
		{"space in name", muster.Model{Name: "a b", Provider: "sim"}, muster.EInvalid},
		{"bang in name", muster.Model{Name: "x!", Provider: "sim"}, muster.EInvalid},
		{"bad uuid", muster.Model{Name: "u", UUID: "not-a-uuid", Provider: "sim"}, muster.EInvalid},
		{"bad settings", muster.Model{Name: "bad-settings", Provider: "sim", Settings: badSettings}, muster.EInvalid},
		{"taken name", muster.Model{Name: "taken", Provider: "sim"}, muster.EConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.CreateModel(ctx, tc.m)
			wantCode(t, "create model", err, tc.code)
		})
	}
	ms, err := s.Models(ctx)
	if err != nil || len(ms) != 1 {
		t.Fatalf("models after bad creates: got %d models (err %v), want 1", len(ms), err)
	}
	const missing = "00000000-0000-4000-8000-000000000000"
	_, err = s.Model(ctx, "nope")
	wantCode(t, "unknown model", err, muster.ENotFound)
	wantCode(t, "update settings of unknown model", s.UpdateModelSettings(ctx, missing, muster.DefaultSettings()), muster.ENotFound)
	wantCode(t, "remove unknown model", s.RemoveModel(ctx, missing), muster.ENotFound)
	m, _ := s.Model(ctx, "taken")
	wantCode(t, "update bad settings", s.UpdateModelSettings(ctx, m.UUID, badSettings), muster.EInvalid)
	if got, _ := s.Model(ctx, "taken"); got.Settings != muster.DefaultSettings() {
		t.Fatalf("settings after a refused update: got %+v, want defaults", got.Settings)
	}
}

func testModelsPersist(t *testing.T, h *harness) {
	ctx := ctxFor(t)
	s := h.store(t)
	set := muster.DefaultSettings()
	set.ZoneFailureTTL = time.Minute
	set.RateLimitRate = 2.5
	m, err := s.CreateModel(ctx, muster.Model{Name: "kept", Provider: "sim", Config: map[string]string{"endpoint": "http://127.0.0.1:1"}, Settings: set})
	if err != nil {
		t.Fatalf("create model: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	s = h.store(t)
	got, err := s.Model(ctx, "kept")
	if err != nil {
		t.Fatalf("model after reopen: %v", err)
	}
	if got.UUID != m.UUID || got.Settings != set || !reflect.DeepEqual(got.Config, m.Config) || !got.Created.Equal(m.Created) {
		t.Fatalf("model after reopen: got %+v, want %+v", got, m)
	}
}
