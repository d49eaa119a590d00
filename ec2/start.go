package ec2

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/ec2"
	"github.com/aws/aws-sdk-go-v2/service/ec2/types"
	"github.com/musterhq/muster"
)

const (
	// minRootGiB is the smallest root disk, Ubuntu images' snapshot size.
	minRootGiB = 8
	// maxGiB bounds EBS volume sizes (64 TiB).
	maxGiB = 64 << 10
	// maxBatch is MaxBatch: how many starts one RunInstances carries. A
	// batch's user data holds the common agent config once (about 4 KB
	// with the CA, scripts and unit) and about 310 bytes a machine (its
	// 64-hex password and launch token, nonce and id), so 32 starts take
	// about 13.5 KB of EC2's 16 KiB, leaving room for longer addresses and
	// ids (TestBatchUserDataSize measures it). A batch whose user data
	// would not fit all the same is split.
	maxBatch = 32
)

// volumeDevices are the device names of a start's volumes, in order
// (AWS's recommended /dev/sd[f-p]).
var volumeDevices = func() []string {
	var out []string
	for c := 'f'; c <= 'p'; c++ {
		out = append(out, "/dev/sd"+string(c))
	}
	return out
}()

// volumeTypes maps storage pools to EBS volume types.
var volumeTypes = map[string]types.VolumeType{
	"":         types.VolumeTypeGp3,
	"ebs":      types.VolumeTypeGp3,
	"gp3":      types.VolumeTypeGp3,
	"gp2":      types.VolumeTypeGp2,
	"standard": types.VolumeTypeStandard,
}

// plan is everything one RunInstances needs for a start, worked out
// before the call.
type plan struct {
	sp       muster.StartParams
	zone     string
	subnetID string
	arch     string
	itype    instanceType
	img      image
	rootGiB  int32
	vols     []plannedVolume
	agent    *agentSetup
}

type plannedVolume struct {
	vol    muster.Volume
	gib    int32
	device string
	typ    types.VolumeType
}

// shape identifies the starts one RunInstances may carry together.
func (pl *plan) shape() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s|%s|%s|%s|%d|%s", pl.zone, pl.subnetID, pl.itype.name, pl.img.id, pl.rootGiB, pl.agent.Key())
	for _, v := range pl.vols {
		fmt.Fprintf(&b, "|%s:%d:%s:%s", v.vol.Name, v.gib, v.device, v.typ)
	}
	return b.String()
}

// MaxBatch is the largest batch StartInstances starts with one call.
func (p *Provider) MaxBatch() int { return maxBatch }

// StartInstance starts one instance with RunInstances: ClientToken is the
// launch token (a start repeated with it returns the first's instance), the
// instance and its volumes are tagged with controller, model, machine,
// launch token, sp.Tags and Name, in a subnet of sp.Zone.
func (p *Provider) StartInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	res, err := p.startInstance(ctx, sp)
	if err != nil {
		return muster.StartResult{}, fmt.Errorf("start instance for machine %s: %w", sp.MachineID, err)
	}
	return res, nil
}

func (p *Provider) startInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	pl, err := p.plan(ctx, sp)
	if err != nil {
		return muster.StartResult{}, err
	}
	return p.startOne(ctx, pl)
}

// StartInstances starts ps: those of one shape (zone, subnet, type, image,
// disks, agent binary) with one RunInstances of MinCount 1 and MaxCount
// len, each machine's identity in the user data at its launch index (see
// batchUserData). Starts EC2 did not launch get a capacity error of the
// zone.
func (p *Provider) StartInstances(ctx context.Context, ps []muster.StartParams) []muster.StartOutcome {
	outs := make([]muster.StartOutcome, len(ps))
	plans := make([]plan, len(ps))
	groups := map[string][]int{}
	var order []string
	for i, sp := range ps {
		pl, err := p.plan(ctx, sp)
		if err != nil {
			outs[i].Err = fmt.Errorf("start instance for machine %s: %w", sp.MachineID, err)
			continue
		}
		plans[i] = pl
		k := pl.shape()
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		for len(idx) > 0 {
			n := min(len(idx), maxBatch)
			p.startGroup(ctx, plans, idx[:n], outs)
			idx = idx[n:]
		}
	}
	return outs
}

