package api_test

import (
	"os"
	"strings"
	"testing"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
)

func TestParseFleet(t *testing.T) {
	f, err := api.ParseFleet([]byte(`
groups:
  - name: web
    count: 3
    constraints: cores=2 mem=4G
    storage: [data=10G]
  - name: db
    count: 2
    base: ubuntu@22.04
`))
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Groups) != 2 || f.Groups[0].Count != 3 || f.Groups[1].Base != "ubuntu@22.04" {
		t.Fatalf("got %+v", f.Groups)
	}
	tm, err := muster.NewMachineTemplate(f.Groups[0].Constraints, f.Groups[0].Name, f.Groups[0].Base, "", f.Groups[0].Storage)
	if err != nil || tm.Constraints.Cores != 2 || tm.Storage[0].Size != 10240 || tm.Group != "web" || tm.Base != "ubuntu@24.04" {
		t.Fatalf("template %+v, %v", tm, err)
	}
}

func TestParseFleetErrors(t *testing.T) {
	tests := []struct{ name, in, want string }{
		{"empty", "", "empty"},
		{"no groups", "groups: []", "no groups"},
		{"unknown field", "groups:\n- name: a\n  cont: 1", `fleet file: line 3: unknown field "cont" (a group has name, count, constraints, base, storage)`},
		{"bad name", "groups:\n- name: 'a b'\n  count: 1", `group "a b": bad name`},
		{"no name", "groups:\n- count: 1", "group 1: bad name"},
		{"twice", "groups:\n- name: a\n- name: a", `group "a": listed twice`},
		{"negative", "groups:\n- name: a\n  count: -1", "count -1"},
		{"bad constraint", "groups:\n- name: a\n  constraints: mem=lots", `"mem"`},
		{"bad storage", "groups:\n- name: a\n  storage: [data]", `bad storage "data"`},
		{"bad base", "groups:\n- name: a\n  base: ubuntu", `bad base "ubuntu"`},
		{"not yaml", "{{{", "fleet file"},
		{"bad max-unhealthy", "groups:\n- name: a\n  max-unhealthy: 140%", `group "a": bad max-unhealthy "140%": want between 0% and 100%`},
		{"bad unhealthy-after", "groups:\n- name: a\n  unhealthy-after: soon", `bad unhealthy-after "soon"`},
		{"a number", "0", "cannot unmarshal the number `0` into a fleet file (a map with groups)"},
		{"groups a number", "groups: 3", "into the list of groups"},
		{"group a number", "groups: [3]", "into a group (name, count"},
		{"a list", "- a", "cannot unmarshal a list into a fleet file"},
		{"top-level key with a space", "0 0: 1", `unknown field "0 0" (a fleet file has groups)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := api.ParseFleet([]byte(tt.in))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "api.") || strings.Contains(err.Error(), "!!") {
				t.Errorf("error spans lines or speaks Go/YAML tags: %q", err)
			}
		})
	}
}

func TestExampleFleetParses(t *testing.T) {
	data, err := os.ReadFile("../examples/fleet.yaml")
	if err != nil {
		t.Fatal(err)
	}
	f, err := api.ParseFleet(data)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, g := range f.Groups {
		total += g.Count
	}
	if total < 8 || total > 20 {
		t.Errorf("example fleet has %d machines, want about a dozen", total)
	}
}

func FuzzParseFleet(f *testing.F) {
	f.Add([]byte("groups:\n- name: web\n  count: 3\n  constraints: cores=2\n  storage: [data=1G]\n"))
	f.Add([]byte("groups: [{name: a, count: 1}]"))
	f.Add([]byte("{}"))
	f.Add([]byte(`"": 1`)) // an empty key: yaml.v3 names the Go type
	f.Add([]byte("groups:\n- name: g\n  unhealthy-after: 30s\n  max-unhealthy: 40%\n  max-in-flight: 2\n  registration-timeout: 0s\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fl, err := api.ParseFleet(data)
		if err != nil {
			if strings.Contains(err.Error(), "\n") || strings.Contains(err.Error(), "api.") || strings.Contains(err.Error(), "!!") {
				t.Fatalf("multi-line error, or one in Go's words %q", err)
			}
			return
		}
		for _, g := range fl.Groups {
			if _, err := muster.NewMachineTemplate(g.Constraints, g.Name, g.Base, "", g.Storage); err != nil {
				t.Fatalf("accepted group %q has a bad template: %v", g.Name, err)
			}
			s := muster.DefaultSettings()
			for k, v := range map[string]string{"registration-timeout": g.RegistrationTimeout, "unhealthy-after": g.UnhealthyAfter,
				"max-unhealthy": g.MaxUnhealthy, "max-in-flight": g.MaxInFlight} {
				if err := s.Set(muster.GroupSettingKey(g.Name, k), v); err != nil {
					t.Fatalf("accepted group %q has a bad %s %q: %v", g.Name, k, v, err)
				}
			}
		}
	})
}

// An empty key, in the file or in a group, is an unknown field in the
// fleet file's words, not Go's.
func TestParseFleetEmptyKey(t *testing.T) {
	for _, in := range []string{`"": 1`, "groups:\n- name: a\n  \"\": 1\n", "{0\n\n0}0"} {
		_, err := api.ParseFleet([]byte(in))
		if err == nil || !strings.Contains(err.Error(), `unknown field "`) || strings.Contains(err.Error(), "api.") || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: got %v, want an unknown empty field in the fleet file's words", in, err)
		}
	}
}
