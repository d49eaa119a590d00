package sim

import (
	"context"

	"github.com/musterhq/muster"
)

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
