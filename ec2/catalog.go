package ec2

import (
	"cmp"
	"context"
	"fmt"
	"regexp"
	"slices"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
)

// CanonicalOwner is the AWS account that publishes Ubuntu images.
const CanonicalOwner = "099720109477"

// instanceType is an EC2 instance type as starts need it.
type instanceType struct {
	name   string
	arches []string // muster arch names
	cores  uint64
	mem    uint64 // MiB
}

// image is an AMI for a base and arch.
type image struct {
	id         string
	name       string
	rootDevice string
	created    string
}

// subnet is a subnet as starts and Subnets need it.
type subnet struct {
	id, cidr, zone, space string
	defaultForAz          bool
	available             bool
}

// ec2Arch returns EC2's name of a muster arch.
func ec2Arch(arch string) (string, bool) {
	switch arch {
	case "amd64":
		return "x86_64", true
	case "arm64":
		return "arm64", true
	}
	return "", false
}

// musterArch returns muster's name of an EC2 architecture, "" if none.
func musterArch(a string) string {
	switch a {
	case "x86_64":
		return "amd64"
	case "arm64":
		return "arm64"
	}
	return ""
}

// instanceTypes lists the region's instance types once; later calls use
// the list. Previous-generation and bare-metal types are left out.
func (p *Provider) instanceTypes(ctx context.Context) ([]instanceType, error) {
	if err := acquire(ctx, p.typesSem); err != nil {
		return nil, fmt.Errorf("ec2 DescribeInstanceTypes: %w", err)
	}
	defer func() { <-p.typesSem }()
	p.mu.Lock()
	its := p.types
	p.mu.Unlock()
	if its != nil {
		return its, nil
	}
	its = []instanceType{}
	pages := ec2.NewDescribeInstanceTypesPaginator(p.client, &ec2.DescribeInstanceTypesInput{MaxResults: aws.Int32(100)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "DescribeInstanceTypes", "")
		}
		for _, t := range out.InstanceTypes {
			if it, ok := convertType(t); ok {
				its = append(its, it)
			}
		}
	}
	sortTypes(its)
	p.mu.Lock()
	p.types = its
	p.mu.Unlock()
	return its, nil
}

func convertType(t types.InstanceTypeInfo) (instanceType, bool) {
	if t.InstanceType == "" || t.VCpuInfo == nil || t.MemoryInfo == nil || t.ProcessorInfo == nil ||
		(t.CurrentGeneration != nil && !*t.CurrentGeneration) || aws.ToBool(t.BareMetal) {
		return instanceType{}, false
	}
	it := instanceType{
		name:  string(t.InstanceType),
		cores: uint64(max(aws.ToInt32(t.VCpuInfo.DefaultVCpus), 0)),
		mem:   uint64(max(aws.ToInt64(t.MemoryInfo.SizeInMiB), 0)),
	}
	for _, a := range t.ProcessorInfo.SupportedArchitectures {
		if ma := musterArch(string(a)); ma != "" && !slices.Contains(it.arches, ma) {
			it.arches = append(it.arches, ma)
		}
	}
	return it, len(it.arches) > 0 && it.cores > 0
}

// sortTypes orders types smallest first: cores, then memory, then name.
func sortTypes(its []instanceType) {
	slices.SortFunc(its, func(a, b instanceType) int {
		return cmp.Or(cmp.Compare(a.cores, b.cores), cmp.Compare(a.mem, b.mem), cmp.Compare(a.name, b.name))
	})
}

// matchType returns the smallest of its (sorted smallest first) that
// supports arch and fits c's cores and mem; with an instance-type
// constraint, that type, which must support arch and fit.
func matchType(its []instanceType, c muster.Constraints, arch string) (instanceType, error) {
	fits := func(it instanceType) bool { return it.cores >= c.Cores && it.mem >= c.Mem }
	if c.InstanceType != "" {
		i := slices.IndexFunc(its, func(it instanceType) bool { return it.name == c.InstanceType })
		switch {
		case i < 0:
			return instanceType{}, zoneIndependent("no instance type %q in this region", c.InstanceType)
		case !slices.Contains(its[i].arches, arch):
			return instanceType{}, zoneIndependent("instance type %s does not support arch %s", c.InstanceType, arch)
		case !fits(its[i]):
			return instanceType{}, zoneIndependent("instance type %s (cores=%d mem=%dM) does not fit constraints %q", c.InstanceType, its[i].cores, its[i].mem, c.String())
		}
		return its[i], nil
	}
	for _, it := range its {
		if slices.Contains(it.arches, arch) && fits(it) {
			return it, nil
		}
	}
	return instanceType{}, zoneIndependent("no instance type for arch %s matching %q", arch, c.String())
}

var versionRE = regexp.MustCompile(`^[0-9]{1,4}\.[0-9]{1,4}$`)

