package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
	"github.com/musterhq/muster"
)

const (
	mib = 1 << 20
	// minMem is the engine's smallest memory limit, in MiB.
	minMem = 6
	// maxBatch bounds StartInstances; parallel is how many engine calls a
	// batch or a stop runs at once.
	maxBatch = 16
	parallel = 4
	// cleanupTimeout bounds the removal of a half-started container after
	// its start failed or was cancelled.
	cleanupTimeout = 15 * time.Second
)

// ContainerName is the name of the container of a machine's launch:
// "muster-<model8>-m<machine>-<token12>".
func (p *Provider) ContainerName(machineID, token string) string {
	return "muster-" + p.model8 + "-m" + sanitize(machineID) + "-" + short(token, 12)
}

// volumeName is the Docker volume of a machine's named storage.
func (p *Provider) volumeName(machineID, token, name string) string {
	return p.ContainerName(machineID, token) + "-" + sanitize(name)
}

// StartInstance starts a container for sp.MachineID in sp.Zone (default: the
// placement zone, else the first zone). A container that already carries
// sp.LaunchToken is returned instead of starting another (a container left
// created but never started by a crash is given its config and started).
func (p *Provider) StartInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	res, err := p.startInstance(ctx, sp)
	if err != nil {
		return muster.StartResult{}, fmt.Errorf("start instance for machine %s: %w", sp.MachineID, err)
	}
	return res, nil
}

func (p *Provider) startInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	if err := ctx.Err(); err != nil {
		return muster.StartResult{}, err
	}
	zone, err := p.checkParams(ctx, &sp)
	if err != nil {
		return muster.StartResult{}, err
	}
	if sp.LaunchToken == "" {
		// No idempotency without a token; make the name unique anyway.
		var b [8]byte
		_, _ = rand.Read(b[:])
		sp.LaunchToken = hex.EncodeToString(b[:])
	}
	unlock, err := p.lockToken(ctx, sp.LaunchToken)
	if err != nil {
		return muster.StartResult{}, err
	}
	defer unlock()

	if id, found, err := p.findByToken(ctx, sp.LaunchToken); err != nil {
		return muster.StartResult{}, err
	} else if found {
		p.log.Debug("instance found by launch token", "machine", sp.MachineID, "instance", id)
		return p.resume(ctx, id, sp)
	}

	ei, err := p.engineInfo(ctx)
	if err != nil {
		return muster.StartResult{}, err
	}
	binPath, binSum := p.agentFor(sp, ei.Arch)
	img, err := p.ensureImage(ctx, binPath, binSum)
	if err != nil {
		return muster.StartResult{}, err
	}
	var zn zoneNet
	if p.cfg.NetworkMode == NetworkBridge {
		if zn, err = p.zoneNetwork(ctx, zone); err != nil {
			return muster.StartResult{}, err
		}
	}
	id, err := p.create(ctx, sp, zone, img, zn)
	if err != nil {
		return muster.StartResult{}, err
	}
	res, err := p.resume(ctx, id, sp)
	if err != nil {
		p.removeAfterFailure(ctx, id, sp.LaunchToken)
		return muster.StartResult{}, err
	}
	p.log.Info("instance started", "machine", sp.MachineID, "instance", id, "zone", zone, "addresses", res.Addresses)
	return res, nil
}

