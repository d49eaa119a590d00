package sim

import (
	"context"
	"slices"
	"time"

	"github.com/musterhq/muster"
)

var (
	_ muster.Provider     = (*Provider)(nil)
	_ muster.BatchStarter = (*Provider)(nil)
	_ muster.Networking   = (*Provider)(nil)
)

// backend is a cloud, in-process (*Cloud) or over HTTP (*Client).
type backend interface {
	start(ctx context.Context, controller, model string, ps []muster.StartParams) ([]muster.StartOutcome, error)
	stop(ctx context.Context, controller, model string, ids []string) error
	list(ctx context.Context, controller, model string) ([]muster.Instance, error)
	listZones(ctx context.Context) ([]muster.Zone, error)
	listSubnets(ctx context.Context) ([]muster.Subnet, error)
	deriveZones(ctx context.Context, p muster.StartParams) ([]string, error)
	quarantine(ctx context.Context, controller, model, id string, since time.Time) error
	restore(ctx context.Context, controller, model, id string) error
	MaxBatch() int
}

var (
	_ backend = (*Cloud)(nil)
	_ backend = (*Client)(nil)
)

// Provider is a muster.Provider (with BatchStarter and Networking) for one
// controller and model on a sim cloud. It is safe for concurrent use.
// It lists and stops only instances tagged with its controller and model
// (H7), and tags what it starts with them, whatever the params say.
type Provider struct {
	b          backend
	controller string
	model      string
}

// Provider returns the provider of a controller and model on c.
func (c *Cloud) Provider(controllerUUID, modelUUID string) *Provider {
	return &Provider{b: c, controller: controllerUUID, model: modelUUID}
}

// StartInstance starts one instance; see muster.Provider.
func (p *Provider) StartInstance(ctx context.Context, sp muster.StartParams) (muster.StartResult, error) {
	outs, err := p.b.start(ctx, p.controller, p.model, []muster.StartParams{sp})
	if err != nil {
		return muster.StartResult{}, err
	}
	if len(outs) != 1 {
		return muster.StartResult{}, muster.NewProviderError(muster.ErrUnavailable, "", "sim: %d outcomes for one start", len(outs))
	}
	return outs[0].Result, outs[0].Err
}

// StartInstances starts up to MaxBatch instances in one call; a failure of
// the whole call (throttled, cancelled) is each outcome's error.
func (p *Provider) StartInstances(ctx context.Context, ps []muster.StartParams) []muster.StartOutcome {
	if len(ps) == 0 {
		return nil
	}
	outs, err := p.b.start(ctx, p.controller, p.model, ps)
	if err == nil && len(outs) != len(ps) {
		err = muster.NewProviderError(muster.ErrUnavailable, "", "sim: %d outcomes for %d starts", len(outs), len(ps))
	}
	if err != nil {
		outs = make([]muster.StartOutcome, len(ps))
		for i := range outs {
			outs[i].Err = err
		}
	}
	return outs
}

// MaxBatch is the largest batch one StartInstances call may carry.
func (p *Provider) MaxBatch() int { return p.b.MaxBatch() }

// StopInstances stops this model's instances among ids; others' instances
// and unknown ids are ignored.
func (p *Provider) StopInstances(ctx context.Context, ids ...string) error {
	if len(ids) == 0 {
		return ctx.Err()
	}
	return p.b.stop(ctx, p.controller, p.model, ids)
}

// Instances lists this model's instances, oldest first.
func (p *Provider) Instances(ctx context.Context) ([]muster.Instance, error) {
	return p.b.list(ctx, p.controller, p.model)
}

// Zones lists the cloud's zones.
func (p *Provider) Zones(ctx context.Context) ([]muster.Zone, error) { return p.b.listZones(ctx) }

// Subnets lists the cloud's subnets.
func (p *Provider) Subnets(ctx context.Context) ([]muster.Subnet, error) {
	return p.b.listSubnets(ctx)
}

// DeriveZones returns the zones p's placement (zone=NAME) and requested
// spaces allow; nil means any. An unknown placement zone is a
// zone-independent error.
func (p *Provider) DeriveZones(ctx context.Context, sp muster.StartParams) ([]string, error) {
	return p.b.deriveZones(ctx, sp)
}

// EnrolsBatches implements muster.BatchEnroller: the sim signs its
// instances' identity documents, so batch-started agents enrol (SPEC §4).
func (p *Provider) EnrolsBatches() bool { return true }

var _ muster.Offerer = (*Provider)(nil)

// Offerings are the sim's instance types and bases, which every sim has.
func (p *Provider) Offerings() muster.Offerings {
	o := muster.Offerings{Bases: slices.Clone(Bases)}
	for _, it := range InstanceTypes {
		o.InstanceTypes = append(o.InstanceTypes, muster.InstanceTypeOffer{Name: it.Name, Arch: it.Arch, Cores: uint64(it.Cores), Mem: it.Mem})
	}
	return o
}
