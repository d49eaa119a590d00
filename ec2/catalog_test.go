package ec2

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
)

func testTypes() []instanceType {
	its := []instanceType{
		{name: "m7g.large", arches: []string{"arm64"}, cores: 2, mem: 8192},
		{name: "t3.micro", arches: []string{"amd64"}, cores: 2, mem: 1024},
		{name: "t3.nano", arches: []string{"amd64"}, cores: 2, mem: 512},
		{name: "t4g.nano", arches: []string{"arm64"}, cores: 2, mem: 512},
		{name: "c7i.xlarge", arches: []string{"amd64"}, cores: 4, mem: 8192},
		{name: "s1.small", arches: []string{"amd64", "arm64"}, cores: 1, mem: 2048},
		{name: "m7i.large", arches: []string{"amd64"}, cores: 2, mem: 8192},
	}
	sortTypes(its)
	return its
}

func TestMatchType(t *testing.T) {
	its := testTypes()
	tests := []struct {
		cons, arch string
		want       string // "" = zone-independent error
		wantErr    string
	}{
		{"", "amd64", "s1.small", ""},
		{"cores=2", "amd64", "t3.nano", ""},
		{"cores=2 mem=1G", "amd64", "t3.micro", ""},
		{"mem=4G", "amd64", "m7i.large", ""},
		{"mem=4G", "arm64", "m7g.large", ""},
		{"cores=3", "amd64", "c7i.xlarge", ""},
		{"cores=3", "arm64", "", "no instance type for arch arm64"},
		{"cores=1000", "amd64", "", `matching "cores=1000"`},
		{"instance-type=t3.micro", "amd64", "t3.micro", ""},
		{"instance-type=t3.micro", "arm64", "", "does not support arch arm64"},
		{"instance-type=t3.micro mem=2G", "amd64", "", "does not fit"},
		{"instance-type=x9.huge", "amd64", "", `no instance type "x9.huge"`},
	}
	for _, tt := range tests {
		t.Run(tt.cons+"/"+tt.arch, func(t *testing.T) {
			got, err := matchType(its, muster.MustParseConstraints(tt.cons), tt.arch)
			if tt.want != "" {
				if err != nil || got.name != tt.want {
					t.Errorf("got %q, %v; want %q", got.name, err, tt.want)
				}
				return
			}
			if muster.ProviderErrorKindOf(err) != muster.ErrZoneIndependent || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("got %q, %v; want a zone-independent error containing %q", got.name, err, tt.wantErr)
			}
		})
	}
}

func TestConvertType(t *testing.T) {
	info := func(name string, cur, metal bool, cores int32, mem int64, arches ...types.ArchitectureType) types.InstanceTypeInfo {
		return types.InstanceTypeInfo{
			InstanceType: types.InstanceType(name), CurrentGeneration: aws.Bool(cur), BareMetal: aws.Bool(metal),
			VCpuInfo: &types.VCpuInfo{DefaultVCpus: aws.Int32(cores)}, MemoryInfo: &types.MemoryInfo{SizeInMiB: aws.Int64(mem)},
			ProcessorInfo: &types.ProcessorInfo{SupportedArchitectures: arches},
		}
	}
	it, ok := convertType(info("s1.small", true, false, 1, 2048, "x86_64", "arm64", "i386"))
	if !ok || it.name != "s1.small" || it.cores != 1 || it.mem != 2048 || !slices.Equal(it.arches, []string{"amd64", "arm64"}) {
		t.Errorf("got %+v, %v", it, ok)
	}
	for _, bad := range []types.InstanceTypeInfo{
		info("t1.micro", false, false, 1, 613, "x86_64"),
		info("m5.metal", true, true, 96, 393216, "x86_64"),
		info("x.i386", true, false, 1, 512, "i386"),
		{InstanceType: "broken"},
	} {
		if it, ok := convertType(bad); ok {
			t.Errorf("convertType(%s) = %+v, want it left out", bad.InstanceType, it)
		}
	}
}

