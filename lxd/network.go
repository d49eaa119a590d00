package lxd

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"sort"
)

// netSem serialises zone network creation in this process, so that two
// models do not pick the same free subnet.
var netSem = make(chan struct{}, 1)

// Subnets of zone networks are /24s of subnetBase, picked free.
var subnetBase = netip.MustParsePrefix("10.210.0.0/15")

// NetworkName is the bridge of a zone: "mu" + 10 hex digits of a hash of
// controller, model and zone (Linux keeps interface names under 16 bytes).
func (p *Provider) NetworkName(zone string) string {
	sum := sha256.Sum256([]byte(p.cfg.ControllerUUID + "/" + p.cfg.ModelUUID + "/" + zone))
	return fmt.Sprintf("mu%x", sum[:5])
}

// zoneNetwork returns the name of the zone's bridge, creating it when
// missing with a free /24 of 10.210.0.0/15, NAT and DHCP. A network that
// cannot be created is a capacity error of that zone.
func (p *Provider) zoneNetwork(ctx context.Context, zone string) (string, error) {
	p.mu.Lock()
	name, ok := p.networks[zone]
	p.mu.Unlock()
	if ok {
		return name, nil
	}
	select {
	case netSem <- struct{}{}:
	case <-ctx.Done():
		return "", fmt.Errorf("network of zone %s: %w", zone, ctx.Err())
	}
	defer func() { <-netSem }()
	name = p.NetworkName(zone)
	n, err := p.c.Network(ctx, name)
	switch {
	case err == nil:
		if !p.isOwn(n.Config) || n.Config[KeyZone] != zone {
			return "", zoneIndependent("network %s of zone %s exists but is not this model's", name, zone)
		}
	case IsNotFound(err):
		if err := p.createNetwork(ctx, zone, name); err != nil {
			return "", err
		}
	default:
		return "", classify(err, zone, "network of zone "+zone)
	}
	p.mu.Lock()
	p.networks[zone] = name
	p.mu.Unlock()
	return name, nil
}

func (p *Provider) createNetwork(ctx context.Context, zone, name string) error {
	all, err := p.c.Networks(ctx)
	if err != nil {
		return classify(err, zone, "list networks")
	}
	var used []netip.Prefix
	for _, n := range all {
		if pfx, err := netip.ParsePrefix(n.Config["ipv4.address"]); err == nil {
			used = append(used, pfx.Masked())
		}
	}
	used = append(used, hostPrefixes()...)
	sum := sha256.Sum256([]byte(name))
	subnet, ok := freeSubnet(used, int(binary.BigEndian.Uint16(sum[:2])))
	if !ok {
		return capacityErr(zone, "no free /24 in %s for the network of zone %s", subnetBase, zone)
	}
	gw := subnet.Addr().Next()
	cfg := p.ownConfig()
	cfg[KeyZone] = zone
	cfg["ipv4.address"] = netip.PrefixFrom(gw, 24).String()
	cfg["ipv4.nat"] = "true"
	cfg["ipv6.address"] = "none"
	err = p.c.CreateNetwork(ctx, Network{Name: name, Type: "bridge", Config: cfg,
		Description: "muster zone " + zone + " of model " + p.cfg.ModelUUID})
	if IsConflict(err) {
		return nil // made meanwhile by another process of this model
	}
	if err != nil {
		if ctx.Err() != nil {
			return classify(ctx.Err(), zone, "create network "+name)
		}
		return capacityErr(zone, "create network %s for zone %s: %v", name, zone, err)
	}
	p.log.Info("zone network created", "zone", zone, "network", name, "subnet", subnet)
	return nil
}

// freeSubnet returns a /24 of subnetBase that overlaps none of used,
// searching from the start'th.
func freeSubnet(used []netip.Prefix, start int) (netip.Prefix, bool) {
	n := 1 << (24 - subnetBase.Bits())
	base := subnetBase.Addr().As4()
	for i := 0; i < n; i++ {
		k := (start + i) % n
		a := base
		a[1] += byte(k >> 8)
		a[2] = byte(k)
		cand := netip.PrefixFrom(netip.AddrFrom4(a), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, true
		}
	}
	return netip.Prefix{}, false
}

