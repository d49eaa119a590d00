package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/musterhq/muster"
	"gopkg.in/yaml.v3"
)

// fleetFile is the YAML of `muster apply -f`:
//
//	groups:
//	  - name: web
//	    count: 3
//	    constraints: cores=2 mem=4G
//	    base: ubuntu@24.04
//	    storage: [data=10G]
type fleetFile struct {
	Groups []fleetGroup `yaml:"groups"`
}

type fleetGroup struct {
	Name        string   `yaml:"name"`
	Count       int      `yaml:"count"`
	Constraints string   `yaml:"constraints"`
	Base        string   `yaml:"base"`
	Storage     []string `yaml:"storage"`
}

// maxFleetCount bounds one group's count.
const maxFleetCount = 100000

// parseFleet decodes and checks a fleet file. Errors name the group and
// field at fault.
func parseFleet(data []byte) (*fleetFile, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var f fleetFile
	if err := dec.Decode(&f); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("fleet file is empty")
		}
		return nil, fmt.Errorf("fleet file: %v", oneLine(err.Error()))
	}
	if len(f.Groups) == 0 {
		return nil, fmt.Errorf("fleet file has no groups")
	}
	seen := map[string]bool{}
	for i, g := range f.Groups {
		where := fmt.Sprintf("group %d", i+1)
		if g.Name != "" {
			where = fmt.Sprintf("group %q", g.Name)
		}
		if err := muster.CheckName(g.Name); err != nil {
			return nil, fmt.Errorf("%s: bad name: %v", where, err)
		}
		if seen[g.Name] {
			return nil, fmt.Errorf("%s: listed twice", where)
		}
		seen[g.Name] = true
		if g.Count < 0 || g.Count > maxFleetCount {
			return nil, fmt.Errorf("%s: count %d out of range 0..%d", where, g.Count, maxFleetCount)
		}
		if _, err := g.template(); err != nil {
			return nil, fmt.Errorf("%s: %v", where, err)
		}
	}
	return &f, nil
}

// template is the machine template of a group's machines.
func (g fleetGroup) template() (muster.MachineTemplate, error) {
	return muster.NewMachineTemplate(g.Constraints, g.Name, g.Base, "", g.Storage)
}