// checkParams validates sp against the configuration and the engine, and
// returns the zone to start in.
func (p *Provider) checkParams(ctx context.Context, sp *muster.StartParams) (string, error) {
	if sp.MachineID == "" {
		return "", zoneIndependent("no machine id")
	}
	if (sp.ControllerUUID != "" && sp.ControllerUUID != p.cfg.ControllerUUID) ||
		(sp.ModelUUID != "" && sp.ModelUUID != p.cfg.ModelUUID) {
		return "", zoneIndependent("start params are for controller %s model %s, not this provider's", sp.ControllerUUID, sp.ModelUUID)
	}
	zone := sp.Zone
	if zone == "" {
		pz, err := p.DeriveZones(ctx, *sp)
		if err != nil {
			return "", err
		}
		zone = p.cfg.Zones[0]
		if len(pz) > 0 {
			zone = pz[0]
		}
	}
	if !p.hasZone(zone) {
		return "", zoneIndependent("zone %q is not one of the configured zones %s", zone, strings.Join(p.cfg.Zones, ","))
	}
	c := sp.Constraints
	if c.InstanceType != "" {
		return "", zoneIndependent("instance-type %q: the docker provider has no instance types", c.InstanceType)
	}
	ei, err := p.engineInfo(ctx)
	if err != nil {
		return "", err
	}
	for _, a := range []string{sp.Arch, c.Arch} {
		if a != "" && a != ei.Arch {
			return "", zoneIndependent("arch %s: the docker engine runs %s", a, ei.Arch)
		}
	}
	if c.Cores > uint64(ei.NCPU) {
		return "", zoneIndependent("cores=%d: the docker host has %d CPUs", c.Cores, ei.NCPU)
	}
	if c.Mem > 0 && c.Mem < minMem {
		return "", zoneIndependent("mem=%dM: the docker engine's smallest memory limit is %dM", c.Mem, minMem)
	}
	if hostMem := uint64(ei.MemTotal) / mib; c.Mem > hostMem {
		return "", zoneIndependent("mem=%dM: the docker host has %dM", c.Mem, hostMem)
	}
	seen := map[string]bool{}
	for _, v := range sp.Volumes {
		if !nameRE.MatchString(v.Name) {
			return "", zoneIndependent("bad volume name %q", v.Name)
		}
		if seen[v.Name] {
			return "", zoneIndependent("volume %q given more than once", v.Name)
		}
		seen[v.Name] = true
		if v.Pool != "" && v.Pool != "local" {
			return "", zoneIndependent("volume %s: unknown storage pool %q (the docker provider has only \"local\")", v.Name, v.Pool)
		}
	}
	return zone, nil
}

// findByToken returns the id of this model's container with the token.
func (p *Provider) findByToken(ctx context.Context, token string) (string, bool, error) {
	f := p.ownFilters().Add("label", muster.TagLaunchToken+"="+token)
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return "", false, classify(err, "list containers")
	}
	items := slices.DeleteFunc(res.Items, func(s container.Summary) bool {
		return !p.isOwn(s.Labels) || s.Labels[muster.TagLaunchToken] != token
	})
	if len(items) == 0 {
		return "", false, nil
	}
	slices.SortFunc(items, func(a, b container.Summary) int { return int(a.Created - b.Created) })
	return items[0].ID, true, nil
}