// startGroup starts the plans at idx (one shape) with one RunInstances, or
// more when the user data would not fit in one.
func (p *Provider) startGroup(ctx context.Context, plans []plan, idx []int, outs []muster.StartOutcome) {
	fail := func(err error) {
		for _, i := range idx {
			outs[i].Err = fmt.Errorf("start instance for machine %s: %w", plans[i].sp.MachineID, err)
		}
	}
	if len(idx) == 1 {
		res, err := p.startOne(ctx, plans[idx[0]])
		if err != nil {
			fail(err)
			return
		}
		outs[idx[0]].Result = res
		return
	}
	ls := make([]launch, len(idx))
	var agents []*agentSetup
	for k, i := range idx {
		ls[k] = launch{Machine: plans[i].sp.MachineID, LaunchToken: plans[i].sp.LaunchToken}
		if plans[i].agent != nil {
			agents = append(agents, plans[i].agent)
		}
	}
	ud, err := batchUserData(ls, agents)
	if err != nil {
		fail(err)
		return
	}
	if len(ud) > maxUserData {
		half := len(idx) / 2
		p.startGroup(ctx, plans, idx[:half], outs)
		p.startGroup(ctx, plans, idx[half:], outs)
		return
	}
	first := plans[idx[0]]
	tokens := make([]string, len(ls))
	machines := make([]string, len(ls))
	for k, l := range ls {
		tokens[k], machines[k] = l.LaunchToken, l.Machine
	}
	token := batchToken(tokens)
	tags := map[string]string{}
	for k, v := range first.sp.Tags {
		same := true
		for _, i := range idx[1:] {
			if w, ok := plans[i].sp.Tags[k]; !ok || w != v {
				same = false
				break
			}
		}
		if same && k != muster.TagMachine && k != muster.TagLaunchToken {
			tags[k] = v
		}
	}
	tags[muster.TagController], tags[muster.TagModel], tags[TagBatch] = p.controller, p.model, token
	_, ownName := tags[TagName] // the machines' common Name tag, kept
	if !ownName {
		tags[TagName] = truncate("muster-"+short(p.model, 8)+"-machines "+strings.Join(machines, " "), 255)
	}
	out, err := p.runInstances(ctx, p.runInput(first, len(idx), token, ud, tags))
	if err != nil {
		fail(p.runError(err, first.zone))
		return
	}
	rid := aws.ToString(out.ReservationId)
	byIndex := map[int]types.Instance{}
	for _, inst := range out.Instances {
		if inst.AmiLaunchIndex != nil {
			byIndex[int(*inst.AmiLaunchIndex)] = inst
		}
	}
	launches := map[int]launch{}
	for k := range ls {
		launches[k] = ls[k]
	}
	p.mu.Lock()
	if rid != "" {
		p.batches[rid] = launches
	}
	p.mu.Unlock()
	launched := 0
	var named []namedInstance
	for k, i := range idx {
		inst, ok := byIndex[k]
		if !ok {
			continue
		}
		launched++
		t := maps.Clone(tags)
		t[muster.TagMachine], t[muster.TagLaunchToken] = ls[k].Machine, ls[k].LaunchToken
		if !ownName {
			t[TagName] = firstOf(plans[i].sp.Tags[TagName], p.machineName(ls[k].Machine))
		}
		if p.instance(inst).Tags[muster.TagMachine] != ls[k].Machine { // not tagged by an earlier call of the token
			named = append(named, namedInstance{id: aws.ToString(inst.InstanceId), launch: ls[k], name: t[TagName]})
		}
		res, err := p.started(plans[i], inst, t)
		if err != nil {
			outs[i].Err = fmt.Errorf("start instance for machine %s: %w", plans[i].sp.MachineID, err)
			continue
		}
		outs[i].Result = res
	}
	for k, i := range idx {
		if _, ok := byIndex[k]; !ok {
			outs[i].Err = fmt.Errorf("start instance for machine %s: %w", plans[i].sp.MachineID,
				muster.NewProviderError(muster.ErrCapacity, first.zone, "ec2 RunInstances in zone %s: launched %d of %d instances of type %s",
					first.zone, launched, len(idx), first.itype.name))
		}
	}
	p.log.Info("batch started", "reservation", rid, "zone", first.zone, "launched", launched, "wanted", len(idx))
	p.tagMachines(ctx, named)
}

// namedInstance is a batch instance with the machine it was launched for.
type namedInstance struct {
	id     string
	launch launch
	name   string // its Name tag; "" to leave Name as it is
}

// machineName is the Name tag of a machine's instance.
func (p *Provider) machineName(machine string) string {
	return truncate("muster-"+short(p.model, 8)+"-machine-"+machine, 255)
}