// hostPrefixes are the IPv4 prefixes of the host's interfaces.
func hostPrefixes() []netip.Prefix {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil
	}
	var out []netip.Prefix
	for _, a := range addrs {
		if in, ok := a.(*net.IPNet); ok {
			if pfx, err := netip.ParsePrefix(in.String()); err == nil && pfx.Addr().Is4() {
				out = append(out, pfx.Masked())
			}
		}
	}
	return out
}

// GatewayAddresses returns the host's address on each zone's network, in
// the order of the zones, creating the networks when missing: a controller
// on this host listening there is reachable by the instances' agents.
func (p *Provider) GatewayAddresses(ctx context.Context) ([]string, error) {
	var out []string
	for _, z := range p.cfg.Zones {
		name, err := p.zoneNetwork(ctx, z)
		if err != nil {
			return nil, err
		}
		n, err := p.c.Network(ctx, name)
		if err != nil {
			return nil, classify(err, z, "network of zone "+z)
		}
		pfx, err := netip.ParsePrefix(n.Config["ipv4.address"])
		if err != nil {
			return nil, fmt.Errorf("lxd: network %s has no IPv4 address: %q", name, n.Config["ipv4.address"])
		}
		out = append(out, pfx.Addr().String())
	}
	return out, nil
}

// Leftovers lists what the daemon still holds of this model: instances,
// networks and volumes with its keys, as "instance NAME", "network NAME"
// and "volume NAME", sorted.
func (p *Provider) Leftovers(ctx context.Context) ([]string, error) {
	var out []string
	ins, err := p.c.Instances(ctx)
	if err != nil {
		return nil, classify(err, "", "list instances")
	}
	for _, in := range ins {
		if p.isOwn(in.Config) {
			out = append(out, "instance "+in.Name)
		}
	}
	ns, err := p.c.Networks(ctx)
	if err != nil {
		return nil, classify(err, "", "list networks")
	}
	for _, n := range ns {
		if p.isOwn(n.Config) {
			out = append(out, "network "+n.Name)
		}
	}
	vs, err := p.c.StorageVolumes(ctx, p.cfg.StoragePool)
	if err != nil {
		return nil, classify(err, "", "list volumes")
	}
	for _, v := range vs {
		if p.isOwn(v.Config) {
			out = append(out, "volume "+v.Name)
		}
	}
	sort.Strings(out)
	return out, nil
}

// Cleanup deletes this model's instances, volumes and zone networks, for a
// model that has been removed.
func (p *Provider) Cleanup(ctx context.Context) error {
	insts, err := p.Instances(ctx)
	if err != nil {
		return err
	}
	var ids []string
	for _, in := range insts {
		ids = append(ids, in.ID)
	}
	if err := p.StopInstances(ctx, ids...); err != nil {
		return err
	}
	vs, err := p.c.StorageVolumes(ctx, p.cfg.StoragePool)
	if err != nil {
		return classify(err, "", "list volumes")
	}
	for _, v := range vs {
		if p.isOwn(v.Config) {
			if err := p.c.DeleteStorageVolume(ctx, p.cfg.StoragePool, v.Name); err != nil && !IsNotFound(err) {
				return classify(err, "", "delete volume "+v.Name)
			}
		}
	}
	ns, err := p.c.Networks(ctx)
	if err != nil {
		return classify(err, "", "list networks")
	}
	for _, n := range ns {
		if p.isOwn(n.Config) {
			if err := p.c.DeleteNetwork(ctx, n.Name); err != nil && !IsNotFound(err) {
				return classify(err, "", "delete network "+n.Name)
			}
		}
	}
	p.mu.Lock()
	clear(p.networks)
	p.mu.Unlock()
	return nil
}