// create makes the volumes and the container, not yet started.
func (p *Provider) create(ctx context.Context, sp muster.StartParams, zone string, img *agentImage, zn zoneNet) (string, error) {
	labels := map[string]string{}
	for k, v := range sp.Tags {
		labels[k] = v
	}
	for k, v := range p.ownLabels() {
		labels[k] = v
	}
	labels[muster.TagMachine] = sp.MachineID
	labels[muster.TagLaunchToken] = sp.LaunchToken
	labels[LabelZone] = zone

	var mounts []mount.Mount
	for _, v := range sp.Volumes {
		vl := map[string]string{}
		for k, val := range labels {
			vl[k] = val
		}
		vl[LabelVolume] = v.Name
		name := p.volumeName(sp.MachineID, sp.LaunchToken, v.Name)
		if err := whole(ctx, func(ctx context.Context) error {
			_, err := p.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: name, Driver: "local", Labels: vl})
			return err
		}); err != nil {
			p.removeAfterFailure(ctx, "", sp.LaunchToken)
			return "", classify(err, "create volume "+name)
		}
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: name, Target: path.Join(StorageDir, v.Name)})
	}

	hc := &container.HostConfig{
		Mounts: mounts,
		Resources: container.Resources{
			NanoCPUs: int64(sp.Constraints.Cores) * 1e9,
			Memory:   int64(sp.Constraints.Mem) * mib,
		},
	}
	var nc *network.NetworkingConfig
	if p.cfg.NetworkMode == NetworkHost {
		hc.NetworkMode = container.NetworkMode(NetworkHost)
	} else {
		hc.NetworkMode = container.NetworkMode(zn.Name)
		nc = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{zn.Name: {NetworkID: zn.ID}}}
	}
	hostname := "m-" + strings.ToLower(sanitize(sp.MachineID))
	if len(hostname) > 63 {
		hostname = hostname[:63]
	}
	opts := client.ContainerCreateOptions{
		Name:             p.ContainerName(sp.MachineID, sp.LaunchToken),
		Config:           &container.Config{Image: img.Ref, Labels: labels, Hostname: hostname},
		HostConfig:       hc,
		NetworkingConfig: nc,
	}
	if p.cfg.NetworkMode == NetworkHost {
		opts.Config.Hostname = "" // host mode shares the host's UTS name
	}
	// The engine goes on creating a container whose caller hung up, so
	// the create is not cancelled half-way: the id it returns is what a
	// cleanup needs.
	dctx, cancel := detached(ctx)
	defer cancel()
	res, err := p.cli.ContainerCreate(dctx, opts)
	if err != nil && cerrdefs.IsConflict(err) {
		// The name is taken: by a concurrent start of this token (in
		// another process), or by another token sharing the first 12
		// characters, in which case the whole token makes it unique.
		if id, found, ferr := p.findByToken(ctx, sp.LaunchToken); ferr == nil && found {
			return id, nil
		}
		opts.Name = "muster-" + p.model8 + "-m" + sanitize(sp.MachineID) + "-" + sanitize(sp.LaunchToken)
		res, err = p.cli.ContainerCreate(dctx, opts)
	}
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			// The image or network was removed behind our back: look them
			// up again next time.
			p.mu.Lock()
			p.images = map[string]*agentImage{}
			delete(p.networks, zone)
			p.mu.Unlock()
			err = &muster.ProviderError{Kind: muster.ErrUnavailable, Message: "docker: create container: " + err.Error(), Err: err}
		}
		p.removeAfterFailure(ctx, "", sp.LaunchToken)
		return "", classify(err, "create container "+opts.Name)
	}
	for _, w := range res.Warnings {
		p.log.Warn("container create warning", "machine", sp.MachineID, "warning", w)
	}
	if err := ctx.Err(); err != nil {
		p.removeAfterFailure(ctx, res.ID, sp.LaunchToken)
		return "", err
	}
	if err := p.copyConfig(ctx, res.ID, sp.UserData); err != nil {
		p.removeAfterFailure(ctx, res.ID, sp.LaunchToken)
		return "", err
	}
	return res.ID, nil
}

// copyConfig writes the agent config into the container.
func (p *Provider) copyConfig(ctx context.Context, id string, data []byte) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := path.Dir(AgentConfigPath)[1:] // "etc/muster"
	now := time.Now()
	hdrs := []*tar.Header{
		{Name: path.Dir(dir) + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now},
		{Name: dir + "/", Mode: 0o755, Typeflag: tar.TypeDir, ModTime: now},
		{Name: AgentConfigPath[1:], Mode: 0o600, Typeflag: tar.TypeReg, Size: int64(len(data)), ModTime: now},
	}
	for _, h := range hdrs {
		if err := tw.WriteHeader(h); err != nil {
			return fmt.Errorf("docker: agent config archive: %w", err)
		}
	}
	if _, err := tw.Write(data); err != nil {
		return fmt.Errorf("docker: agent config archive: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("docker: agent config archive: %w", err)
	}
	_, err := p.cli.CopyToContainer(ctx, id, client.CopyToContainerOptions{DestinationPath: "/", Content: &buf})
	return classify(err, "copy agent config")
}

// resume starts the container if it was never started and returns what it
// is.
func (p *Provider) resume(ctx context.Context, id string, sp muster.StartParams) (muster.StartResult, error) {
	ins, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return muster.StartResult{}, classify(err, "inspect container "+id)
	}
	if ins.Container.State != nil && ins.Container.State.Status == container.StateCreated {
		if _, err := p.cli.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: AgentConfigPath}); err != nil {
			if !cerrdefs.IsNotFound(err) {
				return muster.StartResult{}, classify(err, "stat agent config")
			}
			if err := p.copyConfig(ctx, id, sp.UserData); err != nil {
				return muster.StartResult{}, err
			}
		}
		if err := whole(ctx, func(ctx context.Context) error {
			_, err := p.cli.ContainerStart(ctx, id, client.ContainerStartOptions{})
			return err
		}); err != nil {
			return muster.StartResult{}, classify(err, "start container "+id)
		}
		if ins, err = p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{}); err != nil {
			return muster.StartResult{}, classify(err, "inspect container "+id)
		}
	}
	return p.result(ctx, ins.Container, sp)
}

