package docker

import "github.com/musterhq/muster"

var _ muster.Offerer = (*Provider)(nil)

// Offerings is what the docker host can run, once its engine has been
// asked (Resources, or a first start): no instance types, and one
// nameless offer of the host's arch, CPUs and memory, the largest cores
// and mem a container can have. Nothing is known before.
func (p *Provider) Offerings() muster.Offerings {
	p.mu.Lock()
	ei := p.engine
	p.mu.Unlock()
	if ei == nil {
		return muster.Offerings{}
	}
	return muster.Offerings{InstanceTypes: []muster.InstanceTypeOffer{{Arch: ei.Arch, Cores: uint64(ei.NCPU), Mem: uint64(ei.MemTotal) / mib}}}
}
