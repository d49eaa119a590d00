package api

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/musterhq/muster"
	"gopkg.in/yaml.v3"
)

// fleetFile is the YAML of a fleet file (`muster apply -f`):
//
//	groups:
//	  - name: web
//	    count: 3
//	    constraints: cores=2 mem=4G
//	    base: ubuntu@24.04
//	    storage: [data=10G]
type fleetFile struct {
	Groups []FleetGroup `yaml:"groups"`
}

// maxFleetCount bounds one group's count.
const maxFleetCount = 100000

// ParseFleet decodes and checks a fleet file into the request that
// applies it. Errors are one line and name the group and field at fault.
func ParseFleet(data []byte) (ApplyRequest, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fleetFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return ApplyRequest{}, fmt.Errorf("fleet file is empty")
		}
		return ApplyRequest{}, fmt.Errorf("fleet file: %s", fleetYAMLError(err))
	}
	if len(f.Groups) == 0 {
		return ApplyRequest{}, fmt.Errorf("fleet file has no groups")
	}
	seen := map[string]bool{}
	for i, g := range f.Groups {
		where := fmt.Sprintf("group %d", i+1)
		if g.Name != "" {
			where = fmt.Sprintf("group %q", g.Name)
		}
		if err := muster.CheckName(g.Name); err != nil {
			return ApplyRequest{}, fmt.Errorf("%s: bad name: %v", where, err)
		}
		if seen[g.Name] {
			return ApplyRequest{}, fmt.Errorf("%s: listed twice", where)
		}
		seen[g.Name] = true
		if g.Count < 0 || g.Count > maxFleetCount {
			return ApplyRequest{}, fmt.Errorf("%s: count %d out of range 0..%d", where, g.Count, maxFleetCount)
		}
		if _, err := muster.NewMachineTemplate(g.Constraints, g.Name, g.Base, "", g.Storage); err != nil {
			return ApplyRequest{}, fmt.Errorf("%s: %v", where, err)
		}
		if _, err := g.withSettings(muster.DefaultSettings()); err != nil {
			return ApplyRequest{}, fmt.Errorf("%s: %s", where, muster.ErrorMessage(err))
		}
	}
	return ApplyRequest{Groups: f.Groups}, nil
}