// tagMachines tags each batch instance of ns with its machine, launch
// token and Name, one CreateTags an instance (CreateTags gives all its
// resources the same tags). A failure is logged only: until the tags are
// there, Instances reads the machine from the user data and tags again.
func (p *Provider) tagMachines(ctx context.Context, ns []namedInstance) {
	for _, n := range ns {
		if n.id == "" || n.launch.Machine == "" {
			continue
		}
		tags := []types.Tag{
			{Key: aws.String(muster.TagMachine), Value: aws.String(n.launch.Machine)},
			{Key: aws.String(muster.TagLaunchToken), Value: aws.String(n.launch.LaunchToken)},
		}
		if n.name != "" {
			tags = append(tags, types.Tag{Key: aws.String(TagName), Value: aws.String(n.name)})
		}
		_, err := p.client.CreateTags(ctx, &ec2.CreateTagsInput{Resources: []string{n.id}, Tags: tags})
		if err != nil {
			p.log.Warn("batch instance not tagged with its machine; the next listing tries again",
				"instance", n.id, "machine", n.launch.Machine, "err", classify(err, "CreateTags", ""))
			if ctx.Err() != nil {
				return
			}
		}
	}
}

// startOne starts one instance.
func (p *Provider) startOne(ctx context.Context, pl plan) (muster.StartResult, error) {
	sp := pl.sp
	ud, err := singleUserData(pl.agent)
	if err != nil {
		return muster.StartResult{}, err
	}
	if len(ud) > maxUserData {
		return muster.StartResult{}, zoneIndependent("user data of machine %s is %d bytes, EC2 takes at most %d", sp.MachineID, len(ud), maxUserData)
	}
	tags := maps.Clone(sp.Tags)
	if tags == nil {
		tags = map[string]string{}
	}
	tags[muster.TagController], tags[muster.TagModel] = p.controller, p.model
	if sp.MachineID != "" {
		tags[muster.TagMachine] = sp.MachineID
	}
	if sp.LaunchToken != "" {
		tags[muster.TagLaunchToken] = sp.LaunchToken
	}
	if _, ok := tags[TagName]; !ok {
		tags[TagName] = p.machineName(sp.MachineID)
	}
	out, err := p.runInstances(ctx, p.runInput(pl, 1, clientToken(sp.LaunchToken), ud, tags))
	if err != nil {
		return muster.StartResult{}, p.runError(err, pl.zone)
	}
	if len(out.Instances) == 0 {
		return muster.StartResult{}, muster.NewProviderError(muster.ErrUnavailable, pl.zone, "ec2 RunInstances in zone %s: no instance in the reply", pl.zone)
	}
	inst := slices.MinFunc(out.Instances, func(a, b types.Instance) int {
		return int(aws.ToInt32(a.AmiLaunchIndex) - aws.ToInt32(b.AmiLaunchIndex))
	})
	res, err := p.started(pl, inst, tags)
	if err != nil {
		return muster.StartResult{}, err
	}
	p.log.Info("instance started", "machine", sp.MachineID, "instance", res.Instance.ID, "zone", res.Instance.Zone)
	return res, nil
}

// runInstances calls RunInstances. A start repeated after a crash sends
// the identical request (same launch token, so same ClientToken, password
// and nonce), but when the controller's address or agent binary changed
// in between, its user data differs and EC2 answers
// IdempotentParameterMismatch. The instances the token's first call
// launched are then the reply, once listed (by the client-token filter):
// they carry the machines' launch tokens, as adoption from a listing
// would take them.
func (p *Provider) runInstances(ctx context.Context, in *ec2.RunInstancesInput) (*ec2.RunInstancesOutput, error) {
	out, err := p.client.RunInstances(ctx, in)
	token := aws.ToString(in.ClientToken)
	if apiCode(err) != codeTokenMismatch || token == "" {
		return out, err
	}
	var found *ec2.RunInstancesOutput
	ferr := p.describeOwn(ctx, append(p.ownFilters(), types.Filter{Name: aws.String("client-token"), Values: []string{token}}),
		func(r types.Reservation) {
			if found == nil {
				found = &ec2.RunInstancesOutput{ReservationId: r.ReservationId}
			}
			for _, inst := range r.Instances {
				if aws.ToString(inst.ClientToken) == token && aws.ToString(r.ReservationId) == aws.ToString(found.ReservationId) {
					found.Instances = append(found.Instances, inst)
				}
			}
		})
	if ferr != nil || found == nil || len(found.Instances) == 0 {
		return nil, err
	}
	for _, inst := range found.Instances {
		// Only the user data may differ: not the zone, type or image.
		if aws.ToString(inst.SubnetId) != aws.ToString(in.SubnetId) || inst.InstanceType != in.InstanceType ||
			aws.ToString(inst.ImageId) != aws.ToString(in.ImageId) {
			return nil, err
		}
	}
	p.log.Warn("RunInstances repeated with other user data; the client token's instances are taken as they are",
		"client-token", token, "reservation", aws.ToString(found.ReservationId))
	return found, nil
}

