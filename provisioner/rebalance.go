package provisioner

import "context"

// move is a replacement into another zone waiting for max-in-flight.
type move struct {
	id   string
	zone string
}

// startMoves starts waiting moves within what max-in-flight leaves.
func (p *Provisioner) startMoves(ctx context.Context, stats map[string]*groupStat) error {
	return nil
}