// result reads hardware, addresses and volumes back from the container.
func (p *Provider) result(ctx context.Context, c container.InspectResponse, sp muster.StartParams) (muster.StartResult, error) {
	ei, err := p.engineInfo(ctx)
	if err != nil {
		return muster.StartResult{}, err
	}
	var labels map[string]string
	if c.Config != nil {
		labels = c.Config.Labels
	}
	inst := muster.Instance{
		ID:          c.ID,
		Zone:        labels[LabelZone],
		Tags:        labels,
		MachineID:   labels[muster.TagMachine],
		LaunchToken: labels[muster.TagLaunchToken],
	}
	if t, err := time.Parse(time.RFC3339Nano, c.Created); err == nil {
		inst.Created = t
	}
	if c.State != nil {
		inst.State = instanceState(c.State.Status)
	}
	hw := muster.Hardware{Arch: ei.Arch, Cores: uint64(ei.NCPU), Mem: uint64(ei.MemTotal) / mib, AvailabilityZone: inst.Zone}
	if hc := c.HostConfig; hc != nil {
		if hc.NanoCPUs > 0 {
			hw.Cores = uint64((hc.NanoCPUs + 1e9 - 1) / 1e9)
		}
		if hc.Memory > 0 {
			hw.Mem = uint64(hc.Memory) / mib
		}
	}
	res := muster.StartResult{Instance: inst, DisplayName: strings.TrimPrefix(c.Name, "/"), Hardware: hw}
	if p.cfg.NetworkMode == NetworkHost {
		res.Addresses = []string{"127.0.0.1"}
	} else if c.NetworkSettings != nil {
		want := p.NetworkName(inst.Zone)
		if ep := c.NetworkSettings.Networks[want]; ep != nil && ep.IPAddress.IsValid() {
			res.Addresses = append(res.Addresses, ep.IPAddress.String())
		}
		names := make([]string, 0, len(c.NetworkSettings.Networks))
		for n := range c.NetworkSettings.Networks {
			names = append(names, n)
		}
		slices.Sort(names)
		for _, n := range names {
			ep := c.NetworkSettings.Networks[n]
			if n != want && ep != nil && ep.IPAddress.IsValid() {
				res.Addresses = append(res.Addresses, ep.IPAddress.String())
			}
		}
	}
	for _, m := range c.Mounts {
		if m.Type != mount.TypeVolume || path.Dir(m.Destination) != StorageDir {
			continue
		}
		v := muster.Volume{Name: path.Base(m.Destination), VolumeID: m.Name}
		for _, want := range sp.Volumes {
			if want.Name == v.Name {
				v.Size, v.Pool = want.Size, want.Pool
			}
		}
		res.Volumes = append(res.Volumes, v)
		res.Attachments = append(res.Attachments, muster.VolumeAttachment{
			Volume: v.Name, MachineID: inst.MachineID, InstanceID: c.ID, DeviceName: m.Destination,
		})
	}
	slices.SortFunc(res.Volumes, func(a, b muster.Volume) int { return strings.Compare(a.Name, b.Name) })
	slices.SortFunc(res.Attachments, func(a, b muster.VolumeAttachment) int { return strings.Compare(a.Volume, b.Volume) })
	return res, nil
}

// instanceState maps Docker's container states to muster's.
func instanceState(s container.ContainerState) string {
	switch s {
	case container.StateCreated, container.StateRestarting:
		return "pending"
	case container.StateRunning, container.StatePaused:
		return "running"
	case container.StateRemoving:
		return "stopping"
	case container.StateExited:
		return "stopped"
	case container.StateDead:
		return "terminated"
	}
	return string(s)
}

