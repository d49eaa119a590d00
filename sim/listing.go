package sim

import (
	"time"

	"github.com/musterhq/muster"
)

// Listed is one instance as `muster sim instances --format json` prints
// it, the shape SPEC §5.2 gives.
type Listed struct {
	ID          string `json:"id"`
	Zone        string `json:"zone"`
	State       string `json:"state"`
	Model       string `json:"model"`
	Controller  string `json:"controller"`
	Machine     string `json:"machine"`
	LaunchToken string `json:"launch-token"`
	Created     string `json:"created"` // RFC 3339, to the second
}

// Listing is i as Listed.
func (i Instance) Listing() Listed {
	return Listed{
		ID: i.ID, Zone: i.Zone, State: i.State, Model: i.Model(), Controller: i.Controller(),
		Machine: i.Tags[muster.TagMachine], LaunchToken: i.Tags[muster.TagLaunchToken],
		Created: i.Created.UTC().Format(time.RFC3339),
	}
}
