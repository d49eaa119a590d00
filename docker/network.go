package docker

import (
	"context"
	"errors"
	"fmt"
	"slices"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"
)

// netSem serialises network creation in this process: engines before API
// 1.44 accept two networks of one name.
var netSem = make(chan struct{}, 1)

// zoneNet is a zone's network.
type zoneNet struct {
	ID      string
	Name    string
	Subnet  string // CIDR
	Gateway string // IP
}

// NetworkName is the name of a zone's network:
// "muster-<controller8>-<model8>-<zone>".
func (p *Provider) NetworkName(zone string) string { return p.prefix + "-" + zone }

// zoneNetwork returns the zone's network, creating it when missing. A
// network that cannot be created is a capacity error of that zone.
func (p *Provider) zoneNetwork(ctx context.Context, zone string) (zoneNet, error) {
	p.mu.Lock()
	zn, ok := p.networks[zone]
	p.mu.Unlock()
	if ok {
		return zn, nil
	}
	if err := acquire(ctx, netSem); err != nil {
		return zoneNet{}, fmt.Errorf("network of zone %s: %w", zone, err)
	}
	defer func() { <-netSem }()
	zn, found, err := p.findNetwork(ctx, zone)
	if err != nil {
		return zoneNet{}, err
	}
	if !found {
		labels := p.ownLabels()
		labels[LabelZone] = zone
		name := p.NetworkName(zone)
		opts := client.NetworkCreateOptions{Driver: "bridge", Labels: labels}
		p.mu.Lock()
		pfx, ok := p.subnets[zone]
		p.mu.Unlock()
		if ok {
			opts.IPAM = &network.IPAM{Driver: "default", Config: []network.IPAMConfig{{Subnet: pfx}}}
		}
		res, err := p.cli.NetworkCreate(ctx, name, opts)
		if err != nil {
			if ctx.Err() != nil || client.IsErrConnectionFailed(err) {
				return zoneNet{}, classify(err, "create network "+name)
			}
			return zoneNet{}, capacity(zone, err, "create network %s for zone %s", name, zone)
		}
		p.log.Info("zone network created", "zone", zone, "network", name, "id", res.ID)
		ins, err := p.cli.NetworkInspect(ctx, res.ID, client.NetworkInspectOptions{})
		if err != nil {
			return zoneNet{}, classify(err, "inspect network "+name)
		}
		zn = toZoneNet(ins.Network.Network)
	}
	p.mu.Lock()
	p.networks[zone] = zn
	p.mu.Unlock()
	return zn, nil
}

// findNetwork finds the zone's network by its labels; with several (a race
// on an old engine, or another process) the oldest wins.
func (p *Provider) findNetwork(ctx context.Context, zone string) (zoneNet, bool, error) {
	f := p.ownFilters().Add("label", LabelZone+"="+zone)
	res, err := p.cli.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return zoneNet{}, false, classify(err, "list networks")
	}
	items := slices.Clone(res.Items)
	items = slices.DeleteFunc(items, func(n network.Summary) bool { return !p.isOwn(n.Labels) || n.Labels[LabelZone] != zone })
	if len(items) == 0 {
		return zoneNet{}, false, nil
	}
	slices.SortFunc(items, func(a, b network.Summary) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	return toZoneNet(items[0].Network), true, nil
}

func toZoneNet(n network.Network) zoneNet {
	zn := zoneNet{ID: n.ID, Name: n.Name}
	for _, c := range n.IPAM.Config {
		if c.Subnet.Addr().Is4() {
			zn.Subnet = c.Subnet.String()
			if c.Gateway.IsValid() {
				zn.Gateway = c.Gateway.String()
			} else {
				zn.Gateway = c.Subnet.Masked().Addr().Next().String()
			}
			break
		}
	}
	return zn
}

// GatewayAddresses returns the host's address on each zone network, in zone
// order: a controller on the host that listens there (or on 0.0.0.0) is
// reachable from the agents in the containers. In host mode it is
// ["127.0.0.1"]. Missing networks are created.
func (p *Provider) GatewayAddresses(ctx context.Context) ([]string, error) {
	if p.cfg.NetworkMode == NetworkHost {
		return []string{"127.0.0.1"}, nil
	}
	var out []string
	for _, z := range p.cfg.Zones {
		zn, err := p.zoneNetwork(ctx, z)
		if err != nil {
			return nil, err
		}
		if zn.Gateway != "" && !slices.Contains(out, zn.Gateway) {
			out = append(out, zn.Gateway)
		}
	}
	return out, nil
}

// ZoneSubnets returns each zone's network CIDR (bridge mode; empty in host
// mode). Missing networks are created.
func (p *Provider) ZoneSubnets(ctx context.Context) (map[string]string, error) {
	out := map[string]string{}
	if p.cfg.NetworkMode == NetworkHost {
		return out, nil
	}
	for _, z := range p.cfg.Zones {
		zn, err := p.zoneNetwork(ctx, z)
		if err != nil {
			return nil, err
		}
		out[z] = zn.Subnet
	}
	return out, nil
}

// Cleanup removes this model's networks and its volumes that no container
// uses (left by a stop that failed half-way). It is for a removed model,
// whose instances are already stopped: a network with containers still
// attached is not removed and is reported in the error.
func (p *Provider) Cleanup(ctx context.Context) error {
	if err := acquire(ctx, netSem); err != nil {
		return fmt.Errorf("cleanup: %w", err)
	}
	defer func() { <-netSem }()
	var errs []error
	vf := p.ownFilters().Add("dangling", "true")
	vols, err := p.cli.VolumeList(ctx, client.VolumeListOptions{Filters: vf})
	if err != nil {
		return classify(err, "list volumes")
	}
	for _, v := range vols.Items {
		if !p.isOwn(v.Labels) {
			continue
		}
		if _, err := p.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, classify(err, "remove volume "+v.Name))
		}
	}
	p.mu.Lock()
	p.networks = map[string]zoneNet{}
	p.mu.Unlock()
	res, err := p.cli.NetworkList(ctx, client.NetworkListOptions{Filters: p.ownFilters()})
	if err != nil {
		return classify(err, "list networks")
	}
	for _, n := range res.Items {
		if !p.isOwn(n.Labels) {
			continue
		}
		if _, err := p.cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, classify(err, "remove network "+n.Name))
			continue
		}
		p.log.Info("zone network removed", "network", n.Name, "zone", n.Labels[LabelZone])
	}
	return errors.Join(errs...)
}
