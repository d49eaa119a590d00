package sim

import (
	"context"
	"time"

	"github.com/musterhq/muster"
)

// InstanceSummary is one entry of `muster sim instances --format json`,
// exactly as SPEC §5.2 has it.
type InstanceSummary struct {
	ID          string `json:"id"`
	Zone        string `json:"zone"`
	State       string `json:"state"`
	Model       string `json:"model"`
	Controller  string `json:"controller"`
	Machine     string `json:"machine"`
	LaunchToken string `json:"launch-token"`
	Created     string `json:"created"`
}

// Summary returns i as `muster sim instances` shows it.
func (i Instance) Summary() InstanceSummary {
	return InstanceSummary{
		ID: i.ID, Zone: i.Zone, State: i.State, Model: i.Model(), Controller: i.Controller(),
		Machine: i.Tags[muster.TagMachine], LaunchToken: i.Tags[muster.TagLaunchToken],
		Created: i.Created.UTC().Format(time.RFC3339Nano),
	}
}

// FirstAvailableZone returns the name of the sim's first available zone;
// EUnavailable when it has none.
func (c *Client) FirstAvailableZone(ctx context.Context) (string, error) {
	zs, err := c.Zones(ctx)
	if err != nil {
		return "", err
	}
	for _, z := range zs {
		if z.Available {
			return z.Name, nil
		}
	}
	return "", muster.Errorf(muster.EUnavailable, "the sim has no available zone")
}
