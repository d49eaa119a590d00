package muster

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultSettings(t *testing.T) {
	s := DefaultSettings()
	want := map[string]string{
		"harvest-mode": "destroyed", "harvest-min-age": "1m0s", "num-provision-workers": "16",
		"retry-count": "10", "retry-delay": "10s", "auto-retry-max": "30m0s", "zone-failure-ttl": "3m0s",
		"resync-interval": "5m0s", "agent-heartbeat": "10s", "rate-limit-burst": "20", "rate-limit-rate": "100",
		"sim-agents": "true", "batch-starts": "true", "event-retention": "168h0m0s",
		"registration-timeout": "10m0s", "unhealthy-after": "0s", "max-unhealthy": "40%", "max-in-flight": "10%",
		"harvest-quarantine": "0s", "harvest-max-fraction": "0.5",
	}
	got := s.Map()
	if len(got) != len(want) {
		t.Errorf("got %d keys, want %d", len(got), len(want))
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %q, want %q", k, got[k], v)
		}
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	if s.RetryDelay != 10*time.Second || s.NumProvisionWorkers != 16 || !s.HarvestMode.Destroyed() || s.HarvestMode.Unknown() {
		t.Errorf("typed defaults wrong: %+v", s)
	}
}

func TestSettingsSet(t *testing.T) {
	tests := []struct {
		key, value string
		wantErr    string // "" = accepted
	}{
		{"harvest-mode", "all", ""},
		{"harvest-mode", "some", `bad harvest-mode "some"`},
		{"num-provision-workers", "256", ""},
		{"num-provision-workers", "257", `bad num-provision-workers "257": want between 1 and 256`},
		{"num-provision-workers", "0", "want between 1 and 256"},
		{"num-provision-workers", "x", "want a whole number"},
		{"retry-delay", "1s", ""},
		{"retry-delay", "-1s", "want between"},
		{"retry-delay", "soon", "want a duration"},
		{"rate-limit-rate", "NaN", "want between"},
		{"rate-limit-rate", "2.5", ""},
		{"sim-agents", "maybe", "want true or false"},
		{"max-unhealthy", "25%", ""},
		{"max-unhealthy", "101%", `bad max-unhealthy "101%": want between 0% and 100%`},
		{"max-in-flight", "-1%", "want between"},
		{"max-in-flight", "half", "want a share such as 40%"},
		{"unhealthy-after", "30s", ""},
		{"registration-timeout", "-1s", "want between"},
		{"no-such-key", "1", `unknown model-config key "no-such-key"`},
	}
	for _, tt := range tests {
		t.Run(tt.key+"="+tt.value, func(t *testing.T) {
			s := DefaultSettings()
			before := s.Map()
			err := s.Set(tt.key, tt.value)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("Set: %v", err)
				}
				if got, _ := s.Get(tt.key); got != tt.value && tt.key != "retry-delay" {
					t.Errorf("Get after Set: got %q, want %q", got, tt.value)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got error %v, want one containing %q", err, tt.wantErr)
			}
			if ErrorCode(err) != EInvalid {
				t.Errorf("code %q, want invalid", ErrorCode(err))
			}
			after := s.Map()
			for k := range before {
				if before[k] != after[k] {
					t.Errorf("refused Set changed %s from %q to %q", k, before[k], after[k])
				}
			}
		})
	}
}

func TestLifeOnlyMovesForward(t *testing.T) {
	tests := []struct {
		from, to Life
		want     bool
	}{
		{LifeAlive, LifeAlive, true}, {LifeAlive, LifeDying, true}, {LifeAlive, LifeDead, true},
		{LifeDying, LifeDead, true}, {LifeDying, LifeAlive, false}, {LifeDead, LifeDying, false},
		{LifeDead, LifeAlive, false}, {LifeAlive, "zombie", false}, {"zombie", LifeDead, false},
	}
	for _, tt := range tests {
		if got := tt.from.CanBecome(tt.to); got != tt.want {
			t.Errorf("%s→%s: got %v, want %v", tt.from, tt.to, got, tt.want)
		}
	}
}

func TestParseStorage(t *testing.T) {
	good := map[string]StorageDirective{
		"data=10G":          {Name: "data", Size: 10240},
		"data=10G,pool=ssd": {Name: "data", Size: 10240, Pool: "ssd"},
		"logs=512M":         {Name: "logs", Size: 512},
	}
	for in, want := range good {
		got, err := ParseStorage(in)
		if err != nil || got != want {
			t.Errorf("ParseStorage(%q) = %+v, %v; want %+v", in, got, err, want)
		}
		if got.String() != in {
			t.Errorf("String() = %q, want %q", got.String(), in)
		}
	}
	for _, in := range []string{"", "data", "data=", "data=0", "data=10X", "=10G", "data=10G,size=3", "data=10G,pool=", "da ta=1G"} {
		if _, err := ParseStorage(in); err == nil || ErrorCode(err) != EInvalid {
			t.Errorf("ParseStorage(%q): got %v, want an invalid error", in, err)
		}
	}
}

