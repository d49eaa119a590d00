package ec2api

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster/sim"
)

// The describe actions, TerminateInstances and DescribeInstanceAttribute.
// Each runs inside Cloud.Do and returns its response document or an
// error.

// ---- DescribeAvailabilityZones

func (a *API) describeAvailabilityZones(q *query) (any, error) {
	names, err := list(q.form, "ZoneName")
	if err != nil {
		return nil, err
	}
	zones := a.c.Zones()
	for _, n := range names {
		if !slices.ContainsFunc(zones, func(z sim.ZoneState) bool { return z.Name == n }) {
			return nil, invalidValue("Invalid availability zone: [%s]", truncate(n, 64))
		}
	}
	var all []xmlZone
	for _, z := range zones {
		if len(names) > 0 && !slices.Contains(names, z.Name) {
			continue
		}
		x := xmlZone{ZoneName: z.Name, ZoneState: "available", RegionName: q.region, ZoneID: fmt.Sprintf("sim-az%d", z.Index+1), ZoneType: "availability-zone"}
		if !z.Available {
			x.ZoneState = "impaired"
		}
		all = append(all, x)
	}
	page, _, err := describe(q, all, paging{}, func(x xmlZone) row {
		return row{fields: map[string][]string{
			"zone-name":   {x.ZoneName},
			"state":       {x.ZoneState},
			"zone-id":     {x.ZoneID},
			"region-name": {x.RegionName},
			"zone-type":   {x.ZoneType},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeAvailabilityZonesResponse{RequestID: q.requestID, Zones: nonNil(page)}, nil
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// ---- DescribeSubnets

func (a *API) describeSubnets(q *query) (any, error) {
	ids, err := list(q.form, "SubnetId")
	if err != nil {
		return nil, err
	}
	subnets := a.c.Subnets()
	var unknown []string
	for _, id := range ids {
		if !slices.ContainsFunc(subnets, func(s sim.SubnetState) bool { return s.ID == id }) {
			unknown = append(unknown, truncate(id, 64))
		}
	}
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidSubnetID.NotFound", "subnet", unknown)
	}
	var all []xmlSubnet
	for _, s := range subnets {
		if len(ids) > 0 && !slices.Contains(ids, s.ID) {
			continue
		}
		x := xmlSubnet{
			SubnetID: s.ID, VpcID: vpcID, CIDRBlock: s.CIDR, AvailabilityZone: s.Zone, State: "available",
			AvailableIPAddressCount: s.Free, DefaultForAz: s.Default, Tags: []xmlTag{},
		}
		if s.Space != "" {
			x.Tags = []xmlTag{{Key: "muster-space", Value: s.Space}}
		}
		all = append(all, x)
	}
	page, next, err := describe(q, all, paging{minMax: 5, maxMax: 1000, tagged: true}, func(x xmlSubnet) row {
		return row{tags: tagMap(x.Tags), fields: map[string][]string{
			"availability-zone": {x.AvailabilityZone},
			"availabilityZone":  {x.AvailabilityZone},
			"subnet-id":         {x.SubnetID},
			"default-for-az":    {strconv.FormatBool(x.DefaultForAz)},
			"defaultForAz":      {strconv.FormatBool(x.DefaultForAz)},
			"vpc-id":            {x.VpcID},
			"cidr-block":        {x.CIDRBlock},
			"cidrBlock":         {x.CIDRBlock},
			"cidr":              {x.CIDRBlock},
			"state":             {x.State},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeSubnetsResponse{RequestID: q.requestID, Subnets: page, NextToken: next}, nil
}

func tagMap(tags []xmlTag) map[string]string {
	m := make(map[string]string, len(tags))
	for _, t := range tags {
		m[t.Key] = t.Value
	}
	return m
}

// ---- DescribeImages

func (a *API) describeImages(q *query) (any, error) {
	ids, err := list(q.form, "ImageId")
	if err != nil {
		return nil, err
	}
	owners, err := list(q.form, "Owner")
	if err != nil {
		return nil, err
	}
	var unknown []string
	for _, id := range ids {
		if !validID("ami-", id) {
			return nil, newError(http.StatusBadRequest, "InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", truncate(id, 64))
		}
		if findImage(id) == nil {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, newError(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", strings.Join(unknown, ", "))
	}
	var all []xmlImage
	for _, im := range images {
		if len(ids) > 0 && !slices.Contains(ids, im.id) || len(owners) > 0 && !slices.Contains(owners, imageOwner) {
			continue
		}
		all = append(all, xmlImage{
			ImageID: im.id, Name: im.name, OwnerID: imageOwner, ImageState: "available", Architecture: ec2Arch(im.arch),
			CreationDate: imageDate, IsPublic: true, ImageType: "machine", RootDeviceName: rootDevice,
			RootDeviceType: "ebs", VirtualizationType: "hvm",
		})
	}
	page, next, err := describe(q, all, paging{minMax: 5, maxMax: 1000}, func(x xmlImage) row {
		return row{fields: map[string][]string{
			"name":                {x.Name},
			"architecture":        {x.Architecture},
			"state":               {x.ImageState},
			"owner-id":            {x.OwnerID},
			"image-id":            {x.ImageID},
			"is-public":           {"true"},
			"root-device-type":    {x.RootDeviceType},
			"root-device-name":    {x.RootDeviceName},
			"virtualization-type": {x.VirtualizationType},
			"image-type":          {x.ImageType},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeImagesResponse{RequestID: q.requestID, Images: page, NextToken: next}, nil
}

// ---- DescribeInstanceTypes

func (a *API) describeInstanceTypes(q *query) (any, error) {
	asked, err := list(q.form, "InstanceType")
	if err != nil {
		return nil, err
	}
	names, arches := typeNames()
	var unknown []string
	for _, n := range asked {
		if arches[n] == nil {
			unknown = append(unknown, truncate(n, 64))
		}
	}
	if len(unknown) > 0 {
		return nil, newError(http.StatusBadRequest, "InvalidInstanceType", "The following supplied instance types do not exist: [%s]", strings.Join(unknown, ", "))
	}
	var all []xmlInstanceType
	for _, n := range names {
		if len(asked) > 0 && !slices.Contains(asked, n) {
			continue
		}
		it, _ := findType(n, "")
		var x xmlInstanceType
		x.InstanceType, x.CurrentGeneration = n, true
		x.VCPUInfo.DefaultVCPUs = it.Cores
		x.MemoryInfo.SizeInMiB = it.Mem
		x.ProcessorInfo.SupportedArchitectures = arches[n]
		all = append(all, x)
	}
	// EC2 wants MaxResults 5 to 100; the sim has only four types, so it
	// takes 1 to 100 to let clients page through them.
	page, next, err := describe(q, all, paging{minMax: 1, maxMax: 100}, func(x xmlInstanceType) row {
		return row{fields: map[string][]string{
			"instance-type":                         {x.InstanceType},
			"processor-info.supported-architecture": x.ProcessorInfo.SupportedArchitectures,
			"vcpu-info.default-vcpus":               {strconv.Itoa(x.VCPUInfo.DefaultVCPUs)},
			"memory-info.size-in-mib":               {strconv.FormatUint(x.MemoryInfo.SizeInMiB, 10)},
			"current-generation":                    {"true"},
		}}
	})
	if err != nil {
		return nil, err
	}
	return &describeInstanceTypesResponse{RequestID: q.requestID, Types: page, NextToken: next}, nil
}

// ---- instances as EC2 shows them

// attrs returns inst's EC2 attributes, derived for an instance the EC2
// API did not start.
func attrs(inst *sim.Instance, subnets []sim.SubnetState) sim.EC2Attrs {
	if inst.EC2 != nil {
		return *inst.EC2
	}
	h := strings.TrimPrefix(inst.ID, "i-")
	base := inst.Base
	if base == "" {
		base = "ubuntu@24.04"
	}
	a := sim.EC2Attrs{ImageID: imageID(base, inst.Arch), ReservationID: "r-" + h, RootVolumeID: "vol-" + h}
	if len(inst.Addresses) > 0 {
		if s := subnetOf(subnets, inst.Addresses[0]); s != nil {
			a.SubnetID = s.ID
		}
	}
	return a
}

// instance is an instance with its EC2 attributes.
type instance struct {
	*sim.Instance
	a sim.EC2Attrs
}

// instances returns the listed instances with their attributes and the
// subnets.
func (a *API) instances() ([]instance, []sim.SubnetState) {
	subnets := a.c.Subnets()
	listed := a.c.Listed()
	out := make([]instance, len(listed))
	for i := range listed {
		out[i] = instance{&listed[i], attrs(&listed[i], subnets)}
	}
	return out, subnets
}

// xml returns inst as EC2 describes it.
func (inst instance) xml(subnets []sim.SubnetState, region string) xmlInstance {
	a := inst.a
	x := xmlInstance{
		InstanceID: inst.ID, ImageID: a.ImageID, State: ec2State(inst.State), AmiLaunchIndex: a.LaunchIndex,
		InstanceType: inst.InstanceType, LaunchTime: inst.Created.UTC().Format(timeFormat),
		Placement: xmlPlacement{AvailabilityZone: inst.Zone, Tenancy: "default"},
		SubnetID:  a.SubnetID, VpcID: vpcID, Architecture: ec2Arch(inst.Arch),
		RootDeviceType: "ebs", RootDeviceName: rootDevice, ClientToken: a.ClientToken,
		Tags: sortedTags(inst.Tags), SourceDestCheck: true, VirtualizationType: "hvm", Hypervisor: "xen",
	}
	x.Monitoring.State = "disabled"
	if inst.State == "terminated" {
		return x // EC2 shows no addresses or volumes of a terminated instance
	}
	x.BlockDevices = append(x.BlockDevices, xmlBlockDevice{DeviceName: rootDevice, EBS: xmlEBS{
		VolumeID: a.RootVolumeID, Status: "attached", DeleteOnTermination: !slices.Contains(a.KeepVolumes, rootDevice),
	}})
	for _, at := range inst.Attachments {
		for _, v := range inst.Volumes {
			if v.Name == at.Volume {
				x.BlockDevices = append(x.BlockDevices, xmlBlockDevice{DeviceName: at.DeviceName, EBS: xmlEBS{
					VolumeID: v.VolumeID, Status: "attached", DeleteOnTermination: !slices.Contains(a.KeepVolumes, at.DeviceName),
				}})
				break
			}
		}
	}
	h := strings.TrimPrefix(inst.ID, "i-")
	for i, addr := range inst.Addresses {
		if i == 0 {
			x.PrivateIP = addr
			x.PrivateDNSName = privateDNSName(addr, region)
		}
		nic := xmlNIC{NetworkInterfaceID: fmt.Sprintf("eni-%.16s%x", h, i%16), VpcID: vpcID, PrivateIPAddress: addr, Attachment: xmlNICAttachment{DeviceIndex: i}}
		if s := subnetOf(subnets, addr); s != nil {
			nic.SubnetID = s.ID
		}
		x.NICs = append(x.NICs, nic)
	}
	return x
}

func firstN(s []string, n int) []string { return s[:min(len(s), n)] }

func privateDNSNames(addrs []string, region string) []string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = privateDNSName(a, region)
	}
	return out
}

func subnetIDs(subnets []sim.SubnetState, addrs []string) []string {
	var out []string
	for _, a := range addrs {
		if s := subnetOf(subnets, a); s != nil {
			out = append(out, s.ID)
		}
	}
	return out
}

func sortedTags(tags map[string]string) []xmlTag {
	keys := make([]string, 0, len(tags))
	for k := range tags {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]xmlTag, 0, len(keys))
	for _, k := range keys {
		out = append(out, xmlTag{Key: k, Value: tags[k]})
	}
	return out
}

// key orders instances for DescribeInstances: by launch time, then
// reservation and launch index, so a reservation's instances are
// together.
func (inst instance) key() string {
	return fmt.Sprintf("%020d/%s/%06d/%s", inst.Created.UnixNano(), inst.a.ReservationID, inst.a.LaunchIndex, inst.ID)
}

// ---- DescribeInstances

func (a *API) describeInstances(q *query) (any, error) {
	ids, err := list(q.form, "InstanceId")
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 && q.form.Has("MaxResults") {
		return nil, newError(http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
	}
	if err := checkInstanceIDs(ids); err != nil {
		return nil, err
	}
	all, subnets := a.instances()
	var unknown []string
	for _, id := range ids {
		if !slices.ContainsFunc(all, func(inst instance) bool { return inst.ID == id }) && !slices.Contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	if len(ids) > 0 {
		all = slices.DeleteFunc(all, func(inst instance) bool { return !slices.Contains(ids, inst.ID) })
	}
	slices.SortFunc(all, func(x, y instance) int { return strings.Compare(x.key(), y.key()) })
	page, next, err := describe(q, all, paging{minMax: 5, maxMax: 1000, tagged: true}, func(inst instance) row {
		return row{key: inst.key(), tags: inst.Tags, fields: map[string][]string{
			"instance-state-name": {ec2State(inst.State).Name},
			"instance-id":         {inst.ID},
			"availability-zone":   {inst.Zone},
			"client-token":        {inst.a.ClientToken},
			"instance-type":       {inst.InstanceType},
			"reservation-id":      {inst.a.ReservationID},
			"subnet-id":           {inst.a.SubnetID},
			"image-id":            {inst.a.ImageID},
			"instance-state-code": {strconv.Itoa(ec2State(inst.State).Code)},
			"architecture":        {ec2Arch(inst.Arch)},
			"vpc-id":              {vpcID},
			"private-ip-address":  firstN(inst.Addresses, 1),
			"private-dns-name":    privateDNSNames(firstN(inst.Addresses, 1), q.region),
			"network-interface.addresses.private-ip-address": inst.Addresses,
			"network-interface.subnet-id":                    subnetIDs(subnets, inst.Addresses),
			"root-device-type":                               {"ebs"},
			"root-device-name":                               {rootDevice},
			"launch-index":                                   {strconv.Itoa(inst.a.LaunchIndex)},
			"tenancy":                                        {"default"},
			"owner-id":                                       {ownerID},
		}}
	})
	if err != nil {
		return nil, err
	}
	resp := &describeInstancesResponse{RequestID: q.requestID, Reservations: []xmlReservation{}, NextToken: next}
	for _, inst := range page {
		n := len(resp.Reservations)
		if n == 0 || resp.Reservations[n-1].ReservationID != inst.a.ReservationID {
			resp.Reservations = append(resp.Reservations, xmlReservation{ReservationID: inst.a.ReservationID, OwnerID: ownerID})
			n++
		}
		r := &resp.Reservations[n-1]
		r.Instances = append(r.Instances, inst.xml(subnets, q.region))
	}
	return resp, nil
}

// ---- TerminateInstances

func (a *API) terminateInstances(q *query) (any, error) {
	ids, err := list(q.form, "InstanceId")
	if err != nil {
		return nil, err
	}
	if len(ids) == 0 {
		return nil, missingParam("InstanceId")
	}
	if err := checkInstanceIDs(ids); err != nil {
		return nil, err
	}
	changes, unknown := a.c.Terminate(ids)
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	resp := &terminateInstancesResponse{RequestID: q.requestID}
	for _, ch := range changes {
		resp.Instances = append(resp.Instances, xmlStateChange{InstanceID: ch.ID, CurrentState: ec2State(ch.Current), PreviousState: ec2State(ch.Previous)})
	}
	return resp, nil
}

// ---- DescribeInstanceAttribute

// attribute returns the value of an instance attribute DescribeInstanceAttribute
// serves, false for an attribute it does not know.
func (a *API) attribute(inst instance, name string) (string, bool) {
	switch name {
	case "userData":
		if ud := a.c.UserData(inst.ID); len(ud) > 0 {
			return base64.StdEncoding.EncodeToString(ud), true
		}
		return "", true
	case "instanceType":
		return inst.InstanceType, true
	case "disableApiTermination", "disableApiStop", "ebsOptimized", "enaSupport":
		return strconv.FormatBool(name == "enaSupport"), true
	case "sourceDestCheck":
		return "true", true
	case "instanceInitiatedShutdownBehavior":
		return "stop", true
	case "rootDeviceName":
		return rootDevice, true
	}
	return "", false
}

func (a *API) describeInstanceAttribute(q *query) (any, error) {
	id, attr := q.form.Get("InstanceId"), q.form.Get("Attribute")
	if id == "" {
		return nil, missingParam("InstanceId")
	}
	if attr == "" {
		return nil, missingParam("Attribute")
	}
	if err := checkInstanceIDs([]string{id}); err != nil {
		return nil, err
	}
	all, _ := a.instances()
	i := slices.IndexFunc(all, func(inst instance) bool { return inst.ID == id })
	if i < 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", []string{id})
	}
	v, ok := a.attribute(all[i], attr)
	if !ok {
		return nil, invalidValue("Value (%s) for parameter attribute is invalid. The muster sim serves userData, instanceType, disableApiTermination, disableApiStop, ebsOptimized, enaSupport, sourceDestCheck, instanceInitiatedShutdownBehavior and rootDeviceName.", truncate(attr, 64))
	}
	resp := &describeInstanceAttributeResponse{RequestID: q.requestID, InstanceID: id}
	resp.Attr.XMLName.Local, resp.Attr.Value = attr, v
	return resp, nil
}
