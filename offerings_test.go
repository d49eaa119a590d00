package muster

import (
	"strings"
	"testing"
)

func TestOfferingsCheck(t *testing.T) {
	o := Offerings{
		InstanceTypes: []InstanceTypeOffer{
			{"t.small", "amd64", 1, 2048}, {"t.large", "amd64", 8, 32768}, {"t.arm", "arm64", 4, 8192},
		},
		Bases: []string{"ubuntu@22.04", "ubuntu@24.04"},
		Zones: []string{"a", "b"},
	}
	tmpl := func(cons, base, placement string) MachineTemplate {
		t.Helper()
		tm, err := NewMachineTemplate(cons, "", base, placement, nil)
		if err != nil {
			t.Fatal(err)
		}
		return tm
	}
	for _, ok := range []MachineTemplate{
		tmpl("", "", ""), tmpl("cores=8 mem=32G", "ubuntu@22.04", "zone=b"), tmpl("zones=a,b instance-type=t.small", "", ""),
		tmpl("arch=arm64 cores=4", "", ""), tmpl("mem=4GB", "", ""),
	} {
		if err := o.Check(ok); err != nil {
			t.Errorf("Check(%v): %v, want accepted", ok.Constraints, err)
		}
	}
	for _, tt := range []struct {
		t    MachineTemplate
		want string
	}{
		{tmpl("cores=1000", "", ""), `no instance type offers cores=1000: the largest is t.large (amd64, 8 cores, mem 32G)`},
		{tmpl("mem=64G", "", ""), `no instance type offers mem=64G`},
		{tmpl("instance-type=nope", "", ""), `instance type "nope" is not offered (choices: t.small, t.large, t.arm)`},
		{tmpl("instance-type=t.arm", "", ""), `instance type "t.arm" is not offered for arch amd64`},
		{tmpl("instance-type=t.small cores=2", "", ""), `the largest is t.small`},
		{tmpl("arch=s390x", "", ""), `arch "s390x" is not offered (choices: amd64, arm64)`},
		{tmpl("", "ubuntu@99.99", ""), `base "ubuntu@99.99" is not offered (choices: ubuntu@22.04, ubuntu@24.04)`},
		{tmpl("zones=a,nonexistent", "", ""), `zone "nonexistent" does not exist (zones: a, b)`},
		{tmpl("", "", "zone=q"), `placement zone "q" does not exist (zones: a, b)`},
	} {
		err := o.Check(tt.t)
		if ErrorCode(err) != EInvalid || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Check(%v, %s, %s) = %v, want invalid with %q", tt.t.Constraints, tt.t.Base, tt.t.Placement, err, tt.want)
		}
	}
	// A host without instance types (docker): its size bounds cores and mem.
	host := Offerings{InstanceTypes: []InstanceTypeOffer{{Arch: "amd64", Cores: 4, Mem: 8192}}}
	if err := host.Check(tmpl("cores=4 mem=8GiB", "", "")); err != nil {
		t.Errorf("host offer refused what fits: %v", err)
	}
	for cons, want := range map[string]string{
		"cores=5":          "no instance type offers cores=5: the largest is the host (amd64, 4 cores, mem 8G)",
		"instance-type=m1": `instance type "m1" is not offered: there are none`,
	} {
		if err := host.Check(tmpl(cons, "", "")); err == nil || err.Error() != want {
			t.Errorf("host offer, %s: %v, want %q", cons, err, want)
		}
	}
	// Nothing known: nothing checked.
	if err := (Offerings{}).Check(tmpl("cores=1000 zones=z instance-type=x", "ubuntu@99.99", "zone=q")); err != nil {
		t.Errorf("empty Offerings refused: %v", err)
	}
}