// imageFor returns the newest Ubuntu image of base (ubuntu@VERSION) for
// arch, cached by base and arch.
func (p *Provider) imageFor(ctx context.Context, base, arch string) (image, error) {
	key := base + "/" + arch
	p.mu.Lock()
	img, ok := p.images[key]
	p.mu.Unlock()
	if ok {
		return img, nil
	}
	osName, version, err := muster.ParseBase(base)
	if err != nil {
		return image{}, zoneIndependent("%v", err)
	}
	earch, ok := ec2Arch(arch)
	if osName != "ubuntu" || !versionRE.MatchString(version) || !ok {
		return image{}, zoneIndependent("no image for base %s arch %s (the ec2 provider knows Ubuntu images for amd64 and arm64)", base, arch)
	}
	if err := acquire(ctx, p.imagesSem); err != nil {
		return image{}, fmt.Errorf("ec2 DescribeImages: %w", err)
	}
	defer func() { <-p.imagesSem }()
	p.mu.Lock()
	img, ok = p.images[key]
	p.mu.Unlock()
	if ok {
		return img, nil
	}
	out, err := p.client.DescribeImages(ctx, &ec2.DescribeImagesInput{
		Owners: []string{CanonicalOwner},
		Filters: []types.Filter{
			{Name: aws.String("name"), Values: []string{imageNamePattern(version, arch)}},
			{Name: aws.String("architecture"), Values: []string{earch}},
			{Name: aws.String("state"), Values: []string{"available"}},
		},
	})
	if err != nil {
		return image{}, classify(err, "DescribeImages", "")
	}
	img, ok = newestImage(out.Images, earch)
	if !ok {
		return image{}, zoneIndependent("no image for base %s arch %s in region %s", base, arch, p.region)
	}
	p.mu.Lock()
	p.images[key] = img
	p.mu.Unlock()
	return img, nil
}

// imageNamePattern is the DescribeImages name filter of Canonical's server
// images of an Ubuntu version, e.g.
// ubuntu/images/hvm-ssd-gp3/ubuntu-noble-24.04-amd64-server-20261115.
func imageNamePattern(version, arch string) string {
	return "ubuntu/images/*ubuntu-*-" + version + "-" + arch + "-server-*"
}

// newestImage picks the newest available EBS-backed HVM image of earch.
func newestImage(imgs []types.Image, earch string) (image, bool) {
	var best image
	var bestAt time.Time
	for _, im := range imgs {
		if im.ImageId == nil || string(im.Architecture) != earch ||
			(im.State != "" && im.State != types.ImageStateAvailable) ||
			(im.RootDeviceType != "" && im.RootDeviceType != types.DeviceTypeEbs) ||
			(im.VirtualizationType != "" && im.VirtualizationType != types.VirtualizationTypeHvm) {
			continue
		}
		created := aws.ToString(im.CreationDate)
		at, _ := time.Parse(time.RFC3339, created)
		c := image{id: *im.ImageId, name: aws.ToString(im.Name), rootDevice: aws.ToString(im.RootDeviceName), created: created}
		if best.id == "" || at.After(bestAt) || (at.Equal(bestAt) && cmp.Or(cmp.Compare(c.created, best.created), cmp.Compare(c.name, best.name)) > 0) {
			best, bestAt = c, at
		}
	}
	if best.rootDevice == "" {
		best.rootDevice = "/dev/sda1"
	}
	return best, best.id != ""
}

// listSubnets lists the region's subnets and caches them.
func (p *Provider) listSubnets(ctx context.Context) ([]subnet, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("ec2 DescribeSubnets: %w", err)
	}
	subs := []subnet{}
	pages := ec2.NewDescribeSubnetsPaginator(p.client, &ec2.DescribeSubnetsInput{MaxResults: aws.Int32(1000)})
	for pages.HasMorePages() {
		out, err := pages.NextPage(ctx)
		if err != nil {
			return nil, classify(err, "DescribeSubnets", "")
		}
		for _, s := range out.Subnets {
			sub := subnet{
				id:           aws.ToString(s.SubnetId),
				cidr:         aws.ToString(s.CidrBlock),
				zone:         aws.ToString(s.AvailabilityZone),
				defaultForAz: aws.ToBool(s.DefaultForAz),
				available:    s.State == "" || s.State == types.SubnetStateAvailable,
			}
			for _, t := range s.Tags {
				if aws.ToString(t.Key) == TagSpace {
					sub.space = aws.ToString(t.Value)
				}
			}
			if sub.id != "" {
				subs = append(subs, sub)
			}
		}
	}
	p.mu.Lock()
	p.subnets, p.subnetsAt = subs, p.now()
	p.mu.Unlock()
	return subs, nil
}

// cachedSubnets returns the subnet list, listing it when it is older than
// subnetTTL or when refresh is set.
func (p *Provider) cachedSubnets(ctx context.Context, refresh bool) ([]subnet, error) {
	if err := acquire(ctx, p.subnetsSem); err != nil {
		return nil, fmt.Errorf("ec2 DescribeSubnets: %w", err)
	}
	defer func() { <-p.subnetsSem }()
	p.mu.Lock()
	subs, at := p.subnets, p.subnetsAt
	p.mu.Unlock()
	if subs != nil && !refresh && p.now().Sub(at) < subnetTTL {
		return subs, nil
	}
	return p.listSubnets(ctx)
}

// zoneSubnet returns the subnet a start in zone uses when no space is
// requested: the zone's default subnet, else its first available one.
func zoneSubnet(subs []subnet, zone string) (string, bool) {
	first := ""
	for _, s := range subs {
		if s.zone != zone || !s.available {
			continue
		}
		if s.defaultForAz {
			return s.id, true
		}
		if first == "" {
			first = s.id
		}
	}
	return first, first != ""
}

// spaceSubnet returns the subnet of a requested space (subnet id → zones)
// in zone: the first by id.
func spaceSubnet(m map[string][]string, zone string) (string, bool) {
	var ids []string
	for id, zones := range m {
		if slices.Contains(zones, zone) {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return "", false
	}
	slices.Sort(ids)
	return ids[0], true
}