// runError classifies a RunInstances error; an unknown subnet makes the
// next start list the subnets again.
func (p *Provider) runError(err error, zone string) error {
	if apiCode(err) == codeSubnetNotFound {
		p.mu.Lock()
		p.subnets = nil
		p.mu.Unlock()
	}
	return classify(err, "RunInstances", zone)
}

// runInput is the RunInstances request of n starts of pl's shape.
func (p *Provider) runInput(pl plan, n int, token string, userData []byte, tags map[string]string) *ec2.RunInstancesInput {
	var tagList []types.Tag
	for _, k := range slices.Sorted(maps.Keys(tags)) {
		tagList = append(tagList, types.Tag{Key: aws.String(k), Value: aws.String(tags[k])})
	}
	bdm := []types.BlockDeviceMapping{{
		DeviceName: aws.String(pl.img.rootDevice),
		Ebs: &types.EbsBlockDevice{VolumeSize: aws.Int32(pl.rootGiB), VolumeType: types.VolumeTypeGp3,
			DeleteOnTermination: aws.Bool(true)},
	}}
	for _, v := range pl.vols {
		bdm = append(bdm, types.BlockDeviceMapping{
			DeviceName: aws.String(v.device),
			Ebs:        &types.EbsBlockDevice{VolumeSize: aws.Int32(v.gib), VolumeType: v.typ, DeleteOnTermination: aws.Bool(true)},
		})
	}
	in := &ec2.RunInstancesInput{
		ImageId:             aws.String(pl.img.id),
		InstanceType:        types.InstanceType(pl.itype.name),
		MinCount:            aws.Int32(1),
		MaxCount:            aws.Int32(int32(n)),
		SubnetId:            aws.String(pl.subnetID),
		BlockDeviceMappings: bdm,
		TagSpecifications: []types.TagSpecification{
			{ResourceType: types.ResourceTypeInstance, Tags: tagList},
			{ResourceType: types.ResourceTypeVolume, Tags: tagList},
		},
	}
	if token != "" {
		in.ClientToken = aws.String(token)
	}
	if len(userData) > 0 {
		in.UserData = aws.String(base64.StdEncoding.EncodeToString(userData))
	}
	return in
}

// plan checks sp and works out the zone, subnet, instance type, image,
// disks and agent of its start. The catalogue lookups are cached, so that
// after the first start a start costs one call, RunInstances.
func (p *Provider) plan(ctx context.Context, sp muster.StartParams) (plan, error) {
	if err := ctx.Err(); err != nil {
		return plan{}, fmt.Errorf("ec2 RunInstances: %w", err)
	}
	if (sp.ControllerUUID != "" && sp.ControllerUUID != p.controller) || (sp.ModelUUID != "" && sp.ModelUUID != p.model) {
		return plan{}, zoneIndependent("start params are for controller %s model %s, not this provider's", sp.ControllerUUID, sp.ModelUUID)
	}
	pl := plan{sp: sp, arch: firstOf(sp.Constraints.Arch, sp.Arch, "amd64")}
	if _, ok := ec2Arch(pl.arch); !ok {
		return plan{}, zoneIndependent("arch %s: the ec2 provider starts amd64 and arm64 instances only", pl.arch)
	}
	for k := range sp.Tags {
		if k == "" || strings.HasPrefix(strings.ToLower(k), "aws:") {
			return plan{}, zoneIndependent("bad tag key %q: empty or reserved by AWS", k)
		}
	}
	var err error
	if pl.agent, err = agentFor(sp, pl.arch); err != nil {
		return plan{}, err
	}
	if pl.vols, err = planVolumes(sp); err != nil {
		return plan{}, err
	}
	if sp.Constraints.RootDisk > maxGiB*1024 {
		return plan{}, zoneIndependent("root-disk=%s is larger than EBS allows", muster.FormatSize(sp.Constraints.RootDisk))
	}
	pl.rootGiB = int32(max(minRootGiB, ceilGiB(sp.Constraints.RootDisk)))
	its, err := p.instanceTypes(ctx)
	if err != nil {
		return plan{}, err
	}
	if pl.itype, err = matchType(its, sp.Constraints, pl.arch); err != nil {
		return plan{}, err
	}
	if pl.img, err = p.imageFor(ctx, firstOf(sp.Base, muster.DefaultBase), pl.arch); err != nil {
		return plan{}, err
	}
	if pl.zone, err = p.startZone(ctx, sp); err != nil {
		return plan{}, err
	}
	if pl.subnetID, err = p.subnetFor(ctx, pl.zone, sp.SubnetsToZones); err != nil {
		return plan{}, err
	}
	return pl, nil
}

