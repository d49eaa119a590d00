package lxd

import (
	"context"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/musterhq/muster"
)

// plan is a checked start.
type plan struct {
	name     string
	zone     string
	userData string
	config   map[string]string
	devices  map[string]map[string]string
	volumes  []muster.Volume // with VolumeID set to the LXD volume name
}

var (
	tagKeyRE  = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)
	volNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,15}$`)
)

// knownOS are the bases whose OS the image serves: the image is Debian
// with cloud-init, which boots the same user data and agent as Ubuntu.
var knownOS = []string{"ubuntu", "debian"}

// StartInstance starts one instance: it makes the zone's network when
// missing and the start's volumes, creates the instance from the image
// with the start's tags and cloud-init user data, and starts it. A start
// whose instance name (from machine and launch token) is taken by this
// model's instance of the same token adopts it (C1). Addresses are those
// the instance has when it is started; its agent reports them later.
func (p *Provider) StartInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	if err := ctx.Err(); err != nil {
		return muster.StartResult{}, fmt.Errorf("start instance: %w", err)
	}
	pl, err := p.plan(sp)
	if err != nil {
		return muster.StartResult{}, err
	}
	unlock, err := p.lockToken(ctx, sp.LaunchToken)
	if err != nil {
		return muster.StartResult{}, fmt.Errorf("start instance for machine %s: %w", sp.MachineID, err)
	}
	defer unlock()

	in, err := p.c.Instance(ctx, pl.name)
	switch {
	case err == nil:
		return p.adopt(ctx, sp, pl, in)
	case !IsNotFound(err):
		return muster.StartResult{}, classify(err, pl.zone, "look up instance "+pl.name)
	}
	if _, err := p.c.ImageAlias(ctx, p.cfg.Image); err != nil {
		if IsNotFound(err) {
			return muster.StartResult{}, zoneIndependent("image %q not found (build it with `muster lxd build-image`, or set image=)", p.cfg.Image)
		}
		return muster.StartResult{}, classify(err, pl.zone, "look up image "+p.cfg.Image)
	}
	netName, err := p.zoneNetwork(ctx, pl.zone)
	if err != nil {
		return muster.StartResult{}, err
	}
	pl.devices["eth0"] = map[string]string{"type": "nic", "name": "eth0", "network": netName}
	if err := p.createVolumes(ctx, pl); err != nil {
		p.undo(ctx, pl.name, false)
		return muster.StartResult{}, err
	}
	err = p.c.CreateInstance(ctx, InstancesPost{
		Name:     pl.name,
		Type:     "container",
		Source:   InstanceSource{Type: "image", Alias: p.cfg.Image},
		Config:   pl.config,
		Devices:  pl.devices,
		Profiles: []string{"default"},
	})
	if IsConflict(err) {
		// Made meanwhile by another process with the same token.
		in, gerr := p.c.Instance(ctx, pl.name)
		if gerr != nil {
			return muster.StartResult{}, classify(gerr, pl.zone, "look up instance "+pl.name)
		}
		return p.adopt(ctx, sp, pl, in)
	}
	if err != nil {
		p.undo(ctx, pl.name, true)
		return muster.StartResult{}, classify(err, pl.zone, "create instance "+pl.name)
	}
	if err := p.c.SetState(ctx, pl.name, "start", false); err != nil {
		p.undo(ctx, pl.name, true)
		return muster.StartResult{}, classify(err, pl.zone, "start instance "+pl.name)
	}
	p.log.Info("instance started", "machine", sp.MachineID, "instance", pl.name, "zone", pl.zone)
	in, err = p.c.Instance(ctx, pl.name)
	if err != nil {
		return muster.StartResult{}, classify(err, pl.zone, "look up instance "+pl.name)
	}
	return p.result(ctx, in, sp)
}

// undo removes what a failed start made, even when ctx is cancelled.
func (p *Provider) undo(ctx context.Context, name string, instance bool) {
	bctx, cancel := background(ctx)
	defer cancel()
	if instance {
		if err := p.c.DeleteInstance(bctx, name); err != nil && !IsNotFound(err) {
			p.log.Warn("instance of failed start not deleted", "instance", name, "err", err)
		}
	}
	if err := p.deleteVolumes(bctx, name); err != nil {
		p.log.Warn("volumes of failed start not deleted", "instance", name, "err", err)
	}
}

// adopt returns the instance a start with the same launch token made,
// started if it is not running.
func (p *Provider) adopt(ctx context.Context, sp muster.StartParams, pl plan, in Instance) (muster.StartResult, error) {
	if !p.isOwn(in.Config) || in.Config[keyPrefix+muster.TagLaunchToken] != sp.LaunchToken {
		return muster.StartResult{}, zoneIndependent("instance name %s is taken by an instance that is not this launch's", pl.name)
	}
	if strings.EqualFold(in.Status, "Stopped") {
		if err := p.c.SetState(ctx, in.Name, "start", false); err != nil {
			return muster.StartResult{}, classify(err, pl.zone, "start instance "+in.Name)
		}
	}
	p.log.Info("instance adopted", "machine", sp.MachineID, "instance", in.Name)
	return p.result(ctx, in, sp)
}

// plan checks a start and works out its instance.
func (p *Provider) plan(sp muster.StartParams) (plan, error) {
	if sp.ControllerUUID != p.cfg.ControllerUUID || sp.ModelUUID != p.cfg.ModelUUID {
		return plan{}, zoneIndependent("start params are for controller %s model %s, not this provider's", sp.ControllerUUID, sp.ModelUUID)
	}
	if sp.MachineID == "" || sp.LaunchToken == "" {
		return plan{}, zoneIndependent("start params lack a machine id or launch token")
	}
	pl := plan{name: InstanceName(sp.ModelUUID, sp.MachineID, sp.LaunchToken), zone: sp.Zone}
	if pl.zone == "" {
		pl.zone = p.cfg.Zones[0]
	}
	if !p.hasZone(pl.zone) {
		return plan{}, zoneIndependent("zone %q is not one of the configured zones %s", pl.zone, strings.Join(p.cfg.Zones, ","))
	}
	osName, _, err := muster.ParseBase(sp.Base)
	if err != nil {
		return plan{}, zoneIndependent("%v", err)
	}
	if !slices.Contains(knownOS, osName) {
		return plan{}, zoneIndependent("no image for base %s: image %s boots ubuntu and debian bases", sp.Base, p.cfg.Image)
	}
	arch := sp.Arch
	if arch == "" {
		arch = sp.Constraints.Arch
	}
	if arch == "" {
		arch = p.arch
	}
	if arch != p.arch {
		return plan{}, zoneIndependent("arch %s: this LXD host runs %s containers only", arch, p.arch)
	}
	c := sp.Constraints
	if c.InstanceType != "" {
		return plan{}, zoneIndependent("instance-type=%s: the lxd provider has no instance types", c.InstanceType)
	}
	if c.Cores > p.cores {
		return plan{}, zoneIndependent("cores=%d: the LXD host has %d CPUs", c.Cores, p.cores)
	}
	if c.Mem > p.memMiB {
		return plan{}, zoneIndependent("mem=%s: the LXD host has %s", muster.FormatSize(c.Mem), muster.FormatSize(p.memMiB))
	}
	if pl.userData, err = userData(sp, arch); err != nil {
		return plan{}, err
	}
	pl.config = map[string]string{
		"cloud-init.user-data": pl.userData,
		KeyZone:                pl.zone,
	}
	for k, v := range sp.Tags {
		if !tagKeyRE.MatchString(k) || k == "muster-zone" {
			return plan{}, zoneIndependent("bad tag key %q", k)
		}
		pl.config[keyPrefix+k] = v
	}
	for k, v := range map[string]string{
		muster.TagController: sp.ControllerUUID, muster.TagModel: sp.ModelUUID,
		muster.TagMachine: sp.MachineID, muster.TagLaunchToken: sp.LaunchToken,
	} {
		pl.config[keyPrefix+k] = v
	}
	if c.Cores > 0 {
		pl.config["limits.cpu"] = strconv.FormatUint(c.Cores, 10)
	}
	if c.Mem > 0 {
		pl.config["limits.memory"] = bytesOf(c.Mem)
	}
	root := map[string]string{"type": "disk", "path": "/", "pool": p.cfg.StoragePool}
	if c.RootDisk > 0 {
		root["size"] = bytesOf(c.RootDisk)
	}
	pl.devices = map[string]map[string]string{"root": root}
	if pl.volumes, err = p.planVolumes(sp, pl.name); err != nil {
		return plan{}, err
	}
	for _, v := range pl.volumes {
		pl.devices["vol-"+v.Name] = map[string]string{
			"type": "disk", "pool": p.cfg.StoragePool, "source": v.VolumeID, "path": path.Join(StorageDir, v.Name),
		}
	}
	return pl, nil
}

// planVolumes checks the start's volumes and names their LXD volumes
// "<instance>-<name>".
func (p *Provider) planVolumes(sp muster.StartParams, name string) ([]muster.Volume, error) {
	var out []muster.Volume
	seen := map[string]bool{}
	for _, v := range sp.Volumes {
		if !volNameRE.MatchString(v.Name) {
			return nil, zoneIndependent("bad volume name %q: want lower-case letters, digits and '-', at most 16", v.Name)
		}
		if seen[v.Name] {
			return nil, zoneIndependent("volume %q given more than once", v.Name)
		}
		seen[v.Name] = true
		if v.Pool != "" && v.Pool != p.cfg.StoragePool {
			return nil, zoneIndependent("volume %s: storage pool %q is not the model's pool %q", v.Name, v.Pool, p.cfg.StoragePool)
		}
		v.VolumeID = name + "-" + v.Name
		v.Pool = p.cfg.StoragePool
		out = append(out, v)
	}
	for _, a := range sp.Attachments {
		if !seen[a.Volume] {
			return nil, zoneIndependent("attachment of unknown volume %q", a.Volume)
		}
		if a.MachineID != "" && a.MachineID != sp.MachineID {
			return nil, zoneIndependent("volume attachment %s is for machine %s, not %s", a.Volume, a.MachineID, sp.MachineID)
		}
	}
	return out, nil
}

// createVolumes makes the start's custom volumes, tagged with the
// instance they belong to.
func (p *Provider) createVolumes(ctx context.Context, pl plan) error {
	for _, v := range pl.volumes {
		cfg := p.ownConfig()
		cfg[KeyInstance] = pl.name
		cfg[KeyVolume] = v.Name
		if v.Size > 0 {
			cfg["size"] = bytesOf(v.Size)
		}
		err := p.c.CreateStorageVolume(ctx, p.cfg.StoragePool, StorageVolume{Name: v.VolumeID, Config: cfg,
			Description: "muster volume " + v.Name + " of " + pl.name})
		if err != nil && !IsConflict(err) {
			return classify(err, pl.zone, "create volume "+v.VolumeID)
		}
	}
	return nil
}

// result reads hardware, addresses and volumes back from the instance.
func (p *Provider) result(ctx context.Context, in Instance, sp muster.StartParams) (muster.StartResult, error) {
	inst := toInstance(in)
	res := muster.StartResult{Instance: inst, DisplayName: in.Name}
	hw := muster.Hardware{Arch: musterArch(in.Architecture), Cores: p.cores, Mem: p.memMiB, AvailabilityZone: inst.Zone}
	if n, err := strconv.ParseUint(in.Config["limits.cpu"], 10, 64); err == nil {
		hw.Cores = n
	}
	if m := parseSize(in.Config["limits.memory"]); m > 0 {
		hw.Mem = m
	}
	if root, ok := in.Devices["root"]; ok {
		hw.RootDisk = parseSize(root["size"])
	}
	res.Hardware = hw
	st, err := p.c.InstanceState(ctx, in.Name)
	if err != nil {
		return muster.StartResult{}, classify(err, inst.Zone, "read state of instance "+in.Name)
	}
	res.Instance.State = strings.ToLower(st.Status)
	for _, a := range st.Network["eth0"].Addresses {
		if a.Family == "inet" && a.Scope == "global" {
			res.Addresses = append(res.Addresses, a.Address)
		}
	}
	for dev, d := range in.Devices {
		name, ok := strings.CutPrefix(dev, "vol-")
		if !ok || d["type"] != "disk" {
			continue
		}
		v := muster.Volume{Name: name, VolumeID: d["source"], Pool: d["pool"]}
		for _, want := range sp.Volumes {
			if want.Name == name {
				v.Size = want.Size
			}
		}
		res.Volumes = append(res.Volumes, v)
		res.Attachments = append(res.Attachments, muster.VolumeAttachment{
			Volume: name, MachineID: inst.MachineID, InstanceID: in.Name, DeviceName: d["path"],
		})
	}
	slices.SortFunc(res.Volumes, func(a, b muster.Volume) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(res.Attachments, func(a, b muster.VolumeAttachment) int { return strings.Compare(a.Volume, b.Volume) })
	return res, nil
}
