package muster

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Constraints say what a machine's instance must offer. The zero value
// constrains nothing. Sizes are in MiB ("M"); zero means unset.
type Constraints struct {
	Arch         string   // amd64, arm64, ...; "" = any (the provisioner defaults to amd64)
	Cores        uint64   // minimum CPU cores
	Mem          uint64   // minimum memory, MiB
	RootDisk     uint64   // minimum root disk, MiB
	InstanceType string   // a provider instance type name
	Zones        []string // allowed availability zones
	Spaces       []string // network spaces; "^name" excludes a space
	Tags         []string // provider tags; "^name" excludes a tag
}

// Known architectures.
var Arches = []string{"amd64", "arm64", "ppc64el", "s390x", "riscv64"}

// constraintKeys is the canonical order used by String.
var constraintKeys = []string{"arch", "cores", "mem", "root-disk", "instance-type", "zones", "spaces", "tags"}

// ParseConstraints parses Juju's text form: space-separated key=value pairs,
// sizes with M/G/T/P units, also written MB or MiB (binary, M when none), lists comma-separated, "^name"
// excluding a space or tag. An empty value leaves the key unset. Errors name
// the offending key and value and have code EInvalid.
func ParseConstraints(s string) (Constraints, error) {
	var c Constraints
	seen := map[string]bool{}
	for _, field := range strings.Fields(s) {
		key, value, ok := strings.Cut(field, "=")
		if !ok {
			return Constraints{}, Errorf(EInvalid, "malformed constraint %q: want key=value", field)
		}
		if !isKnownConstraint(key) {
			return Constraints{}, Errorf(EInvalid, "unknown constraint %q", key)
		}
		if seen[key] {
			return Constraints{}, Errorf(EInvalid, "constraint %q given more than once", key)
		}
		seen[key] = true
		if err := c.set(key, value); err != nil {
			return Constraints{}, Errorf(EInvalid, "bad %q constraint %q: %v", key, value, err)
		}
	}
	return c, nil
}

// MustParseConstraints is ParseConstraints for literals in tests and tables;
// it panics on error.
func MustParseConstraints(s string) Constraints {
	c, err := ParseConstraints(s)
	if err != nil {
		panic(err)
	}
	return c
}

func isKnownConstraint(key string) bool {
	for _, k := range constraintKeys {
		if k == key {
			return true
		}
	}
	return false
}

func (c *Constraints) set(key, value string) error {
	if value == "" {
		return nil
	}
	var err error
	switch key {
	case "arch":
		if !validArch(value) {
			return fmt.Errorf("unknown architecture (want one of %s)", strings.Join(Arches, ", "))
		}
		c.Arch = value
	case "cores":
		c.Cores, err = strconv.ParseUint(value, 10, 32)
		if err != nil {
			return fmt.Errorf("want a whole number of cores")
		}
	case "mem":
		c.Mem, err = ParseSize(value)
	case "root-disk":
		c.RootDisk, err = ParseSize(value)
	case "instance-type":
		err = checkName(value)
		c.InstanceType = value
	case "zones":
		c.Zones, err = parseList(value, false)
	case "spaces":
		c.Spaces, err = parseList(value, true)
	case "tags":
		c.Tags, err = parseList(value, true)
	}
	return err
}

func validArch(a string) bool {
	for _, x := range Arches {
		if x == a {
			return true
		}
	}
	return false
}

// checkName accepts the names used in constraints, zones and groups.
func checkName(s string) error {
	if s == "" {
		return fmt.Errorf("empty name")
	}
	for _, r := range s {
		if !(r == '-' || r == '_' || r == '.' || r == ':' || r == '/' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')) {
			return fmt.Errorf("invalid character %q in %q", r, s)
		}
	}
	return nil
}

// CheckName reports whether s is usable as a zone, group, space, pool or
// volume name: letters, digits and - _ . : / only.
func CheckName(s string) error {
	if err := checkName(s); err != nil {
		return Errorf(EInvalid, "%v", err)
	}
	return nil
}

