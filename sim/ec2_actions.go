package sim

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/musterhq/muster"
)

// The EC2 API's actions. Each runs after enter and before leave (see
// serveEC2) and returns its response document or an error.

const (
	ec2RootDevice    = "/dev/sda1"
	ec2VpcID         = "vpc-0a1b2c3d4e5f60718"
	ec2ImageOwner    = "099720109477" // Canonical
	ec2ImageDate     = "2026-11-15T00:00:00.000Z"
	ec2MaxUserData   = 16384
	ec2MaxVolumes    = 24
	ec2MaxTags       = 50
	ec2TimeFormat    = "2006-01-02T15:04:05.000Z"
	ec2MinRootDisk   = 8 // GiB
	ec2MaxVolumeSize = 16384
)

// ec2Image is one image of the EC2 API: one per sim base and arch.
type ec2Image struct {
	id, name, base, arch string
}

var ubuntuCodenames = map[string]string{"22.04": "jammy", "24.04": "noble"}

var ec2Images = func() []ec2Image {
	var out []ec2Image
	for _, base := range Bases {
		version := strings.TrimPrefix(base, "ubuntu@")
		code := ubuntuCodenames[version]
		if code == "" {
			code = version
		}
		for _, arch := range []string{"amd64", "arm64"} {
			out = append(out, ec2Image{
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

func findImage(id string) *ec2Image {
	for i := range ec2Images {
		if ec2Images[i].id == id {
			return &ec2Images[i]
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

var ec2StateCodes = map[string]int{"pending": 0, "running": 16, "shutting-down": 32, "terminated": 48, "stopping": 64, "stopped": 80}

func ec2State(name string) xmlState {
	code, ok := ec2StateCodes[name]
	if !ok {
		return xmlState{Code: 16, Name: "running"}
	}
	return xmlState{Code: code, Name: name}
}

// notFoundIDs is the InvalidXxx.NotFound error naming ids.
func notFoundIDs(code, what string, ids []string) *ec2Error {
	if len(ids) == 1 {
		return newEC2Error(http.StatusBadRequest, code, "The %s ID '%s' does not exist", what, ids[0])
	}
	return newEC2Error(http.StatusBadRequest, code, "The %s IDs '%s' do not exist", what, strings.Join(ids, ", "))
}

// ---- DescribeAvailabilityZones

func (c *Cloud) ec2DescribeAvailabilityZones(q *ec2Query) (any, error) {
	names, err := list(q.form, "ZoneName")
	if err != nil {
		return nil, err
	}
	fs, err := filters(q.form)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, n := range names {
		if c.zone(n) == nil {
			return nil, invalidValue("Invalid availability zone: [%s]", truncate(n, 64))
		}
	}
	resp := &describeAvailabilityZonesResponse{RequestID: q.requestID, Zones: []xmlZone{}}
	for i, z := range c.zones {
		if len(names) > 0 && !contains(names, z.Name) {
			continue
		}
		x := xmlZone{ZoneName: z.Name, ZoneState: "available", RegionName: q.region, ZoneID: fmt.Sprintf("sim-az%d", i+1), ZoneType: "availability-zone"}
		if !z.Available {
			x.ZoneState = "impaired"
		}
		ok, err := matchFilters(fs, nil, map[string][]string{
			"zone-name":   {x.ZoneName},
			"state":       {x.ZoneState},
			"zone-id":     {x.ZoneID},
			"region-name": {x.RegionName},
			"zone-type":   {x.ZoneType},
		})
		if err != nil {
			return nil, err
		}
		if ok {
			resp.Zones = append(resp.Zones, x)
		}
	}
	return resp, nil
}

// ---- DescribeSubnets

func (c *Cloud) ec2DescribeSubnets(q *ec2Query) (any, error) {
	ids, err := list(q.form, "SubnetId")
	if err != nil {
		return nil, err
	}
	fs, err := filters(q.form)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var unknown []string
	for _, id := range ids {
		if c.subnetByID(id) == nil {
			unknown = append(unknown, truncate(id, 64))
		}
	}
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidSubnetID.NotFound", "subnet", unknown)
	}
	used := map[*subnet]int{}
	for a := range c.addrUsed {
		if s := c.subnetOfAddr(a); s != nil {
			used[s]++
		}
	}
	var all []xmlSubnet
	for _, s := range c.subnets {
		if len(ids) > 0 && !contains(ids, s.ID) {
			continue
		}
		x := xmlSubnet{
			SubnetID: s.ID, VpcID: ec2VpcID, CIDRBlock: s.CIDR, AvailabilityZone: s.Zone, State: "available",
			AvailableIPAddressCount: lastHost - firstHost + 1 - used[s], DefaultForAz: c.firstSubnet(s.Zone) == s,
		}
		tags := map[string]string{}
		if s.Space != "" {
			tags["muster-space"] = s.Space
			x.Tags = []xmlTag{{Key: "muster-space", Value: s.Space}}
		}
		ok, err := matchFilters(fs, tags, map[string][]string{
			"availability-zone": {x.AvailabilityZone},
			"subnet-id":         {x.SubnetID},
			"default-for-az":    {strconv.FormatBool(x.DefaultForAz)},
			"vpc-id":            {x.VpcID},
			"cidr-block":        {x.CIDRBlock},
			"state":             {x.State},
		})
		if err != nil {
			return nil, err
		}
		if ok {
			all = append(all, x)
		}
	}
	from, to, next, err := pageBounds(q.form, len(all), 5, 1000)
	if err != nil {
		return nil, err
	}
	return &describeSubnetsResponse{RequestID: q.requestID, Subnets: all[from:to], NextToken: next}, nil
}

func (c *Cloud) subnetByID(id string) *subnet {
	for _, s := range c.subnets {
		if s.ID == id {
			return s
		}
	}
	return nil
}

// subnetOfAddr returns the subnet an address was allocated from.
func (c *Cloud) subnetOfAddr(addr string) *subnet {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return nil
	}
	for _, s := range c.subnets {
		if netip.PrefixFrom(netip.AddrFrom4([4]byte{s.prefix[0], s.prefix[1], s.prefix[2], 0}), 20).Contains(a) {
			return s
		}
	}
	return nil
}

// ---- DescribeImages

func (c *Cloud) ec2DescribeImages(q *ec2Query) (any, error) {
	ids, err := list(q.form, "ImageId")
	if err != nil {
		return nil, err
	}
	owners, err := list(q.form, "Owner")
	if err != nil {
		return nil, err
	}
	fs, err := filters(q.form)
	if err != nil {
		return nil, err
	}
	var unknown []string
	for _, id := range ids {
		if !validID("ami-", id) {
			return nil, newEC2Error(http.StatusBadRequest, "InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", truncate(id, 64))
		}
		if findImage(id) == nil {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", strings.Join(unknown, ", "))
	}
	var all []xmlImage
	for _, im := range ec2Images {
		if len(ids) > 0 && !contains(ids, im.id) {
			continue
		}
		if len(owners) > 0 && !contains(owners, ec2ImageOwner) {
			continue
		}
		x := xmlImage{
			ImageID: im.id, Name: im.name, OwnerID: ec2ImageOwner, ImageState: "available", Architecture: ec2Arch(im.arch),
			CreationDate: ec2ImageDate, IsPublic: true, ImageType: "machine", RootDeviceName: ec2RootDevice,
			RootDeviceType: "ebs", VirtualizationType: "hvm",
		}
		ok, err := matchFilters(fs, nil, map[string][]string{
			"name":                {x.Name},
			"architecture":        {x.Architecture},
			"state":               {x.ImageState},
			"owner-id":            {x.OwnerID},
			"image-id":            {x.ImageID},
			"is-public":           {"true"},
			"root-device-type":    {x.RootDeviceType},
			"virtualization-type": {x.VirtualizationType},
		})
		if err != nil {
			return nil, err
		}
		if ok {
			all = append(all, x)
		}
	}
	from, to, next, err := pageBounds(q.form, len(all), 5, 1000)
	if err != nil {
		return nil, err
	}
	return &describeImagesResponse{RequestID: q.requestID, Images: all[from:to], NextToken: next}, nil
}

// ---- DescribeInstanceTypes

// ec2TypeNames are the sim's instance type names, smallest first, each
// with the arches it exists in.
func ec2TypeNames() ([]string, map[string][]string) {
	var names []string
	arches := map[string][]string{}
	for _, it := range InstanceTypes {
		if arches[it.Name] == nil {
			names = append(names, it.Name)
		}
		arches[it.Name] = append(arches[it.Name], ec2Arch(it.Arch))
	}
	return names, arches
}

func findType(name, arch string) (InstanceType, bool) {
	for _, it := range InstanceTypes {
		if it.Name == name && (arch == "" || it.Arch == arch) {
			return it, true
		}
	}
	return InstanceType{}, false
}

func (c *Cloud) ec2DescribeInstanceTypes(q *ec2Query) (any, error) {
	asked, err := list(q.form, "InstanceType")
	if err != nil {
		return nil, err
	}
	fs, err := filters(q.form)
	if err != nil {
		return nil, err
	}
	names, arches := ec2TypeNames()
	var unknown []string
	for _, n := range asked {
		if arches[n] == nil {
			unknown = append(unknown, truncate(n, 64))
		}
	}
	if len(unknown) > 0 {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidInstanceType", "The following supplied instance types do not exist: [%s]", strings.Join(unknown, ", "))
	}
	var all []xmlInstanceType
	for _, n := range names {
		if len(asked) > 0 && !contains(asked, n) {
			continue
		}
		it, _ := findType(n, "")
		var x xmlInstanceType
		x.InstanceType, x.CurrentGeneration = n, true
		x.VCPUInfo.DefaultVCPUs = it.Cores
		x.MemoryInfo.SizeInMiB = it.Mem
		x.ProcessorInfo.SupportedArchitectures = arches[n]
		ok, err := matchFilters(fs, nil, map[string][]string{
			"instance-type":                         {n},
			"processor-info.supported-architecture": arches[n],
			"vcpu-info.default-vcpus":               {strconv.Itoa(it.Cores)},
			"memory-info.size-in-mib":               {strconv.FormatUint(it.Mem, 10)},
			"current-generation":                    {"true"},
		})
		if err != nil {
			return nil, err
		}
		if ok {
			all = append(all, x)
		}
	}
	// EC2 wants MaxResults 5 to 100; the sim has only four types, so it
	// takes 1 to 100 to let clients page through them.
	from, to, next, err := pageBounds(q.form, len(all), 1, 100)
	if err != nil {
		return nil, err
	}
	return &describeInstanceTypesResponse{RequestID: q.requestID, Types: all[from:to], NextToken: next}, nil
}

// ---- instances as EC2 shows them

// ec2AttrsLocked returns inst's EC2 attributes, derived for an instance
// the EC2 API did not start; c.mu is held.
func (c *Cloud) ec2AttrsLocked(inst *Instance) EC2Attrs {
	if inst.EC2 != nil {
		return *inst.EC2
	}
	h := strings.TrimPrefix(inst.ID, "i-")
	base := inst.Base
	if base == "" {
		base = "ubuntu@24.04"
	}
	a := EC2Attrs{ImageID: imageID(base, inst.Arch), ReservationID: "r-" + h, RootVolumeID: "vol-" + h}
	if len(inst.Addresses) > 0 {
		if s := c.subnetOfAddr(inst.Addresses[0]); s != nil {
			a.SubnetID = s.ID
		}
	}
	return a
}

// ec2InstanceLocked returns inst as EC2 describes it; c.mu is held.
func (c *Cloud) ec2InstanceLocked(inst *Instance, region string) xmlInstance {
	a := c.ec2AttrsLocked(inst)
	x := xmlInstance{
		InstanceID: inst.ID, ImageID: a.ImageID, State: ec2State(inst.State), AmiLaunchIndex: a.LaunchIndex,
		InstanceType: inst.InstanceType, LaunchTime: inst.Created.UTC().Format(ec2TimeFormat),
		Placement: xmlPlacement{AvailabilityZone: inst.Zone, Tenancy: "default"},
		SubnetID:  a.SubnetID, VpcID: ec2VpcID, Architecture: ec2Arch(inst.Arch),
		RootDeviceType: "ebs", RootDeviceName: ec2RootDevice, ClientToken: a.ClientToken,
	}
	keys := make([]string, 0, len(inst.Tags))
	for k := range inst.Tags {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		x.Tags = append(x.Tags, xmlTag{Key: k, Value: inst.Tags[k]})
	}
	if inst.State == "terminated" {
		return x // EC2 shows no addresses or volumes of a terminated instance
	}
	x.BlockDevices = append(x.BlockDevices, xmlBlockDevice{DeviceName: ec2RootDevice, EBS: xmlEBS{
		VolumeID: a.RootVolumeID, Status: "attached", DeleteOnTermination: !contains(a.KeepVolumes, ec2RootDevice),
	}})
	for _, at := range inst.Attachments {
		for _, v := range inst.Volumes {
			if v.Name == at.Volume {
				x.BlockDevices = append(x.BlockDevices, xmlBlockDevice{DeviceName: at.DeviceName, EBS: xmlEBS{
					VolumeID: v.VolumeID, Status: "attached", DeleteOnTermination: !contains(a.KeepVolumes, at.DeviceName),
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
		nic := xmlNIC{NetworkInterfaceID: fmt.Sprintf("eni-%.16s%x", h, i%16), VpcID: ec2VpcID, PrivateIPAddress: addr, Attachment: xmlNICAttachment{DeviceIndex: i}}
		if s := c.subnetOfAddr(addr); s != nil {
			nic.SubnetID = s.ID
		}
		x.NICs = append(x.NICs, nic)
	}
	return x
}

func privateDNSName(addr, region string) string {
	host := "ip-" + strings.ReplaceAll(addr, ".", "-")
	if region == "us-east-1" {
		return host + ".ec2.internal"
	}
	return host + "." + region + ".compute.internal"
}

// instKey orders instances for DescribeInstances: by launch time, then
// reservation and launch index, so a reservation's instances are
// together.
type instKey struct {
	created int64
	rid     string
	index   int
	id      string
}

func (k instKey) less(o instKey) bool {
	if k.created != o.created {
		return k.created < o.created
	}
	if k.rid != o.rid {
		return k.rid < o.rid
	}
	if k.index != o.index {
		return k.index < o.index
	}
	return k.id < o.id
}

func (k instKey) token() string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, "%d/%s/%d/%s", k.created, k.rid, k.index, k.id))
}

func parseInstKey(tok string) (instKey, bool) {
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil {
		return instKey{}, false
	}
	parts := strings.SplitN(string(b), "/", 4)
	if len(parts) != 4 {
		return instKey{}, false
	}
	created, err1 := strconv.ParseInt(parts[0], 10, 64)
	index, err2 := strconv.Atoi(parts[2])
	if err1 != nil || err2 != nil {
		return instKey{}, false
	}
	return instKey{created, parts[1], index, parts[3]}, true
}

// ec2Visible returns the instances and tombstones the EC2 API lists now,
// by id; c.mu is held.
func (c *Cloud) ec2VisibleLocked() map[string]*Instance {
	now := c.clock.Now()
	c.pruneTombsLocked(now)
	lag := c.faults.ListingLag
	out := make(map[string]*Instance, len(c.instances)+len(c.tombs))
	for id, inst := range c.instances {
		if lag <= 0 || now.Sub(inst.Created) >= lag {
			out[id] = inst
		}
	}
	for id, t := range c.tombs {
		if lag <= 0 || now.Sub(t.Instance.Created) >= lag {
			out[id] = &t.Instance
		}
	}
	return out
}

// checkInstanceIDs returns InvalidInstanceID.Malformed for the first id
// that cannot be an instance id.
func checkInstanceIDs(ids []string) error {
	for _, id := range ids {
		if !validID("i-", id) {
			return newEC2Error(http.StatusBadRequest, "InvalidInstanceID.Malformed", "Invalid id: \"%s\"", truncate(id, 64))
		}
	}
	return nil
}

// ---- DescribeInstances

func (c *Cloud) ec2DescribeInstances(q *ec2Query) (any, error) {
	ids, err := list(q.form, "InstanceId")
	if err != nil {
		return nil, err
	}
	fs, err := filters(q.form)
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 && q.form.Has("MaxResults") {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidParameterCombination", "The parameter instancesSet cannot be used with the parameter maxResults")
	}
	max, err := intParam(q.form, "MaxResults", 0)
	if err != nil {
		return nil, err
	}
	if q.form.Has("MaxResults") && (max < 5 || max > 1000) {
		return nil, invalidValue("Value ( %d ) for parameter maxResults is invalid. Expecting a value between 5 and 1000.", max)
	}
	var after *instKey
	if tok := q.form.Get("NextToken"); tok != "" {
		k, ok := parseInstKey(tok)
		if !ok {
			return nil, invalidValue("Invalid value '%s' for nextToken", truncate(tok, 64))
		}
		after = &k
	}
	if err := checkInstanceIDs(ids); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	visible := c.ec2VisibleLocked()
	var unknown []string
	for _, id := range ids {
		if visible[id] == nil && !contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	type item struct {
		key  instKey
		inst *Instance
		a    EC2Attrs
	}
	var items []item
	for id, inst := range visible {
		if len(ids) > 0 && !contains(ids, id) {
			continue
		}
		a := c.ec2AttrsLocked(inst)
		ok, err := matchFilters(fs, inst.Tags, map[string][]string{
			"instance-state-name": {ec2State(inst.State).Name},
			"instance-id":         {inst.ID},
			"availability-zone":   {inst.Zone},
			"client-token":        {a.ClientToken},
			"instance-type":       {inst.InstanceType},
			"reservation-id":      {a.ReservationID},
			"subnet-id":           {a.SubnetID},
			"image-id":            {a.ImageID},
		})
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		k := instKey{inst.Created.UnixNano(), a.ReservationID, a.LaunchIndex, inst.ID}
		if after != nil && !after.less(k) {
			continue
		}
		items = append(items, item{k, inst, a})
	}
	sort.Slice(items, func(i, j int) bool { return items[i].key.less(items[j].key) })
	resp := &describeInstancesResponse{RequestID: q.requestID, Reservations: []xmlReservation{}}
	if max > 0 && len(items) > max {
		items = items[:max]
		resp.NextToken = items[max-1].key.token()
	}
	for _, it := range items {
		n := len(resp.Reservations)
		if n == 0 || resp.Reservations[n-1].ReservationID != it.a.ReservationID {
			resp.Reservations = append(resp.Reservations, xmlReservation{ReservationID: it.a.ReservationID, OwnerID: ec2OwnerID})
			n++
		}
		r := &resp.Reservations[n-1]
		r.Instances = append(r.Instances, c.ec2InstanceLocked(it.inst, q.region))
	}
	return resp, nil
}

// ---- TerminateInstances

func (c *Cloud) ec2TerminateInstances(q *ec2Query) (any, error) {
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
	c.mu.Lock()
	c.pruneTombsLocked(c.clock.Now())
	var unknown []string
	for _, id := range ids {
		if c.instances[id] == nil && c.tombs[id] == nil && !contains(unknown, id) {
			unknown = append(unknown, id)
		}
	}
	if len(unknown) > 0 {
		c.mu.Unlock()
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", unknown)
	}
	resp := &terminateInstancesResponse{RequestID: q.requestID}
	var stopped []string
	done := map[string]bool{}
	for _, id := range ids {
		if done[id] {
			continue
		}
		done[id] = true
		ch := xmlStateChange{InstanceID: id, CurrentState: ec2State("terminated"), PreviousState: ec2State("terminated")}
		if inst := c.instances[id]; inst != nil {
			ch.PreviousState, ch.CurrentState = ec2State(inst.State), ec2State("shutting-down")
			c.removeLocked(inst)
			stopped = append(stopped, id)
		}
		resp.Instances = append(resp.Instances, ch)
	}
	c.mu.Unlock()
	c.afterStop(stopped)
	return resp, nil
}

// ---- DescribeInstanceAttribute

func (c *Cloud) ec2DescribeInstanceAttribute(q *ec2Query) (any, error) {
	id, attr := q.form.Get("InstanceId"), q.form.Get("Attribute")
	if id == "" {
		return nil, missingParam("InstanceId")
	}
	if attr == "" {
		return nil, missingParam("Attribute")
	}
	if attr != "userData" {
		return nil, invalidValue("Value (%s) for parameter attribute is invalid. The sim supports userData only.", truncate(attr, 64))
	}
	if err := checkInstanceIDs([]string{id}); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	inst := c.ec2VisibleLocked()[id]
	if inst == nil {
		return nil, notFoundIDs("InvalidInstanceID.NotFound", "instance", []string{id})
	}
	resp := &describeInstanceAttributeResponse{RequestID: q.requestID, InstanceID: id}
	if p := c.params[id]; p != nil && len(p.UserData) > 0 && c.instances[id] != nil {
		resp.UserData.Value = base64.StdEncoding.EncodeToString(p.UserData)
	}
	return resp, nil
}

// ---- RunInstances

// reservation is an EC2 reservation made with a client token, kept for
// the cloud's lifetime so that the token stays idempotent.
type reservation struct {
	ID           string `json:"id"`
	ClientToken  string `json:"client-token"`
	ImageID      string `json:"image-id"`
	InstanceType string `json:"instance-type"`
	SubnetID     string `json:"subnet-id,omitempty"`
	Zone         string `json:"zone,omitempty"` // Placement.AvailabilityZone
	MinCount     int    `json:"min-count"`
	MaxCount     int    `json:"max-count"`
	// Instances are the reservation's instances as launched.
	Instances []Instance `json:"instances"`
}

// runRequest is a parsed RunInstances.
type runRequest struct {
	image        *ec2Image
	typ          InstanceType
	min, max     int
	subnetID     string
	zone         string
	clientToken  string
	userData     []byte
	tags         map[string]string
	rootDisk     uint64 // MiB
	volumes      []ec2Volume
	keepVolumes  []string
	imageID      string
	instanceType string
}

type ec2Volume struct {
	device string
	size   uint64 // MiB
	typ    string
}

// ec2RunCount is the number of instances a RunInstances asks the instance
// bucket for: MaxCount, at most the cloud's largest batch.
func (c *Cloud) ec2RunCount(q *ec2Query) int {
	n, err := strconv.Atoi(q.form.Get("MaxCount"))
	if err != nil || n < 1 {
		return 0
	}
	return min(n, c.maxBatch)
}

var ec2VolumeTypes = []string{"standard", "io1", "io2", "gp2", "gp3", "sc1", "st1"}

func (c *Cloud) parseRun(form url.Values) (*runRequest, error) {
	r := &runRequest{imageID: form.Get("ImageId"), instanceType: form.Get("InstanceType"), tags: map[string]string{}}
	if r.imageID == "" {
		return nil, missingParam("ImageId")
	}
	if r.instanceType == "" {
		return nil, missingParam("InstanceType")
	}
	for _, p := range []string{"MinCount", "MaxCount"} {
		if form.Get(p) == "" {
			return nil, missingParam(p)
		}
	}
	var err error
	if r.min, err = intParam(form, "MinCount", 0); err != nil {
		return nil, err
	}
	if r.max, err = intParam(form, "MaxCount", 0); err != nil {
		return nil, err
	}
	if r.min < 1 || r.max < r.min {
		return nil, invalidValue("Invalid MinCount %d and MaxCount %d: want 1 <= MinCount <= MaxCount", r.min, r.max)
	}
	if r.min > c.maxBatch {
		return nil, invalidValue("MinCount %d exceeds the %d instances one call may start", r.min, c.maxBatch)
	}
	if !validID("ami-", r.imageID) {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", truncate(r.imageID, 64))
	}
	if r.image = findImage(r.imageID); r.image == nil {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", r.imageID)
	}
	if _, ok := findType(r.instanceType, ""); !ok {
		return nil, invalidValue("Invalid value '%s' for InstanceType.", truncate(r.instanceType, 64))
	}
	it, ok := findType(r.instanceType, r.image.arch)
	if !ok {
		return nil, newEC2Error(http.StatusBadRequest, "InvalidParameterCombination", "The architecture '%s' of the specified AMI is not supported by instance type '%s'.", ec2Arch(r.image.arch), r.instanceType)
	}
	r.typ = it
	r.subnetID = form.Get("SubnetId")
	r.zone = form.Get("Placement.AvailabilityZone")
	r.clientToken = form.Get("ClientToken")
	if len(r.clientToken) > 64 {
		return nil, invalidValue("The client token must be at most 64 characters")
	}
	for i := 0; i < len(r.clientToken); i++ {
		if r.clientToken[i] < 0x20 || r.clientToken[i] > 0x7e {
			return nil, invalidValue("The client token must be printable ASCII")
		}
	}
	if ud := form.Get("UserData"); ud != "" {
		b, err := base64.StdEncoding.DecodeString(ud)
		if err != nil {
			return nil, invalidValue("Invalid BASE64 encoding of user data.")
		}
		if len(b) > ec2MaxUserData {
			return nil, invalidValue("User data is limited to %d bytes", ec2MaxUserData)
		}
		r.userData = b
	}
	if err := r.parseTags(form); err != nil {
		return nil, err
	}
	if err := r.parseBlockDevices(form); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *runRequest) parseTags(form url.Values) error {
	specs, err := indexes(form, "TagSpecification")
	if err != nil {
		return err
	}
	for _, n := range specs {
		p := "TagSpecification." + strconv.Itoa(n)
		rt := form.Get(p + ".ResourceType")
		switch rt {
		case "instance", "volume":
		case "":
			return missingParam(p + ".ResourceType")
		default:
			return invalidValue("'%s' is not a valid taggable resource type for this operation.", truncate(rt, 64))
		}
		tns, err := indexes(form, p+".Tag")
		if err != nil {
			return err
		}
		seen := map[string]bool{}
		for _, m := range tns {
			tp := p + ".Tag." + strconv.Itoa(m)
			k, v := form.Get(tp+".Key"), form.Get(tp+".Value")
			switch {
			case k == "":
				return missingParam(tp + ".Key")
			case len(k) > 128 || len(v) > 256:
				return invalidValue("Tag %s: keys are at most 128 and values at most 256 characters", truncate(k, 64))
			case strings.HasPrefix(strings.ToLower(k), "aws:"):
				return invalidValue("Tag keys starting with 'aws:' are reserved for internal use")
			case seen[k]:
				return invalidValue("Duplicate tag key '%s' in %s", truncate(k, 64), p)
			}
			seen[k] = true
			if rt == "instance" {
				r.tags[k] = v // volume tags are accepted; sim volumes keep none
			}
		}
		if len(seen) > ec2MaxTags {
			return invalidValue("At most %d tags per resource", ec2MaxTags)
		}
	}
	return nil
}

func (r *runRequest) parseBlockDevices(form url.Values) error {
	ns, err := indexes(form, "BlockDeviceMapping")
	if err != nil {
		return err
	}
	bad := func(format string, args ...any) error {
		return newEC2Error(http.StatusBadRequest, "InvalidBlockDeviceMapping", format, args...)
	}
	r.rootDisk = DefaultRootDisk
	seen := map[string]bool{}
	for _, n := range ns {
		p := "BlockDeviceMapping." + strconv.Itoa(n)
		dev := form.Get(p + ".DeviceName")
		if dev == "" {
			return missingParam(p + ".DeviceName")
		}
		if len(dev) > 32 || strings.Trim(dev, "/abcdefghijklmnopqrstuvwxyz0123456789") != "" {
			return bad("Invalid device name %s", truncate(dev, 64))
		}
		if seen[dev] {
			return bad("The device %s is mapped twice", dev)
		}
		seen[dev] = true
		if form.Has(p+".NoDevice") || form.Get(p+".VirtualName") != "" {
			continue
		}
		size, err := intParam(form, p+".Ebs.VolumeSize", 0)
		if err != nil {
			return err
		}
		typ := form.Get(p + ".Ebs.VolumeType")
		if typ != "" && !contains(ec2VolumeTypes, typ) {
			return invalidValue("Value (%s) for parameter volumeType is invalid.", truncate(typ, 32))
		}
		del, err := boolParam(form, p+".Ebs.DeleteOnTermination", true)
		if err != nil {
			return err
		}
		if !del {
			r.keepVolumes = append(r.keepVolumes, dev)
		}
		if form.Has(p+".Ebs.VolumeSize") && (size < 1 || size > ec2MaxVolumeSize) {
			return bad("Volume size %d GiB for %s is out of range (1 to %d)", size, dev, ec2MaxVolumeSize)
		}
		if dev == ec2RootDevice {
			if size == 0 {
				continue
			}
			if size < ec2MinRootDisk {
				return bad("Volume of size %dGB is smaller than snapshot, expect size >= %dGB", size, ec2MinRootDisk)
			}
			r.rootDisk = uint64(size) << 10
			continue
		}
		if size == 0 {
			return bad("The volume size of %s must be given", dev)
		}
		if len(r.volumes) == ec2MaxVolumes {
			return bad("At most %d volumes besides the root one", ec2MaxVolumes)
		}
		r.volumes = append(r.volumes, ec2Volume{device: dev, size: uint64(size) << 10, typ: typ})
	}
	return nil
}

// same reports whether r repeats the reservation's request.
func (r *runRequest) same(res *reservation) bool {
	return r.imageID == res.ImageID && r.instanceType == res.InstanceType && r.min == res.MinCount &&
		r.max == res.MaxCount && r.subnetID == res.SubnetID && r.zone == res.Zone
}

func (c *Cloud) ec2RunInstances(q *ec2Query) (any, error) {
	r, err := c.parseRun(q.form)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	if r.clientToken != "" {
		if res := c.reservations[r.clientToken]; res != nil {
			defer c.mu.Unlock()
			if !r.same(res) {
				return nil, newEC2Error(http.StatusBadRequest, "IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).")
			}
			return c.replayLocked(res, q), nil
		}
	}
	z, s, err := c.runPlacementLocked(r)
	if err != nil {
		c.mu.Unlock()
		return nil, err
	}
	n := min(r.max, c.maxBatch)
	rid := c.newID("r-")
	created := c.clock.Now()
	var launched []*Instance
	var firstErr error
	failed := 0
	for i := 0; i < n; i++ {
		inst, err := c.launch(r.spec(z, s, rid, len(launched), created, c.newID("vol-")))
		if err != nil {
			failed++
			if firstErr == nil {
				firstErr = err
			}
			if len(launched)+n-i-1 < r.min {
				break
			}
			continue
		}
		launched = append(launched, inst)
	}
	if len(launched) < r.min {
		for _, inst := range launched {
			c.unlaunchLocked(inst)
		}
		c.mu.Unlock()
		c.persist()
		return nil, firstErr
	}
	c.stats.Errors[CallStart] += int64(failed)
	resp := &runInstancesResponse{RequestID: q.requestID, xmlReservation: xmlReservation{ReservationID: rid, OwnerID: ec2OwnerID}}
	res := &reservation{ID: rid, ClientToken: r.clientToken, ImageID: r.imageID, InstanceType: r.instanceType,
		SubnetID: r.subnetID, Zone: r.zone, MinCount: r.min, MaxCount: r.max}
	for _, inst := range launched {
		resp.Instances = append(resp.Instances, c.ec2InstanceLocked(inst, q.region))
		res.Instances = append(res.Instances, cloneInstance(inst))
	}
	if r.clientToken != "" {
		c.reservations[r.clientToken] = res
		if c.file != "" {
			c.logRecord(record{Reservation: res})
		}
	}
	c.started(launched)
	return resp, nil
}

// runPlacementLocked returns the zone and subnet of a RunInstances: the
// subnet's, the placement zone's first subnet, or the least used
// available zone's; c.mu is held.
func (c *Cloud) runPlacementLocked(r *runRequest) (*zone, *subnet, error) {
	var s *subnet
	zoneName := r.zone
	if r.subnetID != "" {
		if s = c.subnetByID(r.subnetID); s == nil {
			return nil, nil, notFoundIDs("InvalidSubnetID.NotFound", "subnet", []string{truncate(r.subnetID, 64)})
		}
		if zoneName != "" && zoneName != s.Zone {
			return nil, nil, invalidValue("Value (%s) for parameter availabilityZone is invalid. Subnet '%s' is in the availability zone %s", truncate(zoneName, 64), s.ID, s.Zone)
		}
		zoneName = s.Zone
	} else if zoneName != "" && c.zone(zoneName) == nil {
		return nil, nil, invalidValue("Invalid availability zone: [%s]", truncate(zoneName, 64))
	}
	z, err := c.chooseZone(muster.StartParams{Zone: zoneName}, r.typ.Cores)
	if err != nil {
		return nil, nil, err
	}
	if s == nil {
		s = c.firstSubnet(z.Name)
	}
	return z, s, nil
}

// spec is the launch of the instance with launch index idx.
func (r *runRequest) spec(z *zone, s *subnet, rid string, idx int, created time.Time, rootVolumeID string) launchSpec {
	tags := copyTags(r.tags)
	var vols []muster.Volume
	var atts []muster.VolumeAttachment
	for _, v := range r.volumes {
		name := strings.TrimPrefix(v.device, "/dev/")
		vols = append(vols, muster.Volume{Name: name, Size: v.size, Pool: v.typ})
		atts = append(atts, muster.VolumeAttachment{Volume: name, MachineID: tags[muster.TagMachine], DeviceName: v.device})
	}
	p := muster.StartParams{
		ControllerUUID: tags[muster.TagController], ModelUUID: tags[muster.TagModel], MachineID: tags[muster.TagMachine],
		Zone: z.Name, Base: r.image.base, Arch: r.image.arch, LaunchToken: tags[muster.TagLaunchToken],
		Tags: copyTags(tags), Volumes: vols, Attachments: atts, UserData: r.userData,
	}
	return launchSpec{
		zone: z, typ: r.typ, base: r.image.base, subnet: s, rootDisk: r.rootDisk, tags: tags,
		volumes: vols, attachments: atts, params: p, created: created,
		ec2: &EC2Attrs{
			ImageID: r.imageID, SubnetID: s.ID, ReservationID: rid, LaunchIndex: idx, ClientToken: r.clientToken,
			RootVolumeID: rootVolumeID, KeepVolumes: append([]string(nil), r.keepVolumes...),
		},
	}
}

// replayLocked answers a RunInstances repeated with a client token: the
// reservation's instances as they are now (ended ones terminated); c.mu is
// held.
func (c *Cloud) replayLocked(res *reservation, q *ec2Query) *runInstancesResponse {
	resp := &runInstancesResponse{RequestID: q.requestID, xmlReservation: xmlReservation{ReservationID: res.ID, OwnerID: ec2OwnerID}}
	c.pruneTombsLocked(c.clock.Now())
	for i := range res.Instances {
		inst := &res.Instances[i]
		if live := c.instances[inst.ID]; live != nil {
			inst = live
		} else if t := c.tombs[inst.ID]; t != nil {
			inst = &t.Instance
		} else {
			ended := cloneInstance(inst)
			ended.State = "terminated"
			inst = &ended
		}
		resp.Instances = append(resp.Instances, c.ec2InstanceLocked(inst, q.region))
	}
	return resp
}
