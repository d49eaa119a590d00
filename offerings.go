package muster

import (
	"fmt"
	"slices"
	"strings"
)

// Offerings is what a model's provider can start. A machine nothing
// offered can satisfy is refused when it is declared, with the value and
// the choices named, instead of being added and retried in vain. A nil
// list is not checked: the provider does not know it up front.
type Offerings struct {
	InstanceTypes []InstanceTypeOffer // smallest first
	Bases         []string
	Zones         []string
}

// InstanceTypeOffer is one instance type a provider offers; a nameless
// one is a host without instance types (docker), whose size bounds the
// constraints.
type InstanceTypeOffer struct {
	Name  string
	Arch  string
	Cores uint64
	Mem   uint64 // MiB
}

func (it InstanceTypeOffer) String() string {
	name := it.Name
	if name == "" {
		name = "the host"
	}
	return fmt.Sprintf("%s (%s, %d cores, mem %s)", name, it.Arch, it.Cores, FormatSize(it.Mem))
}

// Offerer is offered by providers that know without calling their cloud
// which instance types and bases they offer. Zones come from the model's
// zone table, not from here.
type Offerer interface {
	Offerings() Offerings
}

// Check refuses t (EInvalid) when nothing in o can satisfy it.
func (o Offerings) Check(t MachineTemplate) error {
	c := t.Constraints
	if o.Bases != nil && t.Base != "" && !slices.Contains(o.Bases, t.Base) {
		return invalidChoice("base", t.Base, o.Bases)
	}
	if o.Zones != nil {
		for _, z := range c.Zones {
			if !slices.Contains(o.Zones, z) {
				return missingZone("zone", z, o.Zones)
			}
		}
		if zone, _ := ParsePlacement(t.Placement); zone != "" && !slices.Contains(o.Zones, zone) {
			return missingZone("placement zone", zone, o.Zones)
		}
	}
	if o.InstanceTypes == nil {
		return nil
	}
	var names, arches []string
	var fit []InstanceTypeOffer
	for _, it := range o.InstanceTypes {
		if it.Name != "" {
			names = appendNew(names, it.Name)
		}
		arches = appendNew(arches, it.Arch)
		if it.Arch == c.ArchOrDefault() && (c.InstanceType == "" || c.InstanceType == it.Name) {
			fit = append(fit, it)
		}
	}
	switch {
	case c.InstanceType != "" && !slices.Contains(names, c.InstanceType):
		return invalidChoice("instance type", c.InstanceType, names)
	case !slices.Contains(arches, c.ArchOrDefault()):
		return invalidChoice("arch", c.ArchOrDefault(), arches)
	case len(fit) == 0:
		return Errorf(EInvalid, "instance type %q is not offered for arch %s", c.InstanceType, c.ArchOrDefault())
	}
	largest := fit[len(fit)-1]
	for _, it := range fit {
		if it.Cores >= c.Cores && it.Mem >= c.Mem {
			return nil
		}
		if it.Cores > largest.Cores || it.Mem > largest.Mem {
			largest = it
		}
	}
	want := Constraints{Cores: c.Cores, Mem: c.Mem}
	return Errorf(EInvalid, "no instance type offers %s: the largest is %s", want, largest)
}

// invalidChoice is the error for a value that is not one of choices.
func invalidChoice(what, value string, choices []string) error {
	if len(choices) == 0 {
		return Errorf(EInvalid, "%s %q is not offered: there are none", what, value)
	}
	return Errorf(EInvalid, "%s %q is not offered (choices: %s)", what, value, strings.Join(choices, ", "))
}

// missingZone is the error for a zone the provider does not have.
func missingZone(what, zone string, zones []string) error {
	return Errorf(EInvalid, "%s %q does not exist (zones: %s)", what, zone, strings.Join(zones, ", "))
}

func appendNew(list []string, s string) []string {
	if slices.Contains(list, s) {
		return list
	}
	return append(list, s)
}