func parseList(value string, allowExclude bool) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	for _, item := range strings.Split(value, ",") {
		name := item
		if allowExclude {
			name = strings.TrimPrefix(item, "^")
		}
		if err := checkName(name); err != nil {
			return nil, err
		}
		if seen[item] {
			return nil, fmt.Errorf("%q listed twice", item)
		}
		seen[item] = true
		out = append(out, item)
	}
	return out, nil
}

var sizeUnits = []struct {
	suffix string
	mib    uint64
}{{"P", 1 << 30}, {"T", 1 << 20}, {"G", 1 << 10}, {"M", 1}}

// maxSizeMiB bounds sizes so that arithmetic on them cannot overflow.
const maxSizeMiB = 1 << 40

// sizeError is ParseSize's refusal of s.
func sizeError(s string) error {
	return fmt.Errorf("invalid size %q (want a number with an optional unit M, MB, MiB, G, GB, GiB, T, TB, TiB, P, PB or PiB)", s)
}

// splitSize splits s into its number and the MiB its unit stands for. As
// in Juju, every unit is binary: 4G, 4GB and 4GiB are all 4096 MiB.
func splitSize(s string) (string, uint64) {
	for _, u := range sizeUnits {
		for _, form := range []string{u.suffix + "iB", u.suffix + "B", u.suffix} {
			if num, ok := strings.CutSuffix(s, form); ok {
				return num, u.mib
			}
		}
	}
	return s, 1
}

// ParseSize parses a size such as "512", "512M", "4G", "4GB", "4GiB" or
// "1.5T" into MiB, rounding fractions up.
func ParseSize(s string) (uint64, error) {
	num, mult := splitSize(s)
	if num == "" || strings.ContainsAny(num, "+-eEnNiIxX_pPbB") {
		return 0, sizeError(s)
	}
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
		return 0, sizeError(s)
	}
	v := math.Ceil(f * float64(mult))
	if v > maxSizeMiB {
		return 0, fmt.Errorf("size %q is too large", s)
	}
	return uint64(v), nil
}

// FormatSize formats MiB with the largest unit that divides it exactly.
func FormatSize(mib uint64) string {
	for _, u := range sizeUnits {
		if mib >= u.mib && mib%u.mib == 0 {
			return strconv.FormatUint(mib/u.mib, 10) + u.suffix
		}
	}
	return "0M"
}

// String formats c in the canonical text form; ParseConstraints(c.String())
// gives c back.
func (c Constraints) String() string {
	var parts []string
	add := func(k, v string) {
		if v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	size := func(v uint64) string {
		if v == 0 {
			return ""
		}
		return FormatSize(v)
	}
	add("arch", c.Arch)
	if c.Cores > 0 {
		add("cores", strconv.FormatUint(c.Cores, 10))
	}
	add("mem", size(c.Mem))
	add("root-disk", size(c.RootDisk))
	add("instance-type", c.InstanceType)
	add("zones", strings.Join(c.Zones, ","))
	add("spaces", strings.Join(c.Spaces, ","))
	add("tags", strings.Join(c.Tags, ","))
	return strings.Join(parts, " ")
}

// IsEmpty reports whether c constrains nothing.
func (c Constraints) IsEmpty() bool { return c.String() == "" }

// IncludedSpaces returns the spaces the machine must be in, in order.
func (c Constraints) IncludedSpaces() []string { return splitExcluded(c.Spaces, false) }

// ExcludedSpaces returns the spaces the machine must not be in.
func (c Constraints) ExcludedSpaces() []string { return splitExcluded(c.Spaces, true) }

func splitExcluded(items []string, excluded bool) []string {
	var out []string
	for _, s := range items {
		if strings.HasPrefix(s, "^") == excluded {
			out = append(out, strings.TrimPrefix(s, "^"))
		}
	}
	return out
}

// ArchOrDefault returns the constrained architecture, or amd64.
func (c Constraints) ArchOrDefault() string {
	if c.Arch == "" {
		return "amd64"
	}
	return c.Arch
}

// AllowsZone reports whether the zones constraint admits zone.
func (c Constraints) AllowsZone(zone string) bool {
	if len(c.Zones) == 0 {
		return true
	}
	for _, z := range c.Zones {
		if z == zone {
			return true
		}
	}
	return false
}