// startZone is sp.Zone, else the placement zone, else the first available
// zone.
func (p *Provider) startZone(ctx context.Context, sp muster.StartParams) (string, error) {
	if sp.Zone != "" {
		return sp.Zone, nil
	}
	if z, err := muster.ParsePlacement(sp.Placement); err != nil {
		return "", zoneIndependent("%v", err)
	} else if z != "" {
		return z, p.checkZone(ctx, z)
	}
	zones, err := p.Zones(ctx)
	if err != nil {
		return "", err
	}
	for _, z := range zones {
		if z.Available && sp.Constraints.AllowsZone(z.Name) {
			return z.Name, nil
		}
	}
	return "", muster.NewProviderError(muster.ErrCapacity, "", "ec2: no available zone allowed by constraints %q", sp.Constraints.String())
}

// subnetFor returns the subnet of a start in zone: a subnet of the first
// requested space in zone, else the zone's default subnet, else its first.
func (p *Provider) subnetFor(ctx context.Context, zone string, s2z []map[string][]string) (string, error) {
	if len(s2z) > 0 {
		if id, ok := spaceSubnet(s2z[0], zone); ok {
			return id, nil
		}
		return "", muster.NewProviderError(muster.ErrUnavailable, zone, "ec2: no subnet of the first requested space in zone %s", zone)
	}
	for _, refresh := range []bool{false, true} {
		subs, err := p.cachedSubnets(ctx, refresh)
		if err != nil {
			return "", err
		}
		if id, ok := zoneSubnet(subs, zone); ok {
			return id, nil
		}
	}
	return "", muster.NewProviderError(muster.ErrUnavailable, zone, "ec2: no available subnet in zone %s", zone)
}

// planVolumes gives each volume a device, an EBS type and a size in GiB.
func planVolumes(sp muster.StartParams) ([]plannedVolume, error) {
	if len(sp.Volumes) > len(volumeDevices) {
		return nil, zoneIndependent("%d volumes: the ec2 provider attaches at most %d", len(sp.Volumes), len(volumeDevices))
	}
	var out []plannedVolume
	for i, v := range sp.Volumes {
		if err := muster.CheckName(v.Name); err != nil {
			return nil, zoneIndependent("bad volume name %q: %v", v.Name, err)
		}
		if slices.ContainsFunc(out, func(o plannedVolume) bool { return o.vol.Name == v.Name }) {
			return nil, zoneIndependent("volume %q given more than once", v.Name)
		}
		if v.Size > maxGiB*1024 {
			return nil, zoneIndependent("volume %s of %s is larger than EBS allows", v.Name, muster.FormatSize(v.Size))
		}
		typ, ok := volumeTypes[v.Pool]
		if !ok {
			return nil, zoneIndependent("volume %s: unknown storage pool %q (known: ebs, gp3, gp2, standard)", v.Name, v.Pool)
		}
		out = append(out, plannedVolume{vol: v, gib: int32(max(1, ceilGiB(v.Size))), device: volumeDevices[i], typ: typ})
	}
	for _, a := range sp.Attachments {
		if !slices.ContainsFunc(out, func(o plannedVolume) bool { return o.vol.Name == a.Volume }) {
			return nil, zoneIndependent("attachment of unknown volume %q", a.Volume)
		}
		if a.MachineID != "" && a.MachineID != sp.MachineID {
			return nil, zoneIndependent("volume attachment %s is for machine %s, not %s", a.Volume, a.MachineID, sp.MachineID)
		}
	}
	return out, nil
}