func TestNewestImage(t *testing.T) {
	img := func(id, arch, created string, root types.DeviceType) types.Image {
		return types.Image{ImageId: aws.String(id), Architecture: types.ArchitectureValues(arch), CreationDate: aws.String(created),
			State: types.ImageStateAvailable, RootDeviceType: root, RootDeviceName: aws.String("/dev/sda1"),
			VirtualizationType: types.VirtualizationTypeHvm, Name: aws.String(id)}
	}
	imgs := []types.Image{
		img("ami-old", "x86_64", "2024-04-23T10:00:00.000Z", types.DeviceTypeEbs),
		img("ami-new", "x86_64", "2026-11-15T00:00:00.000Z", types.DeviceTypeEbs),
		img("ami-arm", "arm64", "2027-01-01T00:00:00.000Z", types.DeviceTypeEbs),
		img("ami-instance-store", "x86_64", "2027-01-01T00:00:00.000Z", types.DeviceTypeInstanceStore),
		img("ami-mid", "x86_64", "2025-06-01T00:00:00.000Z", types.DeviceTypeEbs),
	}
	if got, ok := newestImage(imgs, "x86_64"); !ok || got.id != "ami-new" || got.rootDevice != "/dev/sda1" {
		t.Errorf("got %+v, %v; want ami-new", got, ok)
	}
	if got, ok := newestImage(imgs, "arm64"); !ok || got.id != "ami-arm" {
		t.Errorf("got %+v, %v; want ami-arm", got, ok)
	}
	if _, ok := newestImage(nil, "x86_64"); ok {
		t.Errorf("newestImage(nil) found an image")
	}
	if got := imageNamePattern("24.04", "arm64"); got != "ubuntu/images/*ubuntu-*-24.04-arm64-server-*" {
		t.Errorf("imageNamePattern = %q", got)
	}
}

func TestImageForRefusesUnknownBasesWithoutCalling(t *testing.T) {
	p := newOffline(t)
	for _, tt := range []struct{ base, arch string }{
		{"centos@9", "amd64"}, {"ubuntu@noble", "amd64"}, {"ubuntu@24.04*", "amd64"}, {"ubuntu@24.04", "s390x"}, {"nonsense", "amd64"},
	} {
		_, err := p.imageFor(context.Background(), tt.base, tt.arch)
		if muster.ProviderErrorKindOf(err) != muster.ErrZoneIndependent {
			t.Errorf("imageFor(%s, %s): got %v, want a zone-independent error", tt.base, tt.arch, err)
		}
	}
	if n := len(p.callCounts()); n != 0 {
		t.Errorf("made calls: %v", p.callCounts())
	}
}

func TestSubnetChoice(t *testing.T) {
	subs := []subnet{
		{id: "subnet-a2", zone: "a", available: true},
		{id: "subnet-a1", zone: "a", available: true, defaultForAz: true},
		{id: "subnet-b1", zone: "b", available: false, defaultForAz: true},
		{id: "subnet-b2", zone: "b", available: true},
		{id: "subnet-c1", zone: "c", available: false},
	}
	for zone, want := range map[string]string{"a": "subnet-a1", "b": "subnet-b2", "c": "", "d": ""} {
		got, ok := zoneSubnet(subs, zone)
		if got != want || ok != (want != "") {
			t.Errorf("zoneSubnet(%s) = %q, %v; want %q", zone, got, ok, want)
		}
	}
	space := map[string][]string{"subnet-z": {"a"}, "subnet-y": {"a", "b"}, "subnet-x": {"c"}}
	for zone, want := range map[string]string{"a": "subnet-y", "b": "subnet-y", "c": "subnet-x", "d": ""} {
		got, ok := spaceSubnet(space, zone)
		if got != want || ok != (want != "") {
			t.Errorf("spaceSubnet(%s) = %q, %v; want %q", zone, got, ok, want)
		}
	}
}
