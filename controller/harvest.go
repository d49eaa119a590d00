package controller

import (
	"context"
	"time"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/provisioner"
)

// The controller serves harvest plans and restores (R6, R7) of the
// models whose provisioners it runs.
var _ api.HarvestRuntime = (*Controller)(nil)

// restoreTimeout bounds a restore: the provisioner's loop takes it, and
// the provider starts the instance.
const restoreTimeout = time.Minute

// cloudKey names the cloud a model's provider talks to, the key of the
// capacity memory in the store (Z7): models on the same cloud share it,
// whichever controller runs them. An embedded sim is a cloud of its own:
// the model's own key.
func cloudKey(m muster.Model) string {
	if k := sharedCloudKey(m); k != "" {
		return k
	}
	return "model/" + m.UUID
}

func sharedCloudKey(m muster.Model) string {
	c := m.Config
	switch m.Provider {
	case "sim":
		if c["endpoint"] != "" {
			return "sim " + c["endpoint"]
		}
	case "ec2":
		return "ec2 " + c["region"] + " " + c["endpoint"]
	case "lxd":
		return "lxd " + c["socket"]
	case "docker":
		return "docker " + c["docker-host"]
	}
	return ""
}

// running returns the model's provisioner when it runs here;
// EUnavailable otherwise.
func (c *Controller) running(modelUUID string) (*provisioner.Provisioner, error) {
	if r := c.runner(modelUUID); r != nil {
		if p := r.sup.Provisioner(); p != nil {
			return p, nil
		}
	}
	return nil, muster.Errorf(muster.EUnavailable, "the provisioner of model %s does not run on this controller", modelUUID)
}

// HarvestPlan returns the harvest plan of a model whose provisioner runs
// here.
func (c *Controller) HarvestPlan(ctx context.Context, modelUUID string) (api.HarvestPlan, error) {
	p, err := c.running(modelUUID)
	if err != nil {
		return api.HarvestPlan{}, err
	}
	hp := p.HarvestPlan()
	conv := func(l []provisioner.PlannedHarvest) []api.PlannedHarvest {
		out := make([]api.PlannedHarvest, len(l))
		for i, h := range l {
			out[i] = api.PlannedHarvest(h)
		}
		return out
	}
	return api.HarvestPlan{Quarantined: conv(hp.Quarantined), Next: conv(hp.Next), Breaker: hp.Breaker}, nil
}

// RestoreInstance restores a quarantined instance of a model whose
// provisioner runs here.
func (c *Controller) RestoreInstance(ctx context.Context, modelUUID, id string) error {
	p, err := c.running(modelUUID)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, restoreTimeout)
	defer cancel()
	if err := p.Restore(ctx, id); err != nil {
		if ctx.Err() != nil {
			return muster.Errorf(muster.EUnavailable, "restore of instance %s did not finish: %v", id, ctx.Err())
		}
		return err
	}
	return nil
}

// storedBlocks adds the capacity memory of a model's cloud (Z7) from the
// store to byName, for a model whose provisioner runs elsewhere: a zone
// known only from a block is listed too.
func (c *Controller) storedBlocks(ctx context.Context, modelUUID string, byName map[string]*api.ZoneInfo) error {
	m, err := c.store.Model(ctx, modelUUID)
	if err != nil {
		return err
	}
	bs, err := c.store.CapacityBlocks(ctx, cloudKey(m), c.cfg.Clock.Now())
	if err != nil {
		return err
	}
	for _, b := range bs {
		z := byName[b.Zone]
		if z == nil {
			z = &api.ZoneInfo{Name: b.Zone, Available: true} // it took a start attempt
			byName[b.Zone] = z
		}
		z.Blocked = append(z.Blocked, api.BlockedShape{Shape: b.Shape, Until: b.Until})
	}
	return nil
}

// blockedShapes converts the zone table's capacity blocks, leaving out
// those that have ended.
func blockedShapes(bs []provisioner.BlockedShape, now time.Time) []api.BlockedShape {
	var out []api.BlockedShape
	for _, b := range bs {
		if b.Until.After(now) {
			out = append(out, api.BlockedShape{Shape: b.Shape, Until: b.Until})
		}
	}
	return out
}