func TestParsePlacementAndBase(t *testing.T) {
	if z, err := ParsePlacement("zone=b"); err != nil || z != "b" {
		t.Errorf("ParsePlacement(zone=b) = %q, %v", z, err)
	}
	if z, err := ParsePlacement(""); err != nil || z != "" {
		t.Errorf("ParsePlacement(\"\") = %q, %v", z, err)
	}
	for _, bad := range []string{"b", "zone=", "host=b", "zone=a b"} {
		if _, err := ParsePlacement(bad); err == nil {
			t.Errorf("ParsePlacement(%q) accepted", bad)
		}
	}
	if _, _, err := ParseBase("ubuntu@24.04"); err != nil {
		t.Error(err)
	}
	for _, bad := range []string{"ubuntu", "@24.04", "ubuntu@", "ubu ntu@1"} {
		if _, _, err := ParseBase(bad); err == nil {
			t.Errorf("ParseBase(%q) accepted", bad)
		}
	}
}

func TestMachineTemplateValidate(t *testing.T) {
	tm := MachineTemplate{}
	if err := tm.Validate(); err != nil || tm.Base != DefaultBase {
		t.Fatalf("empty template: %v, base %q", err, tm.Base)
	}
	bad := []MachineTemplate{
		{Base: "nope"}, {Group: "a b"}, {Placement: "zone="},
		{Storage: []StorageDirective{{Name: "d", Size: 1}, {Name: "d", Size: 2}}},
		{Storage: []StorageDirective{{Name: "d"}}},
	}
	for i, tm := range bad {
		if err := tm.Validate(); err == nil {
			t.Errorf("case %d: %+v accepted", i, tm)
		}
	}
}

func TestErrors(t *testing.T) {
	err := Errorf(ENotFound, "machine %q not found", "3")
	wrapped := fmtWrap(err)
	if ErrorCode(wrapped) != ENotFound || ErrorMessage(wrapped) != `machine "3" not found` {
		t.Errorf("got %q %q", ErrorCode(wrapped), ErrorMessage(wrapped))
	}
	plain := errorsNew("boom")
	if ErrorCode(plain) != EInternal || ErrorMessage(plain) != "internal error" {
		t.Errorf("plain error: got %q %q", ErrorCode(plain), ErrorMessage(plain))
	}
	if ErrorCode(nil) != "" {
		t.Error("nil error has a code")
	}
	pe := NewProviderError(ErrCapacity, "a", "zone %s full", "a")
	if ProviderErrorKindOf(fmtWrap(pe)) != ErrCapacity || IsZoneIndependent(pe) || !ErrCapacity.Retryable() || ErrZoneIndependent.Retryable() {
		t.Error("provider error classification wrong")
	}
}

func TestSecrets(t *testing.T) {
	a, b := NewSecret(), NewSecret()
	if a == b || len(a) != 64 {
		t.Fatalf("secrets %q %q", a, b)
	}
	h := HashSecret(a)
	if !SecretMatches(a, h) || SecretMatches(b, h) || h == a {
		t.Error("SecretMatches wrong")
	}
	u := NewUUID()
	if len(u) != 36 || u[14] != '4' || strings.Count(u, "-") != 4 {
		t.Errorf("bad uuid %q", u)
	}
}

func TestSortMachineIDs(t *testing.T) {
	ids := []string{"10", "x", "2", "0", "b", "11"}
	SortMachineIDs(ids)
	if got := strings.Join(ids, ","); got != "0,2,10,11,b,x" {
		t.Fatalf("got %s, want 0,2,10,11,b,x", got)
	}
}

func TestNewMachineTemplate(t *testing.T) {
	tm, err := NewMachineTemplate("cores=2", "web", "", "zone=a", []string{"data=1G"})
	if err != nil || tm.Constraints.Cores != 2 || tm.Group != "web" || tm.Base != DefaultBase || tm.Placement != "zone=a" || tm.Storage[0].Size != 1024 {
		t.Fatalf("got %+v, %v", tm, err)
	}
	for _, bad := range [][]string{{"cores=x", ""}, {"", "data"}, {"", "data=1G", "data=2G"}} {
		if _, err := NewMachineTemplate(bad[0], "", "", "", bad[1:]); err == nil || ErrorCode(err) != EInvalid {
			t.Errorf("%q: got %v, want an invalid error", bad, err)
		}
	}
}
