package ec2api

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/sim"
)

// ---- RunInstances

// runRequest is a parsed RunInstances.
type runRequest struct {
	image        *image
	typ          sim.InstanceType
	min, max     int
	subnetID     string
	zone         string
	clientToken  string
	userData     []byte
	tags         map[string]string
	rootDisk     uint64 // MiB
	volumes      []volume
	keepVolumes  []string
	imageID      string
	instanceType string
}

type volume struct {
	device string
	size   uint64 // MiB
	typ    string
}

// runCount is the number of instances a RunInstances asks the instance
// bucket for: MaxCount, at most the cloud's largest batch.
func (a *API) runCount(q *query) int {
	n, err := strconv.Atoi(q.form.Get("MaxCount"))
	if err != nil || n < 1 {
		return 0
	}
	return min(n, a.c.MaxBatch())
}

var volumeTypes = []string{"standard", "io1", "io2", "gp2", "gp3", "sc1", "st1"}

func (a *API) parseRun(form url.Values) (*runRequest, error) {
	r := &runRequest{imageID: form.Get("ImageId"), instanceType: form.Get("InstanceType"), tags: map[string]string{}}
	if err := checkRunParams(form); err != nil {
		return nil, err
	}
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
	if r.min > a.c.MaxBatch() {
		return nil, invalidValue("MinCount %d exceeds the %d instances one call may start", r.min, a.c.MaxBatch())
	}
	if !validID("ami-", r.imageID) {
		return nil, newError(http.StatusBadRequest, "InvalidAMIID.Malformed", "Invalid id: \"%s\" (expecting \"ami-...\")", truncate(r.imageID, 64))
	}
	if r.image = findImage(r.imageID); r.image == nil {
		return nil, newError(http.StatusBadRequest, "InvalidAMIID.NotFound", "The image id '[%s]' does not exist", r.imageID)
	}
	if _, ok := findType(r.instanceType, ""); !ok {
		return nil, invalidValue("Invalid value '%s' for InstanceType.", truncate(r.instanceType, 64))
	}
	it, ok := findType(r.instanceType, r.image.arch)
	if !ok {
		return nil, newError(http.StatusBadRequest, "InvalidParameterCombination", "The architecture '%s' of the specified AMI is not supported by instance type '%s'.", ec2Arch(r.image.arch), r.instanceType)
	}
	r.typ = it
	r.subnetID = form.Get("SubnetId")
	if nic := form.Get("NetworkInterface.1.SubnetId"); nic != "" {
		if r.subnetID != "" {
			return nil, newError(http.StatusBadRequest, "InvalidParameterCombination", "Network interfaces and an instance-level subnet ID may not be specified on the same request")
		}
		r.subnetID = nic
	}
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
		if len(b) > maxUserData {
			return nil, invalidValue("User data is limited to %d bytes", maxUserData)
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

// runParams are the RunInstances parameters the sim takes (a trailing
// "." takes every parameter under it), each with the values it accepts
// (nil: any); anything else is refused, so that a client never gets an
// instance other than it asked for.
var runParams = map[string][]string{
	"Action": nil, "Version": nil, "DryRun": nil, "ImageId": nil, "InstanceType": nil, "MinCount": nil, "MaxCount": nil,
	"SubnetId": nil, "Placement.AvailabilityZone": nil, "ClientToken": nil, "UserData": nil,
	"TagSpecification.": nil, "BlockDeviceMapping.": nil,
	"Placement.Tenancy":                           {"default"},
	"Monitoring.Enabled":                          {"false"},
	"DisableApiTermination":                       {"false"},
	"DisableApiStop":                              {"false"},
	"EbsOptimized":                                {"false"},
	"HibernationOptions.Configured":               {"false"},
	"InstanceInitiatedShutdownBehavior":           {"stop"},
	"NetworkInterface.1.DeviceIndex":              {"0"},
	"NetworkInterface.1.SubnetId":                 nil,
	"NetworkInterface.1.DeleteOnTermination":      {"true"},
	"NetworkInterface.1.AssociatePublicIpAddress": {"false"},
}

// checkRunParams refuses the parameters the sim does not simulate: key
// pairs and security groups (the sim has none), IAM instance profiles,
// market options, private addresses, other network interfaces, ...
func checkRunParams(form url.Values) error {
	for _, k := range slices.Sorted(maps.Keys(form)) {
		ok, vals := false, []string(nil)
		for p, v := range runParams {
			if k == p || strings.HasSuffix(p, ".") && strings.HasPrefix(k, p) {
				ok, vals = true, v
				break
			}
		}
		switch {
		case k == "KeyName":
			return newError(http.StatusBadRequest, "InvalidKeyPair.NotFound", "The key pair '%s' does not exist", truncate(form.Get(k), 64))
		case strings.HasPrefix(k, "SecurityGroup"):
			return newError(http.StatusBadRequest, "InvalidGroup.NotFound", "The security group '%s' does not exist (the muster sim has no security groups)", truncate(form.Get(k), 64))
		case !ok:
			return unsupported(k)
		case vals != nil && !slices.Contains(vals, form.Get(k)):
			return newError(http.StatusBadRequest, "Unsupported", "The value '%s' of %s is not supported by the muster sim (it takes %s)", truncate(form.Get(k), 64), k, strings.Join(vals, ", "))
		}
	}
	return nil
}

// fingerprint sums up a request's parameters but its client token and
// user data, so that a repeat with other parameters is told from a retry.
// User data is left out because muster's ec2 provider writes new agent
// credentials into it when it repeats a start after a crash (see the
// report of issue 16); EC2 itself compares it too.
func fingerprint(form url.Values) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(form)) {
		if k == "ClientToken" || k == "Version" || k == "UserData" || k == "DryRun" {
			continue
		}
		for _, v := range form[k] {
			h.Write([]byte(strconv.Quote(k) + "=" + strconv.Quote(v) + "\n"))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
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
		if len(seen) > maxTags {
			return invalidValue("At most %d tags per resource", maxTags)
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
		return newError(http.StatusBadRequest, "InvalidBlockDeviceMapping", format, args...)
	}
	r.rootDisk = sim.DefaultRootDisk
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
		if typ != "" && !slices.Contains(volumeTypes, typ) {
			return invalidValue("Value (%s) for parameter volumeType is invalid.", truncate(typ, 32))
		}
		del, err := boolParam(form, p+".Ebs.DeleteOnTermination", true)
		if err != nil {
			return err
		}
		if !del {
			r.keepVolumes = append(r.keepVolumes, dev)
		}
		if form.Has(p+".Ebs.VolumeSize") && (size < 1 || size > maxVolumeSize) {
			return bad("Volume size %d GiB for %s is out of range (1 to %d)", size, dev, maxVolumeSize)
		}
		if dev == rootDevice {
			if size == 0 {
				continue
			}
			if size < minRootDisk {
				return bad("Volume of size %dGB is smaller than snapshot, expect size >= %dGB", size, minRootDisk)
			}
			r.rootDisk = uint64(size) << 10
			continue
		}
		if size == 0 {
			return bad("The volume size of %s must be given", dev)
		}
		if len(r.volumes) == maxVolumes {
			return bad("At most %d volumes besides the root one", maxVolumes)
		}
		r.volumes = append(r.volumes, volume{device: dev, size: uint64(size) << 10, typ: typ})
	}
	return nil
}

func (a *API) runInstances(q *query) (any, error) {
	r, err := a.parseRun(q.form)
	if err != nil {
		return nil, err
	}
	subnets := a.c.Subnets()
	if r.subnetID != "" {
		i := slices.IndexFunc(subnets, func(s sim.SubnetState) bool { return s.ID == r.subnetID })
		if i < 0 {
			return nil, notFoundIDs("InvalidSubnetID.NotFound", "subnet", []string{truncate(r.subnetID, 64)})
		}
		if s := subnets[i]; r.zone != "" && r.zone != s.Zone {
			return nil, invalidValue("Value (%s) for parameter availabilityZone is invalid. Subnet '%s' is in the availability zone %s", truncate(r.zone, 64), s.ID, s.Zone)
		}
	} else if r.zone != "" && !slices.ContainsFunc(a.c.Zones(), func(z sim.ZoneState) bool { return z.Name == r.zone }) {
		return nil, invalidValue("Invalid availability zone: [%s]", truncate(r.zone, 64))
	}
	lr := sim.LaunchRequest{
		ClientToken: r.clientToken, Fingerprint: fingerprint(q.form), Zone: r.zone, SubnetID: r.subnetID,
		Type: r.typ, Base: r.image.base, Min: r.min, Max: r.max, RootDisk: r.rootDisk, Tags: r.tags, UserData: r.userData,
		Attrs: sim.EC2Attrs{ImageID: r.imageID, KeepVolumes: r.keepVolumes},
	}
	for _, v := range r.volumes {
		name := strings.TrimPrefix(v.device, "/dev/")
		lr.Volumes = append(lr.Volumes, muster.Volume{Name: name, Size: v.size, Pool: v.typ})
		lr.Attachments = append(lr.Attachments, muster.VolumeAttachment{Volume: name, DeviceName: v.device})
	}
	res, err := a.c.Launch(lr)
	if err == sim.ErrTokenMismatch {
		return nil, newError(http.StatusBadRequest, "IdempotentParameterMismatch", "Arguments on this idempotent request are inconsistent with arguments used in previous request(s).")
	}
	if err != nil {
		return nil, err
	}
	resp := &runInstancesResponse{RequestID: q.requestID, xmlReservation: xmlReservation{ReservationID: res.ID, OwnerID: ownerID}}
	for i := range res.Instances {
		inst := instance{&res.Instances[i], attrs(&res.Instances[i], subnets)}
		resp.Instances = append(resp.Instances, inst.xml(subnets, q.region))
	}
	return resp, nil
}
