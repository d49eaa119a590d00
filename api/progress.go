package api

import (
	"context"
	"fmt"
	"strings"

	"github.com/musterhq/muster"
)

// Started is reached when a machine's agent has started on its running
// instance; provisioning error and removal end it as failures.
func Started(id string, m MachineStatus, ok bool) (bool, string) {
	if done, why := Provisioned(id, m, ok); !done || why != "" {
		return done, why
	}
	return m.Status == string(muster.StatusStarted), ""
}

// WaitFailFast is Wait that returns as soon as any machine has failed,
// with the failures so far; the others are not waited for.
func (c *Client) WaitFailFast(ctx context.Context, model string, goals map[string]Goal, progress func(st Status, done int, waiting []string)) ([]string, error) {
	return c.wait(ctx, model, goals, progress, true)
}

// Progress is a one-line account of machines being provisioned or
// removed, phase by phase: "instances 12/12 running · agents 9/12
// started", then how many are in provisioning error, dying or gone, and
// the provisioner's error.
func Progress(st Status, ids []string) string {
	var running, started, failed, dying, gone int
	for _, id := range ids {
		m, ok := st.Machines[id]
		switch {
		case !ok:
			gone++
			continue
		case m.Life != string(muster.LifeAlive):
			dying++
		}
		switch m.InstanceStatus {
		case string(muster.InstanceRunning):
			running++
		case string(muster.InstanceProvisioningError):
			failed++
		}
		if m.Status == string(muster.StatusStarted) {
			started++
		}
	}
	parts := []string{
		fmt.Sprintf("instances %d/%d running", running, len(ids)),
		fmt.Sprintf("agents %d/%d started", started, len(ids)),
	}
	for _, c := range []struct {
		n    int
		what string
	}{{failed, "in provisioning error"}, {dying, "dying"}, {gone, "removed"}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", c.n, c.what))
		}
	}
	if st.ProvisionerError != "" {
		parts = append(parts, "provisioner: "+st.ProvisionerError)
	}
	return strings.Join(parts, " · ")
}
