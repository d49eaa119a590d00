package controller

import (
	"context"

	"github.com/musterhq/muster"
	"github.com/musterhq/muster/api"
	"github.com/musterhq/muster/provisioner"
)

var _ api.FleetRuntime = (*Controller)(nil)

// provisionerOf returns the model's running provisioner; EUnavailable when
// it does not run here (another controller holds its lease) or is between
// runs.
func (c *Controller) provisionerOf(modelUUID string) (*provisioner.Provisioner, error) {
	if r := c.runner(modelUUID); r != nil {
		if p := r.sup.Current(); p != nil {
			return p, nil
		}
	}
	return nil, muster.Errorf(muster.EUnavailable, "the provisioner of this model does not run on this controller now; try again or ask the controller that runs it")
}

// Remediation returns the groups whose remediation is paused (R3).
func (c *Controller) Remediation(modelUUID string) []api.RemediationPause {
	p, err := c.provisionerOf(modelUUID)
	if err != nil {
		return nil
	}
	var out []api.RemediationPause
	for _, r := range p.Remediation() {
		out = append(out, api.RemediationPause{Group: r.Group, Unhealthy: r.Unhealthy, Total: r.Total})
	}
	return out
}

// Rebalance plans or starts the moves of R4.
func (c *Controller) Rebalance(ctx context.Context, modelUUID string, req api.RebalanceRequest) ([]api.MoveInfo, error) {
	p, err := c.provisionerOf(modelUUID)
	if err != nil {
		return nil, err
	}
	moves, err := p.Rebalance(ctx, req.Group, req.Plan)
	if err != nil {
		return nil, err
	}
	out := make([]api.MoveInfo, len(moves))
	for i, m := range moves {
		out[i] = api.MoveInfo{Machine: m.MachineID, Group: m.Group, From: m.From, To: m.To}
	}
	return out, nil
}

// ReplaceDrifted starts the rolling update of R5.
func (c *Controller) ReplaceDrifted(ctx context.Context, modelUUID string, ids []string) error {
	p, err := c.provisionerOf(modelUUID)
	if err != nil {
		return err
	}
	return p.ReplaceDrifted(ctx, ids)
}

// Replacing returns the machines being replaced, with their reasons.
func (c *Controller) Replacing(modelUUID string) map[string]string {
	p, err := c.provisionerOf(modelUUID)
	if err != nil {
		return nil
	}
	return p.Replacing()
}