// detached is ctx without its cancellation, bounded by cleanupTimeout: for
// engine calls that must not be abandoned half-way.
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// whole runs an engine call that must not be abandoned half-way (the
// engine goes on with it when its caller hangs up) on a detached context,
// and then reports ctx's end if the call succeeded meanwhile.
func whole(ctx context.Context, call func(context.Context) error) error {
	dctx, cancel := detached(ctx)
	defer cancel()
	if err := call(dctx); err != nil {
		return err
	}
	return ctx.Err()
}

// removeAfterFailure removes a container (if id is set) and its token's
// volumes after its start failed, even when ctx is cancelled.
func (p *Provider) removeAfterFailure(ctx context.Context, id, token string) {
	ctx, cancel := detached(ctx)
	defer cancel()
	if id != "" {
		if _, err := p.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			p.log.Warn("half-started container not removed", "instance", id, "err", err)
		}
	}
	if err := p.removeVolumes(ctx, token); err != nil {
		p.log.Warn("volumes of failed start not removed", "token", token, "err", err)
	}
}

// removeVolumes removes this model's volumes of a launch token.
func (p *Provider) removeVolumes(ctx context.Context, token string) error {
	if token == "" {
		return nil
	}
	f := p.ownFilters().Add("label", muster.TagLaunchToken+"="+token)
	res, err := p.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return classify(err, "list volumes")
	}
	var errs []error
	for _, v := range res.Items {
		if !p.isOwn(v.Labels) || v.Labels[muster.TagLaunchToken] != token {
			continue
		}
		if _, err := p.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, classify(err, "remove volume "+v.Name))
		}
	}
	return errors.Join(errs...)
}

// StartInstances starts each of ps, a few at a time.
func (p *Provider) StartInstances(ctx context.Context, ps []muster.StartParams) []muster.StartOutcome {
	out := make([]muster.StartOutcome, len(ps))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			out[i].Result, out[i].Err = p.StartInstance(ctx, ps[i])
		}()
	}
	wg.Wait()
	return out
}

// MaxBatch is the largest batch StartInstances takes.
func (p *Provider) MaxBatch() int { return maxBatch }

// StopInstances force-removes the containers with the given ids and their
// volumes. Only containers labelled with this controller and model are
// touched; unknown and foreign ids are ignored. ids must be full container
// ids or container names: prefixes are ignored.
func (p *Provider) StopInstances(ctx context.Context, ids ...string) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("stop instances: %w", err)
	}
	ids = slices.Clone(ids)
	slices.Sort(ids)
	ids = slices.Compact(ids)
	errs := make([]error, len(ids))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, id := range ids {
		if id == "" {
			continue
		}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			errs[i] = p.stop(ctx, id)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("stop instances: %w", err)
	}
	return nil
}

func (p *Provider) stop(ctx context.Context, id string) error {
	ins, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if cerrdefs.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return classify(err, "inspect container "+id)
	}
	c := ins.Container
	if c.ID != id && strings.TrimPrefix(c.Name, "/") != id {
		return nil // a prefix or another name resolved it: not ours to guess
	}
	if c.Config == nil || !p.isOwn(c.Config.Labels) {
		p.log.Debug("not stopping foreign container", "instance", id)
		return nil
	}
	if _, err := p.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return classify(err, "remove container "+id)
	}
	p.log.Info("instance stopped", "instance", c.ID, "machine", c.Config.Labels[muster.TagMachine])
	return p.removeVolumes(ctx, c.Config.Labels[muster.TagLaunchToken])
}

// Instances lists this model's containers, in any state.
func (p *Provider) Instances(ctx context.Context) ([]muster.Instance, error) {
	res, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: p.ownFilters()})
	if err != nil {
		return nil, classify(err, "list containers")
	}
	out := make([]muster.Instance, 0, len(res.Items))
	for _, s := range res.Items {
		if !p.isOwn(s.Labels) {
			continue
		}
		out = append(out, muster.Instance{
			ID:          s.ID,
			Zone:        s.Labels[LabelZone],
			Tags:        tagsOf(s.Labels, s.Names),
			MachineID:   s.Labels[muster.TagMachine],
			LaunchToken: s.Labels[muster.TagLaunchToken],
			Created:     time.Unix(s.Created, 0),
			State:       instanceState(s.State),
		})
	}
	slices.SortFunc(out, func(a, b muster.Instance) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}