// started turns a launched instance into a start result, and remembers it
// as this provider's. An instance that already ended (a client token
// repeated after its instance was terminated) is an error: the start needs
// a new launch token.
func (p *Provider) started(pl plan, inst types.Instance, tags map[string]string) (muster.StartResult, error) {
	in := p.instance(inst)
	if in.ID == "" {
		return muster.StartResult{}, muster.NewProviderError(muster.ErrUnavailable, pl.zone, "ec2 RunInstances in zone %s: an instance without id in the reply", pl.zone)
	}
	if in.State == "shutting-down" || in.State == "terminated" {
		return muster.StartResult{}, muster.NewProviderError(muster.ErrUnavailable, pl.zone,
			"ec2 RunInstances: the instance %s of launch token %s is %s; a new start needs a new launch token", in.ID, pl.sp.LaunchToken, in.State)
	}
	p.mu.Lock()
	p.own[in.ID] = p.now()
	p.mu.Unlock()
	for k, v := range tags {
		if _, ok := in.Tags[k]; !ok {
			in.Tags[k] = v
		}
	}
	in.MachineID, in.LaunchToken = tags[muster.TagMachine], tags[muster.TagLaunchToken]
	in.Zone = firstOf(in.Zone, pl.zone)
	itype := firstOf(string(inst.InstanceType), pl.itype.name)
	res := muster.StartResult{
		Instance:    in,
		DisplayName: in.ID + " (" + itype + ")",
		Hardware: muster.Hardware{
			Arch: pl.arch, Cores: pl.itype.cores, Mem: pl.itype.mem,
			RootDisk: uint64(pl.rootGiB) * 1024, AvailabilityZone: in.Zone,
		},
		Addresses: privateAddresses(inst),
	}
	devices := map[string]string{} // device → volume id
	for _, m := range inst.BlockDeviceMappings {
		if m.Ebs != nil {
			devices[aws.ToString(m.DeviceName)] = aws.ToString(m.Ebs.VolumeId)
		}
	}
	for _, v := range pl.vols {
		vol := v.vol
		vol.VolumeID = devices[v.device]
		vol.Size = uint64(v.gib) * 1024
		if vol.Pool == "" {
			vol.Pool = "ebs"
		}
		res.Volumes = append(res.Volumes, vol)
	}
	for _, a := range pl.sp.Attachments {
		a.InstanceID, a.MachineID = in.ID, firstOf(a.MachineID, pl.sp.MachineID)
		for _, v := range pl.vols {
			if v.vol.Name == a.Volume {
				a.DeviceName = v.device
			}
		}
		res.Attachments = append(res.Attachments, a)
	}
	return res, nil
}

// privateAddresses returns an instance's private IPv4 addresses, primary
// first.
func privateAddresses(inst types.Instance) []string {
	var out []string
	add := func(a *string) {
		if s := aws.ToString(a); s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(inst.PrivateIpAddress)
	for _, ni := range inst.NetworkInterfaces {
		add(ni.PrivateIpAddress)
		for _, a := range ni.PrivateIpAddresses {
			add(a.PrivateIpAddress)
		}
	}
	return out
}

// clientToken is the RunInstances ClientToken of a launch token: the token
// itself when EC2 takes it (at most 64 ASCII characters), else a hash of it.
func clientToken(launchToken string) string {
	if launchToken == "" {
		return ""
	}
	ok := len(launchToken) <= 64
	for i := 0; ok && i < len(launchToken); i++ {
		ok = launchToken[i] > ' ' && launchToken[i] < 0x7f
	}
	if ok {
		return launchToken
	}
	sum := sha256.Sum256([]byte(launchToken))
	return "t-" + hex.EncodeToString(sum[:])[:62]
}

// batchToken is the ClientToken of a batch: "b-" and 62 hex digits of the
// SHA-256 of its launch tokens joined by ",".
func batchToken(tokens []string) string {
	sum := sha256.Sum256([]byte(strings.Join(tokens, ",")))
	return "b-" + hex.EncodeToString(sum[:])[:62]
}

// ceilGiB converts MiB to GiB, rounding up.
func ceilGiB(mib uint64) uint64 { return (mib + 1023) / 1024 }

// firstOf returns the first non-empty string.
func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// short returns the first n bytes of s.
func short(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// truncate bounds s to n runes.
func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// EnrolsBatches implements muster.BatchEnroller: a batch's instances share
// their user data, so they enrol with EC2's signed instance identity
// documents instead of carrying each machine's password (SPEC §4) — when
// the controller can verify those documents (Config.IdentityCert).
func (p *Provider) EnrolsBatches() bool { return len(p.idCert) > 0 }
