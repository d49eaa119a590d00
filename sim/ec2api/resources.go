package ec2api

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"strings"

	"github.com/musterhq/muster/sim"
)

// The sim's resources as EC2 names them: images, instance types, ids,
// instance states.

const (
	rootDevice    = "/dev/sda1"
	vpcID         = "vpc-0a1b2c3d4e5f60718"
	imageOwner    = "099720109477" // Canonical
	imageDate     = "2026-11-15T00:00:00.000Z"
	maxUserData   = 16384
	maxVolumes    = 24
	maxTags       = 50
	timeFormat    = "2006-01-02T15:04:05.000Z"
	minRootDisk   = 8 // GiB
	maxVolumeSize = 16384
)

// image is one image of the API: one per sim base and arch.
type image struct {
	id, name, base, arch string
}

var ubuntuCodenames = map[string]string{"22.04": "jammy", "24.04": "noble"}

var images = func() []image {
	var out []image
	for _, base := range sim.Bases {
		version := strings.TrimPrefix(base, "ubuntu@")
		code := ubuntuCodenames[version]
		if code == "" {
			code = version
		}
		for _, arch := range []string{"amd64", "arm64"} {
			out = append(out, image{
				id:   imageID(base, arch),
				name: fmt.Sprintf("ubuntu/images/hvm-ssd-gp3/ubuntu-%s-%s-%s-server-20261115", code, version, arch),
				base: base, arch: arch,
			})
		}
	}
	return out
}()

// imageID is the stable image id of a base and arch.
func imageID(base, arch string) string {
	sum := sha256.Sum256([]byte("muster-sim-image/" + base + "/" + arch))
	return "ami-" + hex.EncodeToString(sum[:])[:17]
}

func findImage(id string) *image {
	for i := range images {
		if images[i].id == id {
			return &images[i]
		}
	}
	return nil
}

// ec2Arch converts a sim arch into EC2's name for it.
func ec2Arch(arch string) string {
	if arch == "amd64" {
		return "x86_64"
	}
	return arch
}

// typeNames are the sim's instance type names, smallest first, each with
// the arches it exists in.
func typeNames() ([]string, map[string][]string) {
	var names []string
	arches := map[string][]string{}
	for _, it := range sim.InstanceTypes {
		if arches[it.Name] == nil {
			names = append(names, it.Name)
		}
		arches[it.Name] = append(arches[it.Name], ec2Arch(it.Arch))
	}
	return names, arches
}

func findType(name, arch string) (sim.InstanceType, bool) {
	for _, it := range sim.InstanceTypes {
		if it.Name == name && (arch == "" || it.Arch == arch) {
			return it, true
		}
	}
	return sim.InstanceType{}, false
}

// validID reports whether s is prefix followed by 8 or 17 hex digits.
func validID(prefix, s string) bool {
	h, ok := strings.CutPrefix(s, prefix)
	if !ok || len(h) != 8 && len(h) != 17 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !('0' <= h[i] && h[i] <= '9' || 'a' <= h[i] && h[i] <= 'f') {
			return false
		}
	}
	return true
}

var stateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func ec2State(name string) xmlState {
	code, ok := stateCodes[name]
	if !ok {
		return xmlState{Code: 16, Name: "running"}
	}
	return xmlState{Code: code, Name: name}
}

// notFoundIDs is the InvalidXxx.NotFound error naming ids.
func notFoundIDs(code, what string, ids []string) *apiError {
	if len(ids) == 1 {
		return newError(http.StatusBadRequest, code, "The %s ID '%s' does not exist", what, ids[0])
	}
	return newError(http.StatusBadRequest, code, "The %s IDs '%s' do not exist", what, strings.Join(ids, ", "))
}

// checkInstanceIDs returns InvalidInstanceID.Malformed for the first id
// that cannot be an instance id.
func checkInstanceIDs(ids []string) error {
	for _, id := range ids {
		if !validID("i-", id) {
			return newError(http.StatusBadRequest, "InvalidInstanceID.Malformed", "Invalid id: \"%s\"", truncate(id, 64))
		}
	}
	return nil
}

// subnetOf returns the subnet of subnets that addr is in, nil if none.
func subnetOf(subnets []sim.SubnetState, addr string) *sim.SubnetState {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return nil
	}
	for i := range subnets {
		if p, err := netip.ParsePrefix(subnets[i].CIDR); err == nil && p.Contains(a) {
			return &subnets[i]
		}
	}
	return nil
}

func privateDNSName(addr, region string) string {
	host := "ip-" + strings.ReplaceAll(addr, ".", "-")
	if region == "us-east-1" {
		return host + ".ec2.internal"
	}
	return host + "." + region + ".compute.internal"
}
